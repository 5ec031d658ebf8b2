//! One queue's waiting tickets and the tick that turns some of them into matches.
//!
//! The pool owns ticket storage (slots with a free list plus an id index, so insert and remove
//! are O(1)), expiry, and the translation between stored tickets and the optimizer's compact
//! candidate records. The choice of matches lives in `one_v_one` and `teams`.
//!
//! The id index is cleaned lazily: a tick does not remove matched tickets from it (that was a
//! chain of three dependent cache misses per ticket: slot, id string, hash table). Each entry
//! carries the slot's generation, so an entry whose slot was emptied or reused is recognised as
//! stale and ignored or overwritten; once stale entries outnumber live ones (plus slack) the
//! next tick drops them in one sequential pass, amortised O(1) per matched ticket.

use std::collections::HashMap;
use std::sync::Arc;

use thiserror::Error;

use super::candidates::{Cand, Chosen, Slot, Slots};
use super::config::{Limits, MatchingConfig};
use super::rule_index::{AttributeCache, Checker, RuleIndex, TickValues, match_attributes};
use super::{
    FormedMatch, IdHash, Shape, Teams, TickOutcome, Ticket, WinModel, one_v_one, quality_of, teams,
};
use crate::ids::TicketId;

/// Why a ticket was refused. The API layer validates requests first, so these mostly guard
/// the core's invariants against a shell bug; they are values, never panics.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum InsertError {
    /// The id is already waiting in this pool.
    #[error("ticket {0} is already in the pool")]
    Duplicate(TicketId),
    /// A ticket must carry at least one player.
    #[error("ticket {0} has no players")]
    Empty(TicketId),
    /// The party is larger than the queue's `max_party_size`.
    #[error("ticket {id} has {size} players, the queue allows at most {max}")]
    PartyTooLarge {
        /// The refused ticket.
        id: TicketId,
        /// Its party size.
        size: usize,
        /// The queue's limit.
        max: u32,
    },
    /// `skills` (or non-empty `roles`) must have one entry per player.
    #[error("ticket {0}: skills and roles must have one entry per player")]
    LengthMismatch(TicketId),
    /// A rating, deviation or `entered_at` is NaN or infinite, or a deviation is negative.
    #[error("ticket {0}: ratings and entered_at must be finite, deviations non-negative")]
    NotFinite(TicketId),
    /// The attributes or avoid-list do not fit the queue's match rules.
    #[error("ticket {0}: {1}")]
    Rules(TicketId, crate::rejection::FieldError),
}

/// Sizes the shell reports as gauges (waiting tickets/players, longest wait).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolStats {
    /// Tickets waiting.
    pub waiting_tickets: usize,
    /// Players waiting (party members counted).
    pub waiting_players: usize,
    /// Longest current wait in seconds (0 when empty).
    pub longest_wait_seconds: f64,
}

type IdMap = HashMap<TicketId, (u32, u32), IdHash>;

/// Stale index entries tolerated beyond the live count before a tick compacts the index.
pub(crate) const STALE_SLACK: usize = 1024;

/// Per-slot values fixed at insert (a waiting ticket never changes).
#[derive(Clone, Copy, Debug)]
struct Meta {
    key: f64,
    dev: f64,
    entered_at: f64,
    /// When the ticket's TTL started: its entry, or its return to the queue
    /// ([`Pool::insert_returning`]), so a ticket whose match fell through gets its full TTL.
    ttl_from: f64,
    size: u32,
}

/// Bits of a packed sort key that hold the slot (see [`pack`]).
const SLOT_BITS: u32 = 20;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

/// A rating key and a slot as one integer that sorts as the key does: the key's bits mapped to
/// an order-preserving unsigned integer, its top 44 bits (sign, exponent and 32 bits of
/// mantissa: keys closer than 2^-32 of their size tie), then the slot. Sorting these is
/// sorting plain integers, half the memory of `(f64, u32)` pairs and a cheaper comparison.
fn pack(key: f64, slot: u32) -> u64 {
    let bits = key.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    (ordered & !SLOT_MASK) | u64::from(slot)
}

