//! Replaying a real match history through a rating system: the test of Josh Menke's "Skill,
//! Matchmaking, and Ranking" (GDC 2016), "test if it predicts match outcomes correctly".
//!
//! Pure: a parsed [`History`] and a [`SystemConfig`] in, measures out; no clock, no I/O. For each
//! match in play order: bring every player's skill forward to the match day (deviation growth for
//! the days since their last match), predict, score the prediction if the match is at or after
//! the scoring start, then rate. Earlier matches only warm the ratings up.
//!
//! The loop keeps skills in a `Vec` indexed by the history's dense player ids and reuses its
//! buffers, so it allocates nothing per match on the Glicko-2 1v1 path (the `glicko2` hot path
//! calls `rating::glicko2::{expected_score, rate_1v1}` directly; a test checks it agrees with the
//! generic `SystemConfig` path). Other systems go through `SystemConfig::{predict, rate}`.
//!
//! Tuning ([`tune`]) is a coordinate search over a small grid per parameter, judged only on
//! matches **before** the scoring start, so the reported scores stay out-of-sample: the first
//! half of that part warms up, the second half is the objective.

use serde::Serialize;

use super::history::{DAY, History};
use super::measures::{Accumulator, Scored, score, score_two};
use crate::rating::{
    MatchInput, Mode, PlayerInput, RatingError, Skill, SystemConfig, TeamStrategy, glicko2,
};

/// What one replay produced.
#[derive(Clone, Debug)]
pub struct ReplayOutcome {
    /// Scored matches (from the scoring start on).
    pub measures: Accumulator,
    /// Matches the rating system refused (counted, reported, never silently dropped).
    pub skipped: u64,
    /// Every player's skill after the last match, by dense player index.
    pub skills: Vec<Skill>,
    /// Every scored prediction, in order, when asked for (for plots); empty otherwise.
    pub predictions: Vec<Scored>,
    /// The first refusal, for the report.
    pub first_error: Option<(usize, RatingError)>,
}

/// Replays `history` through `system`, scoring matches with index ≥ `score_from`.
/// `keep_predictions` keeps every scored prediction (memory ∝ matches) for plotting.
#[must_use]
pub fn replay(
    history: &History,
    system: &SystemConfig,
    score_from: usize,
    keep_predictions: bool,
) -> ReplayOutcome {
    replay_range(
        history,
        system,
        history.matches.len(),
        score_from,
        keep_predictions,
    )
}

/// Replays matches `[0, end)`, scoring those with index ≥ `score_from`.
#[must_use]
pub fn replay_range(
    history: &History,
    system: &SystemConfig,
    end: usize,
    score_from: usize,
    keep_predictions: bool,
) -> ReplayOutcome {
    let n = history.player_count();
    let mut st = State {
        skills: vec![system.initial(); n],
        last_day: vec![i32::MIN; n],
        wins: vec![0; n],
        inputs: Vec::new(),
        decayed: Vec::new(),
    };
    let mut out = ReplayOutcome {
        measures: Accumulator::new(),
        skipped: 0,
        skills: Vec::new(),
        predictions: Vec::new(),
        first_error: None,
    };
    let fast_glicko2 = match system {
        SystemConfig::Glicko2(c) if c.mode == Mode::Streaming => Some(c),
        _ => None,
    };
    let end = end.min(history.matches.len());
    for (i, m) in history.matches[..end].iter().enumerate() {
        let t0 = m.first_team as usize;
        let result = if let Some(c) = fast_glicko2
            && m.teams == 2
            && history.team(t0).len() == 1
            && history.team(t0 + 1).len() == 1
        {
            Ok(glicko2_1v1(history, &mut st, c, m.day, t0))
        } else {
            generic(history, &mut st, system, m.day, t0, m.teams as usize)
        };
        match result {
            Ok(s) => {
                if i >= score_from {
                    out.measures.add(s);
                    if keep_predictions {
                        out.predictions.push(s);
                    }
                }
            }
            Err(e) => {
                out.skipped += 1;
                if out.first_error.is_none() {
                    out.first_error = Some((i, e));
                }
            }
        }
    }
    out.skills = st.skills;
    out
}

/// Mutable replay state, indexed by dense player id, plus reused buffers.
struct State {
    skills: Vec<Skill>,
    last_day: Vec<i32>,
    wins: Vec<u32>,
    inputs: Vec<Vec<PlayerInput>>,
    decayed: Vec<Vec<Skill>>,
}

