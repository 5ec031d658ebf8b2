//! The optimizer's view of a queue's match rules: compact per-slot values kept beside the
//! pool's other per-slot arrays, and the checks the selectors run on candidate matches.
//!
//! - `equal` rules become a partition id per ticket (the tuple of its classes): the pool sorts
//!   candidates by partition, then rating, and runs the selector on each partition, so a
//!   partition is an independent sub-pool and the optimizer stays global within it.
//! - `intersect` tags become a 64-bit mask per rule (63 interned values per rule and pool; any
//!   further value sets the overflow bit, and only a match whose common tags rely on it is
//!   checked on the strings, so the answer is always exact). A full table whose bits belong
//!   to values no waiting ticket holds any more is rebuilt from the waiting tickets, the most
//!   common values first, so junk tags or a vocabulary that changes over time do not send
//!   every later check down the exact path for the pool's life.
//! - `difference` numbers are stored as they are; `avoid` as a flag saying the ticket has a list
//!   (a match with no flagged ticket cannot break the rule; one with a flagged ticket is checked
//!   on the players, both directions).
//!
//! Each tick copies the candidates' values, in candidate order, into [`TickValues`]: the checks
//! and the match attributes then read them sequentially, where reading the per-slot arrays
//! cost a cache miss per read (slots are in no order).
//!
//! [`holds`] is the reference definition, on tickets; [`Checker`] answers the same question
//! on candidates from the compact values (`rule_properties.rs` checks every formed match
//! against [`holds`]). Backfill uses [`holds`] directly: it looks at a handful of tickets.

use std::collections::HashMap;
use std::sync::Arc;

use super::Ticket;
use super::candidates::{Cand, Slots};
use super::rules::{AttributeValue, Attributes, MatchRule, RuleKind, RuleScope};
use crate::ids::PlayerId;

/// Bit of an intersect mask standing for every value past the 63 interned ones.
const OVERFLOW: u64 = 1 << 63;

/// Values an intersect rule's table can intern (every bit but [`OVERFLOW`]).
const TAG_BITS: usize = 63;

/// Fewest tickets that must have left the pool since the intern tables were last looked at
/// before they are looked at again (at least as many as wait, too): looking reads every
/// waiting ticket's masks, and a rebuild its tags, so the cost is spread over the departures.
const TAG_RESCAN_MIN: usize = 64;

/// Bits of a full table held by values no waiting ticket holds that make a rebuild worth it
/// when no waiting ticket relies on the overflow bit (with one that does, one such bit is
/// enough).
const DEAD_BITS_WORTH_A_REBUILD: u32 = 16;

/// Stale value entries tolerated beyond the live ones before they are dropped.
const VALUE_SLACK: usize = 1024;

/// One ticket as the rules see it: its players, attributes and avoid-list, and how long it
/// waited (for optional rules and `difference` expansions).
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub players: &'a [PlayerId],
    pub attributes: &'a Attributes,
    pub avoid: &'a [PlayerId],
    pub wait: f64,
}

impl<'a> Member<'a> {
    /// A waiting ticket at `now`.
    #[must_use]
    pub fn of(t: &'a Ticket, now: f64) -> Member<'a> {
        Member {
            players: &t.players,
            attributes: &t.attributes,
            avoid: &t.avoid,
            wait: t.wait(now),
        }
    }
}

/// A ticket of a running match, kept so backfill can hold newcomers to the rules with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Seated {
    pub players: Vec<PlayerId>,
    pub attributes: Attributes,
    pub avoid: Vec<PlayerId>,
}

impl Seated {
    /// What the rules need of `t`.
    #[must_use]
    pub fn of(t: &Ticket) -> Seated {
        Seated {
            players: t.players.clone(),
            attributes: t.attributes.clone(),
            avoid: t.avoid.clone(),
        }
    }

    /// As a rule member. A seated ticket counts as fresh (wait 0), so every optional rule and
    /// the narrowest `difference` still bind a newcomer to it.
    #[must_use]
    pub fn member(&self) -> Member<'_> {
        Member {
            players: &self.players,
            attributes: &self.attributes,
            avoid: &self.avoid,
            wait: 0.0,
        }
    }
}

