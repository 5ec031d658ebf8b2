//! Weng-Lin online Bayesian ranking: Ruby C. Weng and Chih-Jen Lin, "A Bayesian Approximation
//! Method for Online Ranking" (JMLR 12, 2011), the OpenSkill family: Bradley-Terry full pairing
//! (the update Josh Menke's GDC 2016 talk "Skill, Matchmaking, and Ranking Systems Design"
//! shows), Plackett-Luce, Thurstone-Mosteller full pairing.
//!
//! Any number of teams of any size, placements with ties. Team μ_i = Σ μ_ij, σ_i² = Σ σ_ij².
//! Each model yields per team Ω_i (mean shift) and Δ_i (variance shrink), shared out to members
//! in proportion to their variance: μ_ij += (σ_ij²/σ_i²)·Ω_i,
//! σ_ij² *= max(1 − (σ_ij²/σ_i²)·Δ_i, κ). γ = σ_i / c (openskill's default gamma).
//!
//! Matches the `openskill` Python package 6.2.0 (`BradleyTerryFull`, `PlackettLuce`,
//! `ThurstoneMostellerFull`) with `tau`, `limit_sigma` as configured here, `balance = False`,
//! `margin = 0`, no weights, no scores (placements only); see the known-answer tests.
//!
//! Optional τ (additive dynamics, default off): σ² += τ² before each match, as openskill does.
//!
//! Deviations from the paper: γ is openskill's default σ_i/c; additions from openskill, off by
//! default: τ and `limit_sigma`; additions of this module: σ never below `min_sigma` (only
//! reached after very many games) and optional σ growth per period of inactivity
//! (`sigma_decay_per_period`, default 0: the paper has no time decay).

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

use super::calibration::CalibrationConfig;
use super::margin::{Margin, PairOutcome};
use super::numeric::{phi_major, phi_minor};
use super::{
    DAY_SECONDS, DisplayRating, InputRules, MatchInput, Prediction, RatingError, RatingSystem,
    Skill, check_non_negative, check_positive, ensure_finite, pair_score, validate_elapsed,
    validate_match, validate_skill, validate_teams, win_shares,
};

/// Which Weng-Lin likelihood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Bradley-Terry, full pairing (the algorithm of Menke's talk): logistic pairwise comparisons.
    BradleyTerry,
    /// Plackett-Luce (openskill's default): one ranking likelihood over all teams.
    PlackettLuce,
    /// Thurstone-Mosteller, full pairing: probit pairwise comparisons with a draw margin ε.
    ThurstoneMosteller,
}

/// Parameters of a Weng-Lin queue; `Default` is openskill's setting (μ 25, σ 25/3, β 25/6,
/// κ 1e-4), with τ off.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// μ of an unrated player (25).
    pub mu: f64,
    /// σ of an unrated player (25/3).
    pub sigma: f64,
    /// Performance noise β (σ₀/2 = 25/6).
    pub beta: f64,
    /// Floor κ on the variance multiplier, so σ never collapses in one game (1e-4).
    pub kappa: f64,
    /// Additive dynamics τ: σ² += τ² before each match; 0 = off (openskill's default is 25/300).
    pub tau: f64,
    /// Never let a match raise σ (openskill's `limit_sigma`), useful with τ.
    pub limit_sigma: bool,
    /// Thurstone-Mosteller draw margin ε (openskill's `epsilon`, 0.1).
    pub draw_margin: f64,
    /// Display rating is the conservative μ − k·σ (k = 3).
    pub display_k: f64,
    /// Smallest σ ever returned: keeps σ_i² > 0 after very many games.
    pub min_sigma: f64,
    /// σ added in quadrature per period of inactivity (0 = Weng-Lin's own model: no time decay).
    pub sigma_decay_per_period: f64,
    /// Length of the inactivity period in days (for `sigma_decay_per_period` and season rolls).
    pub rating_period_days: f64,
    /// τ per day: σ² grows by `tau_per_day²` for each day without a match (capped like
    /// `sigma_decay_per_period`), so skill drifts with time rather than with matches played.
    /// 0 = off.
    pub tau_per_day: f64,
    /// Margin of victory from the reported team scores ([`super::margin`]); off by default.
    pub margin: Margin,
    /// Calibration of the pool's predictions ([`super::calibration`]); off by default.
    pub calibration: CalibrationConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            mu: 25.0,
            sigma: 25.0 / 3.0,
            beta: 25.0 / 6.0,
            kappa: 1e-4,
            tau: 0.0,
            limit_sigma: false,
            draw_margin: 0.1,
            display_k: 3.0,
            min_sigma: 1e-6,
            sigma_decay_per_period: 0.0,
            rating_period_days: 7.0,
            tau_per_day: 0.0,
            margin: Margin::default(),
            calibration: CalibrationConfig::default(),
        }
    }
}

/// A Weng-Lin model with its parameters: the [`RatingSystem`] implementation.
#[derive(Clone, Copy, Debug)]
pub struct WengLin<'a> {
    /// The likelihood.
    pub model: Model,
    /// The parameters.
    pub config: &'a Config,
}

impl<'a> WengLin<'a> {
    /// Pairs a model with its parameters.
    #[must_use]
    pub const fn new(model: Model, config: &'a Config) -> Self {
        Self { model, config }
    }
}