#[inline]
fn elapsed_seconds(last_day: i32, day: i32) -> f64 {
    if last_day == i32::MIN || day <= last_day {
        0.0
    } else {
        f64::from(day - last_day) * DAY
    }
}

/// The allocation-free Glicko-2 1v1 step: decay both players to the match day, predict, rate.
#[inline]
fn glicko2_1v1(h: &History, st: &mut State, c: &glicko2::Config, day: i32, t0: usize) -> Scored {
    let (a, b) = (h.team(t0)[0] as usize, h.team(t0 + 1)[0] as usize);
    let bring = |p: usize, st: &State| {
        let e = elapsed_seconds(st.last_day[p], day);
        if e > 0.0 {
            glicko2::decay(&st.skills[p], glicko2::periods(e, c), c)
        } else {
            st.skills[p]
        }
    };
    let (sa, sb) = (bring(a, st), bring(b, st));
    let p0 = glicko2::expected_score(&sa, &sb);
    let (pa, pb) = (h.placements[t0], h.placements[t0 + 1]);
    let score_a = match pa.cmp(&pb) {
        std::cmp::Ordering::Less => 1.0,
        std::cmp::Ordering::Equal => 0.5,
        std::cmp::Ordering::Greater => 0.0,
    };
    let (na, nb) = glicko2::rate_1v1(&sa, &sb, score_a, c);
    st.skills[a] = na;
    st.skills[b] = nb;
    st.last_day[a] = day;
    st.last_day[b] = day;
    if pa < pb {
        st.wins[a] += 1;
    } else if pb < pa {
        st.wins[b] += 1;
    }
    score_two(p0, pa, pb)
}

/// Any system, any shape, through `SystemConfig::{decay, predict, rate}` with reused buffers.
fn generic(
    h: &History,
    st: &mut State,
    system: &SystemConfig,
    day: i32,
    t0: usize,
    teams: usize,
) -> Result<Scored, RatingError> {
    st.inputs.resize_with(teams, Vec::new);
    st.decayed.resize_with(teams, Vec::new);
    for t in 0..teams {
        st.inputs[t].clear();
        st.decayed[t].clear();
        for &p in h.team(t0 + t) {
            let p = p as usize;
            let e = elapsed_seconds(st.last_day[p], day);
            let s = if e > 0.0 {
                system.decay(&st.skills[p], e)?
            } else {
                st.skills[p]
            };
            st.decayed[t].push(s);
            st.inputs[t].push(PlayerInput {
                skill: s,
                elapsed_seconds: 0.0,
                performance: None,
                wins: st.wins[p],
            });
        }
    }
    let placements = &h.placements[t0..t0 + teams];
    let scored = if teams == 2 {
        let refs = [st.decayed[0].as_slice(), st.decayed[1].as_slice()];
        let pred = system.predict(&refs)?;
        let (w0, w1) = (pred.win_probability[0], pred.win_probability[1]);
        score_two(w0 / (w0 + w1), placements[0], placements[1])
    } else {
        let refs: Vec<&[Skill]> = st.decayed[..teams].iter().map(Vec::as_slice).collect();
        let pred = system.predict(&refs)?;
        score(&pred.win_probability, placements).ok_or(RatingError::NonFinite("prediction"))?
    };
    let new = system.rate(&MatchInput {
        teams: &st.inputs[..teams],
        placements,
    })?;
    let best = placements.iter().copied().min().unwrap_or(1);
    for (t, team) in new.iter().enumerate() {
        let won = placements[t] == best && placements.iter().filter(|&&x| x == best).count() == 1;
        for (&p, s) in h.team(t0 + t).iter().zip(team) {
            let p = p as usize;
            st.skills[p] = *s;
            st.last_day[p] = day;
            if won {
                st.wins[p] += 1;
            }
        }
    }
    Ok(scored)
}

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
        ]
    };
}

/// The parameters `--tune` searches for a system (Glicko-2 τ, initial and minimum deviation,
/// rating-period length, team strategy; Glicko's deviations and inactivity; Weng-Lin β, σ₀, τ
/// and σ decay; Elo K and inflation), with grids wide enough to contain the literature's
/// values and ours.
#[must_use]
pub fn tunable(system: &SystemConfig) -> Vec<Param> {
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
            param!(Elo, inflation_per_win, &[0.0, 1.0]),
        ],
    }
}

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

