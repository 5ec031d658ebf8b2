//! The matching core: one queue's waiting tickets and the global optimizer that turns them into
//! matches.
//!
//! What this module owns: tickets waiting in a [`Pool`], the per-queue [`MatchingConfig`]
//! (expansion schedule, quality floor, regions, roles, starvation guard, TTL), the choice of a set
//! of disjoint matches each [`Pool::tick`], team balancing, backfill slot filling, and the pure
//! half of the matcher benchmark ([`baseline`]: a seeded ticket pool and the first-come greedy
//! matcher the optimizer is compared with).
//!
//! Layers, each importing only those before it: this file's values (tickets, formed matches, the
//! win model) and `config`; `candidates` (the per-tick view of waiting tickets and the arena the
//! selectors write chosen matches to); the selectors `one_v_one` and `teams` (with `balance`);
//! `pool` (ticket storage, expiry, candidates in, formed matches out, calling a selector); and on
//! top of the pool [`backfill`] and the [`baseline`].
//!
//! What it must not do: read a clock (time is the `now` argument; the benchmark's timing harness
//! is `tools::bench_matcher`, outside this module), use unseeded randomness, do I/O, record
//! metrics, or import tonic, tokio or sled. It never panics on a ticket the shell handed it: bad
//! tickets are refused by [`Pool::insert`] with an [`InsertError`].
//!
//! Architecture invariant: every match returned by `tick` is disjoint from every other match
//! returned in the same tick, has exactly `shape.teams` teams of exactly `shape.team_size`
//! players, keeps each ticket (party) on one team, and satisfies the regions, roles, skill
//! windows and quality floor of its tickets at `now`, except that a ticket past
//! `max_wait_seconds` lifts the skill window and quality floor of the match it joins and accepts
//! any region it listed (starvation guard). Roles and party integrity are never relaxed.
//! `properties.rs` checks all of this on random pools of every shape.
//!
//! For the shell: validate each queue's config with [`MatchingConfig::validate`] at start-up,
//! keep one [`Pool`] per queue in the matchmaker task, `insert`/`remove` on EnterQueue/Cancel,
//! call `tick(now, &model)` every tick interval, and report `window(id, now)` in SEARCHING
//! updates. The outcome carries everything the metrics need (matches with quality and spread,
//! waits of matched tickets, waiting count; [`Pool::stats`] for gauges); the shell times the
//! tick itself. Three interface choices, all deliberate: `insert` returns a `Result` (a
//! duplicate or malformed ticket must not be silently dropped), `FormedMatch::teams` is a
//! [`Teams`] of `Box<Ticket>` (see there; `teams.iter()`, `teams.len()`, `teams[k]` and
//! `for team in &teams` read as they would on nested vectors), and
//! `FormedMatch::win_probability` is a [`WinProbabilities`] that reads as `&[f64]` (`.to_vec()`
//! for a vector): both keep a 1v1 match free of allocations, which matters when one tick over
//! 100k tickets forms 50k matches.

pub mod backfill;
pub mod balance;
pub mod baseline;
mod candidates;
pub mod config;
mod id_hash;
mod one_v_one;
mod pool;
#[cfg(test)]
mod properties;
mod rule_index;
#[cfg(test)]
mod rule_properties;
pub mod rules;
mod system_model;
mod teams;
#[cfg(test)]
mod tick_tests;

pub use backfill::{BackfillConfig, Fill, FillOrder, OpenMatch};
pub use config::{ExpansionStep, Limits, MatchingConfig, RoleRequirement};
pub(crate) use pool::choose;
pub use pool::{InsertError, Pool, PoolStats};
pub use rule_index::{Member, Seated, holds, match_attributes};
pub use rules::{AttributeValue, Attributes, MatchRule, RuleKind, RuleScope};
pub use system_model::SystemModel;
/// A fast hasher for maps keyed by server-minted ids (tickets, matches): no HashDoS concern,
/// since clients cannot choose the keys that are stored.
pub(crate) type IdHash = std::hash::BuildHasherDefault<id_hash::IdHasher>;

use serde::{Deserialize, Serialize};

use crate::ids::{PlayerId, TicketId};