/// One queue's waiting tickets.
#[derive(Clone, Debug)]
pub struct Pool {
    shape: Shape,
    config: MatchingConfig,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Ticket id → (slot, generation of the slot when the ticket was stored).
    index: IdMap,
    /// Per slot: what the optimizer reads, computed once at insert, so a tick scans compact
    /// arrays instead of chasing every ticket's heap data.
    meta: Vec<Meta>,
    /// Per slot, `config.regions.len()` latencies (`u32::MAX` = region not listed; all 0 for a
    /// ticket that accepts any region).
    latency: Vec<u32>,
    live: usize,
    players: usize,
    /// The match rules and each slot's rule values.
    rules: RuleIndex,
}

impl Pool {
    /// An empty pool. The config should have passed [`MatchingConfig::validate`] for `shape`;
    /// the pool does not re-check it.
    #[must_use]
    pub fn new(shape: Shape, config: MatchingConfig) -> Pool {
        Pool {
            rules: RuleIndex::new(&config.rules),
            shape,
            config,
            slots: Vec::new(),
            free: Vec::new(),
            index: IdMap::default(),
            meta: Vec::new(),
            latency: Vec::new(),
            live: 0,
            players: 0,
        }
    }

    /// The same waiting tickets (waits kept) under a new matching config, or the first ticket
    /// the new config refuses: a config reload changes settings without dropping a ticket.
    pub fn with_config(&self, config: MatchingConfig) -> Result<Pool, InsertError> {
        // With when each one's TTL started (a ticket back from a match keeps its later start).
        let mut tickets: Vec<(&Ticket, f64)> = (0..self.slots.len())
            .filter_map(|i| Some((self.slots[i].ticket()?, self.meta[i].ttl_from)))
            .collect();
        tickets.sort_by(|a, b| a.0.entered_at.total_cmp(&b.0.entered_at));
        let mut pool = Pool::new(self.shape, config);
        for (t, ttl_from) in tickets {
            pool.insert_returning(t.clone(), ttl_from)?;
        }
        Ok(pool)
    }

    /// The queue's shape.
    #[must_use]
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The queue's matching config.
    #[must_use]
    pub fn config(&self) -> &MatchingConfig {
        &self.config
    }