/// Coordinate search on the matches before `score_from` only: replay `[0, score_from)`, judge
/// the log loss of its second half, and for each parameter in turn keep the grid value that
/// lowers it; up to three rounds, stopping early when a round changes nothing. `on_eval` is
/// called after each replay (for a progress bar).
#[must_use]
pub fn tune(
    history: &History,
    start: &SystemConfig,
    score_from: usize,
    on_eval: &dyn Fn(),
) -> TuneResult {
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
    let params = tunable(start);
    let mut best = start.clone();
    let mut best_loss = eval(&best);
    let log_loss_start = best_loss;
    let mut evaluations = 1;
    for _round in 0..3 {
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
                evaluations += 1;
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

/// Upper bound on the number of replays [`tune`] runs (for sizing a progress bar).
#[must_use]
pub fn tune_budget(system: &SystemConfig) -> usize {
    1 + 3 * tunable(system)
        .iter()
        .map(|p| p.grid.len() + 1)
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::{elo, glicko, weng_lin};

    /// Three 1v1 matches between three players on three days; every number below is worked out
    /// by hand from the Elo formula (K = 32, no rounding, no inflation).
    const FIXTURE: &str = r#"{"time":"2020-01-01","teams":[["a"],["b"]],"placements":[1,2]}
{"time":"2020-01-02","teams":[["b"],["c"]],"placements":[2,1]}
{"time":"2020-01-03","teams":[["c"],["a"]],"placements":[2,1]}
"#;

    fn plain_elo(k: f64) -> SystemConfig {
        SystemConfig::Elo(elo::Config {
            k,
            ..elo::Config::plain()
        })
    }

    #[test]
    fn replay_on_a_fixture_with_hand_checked_numbers() {
        let h = History::parse(FIXTURE).unwrap();
        let out = replay(&h, &plain_elo(32.0), 0, true);
        assert_eq!(out.skipped, 0);
        // Match 1: a 1500 vs b 1500, p = ½ (coin flip), a wins: a 1516, b 1484.
        // Match 2: b 1484 vs c 1500: E_b = 1/(1+10^(16/400)) = 0.47699; c is the favourite
        //   (0.52301) and wins: c += 32·0.47699 = 15.2637 → 1515.2637, b 1468.7363.
        // Match 3: c 1515.2637 vs a 1516: E_a = 1/(1+10^(−0.7363/400)) = 0.50106; a is the
        //   favourite and wins.
        let e_b = 1.0 / (1.0 + 10f64.powf(16.0 / 400.0));
        let e_a3 = 1.0 / (1.0 + 10f64.powf((1500.0 + 32.0 * e_b - 1516.0) / 400.0));
        assert!((e_b - 0.476_99).abs() < 1e-5);
        assert!((e_a3 - 0.501_06).abs() < 1e-5);
        let p = &out.predictions;
        assert_eq!(p.len(), 3);
        assert_eq!(p[0], Scored { p: 0.5, y: 0.5 });
        assert!((p[1].p - (1.0 - e_b)).abs() < 1e-12 && p[1].y == 1.0);
        assert!((p[2].p - e_a3).abs() < 1e-12 && p[2].y == 1.0);
        let s = out.measures.summary();
        let ll = (std::f64::consts::LN_2 - (1.0 - e_b).ln() - e_a3.ln()) / 3.0;
        assert!((s.log_loss - ll).abs() < 1e-12);
        assert!((s.accuracy - 2.5 / 3.0).abs() < 1e-12);
        // Final ratings.
        let c_after = 1500.0 + 32.0 * e_b;
        assert!((out.skills[2].mean - (c_after - 32.0 * (1.0 - e_a3))).abs() < 1e-9);
        assert!((out.skills[0].mean - (1516.0 + 32.0 * (1.0 - e_a3))).abs() < 1e-9);
        // Scoring from match 2 on only: the first match warms up.
        let late = replay(&h, &plain_elo(32.0), 1, false);
        assert_eq!(late.measures.n(), 2);
    }

    #[test]
    fn glicko2_fast_path_agrees_with_the_generic_path() {
        let text = (0..300)
            .map(|i| {
                let (a, b) = (i % 7, (i * 3 + 1) % 11);
                let (a, b) = if a == b { (a, b + 1) } else { (a, b) };
                format!(
                    "{{\"time\":\"2020-{:02}-{:02}\",\"teams\":[[\"{a}\"],[\"{b}\"]],\"placements\":[{},{}]}}\n",
                    1 + i / 28,
                    1 + i % 28,
                    1 + (i % 3 == 0) as u32,
                    2 - (i % 3 == 0) as u32
                )
            })
            .collect::<String>();
        let h = History::parse(&text).unwrap();
        let c = glicko2::Config::default();
        let fast = replay(&h, &SystemConfig::Glicko2(c), 0, true);
        // Force the generic path by giving a 2-player "team" shape no fast path: use the
        // SystemConfig directly on each match.
        let mut st = State {
            skills: vec![SystemConfig::Glicko2(c).initial(); h.player_count()],
            last_day: vec![i32::MIN; h.player_count()],
            wins: vec![0; h.player_count()],
            inputs: Vec::new(),
            decayed: Vec::new(),
        };
        for (i, m) in h.matches.iter().enumerate() {
            let s = generic(
                &h,
                &mut st,
                &SystemConfig::Glicko2(c),
                m.day,
                m.first_team as usize,
                2,
            )
            .unwrap();
            assert!((s.p - fast.predictions[i].p).abs() < 1e-9, "match {i}");
        }
        for (a, b) in st.skills.iter().zip(&fast.skills) {
            assert!((a.mean - b.mean).abs() < 1e-6 && (a.deviation - b.deviation).abs() < 1e-6);
        }
    }

    #[test]
    fn every_system_replays_teams_and_free_for_all() {
        let text = r#"{"time":"2020-01-01","teams":[["a","b"],["c","d"]],"placements":[1,2]}
{"time":"2020-01-05","teams":[["a"],["c"],["e"]],"placements":[2,1,3]}
{"time":"2020-02-01","teams":[["a","c"],["b","d"]],"placements":[1,1]}
"#;
        let h = History::parse(text).unwrap();
        for system in [
            SystemConfig::Glicko2(glicko2::Config::default()),
            SystemConfig::Glicko(glicko::Config::default()),
            SystemConfig::WengLinBt(weng_lin::Config::default()),
            SystemConfig::WengLinPl(weng_lin::Config::default()),
            SystemConfig::WengLinTm(weng_lin::Config::default()),
            SystemConfig::Elo(elo::Config::default()),
        ] {
            let out = replay(&h, &system, 0, false);
            assert_eq!(out.skipped, 0, "{}: {:?}", system.name(), out.first_error);
            assert_eq!(out.measures.n(), 3);
            let s = out.measures.summary();
            assert!(s.log_loss.is_finite() && s.ece.is_finite());
        }
    }

    #[test]
    fn tuning_only_sees_matches_before_the_scoring_start() {
        // A history whose first half favours one K and whose second half is random noise: the
        // tuner must be unaffected by anything after `score_from`.
        let mut text = String::new();
        for i in 0..400 {
            let (a, b) = (i % 5, 5 + i % 4);
            let strong_wins = i < 200 || i % 2 == 0;
            let (pa, pb) = if strong_wins { (1, 2) } else { (2, 1) };
            text.push_str(&format!(
                "{{\"time\":\"2020-01-01\",\"teams\":[[\"{a}\"],[\"{b}\"]],\"placements\":[{pa},{pb}]}}\n"
            ));
        }
        let h = History::parse(&text).unwrap();
        let start = plain_elo(16.0);
        let a = tune(&h, &start, 200, &|| {});
        // Changing matches after 200 changes nothing.
        let flipped: String = text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i >= 200 {
                    l.replace("[1,2]", "[x]")
                        .replace("[2,1]", "[1,2]")
                        .replace("[x]", "[2,1]")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let b = tune(&History::parse(&flipped).unwrap(), &start, 200, &|| {});
        assert_eq!(a.chosen, b.chosen);
        assert!(a.log_loss_tuned <= a.log_loss_start);
        assert!(a.evaluations <= tune_budget(&start));
        // Strong players always win before 200: a larger K than 16 fits better.
        let k = a.chosen.iter().find(|(n, _)| n == "k").unwrap().1;
        assert!(k > 16.0, "k = {k}");
    }
}