/// σ added for `periods` of inactivity (`sigma_decay_per_period` per period and `tau_per_day`
/// per day), capped at the unrated σ (never below `min_sigma`).
#[must_use]
pub fn decay(s: &Skill, periods: f64, config: &Config) -> Skill {
    let sigma = s.deviation.max(config.min_sigma);
    let per_period = config.sigma_decay_per_period * config.sigma_decay_per_period
        + config.rating_period_days * config.tau_per_day * config.tau_per_day;
    if per_period <= 0.0 || periods <= 0.0 {
        return Skill {
            deviation: sigma,
            ..*s
        };
    }
    let grown = (sigma * sigma + periods * per_period).sqrt();
    Skill {
        deviation: grown.min(config.sigma.max(sigma)),
        ..*s
    }
}

#[derive(Clone, Copy, Debug)]
struct TeamSum {
    mu: f64,
    s2: f64,
    rank: u32,
}

/// Every pair's outcome under a margin option, `outcomes[i][q]` for team i against team q, or
/// `None` when the placements alone decide (no margin, or no scores).
type Outcomes = Option<Vec<Vec<PairOutcome>>>;

/// The pairs' outcomes of a match with `scores` under `config.margin` ([`Outcomes`]).
fn outcomes(teams: &[TeamSum], scores: &[f64], config: &Config) -> Outcomes {
    if !config.margin.is_active() || scores.len() != teams.len() {
        return None;
    }
    let to_elo = 400.0 / (std::f64::consts::SQRT_2 * config.beta * std::f64::consts::LN_10);
    Some(
        teams
            .iter()
            .enumerate()
            .map(|(i, ti)| {
                teams
                    .iter()
                    .enumerate()
                    .map(|(q, tq)| {
                        config.margin.pair(
                            pair_score(ti.rank, tq.rank),
                            scores[i],
                            scores[q],
                            to_elo * (ti.mu - tq.mu),
                        )
                    })
                    .collect()
            })
            .collect(),
    )
}

/// Ω and Δ for every team under `model`. `teams` are team sums; `outcomes` the margin's pair
/// outcomes, if any (Plackett-Luce with more than two teams reads placements only).
fn omega_delta(
    model: Model,
    teams: &[TeamSum],
    outcomes: &Outcomes,
    config: &Config,
) -> Vec<(f64, f64)> {
    let beta2 = config.beta * config.beta;
    let pair = |i: usize, q: usize| -> Option<PairOutcome> { outcomes.as_ref().map(|o| o[i][q]) };
    match model {
        Model::BradleyTerry => teams
            .iter()
            .enumerate()
            .map(|(i, ti)| {
                let (mut omega, mut delta) = (0.0, 0.0);
                for (q, tq) in teams.iter().enumerate() {
                    if q == i {
                        continue;
                    }
                    let (o, d) = bt_pair(ti, tq, beta2, pair(i, q));
                    omega += o;
                    delta += d;
                }
                (omega, delta)
            })
            .collect(),
        Model::ThurstoneMosteller => teams
            .iter()
            .enumerate()
            .map(|(i, ti)| {
                let (mut omega, mut delta) = (0.0, 0.0);
                for (q, tq) in teams.iter().enumerate() {
                    if q == i {
                        continue;
                    }
                    let c = (ti.s2 + tq.s2 + 2.0 * beta2).sqrt();
                    let x = (ti.mu - tq.mu) / c;
                    let t = config.draw_margin / c;
                    let s2_c = ti.s2 / c;
                    let gamma = ti.s2.sqrt() / c;
                    let ahead = || (s2_c * v(x, t), w(x, t));
                    let behind = || (-s2_c * v(-x, t), w(-x, t));
                    let placed = if tq.rank > ti.rank {
                        ahead()
                    } else if tq.rank < ti.rank {
                        behind()
                    } else {
                        (s2_c * vt(x, t), wt(x, t))
                    };
                    // A margin's partial outcome mixes the updates for finishing ahead and
                    // behind; its weight scales the mean's move.
                    let (o, w_) = match pair(i, q) {
                        Some(m) if m.s == pair_score(ti.rank, tq.rank) => {
                            (m.w * placed.0, placed.1)
                        }
                        Some(m) => {
                            let (a, b) = (ahead(), behind());
                            (
                                m.w * (m.s * a.0 + (1.0 - m.s) * b.0),
                                m.s * a.1 + (1.0 - m.s) * b.1,
                            )
                        }
                        None => placed,
                    };
                    omega += o;
                    delta += gamma * s2_c / c * w_;
                }
                (omega, delta)
            })
            .collect(),
        Model::PlackettLuce => {
            let c = teams.iter().map(|t| t.s2 + beta2).sum::<f64>().sqrt();
            // In log space: ln Σ_{s: r(s) ≥ r(q)} e^{μ_s/c} by log-sum-exp, so neither huge nor
            // tiny μ/c can overflow or underflow into 0/0.
            let x: Vec<f64> = teams.iter().map(|t| t.mu / c).collect();
            let log_sum_q: Vec<f64> = teams
                .iter()
                .map(|tq| {
                    let members = || teams.iter().zip(&x).filter(|(ti, _)| ti.rank >= tq.rank);
                    let top = members().map(|(_, v)| *v).fold(f64::NEG_INFINITY, f64::max);
                    top + members().map(|(_, v)| (v - top).exp()).sum::<f64>().ln()
                })
                .collect();
            let a: Vec<f64> = teams
                .iter()
                .map(|tq| teams.iter().filter(|t| t.rank == tq.rank).count() as f64)
                .collect();
            teams
                .iter()
                .enumerate()
                .map(|(i, ti)| {
                    let (mut omega, mut delta) = (0.0, 0.0);
                    for (q, tq) in teams.iter().enumerate() {
                        if tq.rank <= ti.rank {
                            let r = (x[i] - log_sum_q[q]).exp();
                            delta += r * (1.0 - r) / a[q];
                            if q == i {
                                omega += (1.0 - r) / a[q];
                            } else {
                                omega -= r / a[q];
                            }
                        }
                    }
                    let gamma = ti.s2.sqrt() / c;
                    (omega * ti.s2 / c, delta * ti.s2 / (c * c) * gamma)
                })
                .collect()
        }
    }
}

