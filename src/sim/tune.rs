//! Tuning a rating system on a history's warm-up part: a coordinate search over a small grid
//! per parameter, judged only on matches **before** the scoring start, so the reported scores
//! stay out of sample: the first half of that part warms up, the second half is the objective
//! (the log loss of what the pool would show: calibrated when the system calibrates).
//!
//! The search covers each system's own parameters, its time dynamics (Glicko's c per day,
//! Glicko-2's per-match drift, Weng-Lin's τ per day) and, on a history with scores, its margin
//! option (`margin.kind` as a choice among none, weighted, multiplier and partial, then the
//! partial outcome's weight and scale).

use serde::Serialize;

use super::history::History;
use super::replay::replay_range;
use crate::rating::margin::MarginKind;
use crate::rating::{SystemConfig, TeamStrategy};

/// One tunable parameter: a name as in TOML, its grid, and how to read and write it.
pub struct Param {
    /// The config key (`tau`, `k`, ...).
    pub name: &'static str,
    /// Values tried (the current value is added if missing).
    pub grid: &'static [f64],
    get: fn(&SystemConfig) -> f64,
    set: fn(&mut SystemConfig, f64),
}

macro_rules! param {
    ($variant:ident, $field:ident, $grid:expr) => {
        Param {
            name: stringify!($field),
            grid: $grid,
            get: |s| match s {
                SystemConfig::$variant(c) => c.$field as f64,
                _ => f64::NAN,
            },
            set: |s, v| {
                if let SystemConfig::$variant(c) = s {
                    c.$field = v as _;
                }
            },
        }
    };
}

/// The Glicko family's team strategy as a number (0 individual, 1 composite opponent,
/// 2 composite team), so the coordinate search can treat it like any other parameter.
macro_rules! strategy_param {
    ($variant:ident) => {
        Param {
            name: "team_strategy",
            grid: &[0.0, 1.0, 2.0],
            get: |s| match s {
                SystemConfig::$variant(c) => match c.team_strategy {
                    TeamStrategy::Individual => 0.0,
                    TeamStrategy::CompositeOpponent => 1.0,
                    TeamStrategy::CompositeTeam => 2.0,
                },
                _ => f64::NAN,
            },
            set: |s, v| {
                if let SystemConfig::$variant(c) = s {
                    c.team_strategy = if v < 0.5 {
                        TeamStrategy::Individual
                    } else if v < 1.5 {
                        TeamStrategy::CompositeOpponent
                    } else {
                        TeamStrategy::CompositeTeam
                    };
                }
            },
        }
    };
}

/// A boolean key as 0 / 1.
macro_rules! flag_param {
    ($variant:ident, $field:ident) => {
        Param {
            name: stringify!($field),
            grid: &[0.0, 1.0],
            get: |s| match s {
                SystemConfig::$variant(c) => f64::from(u8::from(c.$field)),
                _ => f64::NAN,
            },
            set: |s, v| {
                if let SystemConfig::$variant(c) = s {
                    c.$field = v > 0.5;
                }
            },
        }
    };
}

/// The margin option's kind as a number (0 none, 1 weighted, 2 multiplier, 3 partial).
const MARGIN_KINDS: [MarginKind; 4] = [
    MarginKind::None,
    MarginKind::Weighted,
    MarginKind::Multiplier,
    MarginKind::Partial,
];

/// The margin option of any system: its kind, then the partial outcome's weight and scale.
fn margin_params() -> Vec<Param> {
    vec![
        Param {
            name: "margin.kind",
            grid: &[0.0, 1.0, 2.0, 3.0],
            get: |s| {
                MARGIN_KINDS
                    .iter()
                    .position(|k| *k == s.margin().kind)
                    .map_or(f64::NAN, |i| i as f64)
            },
            set: |s, v| {
                let kind = MARGIN_KINDS[(v.round().max(0.0) as usize).min(3)];
                s.margin_mut().kind = kind;
            },
        },
        Param {
            name: "margin.weight",
            grid: &[0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 1.0],
            get: |s| s.margin().weight,
            set: |s, v| s.margin_mut().weight = v,
        },
        Param {
            name: "margin.scale",
            grid: &[1.0, 2.0, 3.0, 4.0, 6.0, 10.0],
            get: |s| s.margin().scale,
            set: |s, v| s.margin_mut().scale = v,
        },
    ]
}

