//! Population simulation (SPEC §9 `simulate`; seed 003 "simulation testing", seed 004's success
//! measures): hidden true skills, sessions, arrivals and retirements, skill drift and parties,
//! run through the real optimizer ([`Pool`]) and the queue's real rating system on a simulated
//! clock, with outcomes drawn from the true skills.
//!
//! Pure and reproducible: time is the simulated clock, every random draw comes from one
//! `StdRng` seeded with [`SimParams::seed`], and nothing here reads the wall clock or does I/O,
//! so one seed gives the same report bit for bit.
//!
//! The model (seed 003: "sample from the normal each player has, the higher sample wins"):
//! - True skill on the 1500 rating scale, normal (mean 1500, sd 300) or uniform with the same
//!   mean and sd; it drifts by a normal step each simulated day.
//! - In a match each player performs at N(true skill, `performance_sd`²); a team's performance
//!   is the sum of its members'; teams are placed by performance. So team A beats team B with
//!   probability Φ((ΣA − ΣB) / (performance_sd · sqrt(n_A + n_B))).
//! - Ratings are compared with the truth on the true scale: Glicko and Elo are on it already;
//!   Weng-Lin μ maps as 1500 + (μ − μ₀) · performance_sd / β (its β is its performance noise).
//! - Units (a solo player or a fixed party) start sessions at random (Poisson, `sessions_per_day`),
//!   play a geometric number of games (mean `games_per_session`), re-queueing after each match
//!   (`match_seconds` long) after a short pause (`requeue_seconds`); an expired ticket ends the
//!   session.
//! - A party (fixed members, team queues only) gets its own rating on its first queue and is
//!   matched by it (`party_ratings`, SPEC §3.6); its members' ratings still update as usual.
//! - Each day new solo players arrive (Poisson, `arrivals_per_day`) and each unit retires with
//!   probability `retire_per_day`.
//!
//! Seed 004's measures for two-team matches (skills normalised by sqrt(team size), on the true
//! scale, where the seed's skill is 10× rating): RandomBeatSkill = the team with the lower true
//! total won; GoodSkillMatch = the true underdog had at least 25%; GoodRatedMatch = the
//! optimizer's quality (underdog's predicted chance) is at least 25%; RatingsPredictedSkillWell
//! = |normalised rating difference − normalised skill difference| < 200, not applicable when
//! both differences are beyond ±400 on the same side (a predicted blowout that was one).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, Normal, Poisson};
use serde::{Deserialize, Serialize};

use super::measures::{Accumulator, CalibrationBin, Scored, quantile, score};
use crate::config::RankingKind;
use crate::ids::{PlayerId, TicketId};
use crate::matching::{MatchingConfig, Pool, Shape, Ticket, WinModel};
use crate::ranking::Outcome;
use crate::ranking::RankingConfig;
use crate::rating::{MatchInput, PlayerInput, Skill, SystemConfig};
use crate::results::{QueueRanker, Ranker};
use crate::state::PoolRecord;

/// Seconds in a simulated day.
pub const DAY: f64 = 86_400.0;

/// How true skills are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkillDistribution {
    /// Normal with `skill_mean`, `skill_sd`.
    #[default]
    Normal,
    /// Uniform with the same mean and standard deviation.
    Uniform,
}

/// Everything about the simulated population; `Default` is the documented setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimParams {
    /// Players at the start.
    pub players: usize,
    /// Simulated days.
    pub days: f64,
    /// RNG seed: the whole run is a function of it.
    pub seed: u64,
    /// True-skill distribution.
    pub distribution: SkillDistribution,
    /// Mean true skill (1500 scale).
    pub skill_mean: f64,
    /// Standard deviation of true skill.
    pub skill_sd: f64,
    /// Per-player performance noise in one match (seed 003's "normal each player has").
    pub performance_sd: f64,
    /// Standard deviation of the daily true-skill drift.
    pub drift_sd_per_day: f64,
    /// New solo players per day (Poisson mean).
    pub arrivals_per_day: f64,
    /// Probability that a unit retires on a given day.
    pub retire_per_day: f64,
    /// Fraction of players in pre-made parties (team queues only).
    pub party_fraction: f64,
    /// Give each party its own rating (SPEC §3.6, `rating::party_initial` / `party_rate`) and
    /// let the optimizer match the party by it, as the server does.
    pub party_ratings: bool,
    /// Sessions a unit starts per day (Poisson rate).
    pub sessions_per_day: f64,
    /// Mean games per session (geometric).
    pub games_per_session: f64,
    /// Length of a match in seconds.
    pub match_seconds: f64,
    /// Mean pause between a match's end and the next queue entry in a session (exponential), so
    /// a finished match's players do not all re-enter at the same instant.
    pub requeue_seconds: f64,
    /// Simulated seconds between optimizer ticks.
    pub tick_seconds: f64,
    /// A rating within this distance of the truth (true scale) counts as converged.
    pub convergence_band: f64,
    /// Days between snapshots of the rating-over-time curves.
    pub snapshot_days: f64,
}