/// Teams × team size: the only thing that distinguishes 1v1, NvN and free-for-all, so all three
/// come from config. 1v1 = `{2,1}`, 5v5 = `{2,5}`, ffa8 = `{8,1}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    /// Number of teams (sides) in a match; at least 2.
    pub teams: u32,
    /// Players per team; at least 1.
    pub team_size: u32,
}

impl Shape {
    /// Players in one full match, the unit the optimizer fills.
    #[must_use]
    pub fn players_per_match(&self) -> u32 {
        self.teams.saturating_mul(self.team_size)
    }

    /// True for the shape that gets the exact sorted-order dynamic programme.
    #[must_use]
    pub fn is_one_v_one(&self) -> bool {
        self.teams == 2 && self.team_size == 1
    }
}

/// Win probability model injected by the shell (it wraps the queue's rating system), so the
/// matching core never depends on a particular rating system.
///
/// Input: per team, the `(mean, deviation)` of each of its players in display units (a party
/// with a party rating contributes that rating once per member). Output: one probability per
/// team, summing to at most 1 (the rest is the draw probability, if the system models one).
pub trait WinModel {
    /// Win probability of each team.
    fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64>;

    /// Probability that player `a` beats player `b`. The 1v1 optimizer calls this for every
    /// candidate pair (several per ticket per tick), so a model that can answer without
    /// allocating should override it; the default goes through
    /// [`WinModel::win_probabilities`].
    fn win_probability_1v1(&self, a: (f64, f64), b: (f64, f64)) -> f64 {
        let p = self.win_probabilities(&[vec![a], vec![b]]);
        p.first().copied().unwrap_or(0.5)
    }

    /// Exactly what [`WinModel::win_probabilities`] answers for the teams `[[a], [b]]`: the
    /// 1v1 optimizer calls it once per formed match (50k times in a 100k-ticket tick) to fill
    /// [`FormedMatch::win_probability`], so a model that can answer without allocating should
    /// override it, keeping the same numbers.
    fn pair_win_probabilities(&self, a: (f64, f64), b: (f64, f64)) -> [f64; 2] {
        let p = self.win_probabilities(&[vec![a], vec![b]]);
        [
            p.first().copied().unwrap_or(0.5),
            p.get(1).copied().unwrap_or(0.5),
        ]
    }
}

/// A logistic (Elo-like) model for tests and benchmarks: team strength is the sum of its
/// players' means, deviations are ignored, and team `i` wins with probability proportional to
/// `10^(strength_i / scale)`. For two teams that is Elo's `1 / (1 + 10^((s_b - s_a)/scale))`;
/// `scale` = 400 fits 1500-scale ratings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogisticModel {
    /// Rating difference at which the odds are 10:1.
    pub scale: f64,
}

impl LogisticModel {
    /// A team's strength in units of `scale`.
    fn strength(&self, team: &[(f64, f64)]) -> f64 {
        team.iter().map(|r| r.0).sum::<f64>() / self.scale
    }

    /// Turns strengths into win probabilities, in place (shared by both ways of asking, so
    /// they give the same numbers).
    fn shares(p: &mut [f64]) {
        let top = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut total = 0.0;
        for x in p.iter_mut() {
            *x = (std::f64::consts::LN_10 * (*x - top)).exp();
            total += *x;
        }
        for x in p.iter_mut() {
            *x /= total;
        }
    }
}

impl WinModel for LogisticModel {
    fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
        // One allocation: strengths, then weights, then shares, in place.
        let mut p: Vec<f64> = teams.iter().map(|t| self.strength(t)).collect();
        Self::shares(&mut p);
        p
    }

    fn pair_win_probabilities(&self, a: (f64, f64), b: (f64, f64)) -> [f64; 2] {
        let mut p = [self.strength(&[a]), self.strength(&[b])];
        Self::shares(&mut p);
        p
    }

    fn win_probability_1v1(&self, a: (f64, f64), b: (f64, f64)) -> f64 {
        // 10^x as e^(x·ln 10): the same number, and `exp` is several times cheaper than `powf`
        // in this per-candidate-pair call.
        1.0 / (1.0 + (std::f64::consts::LN_10 * (b.0 - a.0) / self.scale).exp())
    }
}

