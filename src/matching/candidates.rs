//! What the selectors work on: the pool's ticket storage ([`Slots`]), the compact per-tick
//! view of each waiting ticket ([`Cand`]), the arena the chosen matches are written to
//! ([`Chosen`]) and the scoring of one match by the injected model ([`score`]).
//!
//! It sits below both sides of the tick: `pool` builds candidates and turns a
//! [`Chosen`] into formed matches, the selectors (`one_v_one`, `teams`, the benchmark's FIFO
//! baseline) read candidates and fill a [`Chosen`]. It imports neither, so the pool can call
//! the selectors without the selectors depending on the pool.

use super::config::Limits;
use super::{Ticket, WinModel, WinProbabilities};

/// One slot of the pool's ticket storage: the ticket and the slot's generation, odd while
/// occupied and bumped on every store and every take. They share a slot so that taking a
/// matched ticket out touches one cache line, not two or three: the 100k-ticket tick takes 100k
/// tickets from random slots, and those misses were a fifth of it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slot {
    pub(super) ticket: Option<Box<Ticket>>,
    pub(super) generation: u32,
}

impl Slot {
    /// The waiting ticket, if the slot holds one.
    pub fn ticket(&self) -> Option<&Ticket> {
        self.ticket.as_deref()
    }

    /// True while the slot holds a ticket (odd generation).
    pub(super) fn occupied(&self) -> bool {
        self.generation & 1 == 1
    }
}

/// The optimizer's compact view of one waiting ticket at one tick.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cand {
    /// Slot of the ticket in the pool (`u32` so that, beside `size`, a candidate fills one
    /// 64-byte cache line; see [`Cand::slot`]).
    pub slot: u32,
    /// Party size.
    pub size: u32,
    /// Rating key (party rating or mean of members).
    pub key: f64,
    /// Representative deviation.
    pub dev: f64,
    /// Seconds waited.
    pub wait: f64,
    /// Limits from the expansion schedule at this wait.
    pub lim: Limits,
    /// Regions acceptable right now (bit i = `config.regions[i]`; bit 0 alone if the queue
    /// has no regions).
    pub regions: u64,
}

impl Cand {
    /// The ticket's slot as an index into the pool's per-slot arrays.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }
}

/// The matches the optimizer chose, in one flat arena so choosing allocates nothing per match
/// but the model's answer. Every match has exactly `teams` teams: match `m` owns teams
/// `m·teams .. (m+1)·teams`, and team `k`'s candidate indices are
/// `members[team_ends[k-1] .. team_ends[k]]`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chosen {
    pub(super) teams: usize,
    pub(super) members: Vec<usize>,
    team_ends: Vec<usize>,
    pub(super) win_probability: Vec<WinProbabilities>,
    pub(super) rating_spread: Vec<f64>,
}

impl Chosen {
    pub fn new(teams: usize) -> Self {
        Chosen {
            teams,
            ..Chosen::default()
        }
    }

    /// Room for `matches` matches of `members` tickets in all, so a tick that knows its
    /// matches up front (1v1: 50k at 100k tickets) does not regrow these arrays as it pushes.
    pub fn with_capacity(teams: usize, matches: usize, members: usize) -> Self {
        Chosen {
            teams,
            members: Vec::with_capacity(members),
            team_ends: Vec::with_capacity(matches * teams),
            win_probability: Vec::with_capacity(matches),
            rating_spread: Vec::with_capacity(matches),
        }
    }

    /// Matches chosen so far.
    pub fn len(&self) -> usize {
        self.rating_spread.len()
    }

    /// Appends a match given as flat `members` with per-team `ends` (relative to `members`),
    /// scored by [`score`].
    pub fn push(&mut self, members: &[usize], ends: &[usize], scored: (Vec<f64>, f64)) {
        let base = self.members.len();
        self.members.extend_from_slice(members);
        self.team_ends.extend(ends.iter().map(|e| base + e));
        self.win_probability.push(scored.0.into());
        self.rating_spread.push(scored.1);
    }

    /// Appends a 1v1 match of candidates `a` (team 0) and `b` (team 1) with the model's
    /// [`WinModel::pair_win_probabilities`] and their rating spread: [`Chosen::push`] without
    /// the model's vector.
    pub fn push_pair(&mut self, a: usize, b: usize, probabilities: [f64; 2], spread: f64) {
        let base = self.members.len();
        self.members.extend_from_slice(&[a, b]);
        self.team_ends.extend_from_slice(&[base + 1, base + 2]);
        self.win_probability.push(probabilities.into());
        self.rating_spread.push(spread);
    }

    /// Appends the matches of `other`, whose candidate indices count from `offset` (a
    /// partition's selection, made on a sub-slice of the candidates).
    pub fn append(&mut self, other: Chosen, offset: usize) {
        let base = self.members.len();
        self.members
            .extend(other.members.into_iter().map(|c| c + offset));
        self.team_ends
            .extend(other.team_ends.into_iter().map(|e| e + base));
        self.win_probability.extend(other.win_probability);
        self.rating_spread.extend(other.rating_spread);
    }

    /// Candidate indices of team `k` of match `m`.
    pub fn team(&self, m: usize, k: usize) -> &[usize] {
        let t = m * self.teams + k;
        let start = if t == 0 { 0 } else { self.team_ends[t - 1] };
        &self.members[start..self.team_ends[t]]
    }

    /// Candidate indices of every ticket of match `m`, team by team.
    pub fn members(&self, m: usize) -> &[usize] {
        let first = m * self.teams;
        let start = if first == 0 {
            0
        } else {
            self.team_ends[first - 1]
        };
        &self.members[start..self.team_ends[first + self.teams - 1]]
    }
}

/// The pool's ticket storage as the optimizers see it.
pub(crate) type Slots = [Slot];

/// The model's win probabilities for one match (flat `members`, per-team `ends`) and the
/// spread of member ratings. A solo ticket's member rating is its candidate's `(key, dev)`, so
/// only parties are read from the ticket storage. `scratch` is reused across calls so the
/// model's input is not allocated for every match.
pub(crate) fn score(
    cands: &[Cand],
    members: &[usize],
    ends: &[usize],
    slots: &Slots,
    model: &dyn WinModel,
    scratch: &mut Vec<Vec<(f64, f64)>>,
) -> (Vec<f64>, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    scratch.resize_with(ends.len(), Vec::new);
    scratch.truncate(ends.len());
    let mut start = 0;
    for (&end, r) in ends.iter().zip(scratch.iter_mut()) {
        r.clear();
        for &c in &members[start..end] {
            let c = &cands[c];
            if c.size == 1 {
                r.push((c.key, c.dev));
            } else if let Some(t) = slots[c.slot()].ticket() {
                match t.party_skill {
                    Some(p) => r.extend(std::iter::repeat_n(p, t.size())),
                    None => r.extend_from_slice(&t.skills),
                }
            }
        }
        for x in r.iter() {
            (lo, hi) = (lo.min(x.0), hi.max(x.0));
        }
        start = end;
    }
    (model.win_probabilities(scratch), (hi - lo).max(0.0))
}