impl Default for SimParams {
    fn default() -> Self {
        Self {
            players: 2000,
            days: 7.0,
            seed: 1,
            distribution: SkillDistribution::Normal,
            skill_mean: 1500.0,
            skill_sd: 300.0,
            performance_sd: 200.0,
            drift_sd_per_day: 5.0,
            arrivals_per_day: 40.0,
            retire_per_day: 0.01,
            party_fraction: 0.2,
            party_ratings: true,
            sessions_per_day: 2.0,
            games_per_session: 5.0,
            match_seconds: 900.0,
            requeue_seconds: 60.0,
            tick_seconds: 2.0,
            convergence_band: 100.0,
            snapshot_days: 0.25,
        }
    }
}

impl SimParams {
    /// Checks every number; the error names the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        let pos = |k: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!("{k}: must be finite and > 0 (got {v})"))
            }
        };
        let non_neg = |k: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{k}: must be finite and >= 0 (got {v})"))
            }
        };
        if self.players < 2 {
            return Err(format!("players: need at least 2 (got {})", self.players));
        }
        pos("days", self.days)?;
        if self.days > 3650.0 {
            return Err(format!("days: at most 3650 (got {})", self.days));
        }
        pos("skill_sd", self.skill_sd)?;
        pos("performance_sd", self.performance_sd)?;
        non_neg("drift_sd_per_day", self.drift_sd_per_day)?;
        non_neg("arrivals_per_day", self.arrivals_per_day)?;
        if !(0.0..=1.0).contains(&self.retire_per_day) {
            return Err(format!(
                "retire_per_day: must be in [0, 1] (got {})",
                self.retire_per_day
            ));
        }
        if !(0.0..=1.0).contains(&self.party_fraction) {
            return Err(format!(
                "party_fraction: must be in [0, 1] (got {})",
                self.party_fraction
            ));
        }
        pos("sessions_per_day", self.sessions_per_day)?;
        if !(self.games_per_session >= 1.0 && self.games_per_session.is_finite()) {
            return Err(format!(
                "games_per_session: must be >= 1 (got {})",
                self.games_per_session
            ));
        }
        pos("match_seconds", self.match_seconds)?;
        pos("requeue_seconds", self.requeue_seconds)?;
        pos("tick_seconds", self.tick_seconds)?;
        pos("convergence_band", self.convergence_band)?;
        pos("snapshot_days", self.snapshot_days)?;
        if !self.skill_mean.is_finite() {
            return Err("skill_mean: must be finite".into());
        }
        Ok(())
    }
}

/// The queue a simulation runs: its shape, rating system and optimizer config.
#[derive(Clone, Debug)]
pub struct SimQueue {
    /// Queue name (for the report).
    pub name: String,
    /// Teams × team size.
    pub shape: Shape,
    /// Largest party.
    pub max_party_size: u32,
    /// The queue's rating system.
    pub system: SystemConfig,
    /// The queue's optimizer config.
    pub matching: MatchingConfig,
    /// What players are shown (rank points), and the server's ranking settings.
    pub ranking: RankingKind,
    pub ranking_config: RankingConfig,
}

