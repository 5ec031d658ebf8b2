//! Team and free-for-all queues: candidate groups from windows over tickets sorted by rating,
//! balanced into teams, chosen disjointly with the oldest tickets first.
//!
//! Per tick: sort the waiting tickets by rating (O(n log n)) and keep the unmatched ones in a
//! doubly linked list over that order. Then take anchors oldest first (starving tickets by exact
//! wait, the rest by expansion stage, see `anchor_order`); for each unmatched anchor
//! look at its unmatched neighbours that share a region with it (up to `P − 1` players either
//! side, `P` = players per match) and form every window that contains the anchor, takes whole
//! tickets and holds exactly `P` players. Windows that every member's skill window accepts and
//! that share a region are tried tightest first (at most [`TRIES`]): split into teams
//! ([`super::balance`]), scored by the injected model, accepted if the underdog quality reaches
//! every member's floor. The accepted match leaves the list in O(1). Total O(n log n + n · P²).
//!
//! Why this and not a global assignment: with anchors taken oldest first, the longest-waiting
//! ticket always gets the best match around it before younger tickets can take its neighbours,
//! which is the fairness players notice; and because the groups are the tightest windows in
//! sorted order, the set of matches is also tight as a whole (every match is made of rating
//! neighbours), unlike first-come greedy which mixes arbitrary ratings. An exact maximum-weight
//! set packing is NP-hard for `P ≥ 3` and would not fit a 1 s tick at 100k tickets.
//!
//! Match rules: the pool runs this once per partition of `equal` values. Neighbours that break
//! a match-scope rule with the anchor are skipped when its windows are gathered (within a bounded
//! scan, unbounded for a starving anchor), every window must satisfy the match-scope rules as a
//! whole, and the teams of a split the team-scope ones. A starving anchor whose windows all fail
//! gathers rule-compatible tickets nearest first (as for roles). Rules are never lifted.
//!
//! Regions: tickets of other regions are skipped like tickets a rule keeps apart (within the
//! bounded scan for a fresh anchor), so players of two regions interleaved in rating still
//! match within their own. An anchor reaching several regions whose windows all mix them then
//! tries region by region.
//!
//! Starvation: a window containing a ticket past `max_wait_seconds` ignores skill windows and
//! quality floors (regions, roles and parties still hold). A starving anchor whose nearest
//! neighbours fail looks further: region by region for tickets sharing a region with it, and in
//! queues with roles for the nearest tickets able to fill each role minimum (`role_group`), so
//! it never waits while a legal match exists (`properties.rs` checks both). That search stops
//! as soon as it has a group; one that finds the region's waiting players cannot fill the
//! role seats at all is remembered for the rest of the tick, so a crowd of starving tickets
//! with no healer among them costs O(n) per tick, not O(n) each.

use super::balance::{self, Seats, Unit};
use super::candidates::{Cand, Chosen, Slots, score};
use super::config::MatchingConfig;
use super::rule_index::Checker;
use super::{Shape, Ticket, WinModel, quality_of};

/// Candidate windows tried per anchor before it waits for the next tick.
pub const TRIES: usize = 3;

const NONE: usize = usize::MAX;

/// Neighbours a fresh anchor looks past (per side, in players per match) for ones that satisfy
/// the rules and share a region with it; a starving anchor looks as far as it takes.
const RULE_SCAN: u32 = 8;

/// What every window evaluation needs, bundled.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    cands: &'a [Cand],
    shape: Shape,
    config: &'a MatchingConfig,
    model: &'a dyn WinModel,
    slots: &'a Slots,
    rules: &'a Checker<'a>,
    masks: &'a RoleMasks,
}

/// Every candidate's per-player role masks ([`push_role_masks`]), read from the tickets once per
/// tick: the windows tried and the starving anchors' groups look them up many times. Empty in
/// a queue without roles.
struct RoleMasks {
    /// Candidate `c`'s masks are `bits[start[c]..start[c + 1]]`.
    start: Vec<u32>,
    bits: Vec<u64>,
}