/// Whether a match (`teams`, each a list of tickets) satisfies every rule: match-scope rules
/// over all its tickets, team-scope rules within each team. An optional rule no longer binds a
/// match whose tickets all waited past its `drop_after_seconds`.
#[must_use]
pub fn holds(rules: &[MatchRule], teams: &[Vec<Member<'_>>]) -> bool {
    let all: Vec<Member<'_>> = teams.iter().flatten().copied().collect();
    rules.iter().all(|r| match r.scope {
        RuleScope::Match => rule_holds(r, &all),
        RuleScope::Team => teams.iter().all(|t| rule_holds(r, t)),
    })
}

/// One rule over one group of tickets.
fn rule_holds(rule: &MatchRule, group: &[Member<'_>]) -> bool {
    if group.len() < 2 && rule.kind != RuleKind::Intersect {
        return true;
    }
    if !group.iter().any(|m| rule.binds(m.wait)) {
        return true;
    }
    let value = |m: &Member<'_>| m.attributes.get(&rule.attribute).cloned();
    match rule.kind {
        RuleKind::Equal => {
            let class = |m: &Member<'_>| match value(m) {
                Some(AttributeValue::Text(t)) => Some(rule.class_of(&t).into_owned()),
                _ => None,
            };
            let first = class(&group[0]);
            first.is_some() && group.iter().all(|m| class(m) == first)
        }
        RuleKind::Intersect => {
            let mut common: Option<Vec<String>> = None;
            for m in group {
                let Some(AttributeValue::Tags(tags)) = value(m) else {
                    return false;
                };
                common = Some(match common {
                    None => tags,
                    Some(c) => c.into_iter().filter(|t| tags.contains(t)).collect(),
                });
            }
            common.is_some_and(|c| c.len() >= rule.min_common() as usize)
        }
        RuleKind::Difference => {
            let (mut lo, mut hi, mut allowed) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY);
            for m in group {
                let Some(AttributeValue::Number(x)) = value(m) else {
                    return false;
                };
                (lo, hi) = (lo.min(x), hi.max(x));
                allowed = allowed.min(rule.max_at(m.wait));
            }
            hi - lo <= allowed
        }
        RuleKind::Avoid => group.iter().enumerate().all(|(i, a)| {
            group
                .iter()
                .enumerate()
                .all(|(j, b)| i == j || !a.avoid.iter().any(|p| b.players.contains(p)))
        }),
    }
}

/// The values a match was formed under: for each `equal` rule the common value (the sorted
/// distinct values as tags when a group mixed them), for each match-wide `intersect` rule the
/// tags every ticket accepts, sorted. Empty without such rules.
#[must_use]
pub fn match_attributes(rules: &[MatchRule], tickets: &[&Ticket]) -> Attributes {
    let mut out = Attributes::new();
    for rule in rules {
        let values = || {
            tickets
                .iter()
                .filter_map(|t| t.attributes.get(&rule.attribute))
        };
        // Borrowed until the end: a match's values are cloned once, for the answer (this runs
        // once per formed match, inside the tick).
        match (rule.kind, rule.scope) {
            (RuleKind::Equal, _) => {
                let mut distinct: Vec<&str> = Vec::with_capacity(1);
                for v in values() {
                    if let AttributeValue::Text(t) = v
                        && !distinct.contains(&t.as_str())
                    {
                        distinct.push(t);
                    }
                }
                out.insert(rule.attribute.clone(), equal_value(distinct));
            }
            (RuleKind::Intersect, RuleScope::Match) => {
                let mut common: Option<Vec<&str>> = None;
                for v in values() {
                    if let AttributeValue::Tags(tags) = v {
                        match &mut common {
                            None => common = Some(tags.iter().map(String::as_str).collect()),
                            Some(c) => c.retain(|t| tags.iter().any(|x| x == t)),
                        }
                    }
                }
                let mut common = common.unwrap_or_default();
                common.sort_unstable();
                out.insert(
                    rule.attribute.clone(),
                    AttributeValue::Tags(common.into_iter().map(str::to_owned).collect()),
                );
            }
            _ => {}
        }
    }
    out
}

