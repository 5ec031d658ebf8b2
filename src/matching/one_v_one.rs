//! 1v1: an exact dynamic programme over tickets sorted by rating.
//!
//! Objective (maximised over sets of disjoint legal pairs): each pair is worth
//! `1.5 + u(a) + u(b) − (Δ / w)²`, where `u(t) = min(wait, max_wait) / max_wait` rewards serving
//! old tickets, `Δ` is the rating gap and `w` the narrower of the two current windows. A pair is
//! legal when both tickets share a region, and, unless one of them is starving, `Δ` lies inside
//! both windows and the underdog's win probability reaches both quality floors.
//!
//! The programme pairs ticket `j` with one of the `pair_span` tickets before it in sorted order
//! (the ones in between stay waiting) or leaves it waiting: O(n · span) after the O(n log n) sort.
//! Why that is optimal: tickets matter to the objective individually (`u`) except for the
//! mismatch term, which is increasing and convex in `Δ`; for any fixed set of matched tickets
//! the sorted-consecutive pairing minimises the sum of a convex increasing cost and never widens
//! the largest gap, so it is at least as good and at least as legal as any crossing or nested
//! pairing when the tickets share one window. Hence with a common window and `pair_span` ≥ the
//! gap between consecutive matched tickets the result is optimal over **all** matchings; the
//! brute-force test checks exactly that. With per-ticket windows (different waits) it is exact
//! over non-crossing pairings of span ≤ `pair_span`.
//!
//! Match rules: the pool runs this once per partition of `equal` values; a pair must also
//! satisfy the `intersect`, `difference` and `avoid` rules (in the programme and in the
//! starvation pass alike: starving lifts windows and floors, never a rule). Those rules can keep
//! a ticket from every ticket within `pair_span` places of it (a French speaker among English
//! ones) while a compatible one waits a few places further, within its window. So in a queue
//! with such rules the programme runs again over the tickets the previous run left, where the
//! compatible ones are then close in sorted order, until a run pairs nobody (at most
//! [`RULE_RUNS`] runs; a queue without them runs once).
//!
//! Starvation: before the programme, each ticket past `max_wait_seconds` (oldest first) is
//! paired with its nearest unmatched region- and rule-compatible ticket, so nobody past it waits
//! while a partner exists, and a pair of fresh tickets never takes the only partner of a
//! starving one (the team selector serves starving anchors first too). The programme then runs
//! on the tickets left.
//!
//! Regions: one pass per region (most popular first) over the unmatched tickets accepting it.

use super::candidates::{Cand, Chosen, Slots, score};
use super::config::MatchingConfig;
use super::rule_index::Checker;
use super::{WinModel, quality_of};

/// Most runs of the programme over one order in a queue whose rules keep tickets apart (see
/// the module docs); each run after the first sees only the tickets the one before left.
const RULE_RUNS: usize = 8;

/// Whether candidates `i` and `j` may be paired (both accept the match).
pub(crate) fn legal(
    cands: &[Cand],
    i: usize,
    j: usize,
    model: &dyn WinModel,
    rules: &Checker<'_>,
) -> bool {
    let (a, b) = (&cands[i], &cands[j]);
    if a.regions & b.regions == 0 || !rules.pair_ok(cands, i, j) {
        return false;
    }
    if a.lim.starving || b.lim.starving {
        return true;
    }
    let gap = (a.key - b.key).abs();
    if gap > a.lim.window.min(b.lim.window) {
        return false;
    }
    // The programme asks in rating order, so `a` is the underdog and `p` its win probability:
    // the quality the match records, with or without a draw share (the favourite's own share,
    // `1 − p − draw`, is then at least `p`).
    let p = model.win_probability_1v1((a.key, a.dev), (b.key, b.dev));
    quality_of(&[p, 1.0 - p]) >= a.lim.min_quality.max(b.lim.min_quality)
}

/// The objective's worth of pairing `a` with `b` (see the module docs); the programme uses
/// [`value_with`], the brute-force test this.
#[cfg(test)]
pub(crate) fn value(a: &Cand, b: &Cand, max_wait: f64) -> f64 {
    value_with(a, b, urgency(a, max_wait), urgency(b, max_wait))
}