/// One player or one pre-made party waiting in one queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticket {
    /// The ticket's id, unique within the pool.
    pub id: TicketId,
    /// One id = solo, 2+ = a party, always kept on one team.
    pub players: Vec<PlayerId>,
    /// Per player `(mean, deviation)` in the queue rating system's display units.
    pub skills: Vec<(f64, f64)>,
    /// The party's own rating ([`crate::rating::party`]); once it exists it replaces the members'
    /// skills for matching, because a party that over-performs together should meet stronger
    /// opponents.
    pub party_skill: Option<(f64, f64)>,
    /// Seconds on the injected clock. A ticket returned to the queue keeps its original value
    /// ("front of the queue, wait kept").
    pub entered_at: f64,
    /// Latency to each region; empty means any region is fine.
    pub region_latency_ms: Vec<(String, u32)>,
    /// Per player, the roles it can fill; an empty inner list means any role.
    pub roles: Vec<Vec<String>>,
    /// The values the queue's match rules read ([`rules::admit`] keeps only those). A party's
    /// attributes are its ticket's.
    pub attributes: Attributes,
    /// Players this ticket is never matched with or against (queues with an `avoid` rule).
    pub avoid: Vec<PlayerId>,
}

impl Ticket {
    /// Players on this ticket (its party size).
    #[must_use]
    pub fn size(&self) -> usize {
        self.players.len()
    }

    /// The rating each member brings to the match, as the optimizer and the model see it:
    /// the party rating for every member once it exists, otherwise the member's own.
    #[must_use]
    pub fn member_ratings(&self) -> Vec<(f64, f64)> {
        match self.party_skill {
            Some(p) => vec![p; self.players.len()],
            None => self.skills.clone(),
        }
    }

    /// The ticket's sort key: the party rating, or the mean of its members' means.
    #[must_use]
    pub fn rating(&self) -> f64 {
        match self.party_skill {
            Some(p) => p.0,
            None => {
                let n = self.skills.len().max(1) as f64;
                self.skills.iter().map(|s| s.0).sum::<f64>() / n
            }
        }
    }

    /// A representative deviation (root mean square of the members'), used for 1v1 pairs.
    #[must_use]
    pub fn deviation(&self) -> f64 {
        match self.party_skill {
            Some(p) => p.1,
            None => {
                let n = self.skills.len().max(1) as f64;
                (self.skills.iter().map(|s| s.1 * s.1).sum::<f64>() / n).sqrt()
            }
        }
    }

    /// Seconds waited at `now` (never negative, so a clock that steps back cannot produce a
    /// negative wait).
    #[must_use]
    pub fn wait(&self, now: f64) -> f64 {
        (now - self.entered_at).max(0.0)
    }
}

/// A match chosen by the optimizer, ready for the shell to assign an id and a server.
#[derive(Clone, Debug, PartialEq)]
pub struct FormedMatch {
    /// The tickets on each team (whole values, so the shell has ids, players and `entered_at`).
    /// Boxed: the pool stores tickets boxed, and handing over the box instead of moving each
    /// ~150-byte ticket out of a cold slot cut the 100k-ticket tick severalfold; field access
    /// (`t.id`, `t.players`) reads the same through the box.
    pub teams: Teams,
    /// Per team, from the injected model. Reads as a `&[f64]` (`.len()`, `[k]`, `.iter()`);
    /// `.to_vec()` for a vector.
    pub win_probability: WinProbabilities,
    /// How fair the match is, in `[0, 0.5]`: `(teams / 2) · min_i win_probability[i]`.
    /// For two teams that is the underdog's win probability (White's "GoodRatedMatch" measure);
    /// for a free-for-all of N it is the weakest entrant's share of the fair `1/N`, halved, so
    /// one `min_quality` means the same thing in every shape (0.5 = perfectly even).
    pub quality: f64,
    /// Highest minus lowest member rating in the match, in display units.
    pub rating_spread: f64,
    /// The chosen region (lowest worst-case latency among the regions every ticket accepts),
    /// if the queue has regions.
    pub region: Option<String>,
    /// The values the match was formed under ([`match_attributes`]); empty without rules.
    /// Shared: the matches of one tick formed under the same values hold one copy, and the
    /// shell's records of the match share it too.
    pub attributes: std::sync::Arc<Attributes>,
}