/// Everything a simulation reports (the `--json` object, plus series for plots).
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// Rating system.
    pub system: String,
    /// Queue name.
    pub queue: String,
    /// The seed.
    pub seed: u64,
    /// Predictions scored (one per match).
    pub n: u64,
    /// Mean log loss of the rating system's predictions.
    pub log_loss: f64,
    /// Mean Brier score.
    pub brier: f64,
    /// How often the favourite won.
    pub accuracy: f64,
    /// Expected calibration error (10 bins).
    pub ece: f64,
    /// ECE an oracle that knows the true skills gets on the same matches: the sampling-noise
    /// floor the system's ECE should be compared with (two-team queues; absent for
    /// free-for-all).
    pub ece_truth: Option<f64>,
    /// Log loss of that oracle (the best any system could do).
    pub log_loss_truth: Option<f64>,
    /// Wall-clock seconds (filled in by the caller; 0 from the pure run).
    pub seconds: f64,
    /// Median games until a player's rating came within `convergence_band` of the truth and
    /// stayed there (players with 10+ games whose rating ended inside the band).
    pub games_to_converge: f64,
    /// Fraction of players with at least 10 games whose rating ended inside the band.
    pub converged_fraction: f64,
    /// Median match quality (underdog's predicted win probability).
    pub quality_p50: f64,
    /// Mean match quality.
    pub quality_mean: f64,
    /// Median wait of matched tickets, simulated seconds.
    pub wait_p50_s: f64,
    /// 95th percentile wait.
    pub wait_p95_s: f64,
    /// Matches played.
    pub matches: u64,
    /// Tickets that expired unmatched.
    pub expired_tickets: u64,
    /// Players who ever existed (start + arrivals).
    pub players_total: usize,
    /// Players retired by the end.
    pub players_retired: usize,
    /// Seed 004: lower true-skill team won (luck beat skill).
    pub random_beat_skill: f64,
    /// Seed 004: the true underdog had at least a 25% chance.
    pub good_skill_match: Option<f64>,
    /// Seed 004: the predicted underdog had at least a 25% chance.
    pub good_rated_match: f64,
    /// Seed 004: ratings predicted the skill difference well (of applicable matches).
    pub ratings_predicted_skill_well: Option<f64>,
    /// Matches for which RatingsPredictedSkillWell was not applicable (predicted blowouts).
    pub ratings_predicted_skill_well_na: u64,
    /// Predicted vs actual per bucket.
    pub calibration: Vec<CalibrationBin>,
    /// Per true-skill decile (of the starting population, lowest first), mean display rating
    /// over time as (day, rating) points.
    pub display_by_decile: Vec<Vec<(f64, f64)>>,
    /// Per true-skill decile, mean rank points over time (day, RP): seed 003's rank-experience
    /// curves, computed by the server's own ranking code. Empty for `ranking = "none"` queues.
    pub rank_points_by_decile: Vec<Vec<(f64, f64)>>,
    /// Final ratings of active players on the true scale.
    #[serde(skip)]
    pub final_ratings: Vec<f64>,
    /// Final true skills of active players.
    #[serde(skip)]
    pub final_truths: Vec<f64>,
    /// (wait, quality) per matched ticket.
    #[serde(skip)]
    pub wait_quality: Vec<(f64, f64)>,
}

/// A new player's rank-point state, as the server creates it.
fn initial_rank(q: &SimQueue) -> PoolRecord {
    let ladder = crate::ranking::LadderState::new(&q.ranking_config.ladder);
    let (rank_points, ladder_floor) = match q.ranking {
        RankingKind::Ladder => (ladder.rp, ladder.floor_rp),
        RankingKind::None | RankingKind::Inversus => (0, 0),
    };
    PoolRecord {
        skill: q.system.initial(),
        rank_points,
        games: 0,
        wins: 0,
        last_played_unix: None,
        ladder_floor,
        win_streak: 0,
        period: None,
    }
}

struct Player {
    truth: f64,
    skill: Skill,
    /// Rank points and ladder state, as the server keeps them.
    rank: PoolRecord,
    last_played: f64,
    wins: u32,
    games: u32,
    /// Games played when the rating was last outside the convergence band.
    last_outside: u32,
    decile: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum UnitState {
    Offline,
    Queued,
    Playing,
}

struct Unit {
    members: Vec<usize>,
    /// The party's own skill once it has queued (parties of 2+ with `party_ratings`).
    party_skill: Option<Skill>,
    /// Simulated time of the party's last match (for its deviation growth).
    party_last: f64,
    state: UnitState,
    games_left: u32,
    retired: bool,
    ticket: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    SessionStart(usize),
    MatchEnd(usize),
    Requeue(usize),
}

/// The rating system as the optimizer's win model.
struct Model<'a> {
    system: &'a SystemConfig,
    volatility: f64,
}