impl RoleMasks {
    fn new(cands: &[Cand], config: &MatchingConfig, slots: &Slots) -> Self {
        if config.roles.is_empty() {
            return RoleMasks {
                start: Vec::new(),
                bits: Vec::new(),
            };
        }
        let mut start = Vec::with_capacity(cands.len() + 1);
        let mut bits = Vec::with_capacity(cands.len());
        start.push(0);
        for c in cands {
            if let Some(t) = slots[c.slot()].ticket() {
                push_role_masks(config, t, &mut bits);
            }
            start.push(bits.len() as u32);
        }
        RoleMasks { start, bits }
    }

    /// Candidate `c`'s masks, one per player (none in a queue without roles).
    fn of(&self, c: usize) -> &[u64] {
        match self.start.get(c..c + 2) {
            Some(&[a, b]) => &self.bits[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// A candidate window: its members are `buf[start..start + len]`, in rating order.
struct Group {
    spread: f64,
    starving: bool,
    start: usize,
    len: usize,
}

/// Chooses the team matches for one tick; `cands` is sorted by rating key.
pub(crate) fn select(
    cands: &[Cand],
    shape: Shape,
    config: &MatchingConfig,
    model: &dyn WinModel,
    slots: &Slots,
    rules: &Checker<'_>,
) -> Chosen {
    let n = cands.len();
    let need = shape.players_per_match();
    // Doubly linked list of unmatched candidates in rating order (candidate index = position).
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|p| p.wrapping_sub(1)).collect();
    let age = anchor_order(cands, config);

    let mut matched = vec![false; n];
    let mut out = Chosen::new(shape.teams as usize);
    let mut flat = Vec::new();
    let mut ends = Vec::new();
    let mut left = Vec::new();
    let mut right = Vec::new();
    let mut nb = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut buf: Vec<usize> = Vec::new();
    let mut scratch = Vec::new();
    let masks = RoleMasks::new(cands, config, slots);
    let ctx = Ctx {
        cands,
        shape,
        config,
        model,
        slots,
        rules,
        masks: &masks,
    };
    let parties = cands.iter().any(|c| c.size > 1);
    let ruled = rules.active();
    let regional = !config.regions.is_empty();
    // Regions (bits of `Cand::regions`) whose waiting players cannot fill the role seats.
    let mut roles_short = 0u64;
    for &anchor in &age {
        if matched[anchor] || cands[anchor].regions == 0 {
            continue;
        }
        let anchor_starving = cands[anchor].lim.starving;
        // First the nearest neighbours sharing a region with the anchor. For an anchor that
        // reaches one region (or a queue without regions) that is the whole story. An anchor
        // reaching several may find only windows that mix them (an eu-only and a na-only
        // player beside it); it then tries region by region: a starving one always, however
        // far in rating (otherwise it would wait while enough tickets of its own region wait
        // further away: the starvation guard, `properties.rs` checks it), a fresh one within
        // the bounded scan. Walking past the others costs O(n) for starving anchors only, and
        // they are few.
        let several = cands[anchor].regions.count_ones() > 1;
        let passes = if regional && several {
            config.regions.len().min(64) + 1
        } else {
            1
        };
        let mut mixed = false;
        'passes: for pass in 0..passes {
            let region = pass.checked_sub(1);
            if region.is_some() && !anchor_starving && !mixed {
                break;
            }
            if region.is_some_and(|r| cands[anchor].regions >> r & 1 == 0) {
                continue;
            }
            let reach = region.map_or(cands[anchor].regions, |r| 1 << r);
            let accept =
                |p: usize| cands[p].regions & reach != 0 && rules.pair_ok(cands, anchor, p);
            // The anchor's unmatched neighbours in rating order (those sharing `reach` and
            // the rules with the anchor), looking past at most `scan` others: tickets of
            // other regions are skipped like those a rule keeps apart.
            let scan = if anchor_starving || !(ruled || regional) {
                usize::MAX
            } else {
                (RULE_SCAN * need) as usize
            };
            left.clear();
            right.clear();
            let (mut players, mut seen) = (0, 0);
            let mut p = prev[anchor];
            while p != NONE && players + 1 < need && seen < scan {
                if accept(p) {
                    left.push(p);
                    players += cands[p].size;
                }
                seen += 1;
                p = prev[p];
            }
            (players, seen) = (0, 0);
            let mut p = next[anchor];
            while p < n && players + 1 < need && seen < scan {
                if accept(p) {
                    right.push(p);
                    players += cands[p].size;
                }
                seen += 1;
                p = next[p];
            }
            nb.clear();
            nb.extend(left.iter().rev());
            nb.push(anchor);
            nb.extend(right.iter());
            let a = left.len();

            groups.clear();
            buf.clear();
            let mut sum_left = 0;
            for l in (0..=a).rev() {
                sum_left += cands[nb[l]].size;
                if sum_left > need {
                    break;
                }
                let start = buf.len();
                buf.extend_from_slice(&nb[l..=a]);
                let mut sum = sum_left;
                for &r in &nb[a + 1..] {
                    if sum == need {
                        break;
                    }
                    if sum + cands[r].size <= need {
                        buf.push(r);
                        sum += cands[r].size;
                    }
                }
                let members = &buf[start..];
                let lo = cands[members[0]].key;
                let hi = cands[members[members.len() - 1]].key;
                let regions = members.iter().fold(u64::MAX, |m, &c| m & cands[c].regions);
                let starving = members.iter().any(|&c| cands[c].lim.starving);
                mixed |= sum == need && regions == 0;
                if sum != need
                    || regions == 0
                    || (!starving && !members.iter().all(|&c| accepts(&cands[c], lo, hi)))
                    || (ruled && !rules.group_ok(cands, members))
                {
                    buf.truncate(start);
                    continue;
                }
                groups.push(Group {
                    spread: hi - lo,
                    starving,
                    start,
                    len: buf.len() - start,
                });
            }
            groups.sort_by(|x, y| x.spread.total_cmp(&y.spread));

            for g in groups.iter().take(TRIES) {
                let members = &buf[g.start..g.start + g.len];
                let Some(scored) = build(
                    &ctx,
                    members,
                    g.starving,
                    &mut scratch,
                    &mut flat,
                    &mut ends,
                ) else {
                    continue;
                };
                unlink(members, &mut matched, &mut next, &mut prev);
                out.push(&flat, &ends, scored);
                break 'passes;
            }
            // Roles: the nearest neighbours may all lack a required role (five damage dealers
            // around a starving one) while players who can fill it wait further away. Parties:
            // the nearest neighbours may not add up to a match (a solo among duos in 2v2) while
            // a solo further away would. A starving anchor then gathers tickets nearest first,
            // skipping any that would overflow the match, as far as it takes (O(n) at worst,
            // for such anchors only).
            let role_retry = anchor_starving
                && (!config.roles.is_empty() || parties || ruled)
                && reach.count_ones() == 1;
            if !role_retry {
                continue;
            }
            // `reach` is one region here (or the queue has none): remember within the tick
            // that its waiting players cannot fill the role seats, so the next starving anchor
            // there does not walk the whole list again. Without rules `accept` is the same for
            // every such anchor.
            if roles_short & reach != 0 {
                continue;
            }
            let members = match role_group(&ctx, anchor, &next, &prev, accept) {
                Gathered::Group(members) => members,
                Gathered::RolesShort if !ruled => {
                    roles_short |= reach;
                    continue;
                }
                Gathered::RolesShort | Gathered::Nothing => continue,
            };
            if members.iter().fold(u64::MAX, |m, &c| m & cands[c].regions) == 0 {
                continue;
            }
            let Some(scored) = build(&ctx, &members, true, &mut scratch, &mut flat, &mut ends)
            else {
                continue;
            };
            unlink(&members, &mut matched, &mut next, &mut prev);
            out.push(&flat, &ends, scored);
            break 'passes;
        }
    }
    out
}

/// Marks a chosen match's members matched and takes them out of the linked list of unmatched
/// candidates, O(1) each.
fn unlink(members: &[usize], matched: &mut [bool], next: &mut [usize], prev: &mut [usize]) {
    let n = matched.len();
    for &c in members {
        matched[c] = true;
        if prev[c] != NONE {
            next[prev[c]] = next[c];
        }
        if next[c] < n {
            prev[next[c]] = prev[c];
        }
    }
}

/// What [`role_group`] gathered for a starving anchor.
enum Gathered {
    /// One match's players, role seats filled.
    Group(Vec<usize>),
    /// Every ticket `accept` lets in was looked at and none was passed over for size or rules,
    /// yet the role seats stay empty: with fewer tickets waiting (later in the tick) they
    /// cannot be filled either.
    RolesShort,
    /// No group this time (a size or a rule got in the way).
    Nothing,
}

#[cfg(test)]
thread_local! {
    /// Tickets the starving anchors' role groups looked at on this thread, for the tests of
    /// how much work a tick does.
    pub(crate) static WALKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A group for a starving `anchor` in a queue with roles: the nearest unmatched tickets (that
/// `accept` lets in) that fill the role minimums of every team, each player one seat, then the
/// nearest others, to exactly one match's players. It looks outward only as far as it needs.
/// Whether the group splits into legal teams is `build`'s question.
fn role_group(
    ctx: &Ctx<'_>,
    anchor: usize,
    next: &[usize],
    prev: &[usize],
    accept: impl Fn(usize) -> bool,
) -> Gathered {
    let Ctx {
        cands,
        shape,
        config,
        rules,
        masks,
        ..
    } = *ctx;
    let n = cands.len();
    let need = shape.players_per_match() as usize;
    // Unmatched tickets outward from the anchor, nearest rating first.
    let key = cands[anchor].key;
    let (mut l, mut r) = (prev[anchor], next[anchor]);
    let mut nearest = || loop {
        let take_left = match (l != NONE, r < n) {
            (true, true) => key - cands[l].key <= cands[r].key - key,
            (left, right) if left || right => left,
            _ => return None,
        };
        let c = if take_left { l } else { r };
        if take_left {
            l = prev[l];
        } else {
            r = next[r];
        }
        #[cfg(test)]
        WALKED.with(|w| w.set(w.get() + 1));
        if accept(c) {
            return Some(c);
        }
    };
    let mut members = vec![anchor];
    let mut players = cands[anchor].size as usize;
    // A ticket joins only if the group still satisfies the match-scope rules with it.
    let mut probe = Vec::with_capacity(need);
    let mut fits = |members: &[usize], c: usize| {
        if !rules.active() {
            return true;
        }
        probe.clear();
        probe.extend_from_slice(members);
        probe.push(c);
        rules.group_ok(cands, &probe)
    };
    // The role seats of every team: a ticket joins only if it fills a seat the group could not
    // fill without it (a larger matching of players to seats), so a player able to fill two
    // roles is not counted for both.
    let mut seats = Seats::new(&config.roles, shape.teams);
    seats.add_ticket(masks.of(anchor));
    // The tickets looked at so far, nearest first, and whether each joined.
    let mut seen: Vec<(usize, bool)> = Vec::new();
    let mut passed_over = false;
    while !seats.full() {
        let Some(c) = nearest() else {
            return if passed_over {
                Gathered::Nothing
            } else {
                Gathered::RolesShort
            };
        };
        let size = cands[c].size as usize;
        let fit = players + size <= need && fits(&members, c);
        passed_over |= !fit;
        let joins = fit && seats.add_ticket(masks.of(c));
        if joins {
            members.push(c);
            players += size;
        }
        seen.push((c, joins));
    }
    let mut done = players == need;
    let mut join = |c: usize, members: &mut Vec<usize>| {
        let size = cands[c].size as usize;
        if players + size <= need && fits(members, c) {
            members.push(c);
            players += size;
        }
        players == need
    };
    for &(c, joined) in &seen {
        if done {
            break;
        }
        if !joined {
            done = join(c, &mut members);
        }
    }
    while !done {
        let Some(c) = nearest() else {
            return Gathered::Nothing;
        };
        done = join(c, &mut members);
    }
    members.sort_unstable();
    Gathered::Group(members)
}

/// The order anchors are served in: starving tickets first, longest wait first; then the
/// other tickets by expansion stage, latest stage (longest waits) first, and within a stage in
/// rating order.
///
/// Why stages rather than exact wait order: every ticket in one stage has the same window and
/// floor, so which of them anchors first barely changes who gets matched, while visiting
/// anchors in exact wait order jumps to a random place in the rating order each time (a cache
/// miss per anchor, which made the 50k-ticket 5v5 tick several times slower). A ticket in a
/// later stage still always chooses before every fresher one.
fn anchor_order(cands: &[Cand], config: &MatchingConfig) -> Vec<usize> {
    let stages = config.expansion.len();
    let stage = |c: &Cand| {
        if c.lim.starving {
            stages + 1
        } else {
            config
                .expansion
                .iter()
                .take_while(|s| s.after_seconds <= c.wait)
                .count()
        }
    };
    // Counting sort by stage, stable, so each stage keeps rating order.
    let mut counts = vec![0usize; stages + 2];
    let tiers: Vec<usize> = cands.iter().map(stage).collect();
    for &t in &tiers {
        counts[t] += 1;
    }
    let mut starts = vec![0usize; stages + 2];
    let mut acc = 0;
    for t in (0..stages + 2).rev() {
        starts[t] = acc;
        acc += counts[t];
    }
    let mut order = vec![0usize; cands.len()];
    for (i, &t) in tiers.iter().enumerate() {
        order[starts[t]] = i;
        starts[t] += 1;
    }
    let starving = counts[stages + 1];
    order[..starving].sort_by(|&a, &b| cands[b].wait.total_cmp(&cands[a].wait));
    order
}

/// True if `c`'s skill window contains the whole range `[lo, hi]`.
fn accepts(c: &Cand, lo: f64, hi: f64) -> bool {
    c.key - lo <= c.lim.window && hi - c.key <= c.lim.window
}

/// Splits a group into teams (written to `flat`/`ends` in [`Chosen::push`]'s layout), asks the
/// model, and checks the quality floor.
fn build(
    ctx: &Ctx<'_>,
    members: &[usize],
    starving: bool,
    scratch: &mut Vec<Vec<(f64, f64)>>,
    flat: &mut Vec<usize>,
    ends: &mut Vec<usize>,
) -> Option<(Vec<f64>, f64)> {
    let Ctx {
        cands,
        shape,
        config,
        model,
        slots,
        rules,
        masks,
    } = *ctx;
    let units: Vec<Unit> = members
        .iter()
        .map(|&c| Unit {
            size: cands[c].size,
            strength: cands[c].key * f64::from(cands[c].size),
            role_masks: masks.of(c).to_vec(),
        })
        .collect();
    let place = |split: &[Vec<usize>], flat: &mut Vec<usize>, ends: &mut Vec<usize>| {
        flat.clear();
        ends.clear();
        for team in split {
            flat.extend(team.iter().map(|&u| members[u]));
            ends.push(flat.len());
        }
    };
    // The rules that look at each team choose among the splits, so a group some split of
    // which they allow is not refused for the one they do not.
    let mut allowed = |split: &[Vec<usize>]| {
        place(split, flat, ends);
        rules.teams_ok(cands, flat, ends)
    };
    let split = balance::split_where(
        &units,
        shape.teams,
        shape.team_size,
        &config.roles,
        rules
            .team_rules()
            .then_some(&mut allowed as balance::Allowed<'_>),
    )?;
    place(&split, flat, ends);
    let scored = score(cands, flat, ends, slots, model, scratch);
    if !starving {
        let floor = members
            .iter()
            .map(|&c| cands[c].lim.min_quality)
            .fold(0.0, f64::max);
        if quality_of(&scored.0) < floor {
            return None;
        }
    }
    Some(scored)
}

/// [`push_role_masks`] as a vector of its own (the property tests check formed teams with it).
#[cfg(test)]
pub(crate) fn role_masks(config: &MatchingConfig, t: &Ticket) -> Vec<u64> {
    let mut out = Vec::with_capacity(t.players.len());
    push_role_masks(config, t, &mut out);
    out
}

/// Appends, per player of `t`, the bit set of the queue's roles it can fill (all of them if it
/// named none).
fn push_role_masks(config: &MatchingConfig, t: &Ticket, out: &mut Vec<u64>) {
    out.extend((0..t.players.len()).map(|p| {
        match t.roles.get(p) {
            Some(list) if !list.is_empty() => config
                .roles
                .iter()
                .enumerate()
                .filter(|(_, r)| list.contains(&r.name))
                .fold(0u64, |m, (i, _)| m | 1 << i),
            _ => u64::MAX,
        }
    }));
}
