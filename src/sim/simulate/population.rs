//! The simulated population: players with hidden true skills, the units they queue as (a solo
//! player or a fixed party), the starting population, and what each simulated day brings
//! (true-skill drift, retirements, arrivals).
//!
//! Every random draw goes through the simulation's one seeded RNG, in a fixed order.

use rand::Rng;
use rand_distr::{Distribution, Exp, Normal, Poisson};

use super::event_loop::{Event, Sim};
use super::params::{DAY, SkillDistribution};
use crate::rating::Skill;
use crate::records::PoolRecord;

/// One simulated player.
pub(super) struct Player {
    /// Hidden true skill on the 1500 scale; drifts day by day.
    pub(super) truth: f64,
    /// Rating as of `last_played`.
    pub(super) skill: Skill,
    /// Rank points and ladder state, as the server keeps them.
    pub(super) rank: PoolRecord,
    /// Simulated time of the last match (for deviation growth).
    pub(super) last_played: f64,
    pub(super) wins: u32,
    pub(super) games: u32,
    /// Games played when the rating was last outside the convergence band.
    pub(super) last_outside: u32,
    /// True-skill decile among the starting population (0 = lowest); `usize::MAX` for players
    /// who arrived later.
    pub(super) decile: usize,
}

/// Where a unit is between sessions, queue and match.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum UnitState {
    Offline,
    Queued,
    Playing,
}

/// What queues: a solo player or a fixed party.
pub(super) struct Unit {
    /// Indices into the players.
    pub(super) members: Vec<usize>,
    /// The party's own skill once it has queued (parties of 2+ with `party_ratings`).
    pub(super) party_skill: Option<Skill>,
    /// Simulated time of the party's last match (for its deviation growth).
    pub(super) party_last: f64,
    pub(super) state: UnitState,
    /// Games left in the current play session.
    pub(super) games_left: u32,
    pub(super) retired: bool,
    /// Number of the unit's current ticket (ticket ids are `u{unit}.{ticket}`).
    pub(super) ticket: u64,
}

impl Sim<'_> {
    fn draw_truth(&mut self) -> f64 {
        let (m, s) = (self.p.skill_mean, self.p.skill_sd);
        match self.p.distribution {
            SkillDistribution::Normal => {
                m + s * self.rng.sample::<f64, _>(rand_distr::StandardNormal)
            }
            SkillDistribution::Uniform => {
                let half = s * 3f64.sqrt();
                self.rng.random_range(m - half..m + half)
            }
        }
    }

    fn new_player(&mut self) -> usize {
        let truth = self.draw_truth();
        self.players.push(Player {
            truth,
            skill: self.q.system.initial(),
            rank: PoolRecord::initial(&self.q.system, self.q.ranking, &self.q.ranking_config),
            last_played: f64::NEG_INFINITY,
            wins: 0,
            games: 0,
            last_outside: 0,
            decile: usize::MAX,
        });
        self.players.len() - 1
    }

    /// Adds an offline unit and returns its index.
    fn add_unit(&mut self, members: Vec<usize>) -> usize {
        self.units.push(Unit {
            members,
            party_skill: None,
            party_last: f64::NEG_INFINITY,
            state: UnitState::Offline,
            games_left: 0,
            retired: false,
            ticket: 0,
        });
        self.units.len() - 1
    }

    /// Schedules unit `u`'s next play session (exponential gap, `sessions_per_day`).
    pub(super) fn schedule_session(&mut self, u: usize, now: f64) {
        let gap = Exp::new(self.p.sessions_per_day / DAY)
            .map(|e| e.sample(&mut self.rng))
            .unwrap_or(DAY);
        self.push(now + gap, Event::SessionStart(u));
    }

    /// The starting population: `players` players, a `party_fraction` of units being parties
    /// of 2 up to the largest party the queue allows, then each player's true-skill decile.
    pub(super) fn populate(&mut self) {
        let max_party = self.q.max_party_size.min(self.q.shape.team_size) as usize;
        let mut left = self.p.players;
        while left > 0 {
            let party = max_party >= 2 && self.rng.random_bool(self.p.party_fraction);
            let size = if party {
                self.rng.random_range(2..=max_party).min(left)
            } else {
                1
            };
            let members: Vec<usize> = (0..size).map(|_| self.new_player()).collect();
            let u = self.add_unit(members);
            self.schedule_session(u, 0.0);
            left -= size;
        }
        let edges = self.decile_edges();
        for pl in &mut self.players {
            pl.decile = edges.iter().filter(|&&e| pl.truth >= e).count().min(9);
        }
    }

    /// The nine true-skill values that split the players into deciles.
    fn decile_edges(&self) -> Vec<f64> {
        let mut t: Vec<f64> = self.players.iter().map(|p| p.truth).collect();
        t.sort_unstable_by(f64::total_cmp);
        (1..10).map(|d| t[d * t.len() / 10]).collect()
    }

    /// A new simulated day: every true skill drifts, units retire, new solo players arrive and
    /// start their first play session at a random time of the day.
    pub(super) fn new_day(&mut self, now: f64) {
        if self.p.drift_sd_per_day > 0.0
            && let Ok(n) = Normal::new(0.0, self.p.drift_sd_per_day)
        {
            for i in 0..self.players.len() {
                let step = n.sample(&mut self.rng);
                self.players[i].truth += step;
            }
        }
        for u in 0..self.units.len() {
            if !self.units[u].retired && self.rng.random_bool(self.p.retire_per_day) {
                self.units[u].retired = true;
                self.tally.retired_players += self.units[u].members.len();
                if self.units[u].state == UnitState::Queued {
                    self.leave_queue(u);
                }
            }
        }
        let arrivals = Poisson::new(self.p.arrivals_per_day)
            .map(|d| d.sample(&mut self.rng) as usize)
            .unwrap_or(0);
        for _ in 0..arrivals {
            let p = self.new_player();
            let offset = self.rng.random_range(0.0..DAY);
            let u = self.add_unit(vec![p]);
            self.push(now + offset, Event::SessionStart(u));
        }
    }
}