    /// Adds a waiting ticket in amortised O(1). Returns a `Result` (rather than nothing) so a
    /// duplicate or malformed ticket is refused as a value instead of corrupting the pool.
    pub fn insert(&mut self, mut ticket: Ticket) -> Result<(), InsertError> {
        let id = ticket.id.clone();
        if self.lookup(&id).is_some() {
            return Err(InsertError::Duplicate(id));
        }
        let size = ticket.players.len();
        if size == 0 {
            return Err(InsertError::Empty(id));
        }
        let max = self.config.party_limit(self.shape);
        if size > max as usize {
            return Err(InsertError::PartyTooLarge { id, size, max });
        }
        if ticket.skills.len() != size || !(ticket.roles.is_empty() || ticket.roles.len() == size) {
            return Err(InsertError::LengthMismatch(id));
        }
        let finite = |s: &(f64, f64)| s.0.is_finite() && s.1.is_finite() && s.1 >= 0.0;
        if !ticket.entered_at.is_finite()
            || !ticket.skills.iter().all(finite)
            || !ticket.party_skill.iter().all(finite)
        {
            return Err(InsertError::NotFinite(id));
        }
        if !self.config.rules.is_empty() || !ticket.avoid.is_empty() {
            super::rules::admit(
                &self.config.rules,
                &mut ticket.attributes,
                &ticket.avoid,
                &ticket.players,
            )
            .map_err(|e| InsertError::Rules(id.clone(), e))?;
        }
        let meta = Meta {
            key: ticket.rating(),
            dev: ticket.deviation(),
            entered_at: ticket.entered_at,
            ttl_from: ticket.entered_at,
            size: size as u32,
        };
        let r = self.config.regions.len();
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                self.meta.push(meta);
                self.latency.resize(self.latency.len() + r, 0);
                self.slots.len() - 1
            }
        };
        let lat = &mut self.latency[slot * r..(slot + 1) * r];
        if ticket.region_latency_ms.is_empty() {
            lat.fill(0);
        } else {
            lat.fill(u32::MAX);
            for (name, ms) in &ticket.region_latency_ms {
                if let Some(i) = self.config.regions.iter().position(|x| x == name) {
                    lat[i] = (*ms).min(u32::MAX - 1);
                }
            }
        }
        self.meta[slot] = meta;
        self.rules.store(slot, &ticket);
        let s = &mut self.slots[slot];
        s.ticket = Some(Box::new(ticket));
        s.generation = s.generation.wrapping_add(1);
        self.index.insert(id, (slot as u32, s.generation));
        self.live += 1;
        self.players += size;
        Ok(())
    }

    /// The slot of a waiting ticket, ignoring stale index entries.
    /// [`Pool::insert`] for a ticket back from a match that fell through (a declined
    /// ready-check, no game server, a cancel before the start): it keeps its `entered_at`, so
    /// its place among the oldest and its widened windows, and its TTL counts from `now`, so
    /// it is not expired at once for the time its match took.
    pub fn insert_returning(&mut self, ticket: Ticket, now: f64) -> Result<(), InsertError> {
        let id = ticket.id.clone();
        self.insert(ticket)?;
        if let Some(slot) = self.lookup(&id) {
            let meta = &mut self.meta[slot];
            meta.ttl_from = now.max(meta.entered_at);
        }
        Ok(())
    }

    /// Whether the ticket a handle names is past its TTL at `now`.
    pub(crate) fn past_ttl(&self, (slot, _): (u32, u32), now: f64) -> bool {
        self.meta
            .get(slot as usize)
            .is_some_and(|m| now - m.ttl_from >= self.config.ticket_ttl_seconds)
    }

    fn lookup(&self, id: &TicketId) -> Option<usize> {
        let &(slot, generation) = self.index.get(id)?;
        let slot = slot as usize;
        let s = self.slots.get(slot)?;
        (s.generation == generation && s.occupied()).then_some(slot)
    }

    /// Removes a waiting ticket (cancel), in O(1).
    pub fn remove(&mut self, id: &TicketId) -> Option<Ticket> {
        let slot = self.lookup(id);
        self.index.remove(id);
        let t = self.take_slot(slot?)?;
        self.players -= t.size();
        Some(*t)
    }

    /// Empties a slot; its index entry becomes stale (see the module docs).
    /// Moves only the box, never the ticket, so it touches no ticket memory and no other
    /// per-slot array; the caller subtracts the ticket's players from `players`.
    fn take_slot(&mut self, slot: usize) -> Option<Box<Ticket>> {
        let s = self.slots.get_mut(slot)?;
        let t = s.ticket.take()?;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        self.rules.release(slot);
        Some(t)
    }

    /// Drops stale index entries once they outnumber live ones (plus slack), and the rules'
    /// value entries no waiting ticket holds; rebuilds the rules' tag tables when worth it.
    fn compact_index(&mut self) {
        self.rules.compact(&self.slots, self.live);
        if self.index.len() > 2 * self.live + STALE_SLACK {
            let slots = &self.slots;
            self.index.retain(|_, &mut (slot, g)| {
                slots
                    .get(slot as usize)
                    .is_some_and(|s| s.generation == g && s.occupied())
            });
        }
    }

    /// Tickets waiting.
    #[must_use]
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no ticket waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// A waiting ticket, for inspection.
    #[must_use]
    pub fn get(&self, id: &TicketId) -> Option<&Ticket> {
        self.slots[self.lookup(id)?].ticket()
    }

    /// Iterates over the waiting tickets in no particular order.
    pub fn tickets(&self) -> impl Iterator<Item = &Ticket> {
        self.slots.iter().filter_map(Slot::ticket)
    }

    /// The waiting tickets, each with a handle [`Pool::at`] takes back: its slot and the
    /// slot's generation, so a handle kept past the ticket's removal names nothing.
    pub(crate) fn handles(&self) -> impl Iterator<Item = ((u32, u32), &Ticket)> {
        (0u32..)
            .zip(&self.slots)
            .filter_map(|(i, s)| s.ticket().map(|t| ((i, s.generation), t)))
    }

    /// The ticket a handle from [`Pool::handles`] names, if it still waits.
    pub(crate) fn at(&self, (slot, generation): (u32, u32)) -> Option<&Ticket> {
        let s = self.slots.get(slot as usize)?;
        if s.generation == generation {
            s.ticket()
        } else {
            None
        }
    }

    /// Waiting tickets per value of each `equal` rule's attribute: `(attribute, value,
    /// tickets)`, sorted (empty without `equal` rules).
    #[must_use]
    pub fn waiting_by_value(&self) -> Vec<(String, String, u64)> {
        self.rules.waiting_by_value()
    }

    /// Whether `teams` (tickets waiting `now`) satisfy the queue's match rules; backfill asks
    /// it with a running match's tickets plus a newcomer.
    #[must_use]
    pub fn rules_hold(&self, teams: &[Vec<super::rule_index::Member<'_>>]) -> bool {
        super::rule_index::holds(&self.config.rules, teams)
    }

    /// Gauges for the shell's metrics.
    #[must_use]
    pub fn stats(&self, now: f64) -> PoolStats {
        PoolStats {
            waiting_tickets: self.len(),
            waiting_players: self.players,
            longest_wait_seconds: self
                .meta
                .iter()
                .zip(&self.slots)
                .filter(|(_, s)| s.occupied())
                .map(|(m, _)| (now - m.entered_at).max(0.0))
                .fold(0.0, f64::max),
        }
    }

    /// The rating window the ticket accepts right now, `(low, high)` in display units, for
    /// SEARCHING updates. A starving ticket accepts anything: `(-inf, inf)`.
    #[must_use]
    pub fn window(&self, id: &TicketId, now: f64) -> Option<(f64, f64)> {
        let t = self.get(id)?;
        let lim = self.config.limits(t.wait(now));
        if lim.starving {
            return Some((f64::NEG_INFINITY, f64::INFINITY));
        }
        let r = t.rating();
        Some((r - lim.window, r + lim.window))
    }

    /// One optimizer pass at time `now`: removes expired tickets, then chooses a set of
    /// disjoint matches that is good as a whole and removes their tickets.
    pub fn tick(&mut self, now: f64, model: &dyn WinModel) -> TickOutcome {
        self.tick_with(now, |cands, config, shape, slots, rules| {
            choose(cands, config, shape, model, slots, rules)
        })
    }

    /// A tick with another selection strategy (the benchmark's FIFO baseline, or the optimizer
    /// wrapped in a timer), sharing expiry and match construction with [`Pool::tick`] so their
    /// times compare fairly. With `equal` rules `select` runs once per partition (candidates
    /// with the same classes, a contiguous range of the sorted candidates).
    pub(crate) fn tick_with(
        &mut self,
        now: f64,
        mut select: impl FnMut(&[Cand], &MatchingConfig, Shape, &Slots, &Checker<'_>) -> Chosen,
    ) -> TickOutcome {
        let expired = self.expire(now);
        let (cands, ranges) = self.candidates(now);
        let values = self.rules.tick_values(cands.iter().map(Cand::slot));
        let checker = Checker::new(&self.rules, &self.slots, &values);
        let mut chosen = Chosen::new(self.shape.teams as usize);
        for range in ranges {
            let start = range.start;
            let part = select(
                &cands[range],
                &self.config,
                self.shape,
                &self.slots,
                &checker.within(start),
            );
            if start == 0 && chosen.len() == 0 {
                chosen = part;
            } else {
                chosen.append(part, start);
            }
        }
        self.finish(&cands, &values, chosen, expired)
    }

    /// Removes and returns the tickets past their TTL.
    fn expire(&mut self, now: f64) -> Vec<Ticket> {
        let ttl = self.config.ticket_ttl_seconds;
        let expired_slots: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].occupied() && (now - self.meta[i].ttl_from).max(0.0) >= ttl)
            .collect();
        let mut expired = Vec::with_capacity(expired_slots.len());
        for slot in expired_slots {
            if let Some(t) = self.take_slot(slot) {
                self.players -= t.size();
                expired.push(*t);
            }
        }
        self.compact_index();
        expired
    }

    fn finish(
        &mut self,
        cands: &[Cand],
        values: &TickValues,
        mut chosen: Chosen,
        expired: Vec<Ticket>,
    ) -> TickOutcome {
        let mut out = TickOutcome {
            expired,
            ..TickOutcome::default()
        };
        // First move every matched ticket (a box) out of its slot in one tight loop whose
        // iterations are independent, so the CPU keeps many slot misses in flight; the matches
        // are then built from this sequential list.
        // The match attributes come from the tick's compact rule values (`None`: read the
        // tickets, below).
        let mut fast: Vec<Option<Arc<super::Attributes>>> = Vec::new();
        if !self.config.rules.is_empty() {
            let mut cache = AttributeCache::default();
            fast.reserve(chosen.len());
            for m in 0..chosen.len() {
                fast.push(
                    self.rules
                        .shared_attributes_of(values, chosen.members(m), &mut cache),
                );
            }
        }
        let mut taken = Vec::with_capacity(chosen.members.len());
        out.matched_waits.reserve(chosen.members.len());
        for &c in &chosen.members {
            let t = self.take_slot(cands[c].slot());
            if t.is_some() {
                self.players -= cands[c].size as usize;
            }
            taken.push(t);
            out.matched_waits.push(cands[c].wait);
        }
        out.matches.reserve(chosen.len());
        let mut taken = taken.into_iter();
        // Moved out, not cloned: one allocation per match saved on the hot path.
        let mut probabilities = std::mem::take(&mut chosen.win_probability).into_iter();
        // One buffer for the whole tick: `Teams` takes a match's tickets out of it (inline for
        // a pair), so a 1v1 match allocates nothing here.
        let mut tickets = Vec::with_capacity(self.shape.players_per_match() as usize);
        let mut ends = Vec::with_capacity(chosen.teams);
        // Without regions the mask is unused, and reading it was a cache miss per ticket.
        let regional = !self.config.regions.is_empty();
        // One empty map shared by the tick's rule-free matches: no allocation per match.
        let no_attributes = Arc::new(super::Attributes::new());
        for m in 0..chosen.len() {
            let mut mask = u64::MAX;
            ends.clear();
            for k in 0..chosen.teams {
                for &c in chosen.team(m, k) {
                    if regional {
                        mask &= cands[c].regions;
                    }
                    if let Some(Some(t)) = taken.next() {
                        tickets.push(t);
                    }
                }
                ends.push(tickets.len());
            }
            let win_probability = probabilities.next().unwrap_or_default();
            let teams = Teams::take_from(&mut tickets, &ends);
            let attributes = match fast.get_mut(m).map(Option::take) {
                None => no_attributes.clone(),
                Some(Some(a)) => a,
                Some(None) => {
                    let all: Vec<&Ticket> = teams.tickets().iter().map(|t| &**t).collect();
                    Arc::new(match_attributes(&self.config.rules, &all))
                }
            };
            out.matches.push(FormedMatch {
                quality: quality_of(&win_probability),
                win_probability,
                rating_spread: chosen.rating_spread[m],
                region: if regional {
                    self.choose_region(cands, chosen.members(m), mask)
                } else {
                    None
                },
                teams,
                attributes,
            });
        }
        out.waiting = self.len();
        out
    }

    /// The waiting tickets as candidates, sorted by rating key (both optimizers work on the
    /// sorted order; sorting compact `(key, index)` pairs and gathering once keeps the rest of
    /// the tick sequential in memory), and the ranges of its partitions: with `equal` rules the
    /// candidates are sorted by partition first, each partition by rating.
    fn candidates(&self, now: f64) -> (Vec<Cand>, Vec<std::ops::Range<usize>>) {
        // Slots and partitions are read in slot order, sequentially.
        let packed = self.slots.len() <= 1 << SLOT_BITS;
        let mut keys: Vec<u64> = Vec::with_capacity(self.len());
        let mut parts: Vec<u32> = Vec::new();
        let partitioned = self.rules.partitioned();
        for (slot, (m, s)) in self.meta.iter().zip(&self.slots).enumerate() {
            if s.occupied() {
                keys.push(if packed {
                    pack(m.key, slot as u32)
                } else {
                    slot as u64
                });
                if partitioned {
                    parts.push(self.rules.part(slot));
                }
            }
        }
        let mut ranges = Vec::new();
        if partitioned {
            // Bucketed by partition (a counting sort: partitions are few); each bucket is then
            // sorted by rating as the rule-free tick sorts the whole pool.
            let count = parts.iter().max().map_or(0, |&p| p as usize + 1);
            let mut next = vec![0usize; count + 1];
            for &p in &parts {
                next[p as usize + 1] += 1;
            }
            for p in 0..count {
                next[p + 1] += next[p];
            }
            let starts = next.clone();
            let mut bucketed = vec![0u64; keys.len()];
            for (&key, &p) in keys.iter().zip(&parts) {
                bucketed[next[p as usize]] = key;
                next[p as usize] += 1;
            }
            keys = bucketed;
            ranges.extend(
                starts
                    .windows(2)
                    .filter(|w| w[0] < w[1])
                    .map(|w| w[0]..w[1]),
            );
        } else {
            ranges.push(0..keys.len());
        }
        for range in &ranges {
            let part = &mut keys[range.clone()];
            if packed {
                part.sort_unstable();
            } else {
                part.sort_unstable_by(|&a, &b| {
                    self.meta[a as usize]
                        .key
                        .total_cmp(&self.meta[b as usize].key)
                });
            }
        }
        let slot_of = |k: u64| if packed { k & SLOT_MASK } else { k } as usize;
        // Two passes. The first only copies each ticket's meta from its (random) slot, a loop
        // body small enough for the CPU to keep many of those cache misses in flight at once;
        // `wait` holds `entered_at` until the second pass, which computes the wait-dependent
        // parts in sorted order with no misses. In one pass the misses were served a few at a
        // time, behind the limits and region work of each candidate (0.5-1 ms of 100k).
        let mut cands: Vec<Cand> = keys
            .iter()
            .map(|&k| {
                let slot = slot_of(k);
                let m = &self.meta[slot];
                Cand {
                    slot: slot as u32,
                    key: m.key,
                    dev: m.dev,
                    size: m.size,
                    wait: m.entered_at,
                    lim: Limits {
                        window: 0.0,
                        min_quality: 0.0,
                        max_latency_ms: 0,
                        starving: false,
                    },
                    regions: 1,
                }
            })
            .collect();
        let r = self.config.regions.len();
        let schedule = self.config.schedule();
        for c in &mut cands {
            c.wait = (now - c.wait).max(0.0);
            c.lim = schedule.limits(c.wait);
            if r > 0 {
                let s = c.slot();
                c.regions = latency_mask(&self.latency[s * r..(s + 1) * r], &c.lim);
            }
        }
        (cands, ranges)
    }

    /// The region in `mask` with the lowest worst-case latency over the match's tickets
    /// (from the stored latencies, which stay valid until a slot is reused at insert).
    fn choose_region(&self, cands: &[Cand], members: &[usize], mask: u64) -> Option<String> {
        let r = self.config.regions.len();
        let mut best: Option<(u32, usize)> = None;
        for i in (0..r).filter(|&i| mask >> i & 1 == 1) {
            let worst = members
                .iter()
                .map(|&c| self.latency[cands[c].slot() * r + i])
                .max()
                .unwrap_or(0);
            if best.is_none_or(|(b, _)| worst < b) {
                best = Some((worst, i));
            }
        }
        best.map(|(_, i)| self.config.regions[i].clone())
    }
}