/// An `equal` rule's reported value: the one value, or the sorted distinct values of a group.
fn equal_value(mut distinct: Vec<&str>) -> AttributeValue {
    if let [one] = distinct[..] {
        AttributeValue::Text(one.to_owned())
    } else {
        distinct.sort_unstable();
        AttributeValue::Tags(distinct.into_iter().map(str::to_owned).collect())
    }
}

/// The attributes one tick has built, by what decided them (see
/// [`RuleIndex::shared_attributes_of`]).
#[derive(Debug, Default)]
pub(crate) struct AttributeCache {
    /// Foldhash: much faster than the standard hash on these short integer keys, and seeded at
    /// random per process, so tags cannot be chosen to make the keys collide without the seed.
    built: foldhash::HashMap<Vec<u64>, Arc<Attributes>>,
    key: Vec<u64>,
}

/// The rule values of one tick's candidates, in candidate order (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct TickValues {
    value_of: Vec<u32>,
    tags: Vec<u64>,
    nums: Vec<f64>,
    avoids: Vec<bool>,
}

/// One interned tuple of `equal` values.
#[derive(Clone, Debug)]
struct ValueEntry {
    values: Vec<String>,
    part: u32,
    live: u64,
}

/// A pool's rules and the compact per-slot values the checks read.
#[derive(Clone, Debug, Default)]
pub(crate) struct RuleIndex {
    rules: Vec<MatchRule>,
    equal: Vec<usize>,
    intersect: Vec<usize>,
    difference: Vec<usize>,
    avoid: Option<usize>,
    team_rules: bool,
    /// Per intersect rule, value → bit (at most 63).
    tag_bits: Vec<HashMap<String, u8>>,
    /// Per intersect rule, bit → value (the inverse of `tag_bits`).
    tag_names: Vec<Vec<String>>,
    /// Tickets that left the pool since the intern tables were last looked at.
    tag_departures: usize,
    /// Tuple of equal values → entry.
    value_ids: HashMap<Vec<String>, u32>,
    entries: Vec<ValueEntry>,
    /// Tuple of equal classes → partition.
    parts: HashMap<Vec<String>, u32>,
    live_entries: usize,
    /// Per slot.
    value_of: Vec<u32>,
    tags: Vec<u64>,
    nums: Vec<f64>,
    avoids: Vec<bool>,
}

impl RuleIndex {
    pub(crate) fn new(rules: &[MatchRule]) -> RuleIndex {
        let of = |k: RuleKind| -> Vec<usize> {
            (0..rules.len()).filter(|&i| rules[i].kind == k).collect()
        };
        let intersect = of(RuleKind::Intersect);
        RuleIndex {
            rules: rules.to_vec(),
            equal: of(RuleKind::Equal),
            tag_bits: vec![HashMap::new(); intersect.len()],
            tag_names: vec![Vec::new(); intersect.len()],
            intersect,
            difference: of(RuleKind::Difference),
            avoid: rules.iter().position(|r| r.kind == RuleKind::Avoid),
            team_rules: rules.iter().any(|r| r.scope == RuleScope::Team),
            ..RuleIndex::default()
        }
    }

    /// True when the queue has `equal` rules (candidates are partitioned).
    pub(crate) fn partitioned(&self) -> bool {
        !self.equal.is_empty()
    }