macro_rules! weng_lin_params {
    ($variant:ident) => {
        vec![
            param!(
                $variant,
                beta,
                &[
                    2.0,
                    3.0,
                    25.0 / 6.0,
                    5.0,
                    6.0,
                    8.0,
                    10.0,
                    12.0,
                    15.0,
                    20.0,
                    25.0
                ]
            ),
            param!(
                $variant,
                sigma,
                &[2.0, 3.0, 4.0, 5.0, 6.5, 25.0 / 3.0, 10.0]
            ),
            param!(
                $variant,
                tau,
                &[0.0, 0.02, 0.05, 25.0 / 300.0, 0.15, 0.25, 0.4]
            ),
            param!(
                $variant,
                sigma_decay_per_period,
                &[0.0, 0.1, 0.25, 0.5, 1.0, 2.0]
            ),
            param!($variant, tau_per_day, &[0.0, 0.02, 0.05, 0.1, 0.2, 0.3]),
        ]
    };
}

/// The parameters `--tune` searches for a system (Glicko-2 τ, initial and minimum deviation,
/// rating-period length, team strategy, per-match drift; Glicko's deviations, inactivity and c
/// per day; Weng-Lin β, σ₀, τ, σ decay and τ per day; Elo K and inflation), with grids wide
/// enough to contain the literature's values and ours; with `margin`, the margin option too
/// (for histories with scores).
#[must_use]
pub fn tunable(system: &SystemConfig, margin: bool) -> Vec<Param> {
    // The margin first: whether a system learns from margins changes what its other
    // parameters should be (a partial outcome moves ratings less than a win), so they are
    // searched given the margin rather than the other way round.
    let mut params = if margin { margin_params() } else { Vec::new() };
    params.extend(own_params(system));
    params
}