/// Per-team win probabilities of a formed match. It dereferences to `[f64]`, so it reads like
/// a `Vec<f64>`; two teams are stored inline, because a vector per match would be 50k
/// allocations in a 100k-ticket 1v1 tick.
#[derive(Clone, Debug)]
pub struct WinProbabilities(Probabilities);

/// Storage of [`WinProbabilities`].
#[derive(Clone, Debug)]
enum Probabilities {
    Two([f64; 2]),
    Many(Vec<f64>),
}

impl std::ops::Deref for WinProbabilities {
    type Target = [f64];

    fn deref(&self) -> &[f64] {
        match &self.0 {
            Probabilities::Two(p) => p,
            Probabilities::Many(p) => p,
        }
    }
}

impl PartialEq for WinProbabilities {
    /// Equal when they hold the same numbers, however stored.
    fn eq(&self, other: &WinProbabilities) -> bool {
        **self == **other
    }
}

impl Default for WinProbabilities {
    fn default() -> Self {
        WinProbabilities(Probabilities::Many(Vec::new()))
    }
}

impl From<Vec<f64>> for WinProbabilities {
    fn from(p: Vec<f64>) -> Self {
        WinProbabilities(Probabilities::Many(p))
    }
}

impl From<[f64; 2]> for WinProbabilities {
    fn from(p: [f64; 2]) -> Self {
        WinProbabilities(Probabilities::Two(p))
    }
}

/// The tickets of a formed match, team by team.
///
/// Why not `Vec<Vec<Box<Ticket>>>`: that is one allocation per team plus one per match, and a
/// 100k-ticket 1v1 tick forms 50k matches, so building those vectors costs a fifth of the tick.
/// `Teams` keeps the tickets in one flat list with the team boundaries beside it, and a
/// two-ticket match (every 1v1) inline, so forming a 1v1 match allocates nothing. It reads like
/// nested vectors: `len()`, `iter()` (one `&[Box<Ticket>]` per team),
/// `teams[k]`, `for team in &teams`, plus [`Teams::tickets`] for every ticket at once.
#[derive(Clone, Debug)]
pub struct Teams {
    tickets: Seats,
    split: Split,
}

/// Ticket storage of [`Teams`]. Boxes, not tickets: the pool stores tickets boxed and hands
/// over the boxes (see [`FormedMatch::teams`]).
#[derive(Clone, Debug)]
#[allow(clippy::vec_box)]
enum Seats {
    /// Exactly two tickets, inline.
    Pair([Box<Ticket>; 2]),
    /// Any other number.
    Flat(Vec<Box<Ticket>>),
}

/// Team boundaries of [`Teams`].
#[derive(Clone, Debug)]
enum Split {
    /// Team `k` is ticket `k` (1v1, free-for-all of solos).
    Singles,
    /// Two teams; the first is the tickets before this index.
    Two(usize),
    /// Per team, the end of its tickets (exclusive).
    Ends(Vec<usize>),
}

impl Teams {
    /// Moves the tickets out of `buf` (a flat list, team by team; left empty with its capacity
    /// kept, so one buffer serves a whole tick) and splits them at each team's end (exclusive).
    /// `ends` must increase and end at the number of tickets (every team holds a ticket).
    #[allow(clippy::vec_box)]
    pub(crate) fn take_from(buf: &mut Vec<Box<Ticket>>, ends: &[usize]) -> Teams {
        let split = if ends.iter().enumerate().all(|(k, &end)| end == k + 1) {
            Split::Singles
        } else if ends.len() == 2 {
            Split::Two(ends[0])
        } else {
            Split::Ends(ends.to_vec())
        };
        let tickets = if buf.len() == 2
            && let (Some(b), Some(a)) = (buf.pop(), buf.pop())
        {
            Seats::Pair([a, b])
        } else {
            // An exact-size vector; `buf` keeps its capacity for the next match.
            let mut flat = Vec::with_capacity(buf.len());
            flat.append(buf);
            Seats::Flat(flat)
        };
        Teams { tickets, split }
    }