    /// Records the rule values of `t`, stored in `slot`. The ticket was admitted by
    /// [`super::rules::admit`], so every attribute a rule reads is there with its kind.
    pub(crate) fn store(&mut self, slot: usize, t: &Ticket) {
        if self.rules.is_empty() {
            return;
        }
        let (ni, nd) = (self.intersect.len(), self.difference.len());
        if self.avoids.len() <= slot {
            self.value_of.resize(slot + 1, 0);
            self.tags.resize((slot + 1) * ni, 0);
            self.nums.resize((slot + 1) * nd, 0.0);
            self.avoids.resize(slot + 1, false);
        }
        if !self.equal.is_empty() {
            let values: Vec<String> = self
                .equal
                .iter()
                .map(|&r| match t.attributes.get(&self.rules[r].attribute) {
                    Some(AttributeValue::Text(v)) => v.clone(),
                    _ => String::new(),
                })
                .collect();
            let id = match self.value_ids.get(&values) {
                Some(&id) => id,
                None => self.intern(values),
            };
            let e = &mut self.entries[id as usize];
            if e.live == 0 {
                self.live_entries += 1;
            }
            e.live += 1;
            self.value_of[slot] = id;
        }
        for (k, &r) in self.intersect.iter().enumerate() {
            let bits = &mut self.tag_bits[k];
            let mut mask = 0u64;
            if let Some(AttributeValue::Tags(tags)) = t.attributes.get(&self.rules[r].attribute) {
                for tag in tags {
                    let next = bits.len();
                    mask |= match bits.get(tag) {
                        Some(&b) => 1 << b,
                        None if next < TAG_BITS => {
                            bits.insert(tag.clone(), next as u8);
                            self.tag_names[k].push(tag.clone());
                            1 << next
                        }
                        None => OVERFLOW,
                    };
                }
            }
            self.tags[slot * ni + k] = mask;
        }
        for (k, &r) in self.difference.iter().enumerate() {
            self.nums[slot * nd + k] = match t.attributes.get(&self.rules[r].attribute) {
                Some(AttributeValue::Number(x)) => *x,
                _ => f64::NAN,
            };
        }
        self.avoids[slot] = !t.avoid.is_empty();
    }

    fn intern(&mut self, values: Vec<String>) -> u32 {
        let classes: Vec<String> = self
            .equal
            .iter()
            .zip(&values)
            .map(|(&r, v)| self.rules[r].class_of(v).into_owned())
            .collect();
        let next = self.parts.len() as u32;
        let part = *self.parts.entry(classes).or_insert(next);
        let id = self.entries.len() as u32;
        self.value_ids.insert(values.clone(), id);
        self.entries.push(ValueEntry {
            values,
            part,
            live: 0,
        });
        id
    }

    /// The ticket in `slot` left the pool.
    pub(crate) fn release(&mut self, slot: usize) {
        if !self.intersect.is_empty() {
            self.tag_departures += 1;
        }
        if self.equal.is_empty() {
            return;
        }
        if let Some(&id) = self.value_of.get(slot) {
            let e = &mut self.entries[id as usize];
            e.live = e.live.saturating_sub(1);
            if e.live == 0 {
                self.live_entries -= 1;
            }
        }
    }

    /// Drops value tuples no waiting ticket holds once they outnumber the live ones (plus
    /// slack), so a stream of distinct values cannot grow the index without bound, and
    /// rebuilds the intersect intern tables that are worth it ([`Self::refresh_tag_tables`]).
    /// `slots` are the pool's, `waiting` the number of tickets in them.
    pub(crate) fn compact(&mut self, slots: &Slots, waiting: usize) {
        self.compact_values(|s| slots[s].occupied());
        self.refresh_tag_tables(slots, waiting);
    }

    fn compact_values(&mut self, occupied: impl Fn(usize) -> bool) {
        if self.entries.len() <= 2 * self.live_entries + VALUE_SLACK {
            return;
        }
        let old = std::mem::take(&mut self.entries);
        self.value_ids.clear();
        self.parts.clear();
        let mut remap = vec![u32::MAX; old.len()];
        for (i, e) in old.into_iter().enumerate() {
            if e.live > 0 {
                let id = self.intern(e.values);
                self.entries[id as usize].live = e.live;
                remap[i] = id;
            }
        }
        for slot in 0..self.value_of.len() {
            if occupied(slot) {
                self.value_of[slot] = remap[self.value_of[slot] as usize];
            }
        }
    }