/// Bradley-Terry contribution of opponent `q` to team `i`: (δ_q, η_q), from the placements or
/// from a margin's outcome of the pair.
#[inline]
fn bt_pair(ti: &TeamSum, tq: &TeamSum, beta2: f64, margin: Option<PairOutcome>) -> (f64, f64) {
    let c = (ti.s2 + tq.s2 + 2.0 * beta2).sqrt();
    let p = 1.0 / (1.0 + ((tq.mu - ti.mu) / c).exp());
    let o = margin.unwrap_or(PairOutcome {
        s: pair_score(ti.rank, tq.rank),
        w: 1.0,
    });
    let s2_c = ti.s2 / c;
    let gamma = ti.s2.sqrt() / c;
    (o.w * s2_c * (o.s - p), gamma * s2_c / c * p * (1.0 - p))
}

/// Weng-Lin's V(x, t) = φ(x − t)/Φ(x − t), with openskill's tail fallback.
fn v(x: f64, t: f64) -> f64 {
    let xt = x - t;
    let den = phi_major(xt);
    if den < f64::EPSILON {
        -xt
    } else {
        phi_minor(xt) / den
    }
}

/// Weng-Lin's W(x, t) = V(V + x − t), with openskill's tail fallback.
fn w(x: f64, t: f64) -> f64 {
    let xt = x - t;
    let den = phi_major(xt);
    if den < f64::EPSILON {
        return if x < 0.0 { 1.0 } else { 0.0 };
    }
    let vv = v(x, t);
    vv * (vv + xt)
}

/// Weng-Lin's Ṽ(x, t) for draws.
fn vt(x: f64, t: f64) -> f64 {
    let xx = x.abs();
    let b = phi_major(t - xx) - phi_major(-t - xx);
    if b < 1e-5 {
        return if x < 0.0 { -x - t } else { -x + t };
    }
    let a = phi_minor(-t - xx) - phi_minor(t - xx);
    (if x < 0.0 { -a } else { a }) / b
}

/// Weng-Lin's W̃(x, t) for draws.
fn wt(x: f64, t: f64) -> f64 {
    let xx = x.abs();
    let b = phi_major(t - xx) - phi_major(-t - xx);
    if b < f64::EPSILON {
        return 1.0;
    }
    let vtt = vt(x, t);
    ((t - xx) * phi_minor(t - xx) + (t + xx) * phi_minor(-t - xx)) / b + vtt * vtt
}

/// Shares a team's Ω, Δ out to one member.
#[inline]
fn member_update(s: &Skill, team_s2: f64, omega: f64, delta: f64, config: &Config) -> Skill {
    let share = s.deviation * s.deviation / team_s2;
    let mean = s.mean + share * omega;
    let deviation = at_least(
        s.deviation * at_least(1.0 - share * delta, config.kappa).sqrt(),
        config.min_sigma,
    );
    Skill {
        mean,
        deviation,
        volatility: 0.0,
    }
}

/// max(x, floor) as one `maxsd` (f64::max also handles NaN, which validated input never has;
/// a NaN here yields `floor`).
#[inline]
fn at_least(x: f64, floor: f64) -> f64 {
    if x > floor { x } else { floor }
}

#[inline]
fn with_tau(s: &Skill, config: &Config) -> Skill {
    let sigma = if config.tau > 0.0 {
        (s.deviation * s.deviation + config.tau * config.tau).sqrt()
    } else {
        s.deviation
    };
    Skill {
        mean: s.mean,
        deviation: at_least(sigma, config.min_sigma),
        volatility: 0.0,
    }
}

#[inline]
fn finish(new: Skill, original: &Skill, config: &Config) -> Skill {
    if config.limit_sigma {
        Skill {
            deviation: new
                .deviation
                .min(at_least(original.deviation, config.min_sigma)),
            ..new
        }
    } else {
        new
    }
}

/// One match of any shape: `teams[i]` placed `placements[i]` (1 = first, equal = tie).
/// Returns new skills, same shape. Inputs must be valid (see [`RatingSystem::rate`] for the
/// checked path).
#[must_use]
pub fn rate(
    model: Model,
    teams: &[&[Skill]],
    placements: &[u32],
    config: &Config,
) -> Vec<Vec<Skill>> {
    rate_scored(model, teams, placements, &[], config)
}