/// `u(c)` of the module docs: how much serving `c` now is worth for its wait.
fn urgency(c: &Cand, max_wait: f64) -> f64 {
    c.wait.min(max_wait) / max_wait
}

/// [`value`] given both tickets' [`urgency`], which the programme computes once per ticket
/// instead of once per pair it considers (two divisions saved per pair, same numbers).
fn value_with(a: &Cand, b: &Cand, ua: f64, ub: f64) -> f64 {
    let w = a.lim.window.min(b.lim.window);
    let mismatch = ((a.key - b.key) / w).powi(2);
    let v = 1.5 + ua + ub - mismatch;
    if a.lim.starving || b.lim.starving {
        // A starving ticket must be matched even far outside its window.
        v.max(0.1)
    } else {
        v
    }
}

/// Chooses the pairs for one tick; `cands` is sorted by rating key.
pub(crate) fn select(
    cands: &[Cand],
    config: &MatchingConfig,
    model: &dyn WinModel,
    slots: &Slots,
    rules: &Checker<'_>,
) -> Chosen {
    let n = cands.len();
    let mut matched = vec![false; n];
    let mut pairs = Vec::with_capacity(n / 2);
    // Every ticket's urgency, read in the one pass that also learns whether any ticket starves.
    let max_wait = config.max_wait_seconds;
    let mut starving = false;
    let urgent: Vec<f64> = cands
        .iter()
        .map(|c| {
            starving |= c.lim.starving;
            urgency(c, max_wait)
        })
        .collect();
    // Starving tickets choose first, oldest first, so a pair of fresh tickets never takes the
    // only partner a starving one has.
    if starving {
        starvation_pass(cands, rules, &mut matched, &mut pairs);
    }
    let (order, urgent): (Vec<usize>, Vec<f64>) = if pairs.is_empty() {
        ((0..n).collect(), urgent)
    } else {
        (0..n)
            .filter(|&i| !matched[i])
            .map(|i| (i, urgent[i]))
            .unzip()
    };

    if config.regions.is_empty() {
        pair_runs(
            cands,
            &order,
            &urgent,
            config,
            model,
            rules,
            &mut matched,
            &mut pairs,
        );
    } else {
        let mut popularity: Vec<(usize, usize)> = (0..config.regions.len())
            .map(|r| {
                (
                    order
                        .iter()
                        .filter(|&&i| cands[i].regions >> r & 1 == 1)
                        .count(),
                    r,
                )
            })
            .collect();
        popularity.sort_unstable_by(|a, b| b.cmp(a));
        let mut sub = Vec::with_capacity(order.len());
        let mut sub_urgent = Vec::with_capacity(order.len());
        for (count, r) in popularity {
            if count < 2 {
                continue;
            }
            sub.clear();
            sub_urgent.clear();
            for (&i, &u) in order.iter().zip(&urgent) {
                if !matched[i] && cands[i].regions >> r & 1 == 1 {
                    sub.push(i);
                    sub_urgent.push(u);
                }
            }
            pair_runs(
                cands,
                &sub,
                &sub_urgent,
                config,
                model,
                rules,
                &mut matched,
                &mut pairs,
            );
        }
    }

    let mut scratch = Vec::new();
    let mut chosen = Chosen::with_capacity(2, pairs.len(), 2 * pairs.len());
    for (a, b) in pairs {
        let (ca, cb) = (&cands[a], &cands[b]);
        if ca.size == 1 && cb.size == 1 {
            // What `score` computes for two solos, without its vectors: the spread of two
            // ratings is their distance.
            let p = model.pair_win_probabilities((ca.key, ca.dev), (cb.key, cb.dev));
            chosen.push_pair(a, b, p, (ca.key - cb.key).abs());
        } else {
            let members = [a, b];
            let scored = score(cands, &members, &[1, 2], slots, model, &mut scratch);
            chosen.push(&members, &[1, 2], scored);
        }
    }
    chosen
}

