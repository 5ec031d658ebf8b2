//! The simulation's clock and event loop: optimizer ticks every `tick_seconds` of simulated
//! time, and between them the timed events (a play session starts, a match ends, a unit queues
//! again) in time order. Units enter the real optimizer ([`Pool`]) as tickets; a formed match is
//! played by [`Sim::play`](super::play) and its players come back when it ends.
//!
//! Time is the simulated clock alone: events are ordered by (millisecond, sequence number), so
//! two events at the same instant keep the order they were scheduled in.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Exp};

use super::SimQueue;
use super::params::{DAY, SimParams};
use super::population::{Player, Unit, UnitState};
use super::report::Tally;
use crate::ids::{PlayerId, TicketId};
use crate::matching::{Pool, SystemModel, Ticket};
use crate::ranking::RankingKind;
use crate::rating::Skill;

/// A timed event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Event {
    /// Unit `0` starts a play session (if it is offline and not retired).
    SessionStart(usize),
    /// The match in playing slot `0` ends.
    MatchEnd(usize),
    /// Unit `0` queues again within its play session.
    Requeue(usize),
}

/// The whole simulation state.
pub(super) struct Sim<'a> {
    pub(super) p: &'a SimParams,
    pub(super) q: &'a SimQueue,
    /// The one RNG every draw comes from.
    pub(super) rng: StdRng,
    pub(super) players: Vec<Player>,
    pub(super) units: Vec<Unit>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    pub(super) pool: Pool,
    /// Units of each match being played, by slot; a finished match frees its slot.
    playing: Vec<Option<Vec<usize>>>,
    /// What the report is built from.
    pub(super) tally: Tally,
    /// The pool's calibration, when the queue calibrates: the win model reads it and every
    /// played match refits it, as on the server.
    pub(super) calibration: Option<crate::rating::calibration::Calibration>,
}

/// The ticket id of unit `unit`'s `n`th ticket.
fn ticket_id(unit: usize, n: u64) -> TicketId {
    TicketId::new(format!("u{unit}.{n}"))
}

/// The unit a ticket id belongs to.
pub(super) fn unit_of(id: &TicketId) -> Option<usize> {
    id.as_str()
        .strip_prefix('u')?
        .split('.')
        .next()?
        .parse()
        .ok()
}

impl<'a> Sim<'a> {
    /// An empty simulation with its RNG seeded from `params.seed`.
    pub(super) fn new(params: &'a SimParams, queue: &'a SimQueue) -> Self {
        Sim {
            p: params,
            q: queue,
            rng: StdRng::seed_from_u64(params.seed),
            players: Vec::new(),
            units: Vec::new(),
            events: BinaryHeap::new(),
            seq: 0,
            pool: Pool::new(queue.shape, queue.matching.clone()),
            playing: Vec::new(),
            tally: Tally::default(),
            calibration: queue
                .system
                .calibration()
                .enabled
                .then(|| queue.system.calibration().initial()),
        }
    }
}