fn own_params(system: &SystemConfig) -> Vec<Param> {
    match system {
        SystemConfig::Glicko2(_) => vec![
            param!(
                Glicko2,
                tau,
                &[
                    0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0
                ]
            ),
            param!(
                Glicko2,
                initial_deviation,
                &[0.5, 0.7, 0.85, 1.0, 1.25, 1.5, 1.75, 2.015]
            ),
            param!(
                Glicko2,
                rating_period_days,
                &[3.0, 7.0, 14.0, 30.0, 60.0, 120.0, 240.0, 365.0]
            ),
            param!(Glicko2, min_deviation, &[0.05, 0.1, 0.175, 0.25, 0.35, 0.5]),
            strategy_param!(Glicko2),
            flag_param!(Glicko2, per_match_drift),
        ],
        SystemConfig::Glicko(_) => vec![
            param!(
                Glicko,
                initial_deviation,
                &[80.0, 100.0, 125.0, 150.0, 200.0, 250.0, 300.0, 350.0]
            ),
            param!(
                Glicko,
                periods_to_unrated,
                &[5.0, 10.0, 26.0, 52.0, 100.0, 200.0, 400.0, 800.0, 1600.0]
            ),
            param!(
                Glicko,
                min_deviation,
                &[10.0, 20.0, 30.0, 45.0, 60.0, 80.0, 100.0]
            ),
            strategy_param!(Glicko),
            param!(
                Glicko,
                c_per_day,
                &[0.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
            ),
        ],
        SystemConfig::WengLinBt(_) => weng_lin_params!(WengLinBt),
        SystemConfig::WengLinPl(_) => weng_lin_params!(WengLinPl),
        SystemConfig::WengLinTm(_) => weng_lin_params!(WengLinTm),
        SystemConfig::Elo(_) => vec![
            param!(
                Elo,
                k,
                &[8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 64.0]
            ),
            param!(Elo, inflation_per_win, &[0.0, 0.5, 1.0, 2.0]),
            param!(Elo, normalization_exponent, &[0.5, 0.75, 1.0]),
            flag_param!(Elo, round_adjustment),
        ],
    }
}

/// Most rounds of the coordinate search.
const ROUNDS: usize = 4;

/// What [`tune`] chose.
#[derive(Clone, Debug, Serialize)]
pub struct TuneResult {
    /// The tuned system.
    #[serde(skip)]
    pub system: SystemConfig,
    /// `(key, value)` for every searched parameter, in search order.
    pub chosen: Vec<(String, f64)>,
    /// Objective (log loss on the tuning half) with the starting parameters.
    pub log_loss_start: f64,
    /// Objective with the chosen parameters.
    pub log_loss_tuned: f64,
    /// Replays run.
    pub evaluations: usize,
}

impl TuneResult {
    /// The chosen values as `key=value key=value` (a margin's kind by name), as `replay`
    /// prints them and `docs/replay-results.md` quotes them.
    #[must_use]
    pub fn printed(&self) -> String {
        self.chosen
            .iter()
            .map(|(k, v)| {
                if k == "margin.kind" {
                    let kind = MARGIN_KINDS[(v.round().max(0.0) as usize).min(3)];
                    let name = serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    format!("{k}={name}")
                } else {
                    format!("{k}={v}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Coordinate search on the matches before `score_from` only: replay `[0, score_from)`, judge
/// the log loss of its second half, and for each parameter in turn keep the grid value that
/// lowers it; up to four rounds, stopping early when a round changes nothing. On a history
/// with scores and a start without a margin, a second search starts from the partial outcome
/// and the better of the two is kept. `on_eval` is called after each replay (for a progress
/// bar).
#[must_use]
pub fn tune(
    history: &History,
    start: &SystemConfig,
    score_from: usize,
    on_eval: &dyn Fn(),
) -> TuneResult {
    let margin = has_scores(history, score_from);
    let objective_from = score_from / 2;
    let eval = |s: &SystemConfig| -> f64 {
        on_eval();
        if s.validate().is_err() {
            return f64::INFINITY;
        }
        let out = replay_range(history, s, score_from, objective_from, false);
        if out.skipped > 0 || out.measures.n() == 0 {
            return f64::INFINITY;
        }
        out.measures.summary().log_loss
    };
    let params = tunable(start, margin);
    let search = |from: &SystemConfig, evaluations: &mut usize| -> (SystemConfig, f64) {
        let mut best = from.clone();
        let mut best_loss = eval(&best);
        *evaluations += 1;
        for _round in 0..ROUNDS {
            let mut changed = false;
            for p in &params {
                let current = (p.get)(&best);
                let mut grid: Vec<f64> = p.grid.to_vec();
                if !grid.iter().any(|v| (v - current).abs() < 1e-12) {
                    grid.push(current);
                }
                for v in grid {
                    if (v - (p.get)(&best)).abs() < 1e-12 {
                        continue;
                    }
                    let mut cand = best.clone();
                    (p.set)(&mut cand, v);
                    let loss = eval(&cand);
                    *evaluations += 1;
                    // Require a real improvement so float noise cannot flip-flop the choice.
                    if loss < best_loss - 1e-7 {
                        best_loss = loss;
                        best = cand;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        (best, best_loss)
    };
    let mut evaluations = 0;
    let mut starts = vec![start.clone()];
    if margin && start.margin().kind == MarginKind::None {
        // A coordinate search that starts without a margin tunes the other parameters for
        // placements first and may stay there; a second start from the partial outcome lets
        // the margin's own optimum compete.
        let mut partial = start.clone();
        partial.margin_mut().kind = MarginKind::Partial;
        starts.push(partial);
    }
    let log_loss_start = eval(start);
    evaluations += 1;
    let (mut best, mut best_loss) = (start.clone(), log_loss_start);
    for from in &starts {
        let (system, loss) = search(from, &mut evaluations);
        if loss < best_loss - 1e-7 {
            best = system;
            best_loss = loss;
        }
    }
    let chosen = params
        .iter()
        .map(|p| (p.name.to_string(), (p.get)(&best)))
        .collect();
    TuneResult {
        system: best,
        chosen,
        log_loss_start,
        log_loss_tuned: best_loss,
        evaluations,
    }
}

/// Upper bound on the number of replays [`tune`] runs on `history` (for sizing a progress
/// bar).
#[must_use]
pub fn tune_budget(system: &SystemConfig, history: &History, score_from: usize) -> usize {
    1 + ROUNDS
        * tunable(system, has_scores(history, score_from))
            .iter()
            .map(|p| p.grid.len() + 1)
            .sum::<usize>()
}

/// Whether any match the tuner sees (before `score_from`) has scores: only then is the margin
/// option searched.
fn has_scores(history: &History, score_from: usize) -> bool {
    let end = history
        .matches
        .get(score_from)
        .map_or(history.scores.len(), |m| m.first_team as usize);
    history.scores[..end].iter().any(|s| !s.is_nan())
}