/// [`dp_pass`] over `order`, then, in a queue whose rules keep tickets apart, again over the
/// tickets each run left until a run pairs nobody or [`RULE_RUNS`] have run.
#[allow(clippy::too_many_arguments)]
fn pair_runs(
    cands: &[Cand],
    order: &[usize],
    urgent: &[f64],
    config: &MatchingConfig,
    model: &dyn WinModel,
    rules: &Checker<'_>,
    matched: &mut [bool],
    pairs: &mut Vec<(usize, usize)>,
) {
    let mut formed = pairs.len();
    dp_pass(cands, order, urgent, config, model, rules, matched, pairs);
    if !rules.keeps_apart() {
        return;
    }
    let (mut rest, mut rest_urgent) = (order.to_vec(), urgent.to_vec());
    for _ in 1..RULE_RUNS {
        if pairs.len() == formed {
            // The run paired nobody: the next would see the same tickets.
            break;
        }
        formed = pairs.len();
        let mut kept = 0;
        for k in 0..rest.len() {
            if !matched[rest[k]] {
                rest[kept] = rest[k];
                rest_urgent[kept] = rest_urgent[k];
                kept += 1;
            }
        }
        rest.truncate(kept);
        rest_urgent.truncate(kept);
        if kept < 2 {
            break;
        }
        dp_pass(
            cands,
            &rest,
            &rest_urgent,
            config,
            model,
            rules,
            matched,
            pairs,
        );
    }
}

/// The dynamic programme over `order` (candidate indices sorted by rating); `urgent[k]` is the
/// [`urgency`] of candidate `order[k]`.
#[allow(clippy::too_many_arguments)]
fn dp_pass(
    cands: &[Cand],
    order: &[usize],
    urgent: &[f64],
    config: &MatchingConfig,
    model: &dyn WinModel,
    rules: &Checker<'_>,
    matched: &mut [bool],
    pairs: &mut Vec<(usize, usize)>,
) {
    let n = order.len();
    if n < 2 {
        return;
    }
    let span = config.pair_span.max(1) as usize;
    // best[k] = best value over the first k tickets; back[k] = how ticket k-1 was used
    // (0 = left waiting, s = paired with the ticket s places before it).
    let mut best = vec![0.0f64; n + 1];
    let mut back = vec![0u8; n + 1];
    for j in 0..n {
        let mut top = best[j];
        let mut how = 0u8;
        let b = &cands[order[j]];
        for s in 1..=span.min(j) {
            let i = j - s;
            let a = &cands[order[i]];
            let before = best[i];
            // Cheap bound first: no pair is worth more than 3.5.
            if before + 3.5 <= top {
                continue;
            }
            // The value needs no model call; legality (which may) is checked only for a pair
            // that would improve on the best so far.
            let v = before + value_with(a, b, urgent[i], urgent[j]);
            if v > top && legal(cands, order[i], order[j], model, rules) {
                top = v;
                how = s as u8;
            }
        }
        best[j + 1] = top;
        back[j + 1] = how;
    }
    let mut k = n;
    while k > 0 {
        let s = back[k] as usize;
        if s == 0 {
            k -= 1;
        } else {
            let (i, j) = (order[k - 1 - s], order[k - 1]);
            matched[i] = true;
            matched[j] = true;
            pairs.push((i, j));
            k -= 1 + s;
        }
    }
}