    /// Number of teams.
    #[must_use]
    pub fn len(&self) -> usize {
        match &self.split {
            Split::Singles => self.tickets().len(),
            Split::Two(_) => 2,
            Split::Ends(ends) => ends.len(),
        }
    }

    /// True for a match without teams (never formed by the optimizer).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every ticket of the match, team by team.
    #[must_use]
    pub fn tickets(&self) -> &[Box<Ticket>] {
        match &self.tickets {
            Seats::Pair(pair) => pair,
            Seats::Flat(all) => all,
        }
    }

    /// The tickets of team `k`, or `None` past the last team.
    #[must_use]
    pub fn get(&self, k: usize) -> Option<&[Box<Ticket>]> {
        let all = self.tickets();
        let range = match &self.split {
            Split::Singles => k..k + 1,
            Split::Two(first) => match k {
                0 => 0..*first,
                1 => *first..all.len(),
                _ => return None,
            },
            Split::Ends(ends) => {
                let end = *ends.get(k)?;
                let start = if k == 0 { 0 } else { ends[k - 1] };
                start..end
            }
        };
        all.get(range)
    }

    /// The teams in order, each as a slice of its tickets.
    pub fn iter(&self) -> TeamsIter<'_> {
        TeamsIter { teams: self, k: 0 }
    }

    /// Every ticket of the match, team by team, by value (the shell keeps them to put back in
    /// the queue if the match dissolves, without copying them).
    #[must_use]
    pub fn into_tickets(self) -> Vec<Box<Ticket>> {
        match self.tickets {
            Seats::Pair(pair) => pair.into(),
            Seats::Flat(all) => all,
        }
    }
}

impl PartialEq for Teams {
    /// Equal when they hold the same teams, however stored.
    fn eq(&self, other: &Teams) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::ops::Index<usize> for Teams {
    type Output = [Box<Ticket>];

    /// Team `k`; panics past the last team, like indexing a vector.
    fn index(&self, k: usize) -> &[Box<Ticket>] {
        match self.get(k) {
            Some(team) => team,
            None => panic!("team {k} of a match with {} teams", self.len()),
        }
    }
}

impl<'a> IntoIterator for &'a Teams {
    type Item = &'a [Box<Ticket>];
    type IntoIter = TeamsIter<'a>;

    fn into_iter(self) -> TeamsIter<'a> {
        self.iter()
    }
}

/// Iterator over the teams of a [`Teams`].
#[derive(Clone, Debug)]
pub struct TeamsIter<'a> {
    teams: &'a Teams,
    k: usize,
}

impl<'a> Iterator for TeamsIter<'a> {
    type Item = &'a [Box<Ticket>];

    fn next(&mut self) -> Option<&'a [Box<Ticket>]> {
        let team = self.teams.get(self.k)?;
        self.k += 1;
        Some(team)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.teams.len().saturating_sub(self.k);
        (left, Some(left))
    }
}

impl ExactSizeIterator for TeamsIter<'_> {}

/// Everything one tick produced; the shell turns it into assignments, EXPIRED updates and
/// metrics (the core records none itself).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TickOutcome {
    /// Disjoint matches, removed from the pool.
    pub matches: Vec<FormedMatch>,
    /// Tickets past `ticket_ttl_seconds`, removed from the pool.
    pub expired: Vec<Ticket>,
    /// Seconds each matched ticket waited (one entry per ticket), for the wait-time histogram.
    pub matched_waits: Vec<f64>,
    /// Tickets still waiting after the tick, for the waiting-tickets gauge.
    pub waiting: usize,
}

/// The underdog quality of a set of team win probabilities, as defined on
/// [`FormedMatch::quality`].
#[must_use]
pub fn quality_of(win_probability: &[f64]) -> f64 {
    let min = win_probability
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    if min.is_finite() {
        (win_probability.len() as f64 / 2.0 * min).clamp(0.0, 0.5)
    } else {
        0.0
    }
}