/// [`rate`] with the teams' scores (one per team, or none) for the margin option.
#[must_use]
pub fn rate_scored(
    model: Model,
    teams: &[&[Skill]],
    placements: &[u32],
    scores: &[f64],
    config: &Config,
) -> Vec<Vec<Skill>> {
    if let ([a, b], [pa, pb]) = (teams, placements)
        && model != Model::ThurstoneMosteller
    {
        let y = super::pair_score(*pa, *pb);
        let o = match scores {
            [sa, sb] if config.margin.is_active() => {
                let gap = team_mean_sum(a) - team_mean_sum(b);
                config.margin.pair(
                    y,
                    *sa,
                    *sb,
                    400.0 * gap
                        / (std::f64::consts::SQRT_2 * config.beta * std::f64::consts::LN_10),
                )
            }
            _ => PairOutcome { s: y, w: 1.0 },
        };
        let (na, nb) = rate_two_teams_weighted(model, a, b, o.s, o.w, config);
        return vec![na, nb];
    }
    let prepared: Vec<Vec<Skill>> = teams
        .iter()
        .map(|t| t.iter().map(|s| with_tau(s, config)).collect())
        .collect();
    let sums: Vec<TeamSum> = prepared
        .iter()
        .zip(placements)
        .map(|(t, &rank)| TeamSum {
            mu: t.iter().map(|s| s.mean).sum(),
            s2: t.iter().map(|s| s.deviation * s.deviation).sum(),
            rank,
        })
        .collect();
    let pair_outcomes = outcomes(&sums, scores, config);
    let od = omega_delta(model, &sums, &pair_outcomes, config);
    prepared
        .iter()
        .zip(teams)
        .zip(sums.iter().zip(&od))
        .map(|((team, originals), (sum, &(omega, delta)))| {
            team.iter()
                .zip(originals.iter())
                .map(|(s, o)| finish(member_update(s, sum.s2, omega, delta, config), o, config))
                .collect()
        })
        .collect()
}

/// Σ μ of a team (the team mean Weng-Lin compares).
fn team_mean_sum(team: &[Skill]) -> f64 {
    team.iter().map(|s| s.mean).sum()
}

/// Bradley-Terry 1v1, allocation-free: `score_a` is 1 if `a` won, ½ draw, 0 loss.
///
/// The one-player-per-team special case of the team update: each player's variance share is 1,
/// and Δ = γ·σ²/c²·p(1 − p) = (σ/c)³·p(1 − p).
#[must_use]
#[inline]
pub fn rate_1v1_bt(a: &Skill, b: &Skill, score_a: f64, config: &Config) -> (Skill, Skill) {
    rate_1v1_bt_weighted(a, b, score_a, 1.0, config)
}

/// [`rate_1v1_bt`] with a margin's outcome: `score_a` may be partial and `weight` scales both
/// players' mean moves ([`super::margin`]).
#[must_use]
#[inline]
pub fn rate_1v1_bt_weighted(
    a: &Skill,
    b: &Skill,
    score_a: f64,
    weight: f64,
    config: &Config,
) -> (Skill, Skill) {
    let (sa, sb) = if config.tau > 0.0 {
        let t2 = config.tau * config.tau;
        (
            (a.deviation * a.deviation + t2).sqrt(),
            (b.deviation * b.deviation + t2).sqrt(),
        )
    } else {
        (a.deviation, b.deviation)
    };
    // No floor needed on the way in: c > 0 through β even if σ = 0.
    let (s2a, s2b) = (sa * sa, sb * sb);
    let c = (s2a + s2b + 2.0 * config.beta * config.beta).sqrt();
    let inv_c = 1.0 / c;
    let p_a = 1.0 / (1.0 + ((b.mean - a.mean) * inv_c).exp());
    let p_b = 1.0 - p_a;
    let pp = p_a * p_b;
    let one = |orig: &Skill, sd: f64, s2: f64, score: f64, p: f64| {
        let mean = orig.mean + weight * s2 * inv_c * (score - p);
        let r = sd * inv_c;
        let delta = r * r * r * pp;
        let mut deviation = at_least(
            sd * at_least(1.0 - delta, config.kappa).sqrt(),
            config.min_sigma,
        );
        if config.limit_sigma {
            deviation = deviation.min(at_least(orig.deviation, config.min_sigma));
        }
        Skill {
            mean,
            deviation,
            volatility: 0.0,
        }
    };
    (
        one(a, sa, s2a, score_a, p_a),
        one(b, sb, s2b, 1.0 - score_a, p_b),
    )
}

/// Plackett-Luce 1v1, allocation-free. With two teams Plackett-Luce and Bradley-Terry full
/// pairing coincide (same c = sqrt(σ_a² + σ_b² + 2β²), same Ω and Δ, ties included), which the
/// openskill known answers confirm, so this is [`rate_1v1_bt`].
#[must_use]
#[inline]
pub fn rate_1v1_pl(a: &Skill, b: &Skill, score_a: f64, config: &Config) -> (Skill, Skill) {
    rate_1v1_bt(a, b, score_a, config)
}

