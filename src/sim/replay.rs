//! Replaying a real match history through a rating system: the test of Josh Menke's "Skill,
//! Matchmaking, and Ranking" (GDC 2016), "test if it predicts match outcomes correctly".
//!
//! Pure: a parsed [`History`] and a [`SystemConfig`] in, measures out; no clock, no I/O. For each
//! match in play order: bring every player's skill forward to the match day (deviation growth for
//! the days since their last match), predict, score the prediction if the match is at or after
//! the scoring start, fold the prediction and its result into the calibration, then rate the
//! match (with its scores, for a system with a margin option). Earlier matches only warm the
//! ratings and the calibration up.
//!
//! Every prediction is scored twice: as the system makes it and through the pool's calibration
//! ([`crate::rating::calibration`]), which is refitted online from the predictions before it
//! only. [`ReplayOutcome::measures`] holds what the pool would show (calibrated when the
//! system's `calibration.enabled` is on), and both versions are kept.
//!
//! The loop keeps skills in a `Vec` indexed by the history's dense player ids and reuses its
//! buffers, so it allocates nothing per match on the Glicko-2 1v1 path (the `glicko2` hot path
//! calls `rating::glicko2::{expected_score, rate_1v1_weighted}` directly; a test checks it
//! agrees with the generic `SystemConfig` path). Other systems go through
//! `SystemConfig::{predict, rate_scored}`.
//!
//! Tuning is in [`super::tune`] (re-exported here).

use super::history::{DAY, History};
use super::measures::{Accumulator, Scored, score, score_two};
use crate::rating::calibration::{Calibration, CalibrationConfig, Observation};
use crate::rating::margin::PairOutcome;
use crate::rating::{MatchInput, Mode, PlayerInput, RatingError, Skill, SystemConfig, glicko2};

pub use super::tune::{Param, TuneResult, tunable, tune, tune_budget};