#[cfg(test)]
pub(crate) mod test_util;

#[cfg(test)]
mod tests {
    use super::test_util::solo;
    use super::{LogisticModel, Teams, Ticket, WinModel, WinProbabilities};

    #[allow(clippy::vec_box)]
    fn tickets(ids: &[&str]) -> Vec<Box<Ticket>> {
        ids.iter()
            .map(|id| Box::new(solo(id, 1500.0, 0.0)))
            .collect()
    }

    fn ids(teams: &Teams) -> Vec<Vec<String>> {
        teams
            .iter()
            .map(|team| team.iter().map(|t| t.id.to_string()).collect())
            .collect()
    }

    #[test]
    fn teams_read_like_nested_vectors_in_every_layout() {
        // 1v1 (a pair inline), free-for-all of solos, two teams of parties, three teams.
        for (names, ends, want) in [
            (&["a", "b"][..], &[1, 2][..], vec![vec!["a"], vec!["b"]]),
            (
                &["a", "b", "c"],
                &[1, 2, 3],
                vec![vec!["a"], vec!["b"], vec!["c"]],
            ),
            (&["a", "b", "c"], &[1, 3], vec![vec!["a"], vec!["b", "c"]]),
            (&["a", "b"], &[2], vec![vec!["a", "b"]]),
            (
                &["a", "b", "c", "d"],
                &[1, 3, 4],
                vec![vec!["a"], vec!["b", "c"], vec!["d"]],
            ),
        ] {
            let mut buf = tickets(names);
            let teams = Teams::take_from(&mut buf, ends);
            assert!(buf.is_empty());
            assert_eq!(ids(&teams), want);
            assert_eq!(teams.len(), want.len());
            assert_eq!(teams.iter().len(), want.len());
            assert_eq!(teams.tickets().len(), names.len());
            assert_eq!(teams[0][0].id.as_str(), "a");
            assert!(teams.get(want.len()).is_none());
            let mut n = 0;
            for team in &teams {
                n += team.len();
            }
            assert_eq!(n, names.len());
        }
    }

    /// A model that only implements the required method, to exercise the defaults.
    struct Plain(LogisticModel);

    impl WinModel for Plain {
        fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
            self.0.win_probabilities(teams)
        }
    }

    proptest::proptest! {
        /// The allocation-free pair answer is the general answer for two solo teams, to the
        /// bit, for the logistic model and for the trait's default.
        #[test]
        fn pair_win_probabilities_equal_the_general_answer(
            a in -3000.0..3000.0f64,
            b in -3000.0..3000.0f64,
            scale in 1.0..500.0f64,
        ) {
            let model = LogisticModel { scale };
            let general = model.win_probabilities(&[vec![(a, 10.0)], vec![(b, 20.0)]]);
            proptest::prop_assert_eq!(&model.pair_win_probabilities((a, 10.0), (b, 20.0))[..], &general[..]);
            proptest::prop_assert_eq!(&Plain(model).pair_win_probabilities((a, 10.0), (b, 20.0))[..], &general[..]);
        }
    }

    #[test]
    fn win_probabilities_read_like_a_slice_in_both_layouts() {
        let two = WinProbabilities::from([0.25, 0.75]);
        let many = WinProbabilities::from(vec![0.25, 0.75]);
        assert_eq!(two, many);
        assert_eq!(two.len(), 2);
        assert_eq!(two[1], 0.75);
        assert_eq!(many.to_vec(), vec![0.25, 0.75]);
        assert_ne!(two, WinProbabilities::from(vec![0.25, 0.5, 0.25]));
        assert!(WinProbabilities::default().is_empty());
    }

    #[test]
    fn teams_compare_by_content_not_layout() {
        let pair = Teams::take_from(&mut tickets(&["a", "b"]), &[1, 2]);
        let same = pair.clone();
        assert_eq!(pair, same);
        let one_team = Teams::take_from(&mut tickets(&["a", "b"]), &[2]);
        assert_ne!(pair, one_team);
        let swapped = Teams::take_from(&mut tickets(&["b", "a"]), &[1, 2]);
        assert_ne!(pair, swapped);
    }
}