impl WinModel for Model<'_> {
    fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
        let skills: Vec<Vec<Skill>> = teams
            .iter()
            .map(|t| {
                t.iter()
                    .map(|&(mean, deviation)| Skill {
                        mean,
                        deviation,
                        volatility: self.volatility,
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        match self.system.predict(&refs) {
            Ok(p) => p.win_probability,
            Err(_) => vec![1.0 / teams.len().max(1) as f64; teams.len()],
        }
    }
}

/// Maps a rating mean onto the true-skill scale (see the module docs).
#[must_use]
pub fn to_true_scale(system: &SystemConfig, mean: f64, params: &SimParams) -> f64 {
    match system {
        SystemConfig::WengLinBt(c) | SystemConfig::WengLinPl(c) | SystemConfig::WengLinTm(c) => {
            params.skill_mean + (mean - c.mu) * params.performance_sd / c.beta
        }
        _ => mean,
    }
}

/// Φ, the standard normal CDF (Abramowitz–Stegun 7.1.26 through erf; |error| < 1.5e-7).
fn phi(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z.abs());
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-z * z).exp();
    let erf = if z >= 0.0 { y } else { -y };
    0.5 * (1.0 + erf)
}

struct Sim<'a> {
    p: &'a SimParams,
    q: &'a SimQueue,
    rng: StdRng,
    players: Vec<Player>,
    units: Vec<Unit>,
    events: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64, Event)>>,
    seq: u64,
    pool: Pool,
    playing: Vec<Option<Vec<usize>>>,
    // Measures.
    acc: Accumulator,
    truth_acc: Accumulator,
    waits: Vec<f64>,
    qualities: Vec<f64>,
    wait_quality: Vec<(f64, f64)>,
    matches: u64,
    expired: u64,
    rbs: u64,
    gsm: u64,
    grm: u64,
    two_team: u64,
    rpsw_pass: u64,
    rpsw_applicable: u64,
    rpsw_na: u64,
    retired_players: usize,
}

/// Runs one simulation. Pure: the same `params` and `queue` give the same report.
pub fn simulate(
    params: &SimParams,
    queue: &SimQueue,
    on_day: &dyn Fn(u64),
) -> Result<SimReport, String> {
    params.validate()?;
    queue.system.validate().map_err(|e| e.to_string())?;
    queue
        .matching
        .validate(queue.shape)
        .map_err(|e| e.to_string())?;
    let mut sim = Sim {
        p: params,
        q: queue,
        rng: StdRng::seed_from_u64(params.seed),
        players: Vec::new(),
        units: Vec::new(),
        events: std::collections::BinaryHeap::new(),
        seq: 0,
        pool: Pool::new(queue.shape, queue.matching.clone()),
        playing: Vec::new(),
        acc: Accumulator::new(),
        truth_acc: Accumulator::new(),
        waits: Vec::new(),
        qualities: Vec::new(),
        wait_quality: Vec::new(),
        matches: 0,
        expired: 0,
        rbs: 0,
        gsm: 0,
        grm: 0,
        two_team: 0,
        rpsw_pass: 0,
        rpsw_applicable: 0,
        rpsw_na: 0,
        retired_players: 0,
    };
    sim.populate();
    let deciles = sim.decile_edges();
    for pl in &mut sim.players {
        pl.decile = deciles.iter().filter(|&&e| pl.truth >= e).count().min(9);
    }
    let mut display_by_decile = vec![Vec::new(); 10];
    let mut rank_points_by_decile = vec![Vec::new(); 10];
    let end = params.days * DAY;
    let ticks = (end / params.tick_seconds).ceil() as u64;
    let mut next_day = DAY;
    let mut next_snapshot = 0.0;
    let model = Model {
        system: &queue.system,
        volatility: queue.system.initial().volatility,
    };
    for k in 0..=ticks {
        let now = k as f64 * params.tick_seconds;
        if now >= next_snapshot {
            sim.snapshot(now, &mut display_by_decile, &mut rank_points_by_decile);
            next_snapshot += params.snapshot_days * DAY;
        }
        if now >= next_day {
            sim.new_day(now);
            on_day((now / DAY).round() as u64);
            next_day += DAY;
        }
        sim.run_events(now);
        if !sim.pool.is_empty() {
            let out = sim.pool.tick(now, &model);
            for t in out.expired {
                sim.expired += 1;
                if let Some(u) = unit_of(&t.id) {
                    sim.end_session(u, now);
                }
            }
            for m in out.matches {
                sim.play(now, m);
            }
        }
    }
    if queue.ranking == RankingKind::None {
        rank_points_by_decile.clear();
    }
    Ok(sim.report(display_by_decile, rank_points_by_decile))
}