/// The optimizer proper: the 1v1 dynamic programme or the team window search.
pub(crate) fn choose(
    cands: &[Cand],
    config: &MatchingConfig,
    shape: Shape,
    model: &dyn WinModel,
    slots: &Slots,
    rules: &Checker<'_>,
) -> Chosen {
    if shape.is_one_v_one() {
        one_v_one::select(cands, config, model, slots, rules)
    } else {
        teams::select(cands, shape, config, model, slots, rules)
    }
}

/// Bit set of the regions a ticket accepts under `lim` (see [`Cand::regions`]): the reference
/// definition the property tests check the pool's stored-latency path against.
#[cfg(test)]
pub(crate) fn region_mask(regions: &[String], t: &Ticket, lim: &Limits) -> u64 {
    if regions.is_empty() {
        return 1;
    }
    if t.region_latency_ms.is_empty() {
        return all_regions(regions.len());
    }
    let mut mask = 0u64;
    for (name, latency) in &t.region_latency_ms {
        if (lim.starving || *latency <= lim.max_latency_ms)
            && let Some(i) = regions.iter().position(|r| r == name)
        {
            mask |= 1 << i;
        }
    }
    mask
}

/// [`region_mask`] from a slot's stored latencies.
fn latency_mask(latency: &[u32], lim: &Limits) -> u64 {
    latency
        .iter()
        .enumerate()
        .filter(|&(_, &l)| l != u32::MAX && (lim.starving || l <= lim.max_latency_ms))
        .fold(0u64, |m, (i, _)| m | 1 << i)
}