/// Two teams of any size: the same shape as `skillratings::weng_lin::weng_lin_two_teams`, with
/// only the two output vectors allocated. Bradley-Terry and Plackett-Luce (identical for two
/// teams) run a closed form; Thurstone-Mosteller goes through [`rate`].
#[must_use]
pub fn rate_two_teams(
    model: Model,
    a: &[Skill],
    b: &[Skill],
    score_a: f64,
    config: &Config,
) -> (Vec<Skill>, Vec<Skill>) {
    rate_two_teams_weighted(model, a, b, score_a, 1.0, config)
}

/// [`rate_two_teams`] with a margin's outcome: `score_a` may be partial (BT and PL take it as
/// it is) and `weight` scales the mean moves. Thurstone-Mosteller goes through [`rate`] on the
/// placements of the side the outcome favours (a partial TM outcome is [`rate_scored`]'s).
#[must_use]
pub fn rate_two_teams_weighted(
    model: Model,
    a: &[Skill],
    b: &[Skill],
    score_a: f64,
    weight: f64,
    config: &Config,
) -> (Vec<Skill>, Vec<Skill>) {
    if model == Model::ThurstoneMosteller || a.is_empty() || b.is_empty() {
        let placements = if score_a > 0.5 {
            [1, 2]
        } else if score_a < 0.5 {
            [2, 1]
        } else {
            [1, 1]
        };
        let mut out = rate(model, &[a, b], &placements, config).into_iter();
        let na = out.next().unwrap_or_default();
        let nb = out.next().unwrap_or_default();
        return (na, nb);
    }
    let sum = |team: &[Skill]| {
        team.iter().fold((0.0, 0.0), |(m, v), s| {
            let t = with_tau(s, config);
            (m + t.mean, v + t.deviation * t.deviation)
        })
    };
    let ((mu_a, s2a), (mu_b, s2b)) = (sum(a), sum(b));
    let c = (s2a + s2b + 2.0 * config.beta * config.beta).sqrt();
    let p_a = 1.0 / (1.0 + ((mu_b - mu_a) / c).exp());
    let p_b = 1.0 - p_a;
    let omega_a = weight * s2a / c * (score_a - p_a);
    let omega_b = weight * s2b / c * ((1.0 - score_a) - p_b);
    let delta_a = s2a.sqrt() / c * s2a / (c * c) * p_a * p_b;
    let delta_b = s2b.sqrt() / c * s2b / (c * c) * p_a * p_b;
    let apply = |team: &[Skill], s2: f64, omega: f64, delta: f64| -> Vec<Skill> {
        team.iter()
            .map(|s| {
                finish(
                    member_update(&with_tau(s, config), s2, omega, delta, config),
                    s,
                    config,
                )
            })
            .collect()
    };
    (
        apply(a, s2a, omega_a, delta_a),
        apply(b, s2b, omega_b, delta_b),
    )
}

/// Probability that team sum `a` finishes ahead of team sum `b` under `model` (no draw).
fn pairwise_win(model: Model, a: &TeamSum, b: &TeamSum, beta2: f64) -> f64 {
    let c = (a.s2 + b.s2 + 2.0 * beta2).sqrt();
    match model {
        Model::BradleyTerry | Model::PlackettLuce => 1.0 / (1.0 + ((b.mu - a.mu) / c).exp()),
        Model::ThurstoneMosteller => phi_major((a.mu - b.mu) / c),
    }
}