    /// Once at least as many tickets left as wait (and [`TAG_RESCAN_MIN`]), looks at each
    /// full intersect table and rebuilds it from the waiting tickets when its bits are held by
    /// values no waiting ticket holds: any such bit while a waiting ticket relies on the
    /// overflow bit, or [`DEAD_BITS_WORTH_A_REBUILD`] of them otherwise. Looking reads only the
    /// masks; the spacing keeps both amortised O(1) per departure.
    fn refresh_tag_tables(&mut self, slots: &Slots, waiting: usize) {
        if self.tag_departures < waiting.max(TAG_RESCAN_MIN)
            || self.tag_names.iter().all(|names| names.len() < TAG_BITS)
        {
            return;
        }
        self.tag_departures = 0;
        let ni = self.intersect.len();
        let stored = self.avoids.len().min(slots.len());
        let occupied: Vec<usize> = (0..stored).filter(|&s| slots[s].occupied()).collect();
        for k in 0..ni {
            if self.tag_names[k].len() < TAG_BITS {
                continue;
            }
            let used = occupied
                .iter()
                .fold(0u64, |m, &s| m | self.tags[s * ni + k]);
            let dead = TAG_BITS as u32 - (used & !OVERFLOW).count_ones();
            let overflowing = used & OVERFLOW != 0;
            if dead > 0 && (overflowing || dead >= DEAD_BITS_WORTH_A_REBUILD) {
                self.reintern_tags(k, slots, &occupied);
            }
        }
    }

    /// Rebuilds intersect rule `k`'s table from the tickets in `occupied`: the values most
    /// waiting tickets hold get the bits (ties by value, so the table does not depend on hash
    /// order), and every waiting ticket's mask is made again from it.
    fn reintern_tags(&mut self, k: usize, slots: &Slots, occupied: &[usize]) {
        let attribute = &self.rules[self.intersect[k]].attribute;
        let tags_of = |s: usize| match slots[s].ticket().and_then(|t| t.attributes.get(attribute)) {
            Some(AttributeValue::Tags(tags)) => tags.as_slice(),
            _ => &[],
        };
        let mut holders: HashMap<&str, usize> = HashMap::new();
        for &s in occupied {
            for tag in tags_of(s) {
                *holders.entry(tag.as_str()).or_default() += 1;
            }
        }
        let mut ranked: Vec<(&str, usize)> = holders.into_iter().collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        ranked.truncate(TAG_BITS);
        let names: Vec<String> = ranked.into_iter().map(|(v, _)| v.to_owned()).collect();
        let bits: HashMap<String, u8> = (0u8..).zip(&names).map(|(b, v)| (v.clone(), b)).collect();
        let masks: Vec<u64> = occupied
            .iter()
            .map(|&s| {
                tags_of(s).iter().fold(0u64, |m, tag| {
                    m | bits.get(tag.as_str()).map_or(OVERFLOW, |&b| 1 << b)
                })
            })
            .collect();
        let ni = self.intersect.len();
        for (&s, mask) in occupied.iter().zip(masks) {
            self.tags[s * ni + k] = mask;
        }
        self.tag_bits[k] = bits;
        self.tag_names[k] = names;
    }

    /// The rule values of the tickets in `slots`, in that order, for one tick (empty without
    /// rules). The loop only copies, so the CPU keeps many of its slot misses in flight.
    pub(crate) fn tick_values(&self, slots: impl ExactSizeIterator<Item = usize>) -> TickValues {
        let mut out = TickValues::default();
        if self.rules.is_empty() {
            return out;
        }
        let (ni, nd, n) = (self.intersect.len(), self.difference.len(), slots.len());
        let equal = !self.equal.is_empty();
        out.value_of.reserve(if equal { n } else { 0 });
        out.tags.reserve(n * ni);
        out.nums.reserve(n * nd);
        out.avoids.reserve(n);
        for s in slots {
            if equal {
                out.value_of.push(self.value_of[s]);
            }
            out.tags.extend_from_slice(&self.tags[s * ni..(s + 1) * ni]);
            out.nums.extend_from_slice(&self.nums[s * nd..(s + 1) * nd]);
            out.avoids.push(self.avoids[s]);
        }
        out
    }

