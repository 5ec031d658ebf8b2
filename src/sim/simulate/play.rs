//! One formed match, played: the queue's rating system predicts it from the players' current
//! skills, the result is drawn from their true skills, the prediction is scored, the match's
//! balance is measured, and then ratings, party ratings and rank points are updated exactly as
//! the server would (`SystemConfig::rate`, `results::rate_party`, the queue's `Ranker`).

use super::event_loop::{Sim, unit_of};
use super::to_true_scale;
use super::truth::{draw_placements, oracle_two_team};
use crate::matching::FormedMatch;
use crate::ranking::Outcome;
use crate::rating::{MatchInput, PlayerInput, Skill};
use crate::records::{PartyRecord, PoolRecord};
use crate::results::{QueueRanker, Ranker};
use crate::sim::measures::{Scored, score};

impl Sim<'_> {
    /// Plays match `m`, formed at simulated time `now`.
    pub(super) fn play(&mut self, now: f64, m: FormedMatch) {
        self.tally.matches += 1;
        let mut units = Vec::new();
        let mut unit_team = Vec::new();
        let mut teams: Vec<Vec<usize>> = Vec::with_capacity(m.teams.len());
        for (ti, team) in m.teams.iter().enumerate() {
            let mut players = Vec::new();
            for t in team {
                let wait = t.wait(now);
                self.tally.waits.push(wait);
                self.tally.wait_quality.push((wait, m.quality));
                if let Some(u) = unit_of(&t.id) {
                    units.push(u);
                    unit_team.push(ti);
                    players.extend(self.units[u].members.iter().copied());
                }
            }
            teams.push(players);
        }
        self.tally.qualities.push(m.quality);

        // Skills now, prediction before the result.
        let skills: Vec<Vec<Skill>> = teams
            .iter()
            .map(|t| t.iter().map(|&i| self.current(i, now)).collect())
            .collect();
        let truths: Vec<Vec<f64>> = teams
            .iter()
            .map(|t| t.iter().map(|&i| self.players[i].truth).collect())
            .collect();
        let placements = draw_placements(&truths, self.p.performance_sd, &mut self.rng);
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        if let Ok(mut pred) = self.q.system.predict(&refs) {
            // Scored as the pool shows it (calibrated when the queue calibrates); the
            // calibration then learns from the system's own prediction.
            if let Some(c) = self.calibration {
                let raw = pred.win_probability.clone();
                c.apply(&mut pred.win_probability);
                if let Some(o) = crate::rating::calibration::Observation::new(&raw, &placements) {
                    self.calibration = Some(c.observe(&o, self.q.system.calibration()));
                }
            }
            if let Some(s) = score(&pred.win_probability, &placements) {
                self.tally.predictions.add(s);
            }
        }
        let oracle_p0 = match truths.as_slice() {
            [a, b] => Some(oracle_two_team(a, b, self.p.performance_sd)),
            _ => None,
        };
        if let Some(p0) = oracle_p0 {
            let s = score(&[p0, 1.0 - p0], &placements).unwrap_or(Scored { p: 0.5, y: 0.5 });
            self.tally.oracle.add(s);
        }
        let ratings: Vec<Vec<f64>> = skills
            .iter()
            .map(|t| {
                t.iter()
                    .map(|s| to_true_scale(&self.q.system, s.mean, self.p))
                    .collect()
            })
            .collect();
        self.tally
            .balance
            .record(m.quality, &truths, &ratings, &placements, oracle_p0);

        self.rate(now, &teams, &skills, &placements, &units, &unit_team);
        self.start_match(units, now);
    }

    /// Applies the result: party ratings, then every player's rating, rank points and
    /// convergence bookkeeping.
    fn rate(
        &mut self,
        now: f64,
        teams: &[Vec<usize>],
        skills: &[Vec<Skill>],
        placements: &[u32],
        units: &[usize],
        unit_team: &[usize],
    ) {
        let inputs: Vec<Vec<PlayerInput>> = teams
            .iter()
            .zip(skills)
            .map(|(t, s)| {
                t.iter()
                    .zip(s)
                    .map(|(&i, &skill)| PlayerInput {
                        skill,
                        elapsed_seconds: 0.0,
                        performance: None,
                        wins: self.players[i].wins,
                    })
                    .collect()
            })
            .collect();
        let rated = MatchInput {
            teams: &inputs,
            placements,
        };
        for (&u, &ti) in units.iter().zip(unit_team) {
            if let Some(ps) = self.units[u].party_skill {
                // Its inactivity is applied here on the simulated clock, so none is left for
                // the rating step.
                let party = PartyRecord {
                    skill: self.current_party(u, ps, now),
                    games: 0,
                    last_played_unix: None,
                };
                let members: Vec<usize> = self.units[u]
                    .members
                    .iter()
                    .filter_map(|p| teams[ti].iter().position(|q| q == p))
                    .collect();
                if let Ok(new) = crate::results::rate_party(
                    &self.q.system,
                    &inputs,
                    placements,
                    &[],
                    ti,
                    &members,
                    &party,
                    now,
                ) {
                    self.units[u].party_skill = Some(new);
                    self.units[u].party_last = now;
                }
            }
        }
        let Ok(new) = self.q.system.rate(&rated) else {
            return;
        };
        let ranker = QueueRanker::new(self.q.ranking, &self.q.ranking_config, &self.q.system);
        let team_means: Vec<Vec<f64>> = skills
            .iter()
            .map(|t| t.iter().map(|s| s.mean).collect())
            .collect();
        let band = self.p.convergence_band;
        for (ti, (t, s)) in teams.iter().zip(&new).enumerate() {
            let opponents: Vec<f64> = team_means
                .iter()
                .enumerate()
                .filter(|&(o, _)| o != ti)
                .flat_map(|(_, m)| m.iter().copied())
                .collect();
            let outcome = match Outcome::from_placements(placements, ti) {
                Some(o @ (Outcome::Win | Outcome::Draw)) => o,
                _ => Outcome::Loss,
            };
            for (&i, &skill) in t.iter().zip(s) {
                let truth_scale = to_true_scale(&self.q.system, skill.mean, self.p);
                let pl = &mut self.players[i];
                let before = PoolRecord {
                    skill: pl.skill,
                    ..pl.rank.clone()
                };
                pl.rank = ranker.update(&before, &skill, outcome, &team_means[ti], &opponents);
                pl.skill = skill;
                pl.last_played = now;
                pl.games += 1;
                if placements[ti] == 1 {
                    pl.wins += 1;
                }
                if (truth_scale - pl.truth).abs() > band {
                    pl.last_outside = pl.games;
                }
            }
        }
    }
}