impl Sim<'_> {
    /// Runs the clock from 0 to `days`: snapshots, new days (`on_day` is told each one), timed
    /// events, then an optimizer tick with the queue's own win model.
    pub(super) fn run(&mut self, on_day: &dyn Fn(u64)) {
        let q = self.q;
        let end = self.p.days * DAY;
        let ticks = (end / self.p.tick_seconds).ceil() as u64;
        let mut next_day = DAY;
        let mut next_snapshot = 0.0;
        for k in 0..=ticks {
            let now = k as f64 * self.p.tick_seconds;
            if now >= next_snapshot {
                self.snapshot(now);
                next_snapshot += self.p.snapshot_days * DAY;
            }
            if now >= next_day {
                self.new_day(now);
                on_day((now / DAY).round() as u64);
                next_day += DAY;
            }
            self.run_events(now);
            if !self.pool.is_empty() {
                let model = SystemModel::calibrated(&q.system, self.calibration);
                let out = self.pool.tick(now, &model);
                for t in out.expired {
                    self.tally.expired += 1;
                    if let Some(u) = unit_of(&t.id) {
                        self.end_session(u, now);
                    }
                }
                for m in out.matches {
                    self.play(now, m);
                }
            }
        }
        if self.q.ranking == RankingKind::None {
            self.tally.rank_points_by_decile.clear();
        }
    }

    /// Schedules `e` at simulated time `at`.
    pub(super) fn push(&mut self, at: f64, e: Event) {
        self.seq += 1;
        self.events
            .push(Reverse(((at * 1000.0) as u64, self.seq, e)));
    }

    /// Handles every event due by `now`, in time order.
    fn run_events(&mut self, now: f64) {
        let limit = (now * 1000.0) as u64;
        while let Some(Reverse((t, _, e))) = self.events.peek().copied() {
            if t > limit {
                break;
            }
            self.events.pop();
            match e {
                Event::SessionStart(u) => {
                    if self.units[u].retired || self.units[u].state != UnitState::Offline {
                        continue;
                    }
                    // Geometric number of games with the configured mean.
                    let p = 1.0 / self.p.games_per_session;
                    let mut games = 1;
                    while games < 1000 && !self.rng.random_bool(p) {
                        games += 1;
                    }
                    self.units[u].games_left = games;
                    self.enqueue(u, now);
                }
                Event::Requeue(u) => {
                    if !self.units[u].retired && self.units[u].state == UnitState::Offline {
                        self.enqueue(u, now);
                    }
                }
                Event::MatchEnd(slot) => {
                    let Some(units) = self.playing[slot].take() else {
                        continue;
                    };
                    for u in units {
                        self.units[u].state = UnitState::Offline;
                        if self.units[u].retired {
                            continue;
                        }
                        if self.units[u].games_left > 0 {
                            let pause = Exp::new(1.0 / self.p.requeue_seconds)
                                .map(|e| e.sample(&mut self.rng))
                                .unwrap_or(0.0);
                            self.push(now + pause, Event::Requeue(u));
                        } else {
                            self.schedule_session(u, now);
                        }
                    }
                }
            }
        }
    }

    /// Ends unit `u`'s play session (its ticket expired) and schedules the next one.
    fn end_session(&mut self, u: usize, now: f64) {
        self.units[u].state = UnitState::Offline;
        if !self.units[u].retired {
            self.schedule_session(u, now);
        }
    }

    /// Takes unit `u`'s ticket out of the pool.
    pub(super) fn leave_queue(&mut self, u: usize) {
        let id = ticket_id(u, self.units[u].ticket);
        self.pool.remove(&id);
        self.units[u].state = UnitState::Offline;
    }

    /// Player `i`'s skill brought forward to `now` (deviation growth since the last match).
    pub(super) fn current(&self, i: usize, now: f64) -> Skill {
        let pl = &self.players[i];
        let elapsed = now - pl.last_played;
        if elapsed.is_finite() && elapsed > 0.0 {
            self.q.system.decay(&pl.skill, elapsed).unwrap_or(pl.skill)
        } else {
            pl.skill
        }
    }

    /// A party's own skill brought forward to `now`.
    pub(super) fn current_party(&self, u: usize, party_skill: Skill, now: f64) -> Skill {
        let elapsed = now - self.units[u].party_last;
        if elapsed.is_finite() && elapsed > 0.0 {
            self.q
                .system
                .decay(&party_skill, elapsed)
                .unwrap_or(party_skill)
        } else {
            party_skill
        }
    }

    /// Puts unit `u` in the queue with its current skills (and its party rating, created on a
    /// party's first queue, when `party_ratings` is on).
    fn enqueue(&mut self, u: usize, now: f64) {
        self.units[u].ticket += 1;
        let members = self.units[u].members.clone();
        let party_skill = if self.p.party_ratings && members.len() >= 2 {
            let skill = match self.units[u].party_skill {
                Some(ps) => self.current_party(u, ps, now),
                None => {
                    let current: Vec<Skill> =
                        members.iter().map(|&m| self.current(m, now)).collect();
                    let ps = crate::rating::party_initial(&self.q.system, &current);
                    self.units[u].party_skill = Some(ps);
                    self.units[u].party_last = now;
                    ps
                }
            };
            Some((skill.mean, skill.deviation))
        } else {
            None
        };
        let ticket = Ticket {
            id: ticket_id(u, self.units[u].ticket),
            players: members
                .iter()
                .map(|m| PlayerId::new(format!("p{m}")))
                .collect(),
            skills: members
                .iter()
                .map(|&m| {
                    let s = self.current(m, now);
                    (s.mean, s.deviation)
                })
                .collect(),
            party_skill,
            entered_at: now,
            region_latency_ms: Vec::new(),
            roles: Vec::new(),
            attributes: Default::default(),
            avoid: Vec::new(),
        };
        if self.pool.insert(ticket).is_ok() {
            self.units[u].state = UnitState::Queued;
        } else {
            self.schedule_session(u, now);
        }
    }

    /// Starts the clock of a match between `units`: they are playing, one game of their play
    /// session is used, and the match ends after `match_seconds` ± 25%.
    pub(super) fn start_match(&mut self, units: Vec<usize>, now: f64) {
        for &u in &units {
            self.units[u].state = UnitState::Playing;
            self.units[u].games_left = self.units[u].games_left.saturating_sub(1);
        }
        let slot = match self.playing.iter().position(Option::is_none) {
            Some(s) => s,
            None => {
                self.playing.push(None);
                self.playing.len() - 1
            }
        };
        self.playing[slot] = Some(units);
        let len = self.p.match_seconds * self.rng.random_range(0.75..1.25);
        self.push(now + len, Event::MatchEnd(slot));
    }
}