impl RatingSystem for WengLin<'_> {
    fn name(&self) -> &'static str {
        match self.model {
            Model::BradleyTerry => "weng-lin-bt",
            Model::PlackettLuce => "weng-lin-pl",
            Model::ThurstoneMosteller => "weng-lin-tm",
        }
    }

    fn validate(&self) -> Result<(), FieldError> {
        let c = self.config;
        if !c.mu.is_finite() {
            return Err(FieldError::new(
                "mu",
                format!("must be finite (got {})", c.mu),
            ));
        }
        check_positive("sigma", c.sigma)?;
        check_positive("beta", c.beta)?;
        check_positive("kappa", c.kappa)?;
        if c.kappa > 1.0 {
            return Err(FieldError::new(
                "kappa",
                format!("must be in (0, 1] (got {})", c.kappa),
            ));
        }
        check_non_negative("tau", c.tau)?;
        check_non_negative("draw_margin", c.draw_margin)?;
        check_non_negative("display_k", c.display_k)?;
        check_positive("min_sigma", c.min_sigma)?;
        check_non_negative("sigma_decay_per_period", c.sigma_decay_per_period)?;
        check_positive("rating_period_days", c.rating_period_days)?;
        check_non_negative("tau_per_day", c.tau_per_day)?;
        c.margin.validate()?;
        c.calibration.validate()?;
        Ok(())
    }

    fn initial(&self) -> Skill {
        Skill {
            mean: self.config.mu,
            deviation: self.config.sigma,
            volatility: 0.0,
        }
    }

    fn display(&self, s: &Skill) -> DisplayRating {
        DisplayRating {
            display: s.mean - self.config.display_k * s.deviation,
            low: s.mean - 1.96 * s.deviation,
            high: s.mean + 1.96 * s.deviation,
        }
    }

    /// BT and PL use the logistic link, TM the probit link; with two teams TM also models a draw
    /// (|performance difference| < ε): P(a) = Φ((d − ε)/c), P(b) = Φ((−d − ε)/c), draw the rest.
    fn predict(&self, teams: &[&[Skill]]) -> Result<Prediction, RatingError> {
        validate_teams(teams, &input_rules())?;
        let beta2 = self.config.beta * self.config.beta;
        let sums: Vec<TeamSum> = teams
            .iter()
            .map(|t| TeamSum {
                mu: t.iter().map(|s| s.mean).sum(),
                s2: t.iter().map(|s| s.deviation * s.deviation).sum(),
                rank: 0,
            })
            .collect();
        let prediction = if self.model == Model::ThurstoneMosteller && sums.len() == 2 {
            let (a, b) = (&sums[0], &sums[1]);
            let c = (a.s2 + b.s2 + 2.0 * beta2).sqrt();
            let d = a.mu - b.mu;
            let eps = self.config.draw_margin;
            let pa = phi_major((d - eps) / c);
            let pb = phi_major((-d - eps) / c);
            Prediction {
                win_probability: vec![pa, pb],
                draw_probability: (1.0 - pa - pb).max(0.0),
            }
        } else {
            Prediction {
                win_probability: win_shares(sums.len(), |i, j| {
                    pairwise_win(self.model, &sums[i], &sums[j], beta2)
                }),
                draw_probability: 0.0,
            }
        };
        if prediction.win_probability.iter().all(|p| p.is_finite()) {
            Ok(prediction)
        } else {
            Err(RatingError::NonFinite("prediction"))
        }
    }

    fn rate_scored(
        &self,
        m: &MatchInput<'_>,
        scores: &[f64],
    ) -> Result<Vec<Vec<Skill>>, RatingError> {
        validate_match(m, &input_rules())?;
        super::margin::validate_scores(scores, m.teams.len())?;
        let period = self.rating_period_seconds();
        let prepared =
            |p: &super::PlayerInput| decay(&p.skill, p.elapsed_seconds / period, self.config);
        if let ([a], [b]) = (m.teams[0].as_slice(), m.teams[1].as_slice())
            && m.teams.len() == 2
            && self.model != Model::ThurstoneMosteller
            && (scores.is_empty() || !self.config.margin.is_active())
        {
            let score = pair_score(m.placements[0], m.placements[1]);
            let f = if self.model == Model::BradleyTerry {
                rate_1v1_bt
            } else {
                rate_1v1_pl
            };
            let (na, nb) = f(&prepared(a), &prepared(b), score, self.config);
            return ensure_finite(self.name(), vec![vec![na], vec![nb]]);
        }
        let skills: Vec<Vec<Skill>> = m
            .teams
            .iter()
            .map(|t| t.iter().map(prepared).collect())
            .collect();
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        ensure_finite(
            self.name(),
            rate_scored(self.model, &refs, m.placements, scores, self.config),
        )
    }

    fn decay(&self, s: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError> {
        validate_skill(s, &input_rules(), || "skill".into())?;
        validate_elapsed(elapsed_seconds, || "elapsed_seconds".into())?;
        Ok(decay(
            s,
            elapsed_seconds / self.rating_period_seconds(),
            self.config,
        ))
    }

    fn rating_period_seconds(&self) -> f64 {
        self.config.rating_period_days * DAY_SECONDS
    }
}