/// What one replay produced.
#[derive(Clone, Debug)]
pub struct ReplayOutcome {
    /// Scored matches (from the scoring start on), as the pool would show them: calibrated
    /// when the system's calibration is enabled, as the system made them otherwise.
    pub measures: Accumulator,
    /// The same matches scored on the system's own predictions.
    pub uncalibrated: Accumulator,
    /// The same matches scored through the online calibration.
    pub calibrated: Accumulator,
    /// The calibration after the last match.
    pub calibration: Calibration,
    /// Matches the rating system refused (counted, reported, never silently dropped).
    pub skipped: u64,
    /// Every player's skill after the last match, by dense player index.
    pub skills: Vec<Skill>,
    /// Every scored prediction as shown (see `measures`), in order, when asked for (for plots
    /// and paired comparisons); empty otherwise.
    pub predictions: Vec<Scored>,
    /// The match index of each entry of `predictions`.
    pub predicted: Vec<u32>,
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
    let calibration_config = *system.calibration();
    let shown_calibrated = calibration_config.enabled;
    let mut calibration = calibration_config.initial();
    let mut out = ReplayOutcome {
        measures: Accumulator::new(),
        uncalibrated: Accumulator::new(),
        calibrated: Accumulator::new(),
        calibration,
        skipped: 0,
        skills: Vec::new(),
        predictions: Vec::new(),
        predicted: Vec::new(),
        first_error: None,
    };
    if keep_predictions {
        let scored = end.min(history.matches.len()).saturating_sub(score_from);
        out.predictions.reserve(scored);
        out.predicted.reserve(scored);
    }
    let fast_glicko2 = match system {
        SystemConfig::Glicko2(c) if c.mode == Mode::Streaming => Some(c),
        _ => None,
    };
    let end = end.min(history.matches.len());
    for (i, m) in history.matches[..end].iter().enumerate() {
        let t0 = m.first_team as usize;
        let teams = m.teams as usize;
        let result = if let Some(c) = fast_glicko2
            && teams == 2
            && history.team(t0).len() == 1
            && history.team(t0 + 1).len() == 1
        {
            Ok(glicko2_1v1(history, &mut st, c, m.day, t0))
        } else {
            generic(history, &mut st, system, m.day, t0, teams)
        };
        match result {
            Ok(prediction) => {
                let placements = &history.placements[t0..t0 + teams];
                let (raw, calibrated) = prediction.scored(&calibration, placements);
                if i >= score_from {
                    out.uncalibrated.add(raw);
                    out.calibrated.add(calibrated);
                    let shown = if shown_calibrated { calibrated } else { raw };
                    out.measures.add(shown);
                    if keep_predictions {
                        out.predictions.push(shown);
                        out.predicted.push(i as u32);
                    }
                }
                calibration = prediction.observe(calibration, &calibration_config, placements);
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
    out.calibration = calibration;
    out
}

/// One match's prediction before it was rated: team 0's probability in a two-team match (the
/// common case, without allocating), or every team's.
enum Prediction {
    Two(f64),
    Many(Vec<f64>),
}

impl Prediction {
    /// The prediction scored as the system made it and through `calibration`.
    fn scored(&self, calibration: &Calibration, placements: &[u32]) -> (Scored, Scored) {
        match self {
            Prediction::Two(p0) => (
                score_two(*p0, placements[0], placements[1]),
                score_two(calibration.two(*p0), placements[0], placements[1]),
            ),
            Prediction::Many(p) => {
                let mut c = p.clone();
                calibration.apply(&mut c);
                let fallback = Scored { p: 0.5, y: 0.5 };
                (
                    score(p, placements).unwrap_or(fallback),
                    score(&c, placements).unwrap_or(fallback),
                )
            }
        }
    }

    /// The calibration after learning from this match.
    fn observe(
        &self,
        calibration: Calibration,
        config: &CalibrationConfig,
        placements: &[u32],
    ) -> Calibration {
        match self {
            Prediction::Two(p0) => calibration.observe_two(
                *p0,
                crate::rating::pair_outcome(placements[0], placements[1]),
                config,
            ),
            Prediction::Many(p) => Observation::new(p, placements)
                .map_or(calibration, |o| calibration.observe(&o, config)),
        }
    }
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

/// The allocation-free Glicko-2 1v1 step: decay both players to the match day, predict, rate
/// (with the match's scores under the system's margin option).
#[inline]
fn glicko2_1v1(
    h: &History,
    st: &mut State,
    c: &glicko2::Config,
    day: i32,
    t0: usize,
) -> Prediction {
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
    let y = crate::rating::pair_outcome(pa, pb);
    let o = match h.scores(t0, 2) {
        Some(s) if c.margin.is_active() => c.margin.pair(y, s[0], s[1], sa.mean - sb.mean),
        _ => PairOutcome { s: y, w: 1.0 },
    };
    let (na, nb) = glicko2::rate_1v1_weighted(&sa, &sb, o.s, o.w, c);
    st.skills[a] = na;
    st.skills[b] = nb;
    st.last_day[a] = day;
    st.last_day[b] = day;
    if pa < pb {
        st.wins[a] += 1;
    } else if pb < pa {
        st.wins[b] += 1;
    }
    Prediction::Two(p0)
}

/// Any system, any shape, through `SystemConfig::{decay, predict, rate_scored}` with reused
/// buffers.
fn generic(
    h: &History,
    st: &mut State,
    system: &SystemConfig,
    day: i32,
    t0: usize,
    teams: usize,
) -> Result<Prediction, RatingError> {
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
    let prediction = if teams == 2 {
        let refs = [st.decayed[0].as_slice(), st.decayed[1].as_slice()];
        let pred = system.predict(&refs)?;
        let (w0, w1) = (pred.win_probability[0], pred.win_probability[1]);
        Prediction::Two(w0 / (w0 + w1))
    } else {
        let refs: Vec<&[Skill]> = st.decayed[..teams].iter().map(Vec::as_slice).collect();
        let pred = system.predict(&refs)?;
        score(&pred.win_probability, placements).ok_or(RatingError::NonFinite("prediction"))?;
        Prediction::Many(pred.win_probability)
    };
    let new = system.rate_scored(
        &MatchInput {
            teams: &st.inputs[..teams],
            placements,
        },
        h.scores(t0, teams).unwrap_or(&[]),
    )?;
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
    Ok(prediction)
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
            let t0 = m.first_team as usize;
            let prediction = generic(&h, &mut st, &SystemConfig::Glicko2(c), m.day, t0, 2).unwrap();
            let (s, _) = prediction.scored(&Calibration::default(), &h.placements[t0..t0 + 2]);
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
        assert!(a.evaluations <= tune_budget(&start, &h, 200));
        // Strong players always win before 200: a larger K than 16 fits better.
        let k = a.chosen.iter().find(|(n, _)| n == "k").unwrap().1;
        assert!(k > 16.0, "k = {k}");
    }
}