    /// [`match_attributes`] of the match of the candidates `members` (indices into `values`),
    /// from the compact values (a tick builds one per formed match: reading the tickets' own
    /// maps and strings costs a cache miss per pointer). `None` when a rule's common tags may
    /// include a value past the 63 interned ones; then the caller reads the tickets.
    pub(crate) fn attributes_of(
        &self,
        values: &TickValues,
        members: &[usize],
    ) -> Option<Attributes> {
        let mut out = Attributes::new();
        for (k, &r) in self.equal.iter().enumerate() {
            let mut distinct: Vec<&str> = Vec::with_capacity(1);
            for &c in members {
                let v = self.entries[values.value_of[c] as usize].values[k].as_str();
                if !distinct.contains(&v) {
                    distinct.push(v);
                }
            }
            out.insert(self.rules[r].attribute.clone(), equal_value(distinct));
        }
        let ni = self.intersect.len();
        for (k, &r) in self.intersect.iter().enumerate() {
            if self.rules[r].scope != RuleScope::Match {
                continue;
            }
            let mask = members
                .iter()
                .fold(u64::MAX, |m, &c| m & values.tags[c * ni + k]);
            if mask & OVERFLOW != 0 && !members.is_empty() {
                return None;
            }
            let names = &self.tag_names[k];
            let mut common: Vec<String> = (0..names.len())
                .filter(|&b| mask >> b & 1 == 1)
                .map(|b| names[b].clone())
                .collect();
            common.sort_unstable();
            out.insert(
                self.rules[r].attribute.clone(),
                AttributeValue::Tags(common),
            );
        }
        Some(out)
    }

    /// [`Self::attributes_of`] through `cache`, which maps what decides a match's attributes
    /// (the distinct `equal` value tuples and each match-wide intersect's common mask) to the
    /// attributes built once: in a tick most matches share a few combinations, and a hit
    /// costs a lookup instead of a map and its strings.
    pub(crate) fn shared_attributes_of(
        &self,
        values: &TickValues,
        members: &[usize],
        cache: &mut AttributeCache,
    ) -> Option<Arc<Attributes>> {
        let key = &mut cache.key;
        key.clear();
        if !self.equal.is_empty() {
            key.extend(members.iter().map(|&c| u64::from(values.value_of[c])));
            key.sort_unstable();
            key.dedup();
        }
        key.push(u64::MAX);
        let ni = self.intersect.len();
        for (k, &r) in self.intersect.iter().enumerate() {
            if self.rules[r].scope == RuleScope::Match {
                key.push(
                    members
                        .iter()
                        .fold(u64::MAX, |m, &c| m & values.tags[c * ni + k]),
                );
            }
        }
        if let Some(hit) = cache.built.get(key.as_slice()) {
            return Some(hit.clone());
        }
        let built = Arc::new(self.attributes_of(values, members)?);
        cache.built.insert(cache.key.clone(), built.clone());
        Some(built)
    }

    /// The partition of the ticket in `slot` (0 without `equal` rules).
    pub(crate) fn part(&self, slot: usize) -> u32 {
        if self.equal.is_empty() {
            return 0;
        }
        self.entries[self.value_of[slot] as usize].part
    }

    /// Waiting tickets per value of each `equal` rule's attribute, sorted.
    pub(crate) fn waiting_by_value(&self) -> Vec<(String, String, u64)> {
        let mut counts: std::collections::BTreeMap<(usize, &str), u64> =
            std::collections::BTreeMap::new();
        for e in self.entries.iter().filter(|e| e.live > 0) {
            for (k, v) in e.values.iter().enumerate() {
                *counts.entry((k, v)).or_default() += e.live;
            }
        }
        counts
            .into_iter()
            .map(|((k, v), n)| (self.rules[self.equal[k]].attribute.clone(), v.to_owned(), n))
            .collect()
    }
}