fn unit_of(id: &TicketId) -> Option<usize> {
    id.as_str()
        .strip_prefix('u')?
        .split('.')
        .next()?
        .parse()
        .ok()
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
            rank: initial_rank(self.q),
            last_played: f64::NEG_INFINITY,
            wins: 0,
            games: 0,
            last_outside: 0,
            decile: usize::MAX,
        });
        self.players.len() - 1
    }

    fn push(&mut self, at: f64, e: Event) {
        self.seq += 1;
        self.events
            .push(std::cmp::Reverse(((at * 1000.0) as u64, self.seq, e)));
    }

    fn new_unit(&mut self, members: Vec<usize>, now: f64) {
        self.units.push(Unit {
            members,
            party_skill: None,
            party_last: f64::NEG_INFINITY,
            state: UnitState::Offline,
            games_left: 0,
            retired: false,
            ticket: 0,
        });
        let u = self.units.len() - 1;
        self.schedule_session(u, now);
    }

    fn schedule_session(&mut self, u: usize, now: f64) {
        let gap = Exp::new(self.p.sessions_per_day / DAY)
            .map(|e| e.sample(&mut self.rng))
            .unwrap_or(DAY);
        self.push(now + gap, Event::SessionStart(u));
    }

    fn populate(&mut self) {
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
            self.new_unit(members, 0.0);
            left -= size;
        }
    }

    fn decile_edges(&self) -> Vec<f64> {
        let mut t: Vec<f64> = self.players.iter().map(|p| p.truth).collect();
        t.sort_unstable_by(f64::total_cmp);
        (1..10).map(|d| t[d * t.len() / 10]).collect()
    }

    fn new_day(&mut self, now: f64) {
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
                self.retired_players += self.units[u].members.len();
                if self.units[u].state == UnitState::Queued {
                    let id = ticket_id(u, self.units[u].ticket);
                    self.pool.remove(&id);
                    self.units[u].state = UnitState::Offline;
                }
            }
        }
        let arrivals = Poisson::new(self.p.arrivals_per_day)
            .map(|d| d.sample(&mut self.rng) as usize)
            .unwrap_or(0);
        for _ in 0..arrivals {
            let p = self.new_player();
            self.players[p].decile = usize::MAX;
            let offset = self.rng.random_range(0.0..DAY);
            self.units.push(Unit {
                members: vec![p],
                party_skill: None,
                party_last: f64::NEG_INFINITY,
                state: UnitState::Offline,
                games_left: 0,
                retired: false,
                ticket: 0,
            });
            let u = self.units.len() - 1;
            self.push(now + offset, Event::SessionStart(u));
        }
    }

    fn run_events(&mut self, now: f64) {
        let limit = (now * 1000.0) as u64;
        while let Some(std::cmp::Reverse((t, _, e))) = self.events.peek().copied() {
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

    fn end_session(&mut self, u: usize, now: f64) {
        self.units[u].state = UnitState::Offline;
        if !self.units[u].retired {
            self.schedule_session(u, now);
        }
    }

    fn current(&self, i: usize, now: f64) -> Skill {
        let pl = &self.players[i];
        let elapsed = now - pl.last_played;
        if elapsed.is_finite() && elapsed > 0.0 {
            self.q.system.decay(&pl.skill, elapsed).unwrap_or(pl.skill)
        } else {
            pl.skill
        }
    }

    fn enqueue(&mut self, u: usize, now: f64) {
        self.units[u].ticket += 1;
        let members = self.units[u].members.clone();
        let party_skill = if self.p.party_ratings && members.len() >= 2 {
            let skill = match self.units[u].party_skill {
                Some(ps) => {
                    let elapsed = now - self.units[u].party_last;
                    if elapsed.is_finite() && elapsed > 0.0 {
                        self.q.system.decay(&ps, elapsed).unwrap_or(ps)
                    } else {
                        ps
                    }
                }
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
        };
        if self.pool.insert(ticket).is_ok() {
            self.units[u].state = UnitState::Queued;
        } else {
            self.schedule_session(u, now);
        }
    }

    fn play(&mut self, now: f64, m: crate::matching::FormedMatch) {
        self.matches += 1;
        let mut units = Vec::new();
        let mut unit_team = Vec::new();
        let mut teams: Vec<Vec<usize>> = Vec::with_capacity(m.teams.len());
        for (ti, team) in m.teams.iter().enumerate() {
            let mut players = Vec::new();
            for t in team {
                let wait = t.wait(now);
                self.waits.push(wait);
                self.wait_quality.push((wait, m.quality));
                if let Some(u) = unit_of(&t.id) {
                    units.push(u);
                    unit_team.push(ti);
                    players.extend(self.units[u].members.iter().copied());
                }
            }
            teams.push(players);
        }
        self.qualities.push(m.quality);
        if m.quality >= 0.25 {
            self.grm += 1;
        }
        // Skills now, prediction before the result.
        let skills: Vec<Vec<Skill>> = teams
            .iter()
            .map(|t| t.iter().map(|&i| self.current(i, now)).collect())
            .collect();
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        // Outcome from true skill: team performance = Σ N(truth, sd²).
        let perf: Vec<f64> = teams
            .iter()
            .map(|t| {
                t.iter()
                    .map(|&i| {
                        self.players[i].truth
                            + self.p.performance_sd
                                * self.rng.sample::<f64, _>(rand_distr::StandardNormal)
                    })
                    .sum()
            })
            .collect();
        let mut order: Vec<usize> = (0..teams.len()).collect();
        order.sort_by(|&a, &b| perf[b].total_cmp(&perf[a]));
        let mut placements = vec![0u32; teams.len()];
        for (rank, &t) in order.iter().enumerate() {
            placements[t] = rank as u32 + 1;
        }
        let totals: Vec<f64> = teams
            .iter()
            .map(|t| t.iter().map(|&i| self.players[i].truth).sum())
            .collect();
        if let Ok(pred) = self.q.system.predict(&refs)
            && let Some(s) = score(&pred.win_probability, &placements)
        {
            self.acc.add(s);
        }
        self.seed_measures(&teams, &skills, &totals, &placements);

        let inputs: Vec<Vec<PlayerInput>> = teams
            .iter()
            .zip(&skills)
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
            placements: &placements,
        };
        for (&u, &ti) in units.iter().zip(&unit_team) {
            if let Some(ps) = self.units[u].party_skill {
                let elapsed = now - self.units[u].party_last;
                let ps = if elapsed.is_finite() && elapsed > 0.0 {
                    self.q.system.decay(&ps, elapsed).unwrap_or(ps)
                } else {
                    ps
                };
                if let Ok(new) = crate::rating::party_rate(&self.q.system, &ps, &rated, ti) {
                    self.units[u].party_skill = Some(new);
                    self.units[u].party_last = now;
                }
            }
        }
        if let Ok(new) = self.q.system.rate(&rated) {
            let ranker = QueueRanker::new(self.q.ranking, &self.q.ranking_config, &self.q.system);
            let team_means: Vec<Vec<f64>> = skills
                .iter()
                .map(|t| t.iter().map(|s| s.mean).collect())
                .collect();
            for (ti, (t, s)) in teams.iter().zip(&new).enumerate() {
                let opponents: Vec<f64> = team_means
                    .iter()
                    .enumerate()
                    .filter(|&(o, _)| o != ti)
                    .flat_map(|(_, m)| m.iter().copied())
                    .collect();
                let outcome = match Outcome::from_placements(&placements, ti) {
                    Some(o @ (Outcome::Win | Outcome::Draw)) => o,
                    _ => Outcome::Loss,
                };
                for (&i, &skill) in t.iter().zip(s) {
                    let band = self.p.convergence_band;
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

    fn seed_measures(
        &mut self,
        teams: &[Vec<usize>],
        skills: &[Vec<Skill>],
        totals: &[f64],
        placements: &[u32],
    ) {
        let sd = self.p.performance_sd;
        let winner = placements.iter().position(|&p| p == 1).unwrap_or(0);
        let best_truth = (0..totals.len())
            .max_by(|&a, &b| totals[a].total_cmp(&totals[b]))
            .unwrap_or(0);
        if winner != best_truth {
            self.rbs += 1;
        }
        if teams.len() != 2 {
            return;
        }
        self.two_team += 1;
        let n = (teams[0].len() + teams[1].len()) as f64;
        let p0 = phi((totals[0] - totals[1]) / (sd * n.sqrt()));
        if p0.min(1.0 - p0) >= 0.25 {
            self.gsm += 1;
        }
        self.truth_acc
            .add(score(&[p0, 1.0 - p0], placements).unwrap_or(Scored { p: 0.5, y: 0.5 }));
        let norm = |t: &[f64]| t.iter().sum::<f64>() / (t.len().max(1) as f64).sqrt();
        let r: Vec<Vec<f64>> = skills
            .iter()
            .map(|t| {
                t.iter()
                    .map(|s| to_true_scale(&self.q.system, s.mean, self.p))
                    .collect()
            })
            .collect();
        let tr: Vec<Vec<f64>> = teams
            .iter()
            .map(|t| t.iter().map(|&i| self.players[i].truth).collect())
            .collect();
        let rd = norm(&r[0]) - norm(&r[1]);
        let sdiff = norm(&tr[0]) - norm(&tr[1]);
        if (rd < -400.0 && sdiff < -400.0) || (rd > 400.0 && sdiff > 400.0) {
            self.rpsw_na += 1;
        } else {
            self.rpsw_applicable += 1;
            if (rd - sdiff).abs() < 200.0 {
                self.rpsw_pass += 1;
            }
        }
    }

    fn snapshot(&self, now: f64, out: &mut [Vec<(f64, f64)>], rp_out: &mut [Vec<(f64, f64)>]) {
        let mut sums = [(0.0, 0.0, 0u32); 10];
        for pl in &self.players {
            if pl.decile < 10 {
                let d = self.q.system.display(&pl.skill).display;
                sums[pl.decile].0 += d;
                sums[pl.decile].1 += f64::from(pl.rank.rank_points);
                sums[pl.decile].2 += 1;
            }
        }
        for (d, (s, rp, c)) in sums.iter().enumerate() {
            if *c > 0 {
                out[d].push((now / DAY, s / f64::from(*c)));
                if self.q.ranking != RankingKind::None {
                    rp_out[d].push((now / DAY, rp / f64::from(*c)));
                }
            }
        }
    }

    fn report(
        self,
        display_by_decile: Vec<Vec<(f64, f64)>>,
        rank_points_by_decile: Vec<Vec<(f64, f64)>>,
    ) -> SimReport {
        let s = self.acc.summary();
        let truth = self.truth_acc.summary();
        // Converged = inside the band after the last game and ever since entering it for good:
        // the games needed are one more than the last game that left it outside. Only players
        // with 10+ games count, so one lucky first game does not look like convergence.
        let mut conv: Vec<f64> = Vec::new();
        let mut eligible = 0usize;
        for pl in self.players.iter().filter(|p| p.games >= 10) {
            eligible += 1;
            if pl.last_outside < pl.games {
                conv.push(f64::from(pl.last_outside + 1));
            }
        }
        let converged_eligible = conv.len();
        let active: Vec<&Player> = self
            .units
            .iter()
            .filter(|u| !u.retired)
            .flat_map(|u| u.members.iter().map(|&i| &self.players[i]))
            .filter(|p| p.games > 0)
            .collect();
        let frac = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        // The oracle and two of seed 004's measures are defined for two-team matches only.
        let two_team = self.two_team > 0;
        SimReport {
            system: self.q.system.name().to_string(),
            queue: self.q.name.clone(),
            seed: self.p.seed,
            n: s.n,
            log_loss: s.log_loss,
            brier: s.brier,
            accuracy: s.accuracy,
            ece: s.ece,
            ece_truth: two_team.then_some(truth.ece),
            log_loss_truth: two_team.then_some(truth.log_loss),
            seconds: 0.0,
            games_to_converge: quantile(&conv, 0.5),
            converged_fraction: frac(converged_eligible as u64, eligible as u64),
            quality_p50: quantile(&self.qualities, 0.5),
            quality_mean: if self.qualities.is_empty() {
                0.0
            } else {
                self.qualities.iter().sum::<f64>() / self.qualities.len() as f64
            },
            wait_p50_s: quantile(&self.waits, 0.5),
            wait_p95_s: quantile(&self.waits, 0.95),
            matches: self.matches,
            expired_tickets: self.expired,
            players_total: self.players.len(),
            players_retired: self.retired_players,
            random_beat_skill: frac(self.rbs, self.matches),
            good_skill_match: two_team.then(|| frac(self.gsm, self.two_team)),
            good_rated_match: frac(self.grm, self.matches),
            ratings_predicted_skill_well: (self.rpsw_applicable > 0)
                .then(|| frac(self.rpsw_pass, self.rpsw_applicable)),
            ratings_predicted_skill_well_na: self.rpsw_na,
            calibration: self.acc.calibration(),
            display_by_decile,
            rank_points_by_decile,
            final_ratings: active
                .iter()
                .map(|p| to_true_scale(&self.q.system, p.skill.mean, self.p))
                .collect(),
            final_truths: active.iter().map(|p| p.truth).collect(),
            wait_quality: self.wait_quality,
        }
    }
}

fn ticket_id(unit: usize, n: u64) -> TicketId {
    TicketId::new(format!("u{unit}.{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::glicko2;

    fn queue_1v1() -> SimQueue {
        SimQueue {
            name: "1v1".into(),
            shape: Shape {
                teams: 2,
                team_size: 1,
            },
            max_party_size: 1,
            system: SystemConfig::Glicko2(glicko2::Config::default()),
            matching: MatchingConfig::default_for_scale(400.0),
            ranking: RankingKind::Inversus,
            ranking_config: RankingConfig::default(),
        }
    }

    fn small(seed: u64) -> SimParams {
        SimParams {
            players: 300,
            days: 1.0,
            seed,
            arrivals_per_day: 10.0,
            sessions_per_day: 3.0,
            match_seconds: 600.0,
            tick_seconds: 5.0,
            ..SimParams::default()
        }
    }

    #[test]
    fn a_fixed_seed_reproduces_the_report_bit_for_bit() {
        let a = simulate(&small(7), &queue_1v1(), &|_| {}).unwrap();
        let b = simulate(&small(7), &queue_1v1(), &|_| {}).unwrap();
        assert!(a.matches > 100, "only {} matches", a.matches);
        let ja = serde_json::to_string(&a).unwrap();
        assert_eq!(ja, serde_json::to_string(&b).unwrap());
        assert_eq!(a.final_ratings, b.final_ratings);
        assert_eq!(a.wait_quality, b.wait_quality);
        let c = simulate(&small(8), &queue_1v1(), &|_| {}).unwrap();
        assert_ne!(ja, serde_json::to_string(&c).unwrap());
    }

    #[test]
    fn team_queues_with_parties_run_and_report_seed_measures() {
        let q = SimQueue {
            name: "5v5".into(),
            shape: Shape {
                teams: 2,
                team_size: 5,
            },
            max_party_size: 5,
            system: SystemConfig::WengLinBt(crate::rating::weng_lin::Config::default()),
            matching: MatchingConfig::default_for_scale(15.0),
            ranking: RankingKind::Ladder,
            ranking_config: RankingConfig::default(),
        };
        let r = simulate(&small(3), &q, &|_| {}).unwrap();
        assert!(r.matches > 20, "only {} matches", r.matches);
        assert!((0.0..=1.0).contains(&r.good_skill_match.unwrap()));
        assert!((0.0..=1.0).contains(&r.ratings_predicted_skill_well.unwrap()));
        assert!(r.log_loss.is_finite() && r.ece.is_finite());
        assert_eq!(r.display_by_decile.len(), 10);
    }

    /// An oracle that predicts from the true skills is calibrated by construction: the ECE the
    /// simulation reports for it must be sampling noise, and a converged Glicko-2 on a 1v1 queue
    /// (whose logistic model is close to the simulated probit) must be close to that floor.
    #[test]
    fn a_well_calibrated_system_reports_ece_within_sampling_noise() {
        let params = SimParams {
            players: 400,
            days: 3.0,
            seed: 11,
            arrivals_per_day: 0.0,
            retire_per_day: 0.0,
            drift_sd_per_day: 0.0,
            sessions_per_day: 4.0,
            match_seconds: 600.0,
            tick_seconds: 10.0,
            ..SimParams::default()
        };
        let r = simulate(&params, &queue_1v1(), &|_| {}).unwrap();
        let n = r.n as f64;
        assert!(n > 3000.0, "n = {n}");
        // Sampling noise of ECE over 10 bins with binomial outcomes: about
        // sqrt(10 · 0.25 / n) · sqrt(2/π) in expectation; allow three times that.
        let noise = 3.0 * (10.0 * 0.25 / n).sqrt() * (2.0 / std::f64::consts::PI).sqrt();
        let oracle = r.ece_truth.unwrap();
        assert!(oracle < noise, "oracle ece {oracle} vs noise {noise}");
        assert!(
            r.ece < noise + 0.02,
            "glicko2 ece {} vs noise {noise}",
            r.ece
        );
    }

    #[test]
    fn bad_params_name_the_field() {
        let p = SimParams {
            days: -1.0,
            ..SimParams::default()
        };
        assert!(
            simulate(&p, &queue_1v1(), &|_| {})
                .unwrap_err()
                .starts_with("days")
        );
    }

    #[test]
    fn phi_matches_known_values() {
        assert!((phi(0.0) - 0.5).abs() < 1e-7);
        assert!((phi(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((phi(-1.96) - 0.024_997_9).abs() < 1e-6);
    }
}