/// Pairs every starving unmatched ticket, oldest first, with its nearest unmatched
/// region- and rule-compatible ticket in rating.
fn starvation_pass(
    cands: &[Cand],
    rules: &Checker<'_>,
    matched: &mut [bool],
    pairs: &mut Vec<(usize, usize)>,
) {
    let rest: Vec<usize> = (0..cands.len()).filter(|&i| !matched[i]).collect();
    let mut starving: Vec<usize> = (0..rest.len())
        .filter(|&p| cands[rest[p]].lim.starving)
        .collect();
    if starving.is_empty() {
        return;
    }
    starving.sort_by(|&a, &b| cands[rest[b]].wait.total_cmp(&cands[rest[a]].wait));
    // Doubly linked list over positions in `rest`, so matched tickets are skipped in O(1).
    let n = rest.len();
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = (0..n).map(|p| p.wrapping_sub(1)).collect();
    let mut gone = vec![false; n];
    let unlink = |p: usize, next: &mut Vec<usize>, prev: &mut Vec<usize>| {
        if prev[p] != usize::MAX {
            next[prev[p]] = next[p];
        }
        if next[p] < n {
            prev[next[p]] = prev[p];
        }
    };
    for p in starving {
        if gone[p] {
            continue;
        }
        let me = &cands[rest[p]];
        let fits = |q: usize| {
            let other = &cands[rest[q]];
            other.regions & me.regions != 0 && rules.pair_ok(cands, rest[p], rest[q])
        };
        let mut down = prev[p];
        while down != usize::MAX && !fits(down) {
            down = prev[down];
        }
        let mut up = next[p];
        while up < n && !fits(up) {
            up = next[up];
        }
        let gap = |q: usize| (cands[rest[q]].key - me.key).abs();
        let partner = match (down != usize::MAX, up < n) {
            (true, true) => Some(if gap(down) <= gap(up) { down } else { up }),
            (true, false) => Some(down),
            (false, true) => Some(up),
            (false, false) => None,
        };
        if let Some(q) = partner {
            gone[p] = true;
            gone[q] = true;
            unlink(p, &mut next, &mut prev);
            unlink(q, &mut next, &mut prev);
            matched[rest[p]] = true;
            matched[rest[q]] = true;
            pairs.push((rest[q].min(rest[p]), rest[q].max(rest[p])));
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::matching::LogisticModel;

    const MODEL: LogisticModel = LogisticModel { scale: 400.0 };

    fn no_rules() -> Checker<'static> {
        static NONE: std::sync::LazyLock<crate::matching::rule_index::RuleIndex> =
            std::sync::LazyLock::new(Default::default);
        static VALUES: std::sync::LazyLock<crate::matching::rule_index::TickValues> =
            std::sync::LazyLock::new(Default::default);
        Checker::new(&NONE, &[], &VALUES)
    }

    fn cand(i: usize, key: f64, wait: f64, config: &MatchingConfig) -> Cand {
        Cand {
            slot: i as u32,
            key,
            dev: 50.0,
            size: 1,
            wait,
            lim: config.limits(wait),
            regions: 1,
        }
    }

    /// The best objective over every matching, by exhaustive search.
    fn brute(cands: &[Cand], used: &mut Vec<bool>, config: &MatchingConfig) -> f64 {
        let Some(first) = used.iter().position(|u| !u) else {
            return 0.0;
        };
        used[first] = true;
        let mut best = brute(cands, used, config);
        for j in first + 1..cands.len() {
            if !used[j] && legal(cands, first, j, &MODEL, &no_rules()) {
                used[j] = true;
                let v = value(&cands[first], &cands[j], config.max_wait_seconds)
                    + brute(cands, used, config);
                best = best.max(v);
                used[j] = false;
            }
        }
        used[first] = false;
        best
    }

    proptest! {
        /// With one common window (all waits inside the first expansion step) the programme is
        /// optimal over all matchings, not just neighbour pairings.
        #[test]
        fn dp_is_optimal_against_brute_force(
            tickets in prop::collection::vec((1300.0..1700.0f64, 0.0..9.9f64), 0..10)
        ) {
            let config = MatchingConfig { pair_span: 16, ..MatchingConfig::default() };
            let cands: Vec<Cand> = tickets
                .iter()
                .enumerate()
                .map(|(i, &(k, w))| cand(i, k, w, &config))
                .collect();
            let mut order: Vec<usize> = (0..cands.len()).collect();
            order.sort_by(|&a, &b| cands[a].key.total_cmp(&cands[b].key));
            let mut matched = vec![false; cands.len()];
            let mut pairs = Vec::new();
            let urgent: Vec<f64> = order
                .iter()
                .map(|&c| urgency(&cands[c], config.max_wait_seconds))
                .collect();
            dp_pass(&cands, &order, &urgent, &config, &MODEL, &no_rules(), &mut matched, &mut pairs);
            let got: f64 = pairs
                .iter()
                .map(|&(a, b)| {
                    assert!(legal(&cands, a, b, &MODEL, &no_rules()));
                    value(&cands[a], &cands[b], config.max_wait_seconds)
                })
                .sum();
            let want = brute(&cands, &mut vec![false; cands.len()], &config);
            prop_assert!((got - want).abs() < 1e-9, "dp {got} brute {want}");
        }
    }
}