/// What Weng-Lin accepts as input skill (volatility is ignored).
pub(crate) fn input_rules() -> InputRules {
    InputRules {
        deviation_positive: true,
        volatility_positive: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::test_util::*;

    struct Case {
        model: Model,
        teams: &'static [&'static [(f64, f64)]],
        ranks: &'static [u32],
        tau: f64,
        limit_sigma: bool,
        expected: &'static [&'static [(f64, f64)]],
    }

    /// Expected values computed with the reference implementation, PyPI `openskill` 6.2.0
    /// (models `PlackettLuce`, `BradleyTerryFull`, `ThurstoneMostellerFull`):
    ///
    /// ```text
    /// python3 -m venv /tmp/osk && /tmp/osk/bin/pip install -r scripts/requirements.txt
    /// /tmp/osk/bin/python scripts/openskill_reference.py
    /// ```
    ///
    /// Options (see the script): mu=25, sigma=25/3, beta=25/6, kappa=0.0001, tau as per case
    /// (0 = off), limit_sigma as per case, balance=False, margin=0, default gamma, TM
    /// epsilon=0.1 (= our `draw_margin`), ranks = our placements. Output pasted verbatim:
    #[rustfmt::skip]
    const OPENSKILL_CASES: &[Case] = &[
    // openskill 6.2.0
    // PlackettLuce: 1v1 new players, a wins
    Case { model: Model::PlackettLuce, teams: &[&[(25.0, 8.333333333333334)], &[(25.0, 8.333333333333334)]], ranks: &[1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(27.63523138347365, 8.065506316323548)], &[(22.36476861652635, 8.065506316323548)]] },
    // PlackettLuce: 1v1 rated, upset
    Case { model: Model::PlackettLuce, teams: &[&[(30.0, 4.0)], &[(22.0, 6.5)]], ranks: &[2, 1], tau: 0.0, limit_sigma: false,
        expected: &[&[(28.844599574091845, 3.9696904671889763)], &[(25.050979249663722, 6.285930305008959)]] },
    // PlackettLuce: 1v1 draw
    Case { model: Model::PlackettLuce, teams: &[&[(28.0, 5.0)], &[(24.0, 7.0)]], ranks: &[1, 1], tau: 0.0, limit_sigma: false,
        expected: &[&[(27.772835272333538, 4.93311232559146)], &[(24.445242866226266, 6.739931926646816)]] },
    // PlackettLuce: 2v2
    Case { model: Model::PlackettLuce, teams: &[&[(27.0, 6.0), (23.0, 8.0)], &[(25.0, 3.0), (26.0, 5.5)]], ranks: &[1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(28.416393044460364, 5.881331323030038), (25.518032079040644, 7.716468585251543)], &[(24.64590173888491, 2.990784532851011), (24.809836400140945, 5.443005865593255)]] },
    // PlackettLuce: 3 teams with a tie, uneven sizes
    Case { model: Model::PlackettLuce, teams: &[&[(30.0, 3.0)], &[(24.0, 7.0), (20.0, 8.0)], &[(26.0, 5.0), (25.0, 6.0), (21.0, 4.0)]], ranks: &[2, 1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(30.214224661841303, 2.9988266175604834)], &[(26.666801023216536, 6.9454080916968675), (23.48316868338486, 7.918411761463205)], &[(24.04431872793806, 4.96982151634246), (22.183818968230803, 5.94778172726248), (19.748363985880356, 3.9845654682037126)]] },
    // PlackettLuce: 4-player free-for-all, tie for 2nd
    Case { model: Model::PlackettLuce, teams: &[&[(25.0, 8.0)], &[(28.0, 4.0)], &[(22.0, 6.0)], &[(31.0, 2.5)]], ranks: &[3, 2, 1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(22.77136142572612, 7.713345594157884)], &[(27.885848498632026, 3.9797969031631752)], &[(24.143978746761828, 5.9645763130990295)], &[(30.89001238356687, 2.49657879362639)]] },
    // PlackettLuce: tau and limit_sigma
    Case { model: Model::PlackettLuce, teams: &[&[(27.0, 1.0), (23.0, 0.5)], &[(25.0, 3.0)]], ranks: &[1, 2], tau: 0.08333333333333333, limit_sigma: true,
        expected: &[&[(27.003527451831403, 1.0), (23.00090010839836, 0.5)], &[(24.968447551549453, 2.998071641422762)]] },
    // BradleyTerry: 1v1 new players, a wins
    Case { model: Model::BradleyTerry, teams: &[&[(25.0, 8.333333333333334)], &[(25.0, 8.333333333333334)]], ranks: &[1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(27.63523138347365, 8.065506316323548)], &[(22.36476861652635, 8.065506316323548)]] },
    // BradleyTerry: 2v2
    Case { model: Model::BradleyTerry, teams: &[&[(27.0, 6.0), (23.0, 8.0)], &[(25.0, 3.0), (26.0, 5.5)]], ranks: &[1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(28.416393044460364, 5.881331323030038), (25.518032079040644, 7.716468585251543)], &[(24.64590173888491, 2.990784532851011), (24.809836400140945, 5.443005865593255)]] },
    // BradleyTerry: uneven 3v1
    Case { model: Model::BradleyTerry, teams: &[&[(20.0, 7.0), (22.0, 6.0), (18.0, 8.0)], &[(35.0, 3.0)]], ranks: &[2, 1], tau: 0.0, limit_sigma: false,
        expected: &[&[(16.970685800600112, 6.904153050454243), (19.774381404522533, 5.939752315696667), (14.043344719151168, 7.85662285566355)], &[(35.55640464886937, 2.99815784603976)]] },
    // BradleyTerry: 3 teams with a tie, uneven sizes
    Case { model: Model::BradleyTerry, teams: &[&[(30.0, 3.0)], &[(24.0, 7.0), (20.0, 8.0)], &[(26.0, 5.0), (25.0, 6.0), (21.0, 4.0)]], ranks: &[2, 1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(30.21494297769675, 2.995524906200815)], &[(27.795490772202946, 6.7606869866912325), (24.957375702469157, 7.640817837168934)], &[(23.46646128928756, 4.972396047679559), (21.35170425657409, 5.952241971110135), (19.37853522514404, 3.985880870969367)]] },
    // BradleyTerry: 1v1 draw
    Case { model: Model::BradleyTerry, teams: &[&[(28.0, 5.0)], &[(24.0, 7.0)]], ranks: &[1, 1], tau: 0.0, limit_sigma: false,
        expected: &[&[(27.772835272333538, 4.93311232559146)], &[(24.445242866226266, 6.739931926646816)]] },
    // ThurstoneMosteller: 1v1 new players, a wins
    Case { model: Model::ThurstoneMosteller, teams: &[&[(25.0, 8.333333333333334)], &[(25.0, 8.333333333333334)]], ranks: &[1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(29.230718708993216, 7.630934718709003)], &[(20.769281291006784, 7.630934718709003)]] },
    // ThurstoneMosteller: 1v1 draw
    Case { model: Model::ThurstoneMosteller, teams: &[&[(28.0, 5.0)], &[(24.0, 7.0)]], ranks: &[1, 1], tau: 0.0, limit_sigma: false,
        expected: &[&[(27.08025303310342, 4.716300690154196)], &[(25.802704055117292, 5.845925032828719)]] },
    // ThurstoneMosteller: 2v2
    Case { model: Model::ThurstoneMosteller, teams: &[&[(27.0, 6.0), (23.0, 8.0)], &[(25.0, 3.0), (26.0, 5.5)]], ranks: &[1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(29.324670854021555, 5.683662298562585), (27.13274818492721, 7.233178342570619)], &[(24.41883228649461, 2.975782180422275), (24.046630740717998, 5.349306838147453)]] },
    // ThurstoneMosteller: 3 teams with a tie, uneven sizes
    Case { model: Model::ThurstoneMosteller, teams: &[&[(30.0, 3.0)], &[(24.0, 7.0), (20.0, 8.0)], &[(26.0, 5.0), (25.0, 6.0), (21.0, 4.0)]], ranks: &[2, 1, 2], tau: 0.0, limit_sigma: false,
        expected: &[&[(32.945018082172226, 2.964381736595885)], &[(32.36832203287994, 6.160742500276695), (30.93005326743502, 6.71991725996106)], &[(13.549842158596448, 4.440733926482239), (7.071772708378887, 5.005160964657218), (13.031898981501726, 3.7198602464689348)]] },
    ];

    fn run(case: &Case) -> Vec<Vec<Skill>> {
        let config = Config {
            tau: case.tau,
            limit_sigma: case.limit_sigma,
            ..Config::default()
        };
        let teams: Vec<Vec<Skill>> = case
            .teams
            .iter()
            .map(|t| {
                t.iter()
                    .map(|&(mean, deviation)| Skill {
                        mean,
                        deviation,
                        volatility: 0.0,
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<&[Skill]> = teams.iter().map(Vec::as_slice).collect();
        rate(case.model, &refs, case.ranks, &config)
    }

    #[test]
    fn matches_openskill_reference_to_1e6() {
        for (k, case) in OPENSKILL_CASES.iter().enumerate() {
            let out = run(case);
            for (t, (team, want)) in out.iter().zip(case.expected).enumerate() {
                for (p, (got, &(mu, sigma))) in team.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (got.mean - mu).abs() < 1e-6 && (got.deviation - sigma).abs() < 1e-6,
                        "case {k} ({:?}) team {t} player {p}: got ({}, {}), openskill ({mu}, {sigma})",
                        case.model,
                        got.mean,
                        got.deviation
                    );
                }
            }
        }
    }

    #[test]
    fn generic_path_and_1v1_fast_paths_match_openskill() {
        for case in OPENSKILL_CASES
            .iter()
            .filter(|c| c.teams.len() == 2 && c.teams.iter().all(|t| t.len() == 1))
        {
            if case.model == Model::ThurstoneMosteller {
                continue;
            }
            let config = Config {
                tau: case.tau,
                limit_sigma: case.limit_sigma,
                ..Config::default()
            };
            let sk = |&(mean, deviation): &(f64, f64)| Skill {
                mean,
                deviation,
                volatility: 0.0,
            };
            let (a, b) = (sk(&case.teams[0][0]), sk(&case.teams[1][0]));
            let score = crate::rating::pair_score(case.ranks[0], case.ranks[1]);
            let f = if case.model == Model::BradleyTerry {
                rate_1v1_bt
            } else {
                rate_1v1_pl
            };
            let (na, nb) = f(&a, &b, score, &config);
            let want = case.expected;
            assert_close(na.mean, want[0][0].0, 1e-9);
            assert_close(na.deviation, want[0][0].1, 1e-9);
            assert_close(nb.mean, want[1][0].0, 1e-9);
            assert_close(nb.deviation, want[1][0].1, 1e-9);
        }
    }

    #[test]
    fn thurstone_mosteller_models_draws_in_prediction() {
        let config = Config::default();
        let sys = WengLin::new(Model::ThurstoneMosteller, &config);
        let a = [Skill {
            mean: 25.0,
            deviation: 3.0,
            volatility: 0.0,
        }];
        let p = sys.predict(&[&a, &a]).unwrap();
        assert!(p.draw_probability > 0.0);
        assert_close(p.win_probability[0], p.win_probability[1], 1e-15);
        assert_close(
            p.win_probability.iter().sum::<f64>() + p.draw_probability,
            1.0,
            1e-12,
        );
    }

    #[test]
    fn team_order_does_not_change_the_outcome() {
        for case in OPENSKILL_CASES {
            let out = run(case);
            let config = Config {
                tau: case.tau,
                limit_sigma: case.limit_sigma,
                ..Config::default()
            };
            let teams: Vec<Vec<Skill>> = case
                .teams
                .iter()
                .rev()
                .map(|t| {
                    t.iter()
                        .map(|&(mean, deviation)| Skill {
                            mean,
                            deviation,
                            volatility: 0.0,
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[Skill]> = teams.iter().map(Vec::as_slice).collect();
            let ranks: Vec<u32> = case.ranks.iter().rev().copied().collect();
            let back = rate(case.model, &refs, &ranks, &config);
            for (x, y) in out.iter().zip(back.iter().rev()) {
                for (p, q) in x.iter().zip(y) {
                    assert_close(p.mean, q.mean, 1e-12);
                    assert_close(p.deviation, q.deviation, 1e-12);
                }
            }
        }
    }
}