#[cfg(test)]
fn all_regions(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::LogisticModel;
    use crate::matching::test_util::{party, solo};

    #[test]
    fn packed_keys_sort_as_the_ratings_then_the_slots() {
        let keys = [
            -1e9, -1500.0, -0.5, -0.0, 0.0, 1e-300, 0.5, 1499.99, 1500.0, 1500.01, 1e9,
        ];
        let mut packed: Vec<u64> = keys
            .iter()
            .enumerate()
            .rev()
            .map(|(slot, &k)| pack(k, slot as u32))
            .collect();
        packed.sort_unstable();
        let slots: Vec<u64> = packed.iter().map(|&p| p & SLOT_MASK).collect();
        assert_eq!(slots, (0..keys.len() as u64).collect::<Vec<_>>());
        // Keys closer than the kept bits tie, and are ordered by slot.
        assert!(pack(1500.0 + 1e-9, 3) < pack(1500.0, 7));
        assert!(pack(1500.0, 3) < pack(1500.0 + 1e-9, 7));
        assert_eq!(pack(1500.0, (1 << SLOT_BITS) - 1) & SLOT_MASK, SLOT_MASK);
    }

    const ONE: Shape = Shape {
        teams: 2,
        team_size: 1,
    };
    const MODEL: LogisticModel = LogisticModel { scale: 400.0 };

    #[test]
    fn bad_tickets_are_refused() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("a", 1500.0, 0.0)).unwrap();
        assert!(matches!(
            pool.insert(solo("a", 1500.0, 0.0)),
            Err(InsertError::Duplicate(_))
        ));
        assert!(pool.insert(solo("n", f64::NAN, 0.0)).is_err());
        let two = party("p", &[1500.0, 1500.0], 0.0);
        assert!(pool.insert(two).is_err());
        assert_eq!(pool.len(), 1);
        assert!(pool.remove(&"a".into()).is_some());
        assert!(pool.is_empty());
    }

    #[test]
    fn matched_ids_can_return_and_the_lazy_index_stays_consistent() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        for round in 0..3000 {
            let now = f64::from(round);
            pool.insert(solo("a", 1500.0, now)).unwrap();
            pool.insert(solo(&format!("b{round}"), 1501.0, now))
                .unwrap();
            pool.insert(solo(&format!("c{round}"), 2500.0, now))
                .unwrap();
            assert_eq!(pool.tick(now, &MODEL).matches.len(), 1);
            // A matched ticket is gone for every lookup, and its id may queue again.
            assert!(pool.get(&"a".into()).is_none());
            assert!(pool.remove(&format!("b{round}").as_str().into()).is_none());
            assert_eq!(pool.len(), 1);
            assert!(pool.remove(&format!("c{round}").as_str().into()).is_some());
            assert!(pool.is_empty());
        }
        assert!(pool.index.len() <= 2 * pool.live + STALE_SLACK + 3);
    }

    #[test]
    fn stats_and_starving_windows_for_searching_updates() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("a", 1500.0, 0.0)).unwrap();
        pool.insert(solo("b", 1900.0, 50.0)).unwrap();
        let stats = pool.stats(130.0);
        assert_eq!(stats.waiting_tickets, 2);
        assert_eq!(stats.waiting_players, 2);
        assert_eq!(stats.longest_wait_seconds, 130.0);
        assert_eq!(
            pool.window(&"a".into(), 130.0),
            Some((f64::NEG_INFINITY, f64::INFINITY))
        );
        assert_eq!(pool.window(&"b".into(), 130.0), Some((1500.0, 2300.0)));
        assert_eq!(pool.window(&"zz".into(), 130.0), None);
    }

    #[test]
    fn a_ticket_back_from_a_match_gets_its_whole_ttl_from_its_return() {
        let config = MatchingConfig::default();
        let ttl = config.ticket_ttl_seconds;
        let mut pool = Pool::new(ONE, config);
        // Entered at 0, matched, and back at ttl - 10 when the match fell through; another
        // entered at 0 never left. Ratings far apart: neither is matched.
        pool.insert_returning(solo("back", 1500.0, 0.0), ttl - 10.0)
            .unwrap();
        pool.insert(solo("stayed", 9000.0, 0.0)).unwrap();
        let expired = |o: TickOutcome| -> Vec<String> {
            o.expired.iter().map(|t| t.id.to_string()).collect()
        };
        assert_eq!(expired(pool.tick(ttl, &MODEL)), ["stayed"]);
        // Its place among the oldest is kept (its wait still counts from 0)...
        assert_eq!(pool.stats(ttl).longest_wait_seconds, ttl);
        // ...and a config reload keeps its TTL's start.
        let mut pool = pool.with_config(MatchingConfig::default()).unwrap();
        assert!(expired(pool.tick(2.0 * ttl - 11.0, &MODEL)).is_empty());
        assert_eq!(expired(pool.tick(2.0 * ttl - 10.0, &MODEL)), ["back"]);
    }

    #[test]
    fn a_new_config_keeps_every_waiting_ticket_and_its_wait() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("a", 1500.0, 0.0)).unwrap();
        pool.insert(solo("b", 1600.0, 2.0)).unwrap();
        let wider = MatchingConfig {
            window: 150.0,
            ..MatchingConfig::default()
        };
        let mut moved = pool.with_config(wider).unwrap();
        assert_eq!(moved.len(), 2);
        assert_eq!(moved.get(&"b".into()).unwrap().entered_at, 2.0);
        assert_eq!(moved.config().window, 150.0);
        // Before the first expansion the old window (±50) keeps them apart; the new one pairs them.
        assert_eq!(pool.tick(5.0, &MODEL).matches.len(), 0);
        assert_eq!(moved.tick(5.0, &MODEL).matches.len(), 1);
        // A config that refuses a waiting ticket is refused whole.
        let mut two = Pool::new(
            Shape {
                teams: 2,
                team_size: 2,
            },
            MatchingConfig::default(),
        );
        two.insert(party("p", &[1500.0, 1500.0], 0.0)).unwrap();
        let solo_only = MatchingConfig {
            max_party_size: Some(1),
            ..MatchingConfig::default()
        };
        assert!(matches!(
            two.with_config(solo_only),
            Err(InsertError::PartyTooLarge { .. })
        ));
    }
}