/// The rules as the selectors ask them, on candidates. A selector runs on one partition of
/// the tick's candidates ([`Checker::within`]): candidate indices are relative to it, and the
/// `equal` rules already hold within it.
#[derive(Clone, Copy)]
pub(crate) struct Checker<'a> {
    index: &'a RuleIndex,
    slots: &'a Slots,
    values: &'a TickValues,
    /// Index of the partition's first candidate among the tick's.
    base: usize,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(
        index: &'a RuleIndex,
        slots: &'a Slots,
        values: &'a TickValues,
    ) -> Checker<'a> {
        Checker {
            index,
            slots,
            values,
            base: 0,
        }
    }

    /// The checker for the partition whose candidates start at `start` among the tick's.
    pub(crate) fn within(self, start: usize) -> Checker<'a> {
        Checker {
            base: start,
            ..self
        }
    }

    /// True when the queue has rules a candidate match could break.
    pub(crate) fn active(&self) -> bool {
        !self.index.rules.is_empty()
    }

    /// True when some match-scope rule other than `equal` (which the partitions keep) may
    /// keep two candidates of one partition apart.
    pub(crate) fn keeps_apart(&self) -> bool {
        self.index
            .rules
            .iter()
            .any(|r| r.kind != RuleKind::Equal && r.scope == RuleScope::Match)
    }

    /// True when some rule binds teammates only (checked after the split into teams).
    pub(crate) fn team_rules(&self) -> bool {
        self.index.team_rules
    }

    /// Whether candidates `a` and `b` may be in one match (as teammates or opponents): the
    /// match-scope rules between them.
    pub(crate) fn pair_ok(&self, cands: &[Cand], a: usize, b: usize) -> bool {
        !self.active() || self.scope_ok(cands, &[a, b], RuleScope::Match)
    }

    /// Whether a group of candidates may form one match: the match-scope rules over all of it.
    pub(crate) fn group_ok(&self, cands: &[Cand], members: &[usize]) -> bool {
        !self.active() || self.scope_ok(cands, members, RuleScope::Match)
    }

    /// Whether each team (`flat` split at `ends`) satisfies the team-scope rules.
    pub(crate) fn teams_ok(&self, cands: &[Cand], flat: &[usize], ends: &[usize]) -> bool {
        if !self.team_rules() {
            return true;
        }
        let mut start = 0;
        ends.iter().all(|&end| {
            let team = &flat[start..end];
            start = end;
            self.scope_ok(cands, team, RuleScope::Team)
        })
    }

    /// Every rule of `scope` over the candidates `group`. The `equal` rules, of either scope,
    /// hold by construction: the candidates are of one partition.
    fn scope_ok(&self, cands: &[Cand], group: &[usize], scope: RuleScope) -> bool {
        let (ix, v, base) = (self.index, self.values, self.base);
        let part = |c: usize| ix.entries[v.value_of[base + c] as usize].part;
        debug_assert!(ix.equal.is_empty() || group.iter().all(|&c| part(c) == part(group[0])));
        let binds =
            |r: &MatchRule| r.scope == scope && group.iter().any(|&c| r.binds(cands[c].wait));
        let ni = ix.intersect.len();
        for (k, &r) in ix.intersect.iter().enumerate() {
            let rule = &ix.rules[r];
            if !binds(rule) {
                continue;
            }
            let mask = group
                .iter()
                .fold(u64::MAX, |m, &c| m & v.tags[(base + c) * ni + k]);
            let need = rule.min_common();
            if (mask & !OVERFLOW).count_ones() >= need {
                continue;
            }
            if mask & OVERFLOW == 0 || !self.exact(cands, group, rule) {
                return false;
            }
        }
        let nd = ix.difference.len();
        for (k, &r) in ix.difference.iter().enumerate() {
            let rule = &ix.rules[r];
            if !binds(rule) {
                continue;
            }
            let (mut lo, mut hi, mut allowed) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY);
            for &c in group {
                let x = v.nums[(base + c) * nd + k];
                (lo, hi) = (lo.min(x), hi.max(x));
                allowed = allowed.min(rule.max_at(cands[c].wait));
            }
            // A NaN (never admitted) compares as nothing, and fails.
            if (hi - lo).partial_cmp(&allowed) != Some(std::cmp::Ordering::Less)
                && hi - lo != allowed
            {
                return false;
            }
        }
        if let Some(r) = ix.avoid
            && ix.rules[r].scope == scope
            && group.iter().any(|&c| v.avoids[base + c])
            && !self.exact(cands, group, &ix.rules[r])
        {
            return false;
        }
        true
    }

    /// `rule` over `group` on the tickets themselves.
    fn exact(&self, cands: &[Cand], group: &[usize], rule: &MatchRule) -> bool {
        let members: Option<Vec<Member<'_>>> = group
            .iter()
            .map(|&c| {
                self.slots[cands[c].slot()].ticket().map(|t| Member {
                    players: &t.players,
                    attributes: &t.attributes,
                    avoid: &t.avoid,
                    wait: cands[c].wait,
                })
            })
            .collect();
        members.is_some_and(|m| rule_holds(rule, &m))
    }
}

#[cfg(test)]
mod tests;
