//! The command-line faces of the designer's workbench: `matchmaker replay` and
//! `matchmaker simulate`.
//!
//! `main.rs` owns the command enum and calls [`replay_main`] / [`simulate_main`] with the parsed
//! [`ReplayArgs`] / [`SimulateArgs`]. This module reads files, times runs with the wall clock,
//! prints reports (one JSON object per system or run under `--json`, a table otherwise), drives
//! the progress bar on stderr (hidden under `--json`) and writes plots. The work itself is in the
//! pure [`crate::sim::replay`] and [`crate::sim::simulate`]; [`replay_reports`] is the whole of
//! `replay` but the printing, for callers that check the numbers (`examples/replay_atp.rs`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use super::ToolError;
use crate::config::{Config, Overrides};
use crate::rating::SystemConfig;
use crate::sim::bootstrap::{self, PairedDifference};
use crate::sim::history::{History, parse_date};
use crate::sim::measures::{self, CalibrationBin, Scored, Summary};
use crate::sim::plot::{self, Format};
use crate::sim::replay::{self, TuneResult};
use crate::sim::simulate::{self, SimParams};

/// System names `--system` accepts, in the order `--system all` runs them.
pub const SYSTEM_NAMES: [&str; 6] = [
    "glicko2",
    "glicko",
    "weng-lin-bt",
    "weng-lin-pl",
    "weng-lin-tm",
    "elo",
];

/// `matchmaker replay FILE --system NAME [--system NAME ...] [--rating FILE ...]
/// [--score-from DATE] [--tune] [--peers FILE] [--baseline LABEL] [--json] [--plot DIR]`: how
/// well each rating system would have predicted a real history.
#[derive(Args, Clone, Debug)]
pub struct ReplayArgs {
    /// A match history, one JSON object per line (the format of docs/match-history.md).
    pub file: PathBuf,
    /// Rating system with its default parameters: glicko2, glicko, weng-lin-bt, weng-lin-pl,
    /// weng-lin-tm, elo, or `all`. Repeat to compare several side by side.
    #[arg(long = "system", required_unless_present_any = ["rating_files", "references", "peers"])]
    pub systems: Vec<String>,
    /// A rating system with parameters, as TOML in the form of a queue's `[rating]` table
    /// (`system = "glicko2"`, `tau = 0.3`, ...), e.g. the values `--tune` printed. Repeatable;
    /// these run after the `--system` ones and are labelled by the file's name without its
    /// extension.
    #[arg(long = "rating")]
    pub rating_files: Vec<PathBuf>,
    /// A rating file like --rating, replayed exactly as written even under --tune: a fixed
    /// reference to compare with (`--baseline elo-k32` for `--reference elo-k32.toml`).
    /// Repeatable; these run after the --rating ones.
    #[arg(long = "reference")]
    pub references: Vec<PathBuf>,
    /// Score only matches on or after this date (YYYY-MM-DD); earlier ones warm the ratings up.
    #[arg(long)]
    pub score_from: Option<String>,
    /// Search each system's parameters on the matches before --score-from only, then score
    /// the tuned system; the chosen values are printed.
    #[arg(long)]
    pub tune: bool,
    /// Turn on the pool's calibration for every --system and --rating row (as
    /// `calibration.enabled = true` would), so the first columns, the tuning objective and the
    /// comparison with --baseline are the calibrated probabilities.
    #[arg(long)]
    pub calibrate: bool,
    /// Other libraries' predictions of the same history, one JSON object per system
    /// (`scripts/peers_replay.py --write-predictions FILE`): scored here exactly like ours and
    /// reported as rows labelled by their name.
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Compare every row with this one: the paired difference in log loss on the matches both
    /// scored, with a 95% bootstrap interval (matches resampled in blocks by week). A row's
    /// label as printed (`glicko2`, `elo (tuned)`, a --rating file's name, `peer: ...`), or
    /// `best-peer` for the peer with the lowest log loss.
    #[arg(long)]
    pub baseline: Option<String>,
    /// Print one JSON object per system on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write plots (calibration curve) into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also write PNG files next to the SVGs.
    #[arg(long)]
    pub png: bool,
}

impl ReplayArgs {
    /// `replay FILE` with nothing else set: fill in the fields a caller needs.
    #[must_use]
    pub fn new(file: PathBuf) -> Self {
        Self {
            file,
            systems: Vec::new(),
            rating_files: Vec::new(),
            references: Vec::new(),
            score_from: None,
            tune: false,
            calibrate: false,
            peers: None,
            baseline: None,
            json: false,
            plot: None,
            png: false,
        }
    }
}

/// One system's replay report: what `--json` prints per system.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The row's label: the system's name, a --rating file's name, or a peer's; " (tuned)"
    /// when `--tune` chose its parameters.
    pub label: String,
    /// System name (`peer` for a peer's row).
    pub system: String,
    /// Matches scored.
    pub n: u64,
    /// Mean log loss of the predictions as the pool would show them (calibrated when the
    /// system calibrates).
    pub log_loss: f64,
    /// Mean Brier score.
    pub brier: f64,
    /// How often the favourite won.
    pub accuracy: f64,
    /// Expected calibration error (10 bins).
    pub ece: f64,
    /// The ECE a perfectly calibrated system would show on the same predictions (sampling
    /// noise, [`measures::ece_noise_expected`]): compare `ece` with it.
    pub ece_noise: f64,
    /// The system's own predictions, before calibration.
    pub uncalibrated: Summary,
    /// The same predictions through the pool's online calibration, refitted on past matches
    /// only.
    pub calibrated: Summary,
    /// The calibration's slope after the last match (1 = the system's own probabilities).
    pub calibration_slope: f64,
    /// The paired difference in log loss against `--baseline` (absent without one, and on
    /// the baseline's own row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_baseline: Option<PairedDifference>,
    /// Wall-clock seconds of the scored replay (predict + update of every match; parsing is
    /// `parse_seconds`, shared by all systems).
    pub seconds: f64,
    /// Wall-clock seconds to read and parse the file.
    pub parse_seconds: f64,
    /// Matches the system refused.
    pub skipped: u64,
    /// Matches in the file.
    pub matches: usize,
    /// Distinct players in the file.
    pub players: usize,
    /// The scoring start, as given.
    pub score_from: Option<String>,
    /// What `--tune` chose (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuned: Option<TuneResult>,
    /// Wall-clock seconds spent tuning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tune_seconds: Option<f64>,
    /// Predicted vs actual per bucket of the favourite's probability, as shown.
    pub calibration: Vec<CalibrationBin>,
    /// The same table for the system's own (uncalibrated) predictions.
    pub calibration_uncalibrated: Vec<CalibrationBin>,
    /// The scored predictions as shown and their match indices, for paired comparisons.
    #[serde(skip)]
    predictions: Vec<(u32, Scored)>,
}

impl ReplayReport {
    /// How tables, plots and `docs/replay-results.md` name a row: the system's name (or a
    /// --rating file's, or a peer's), with " (tuned)" when `--tune` chose its parameters.
    #[must_use]
    pub fn label(&self) -> String {
        self.label.clone()
    }
}

/// A system by name with its documented defaults (those of a queue's `[rating]` table).
pub fn system_by_name(name: &str) -> Result<SystemConfig, ToolError> {
    if !SYSTEM_NAMES.contains(&name) {
        return Err(ToolError::flag(
            "--system",
            format!(
                "unknown system {name:?} (known: {}, all)",
                SYSTEM_NAMES.join(", ")
            ),
        ));
    }
    serde_json::from_value(serde_json::json!({ "system": name })).map_err(|source| {
        ToolError::Json {
            what: format!("--system {name}"),
            source,
        }
    })
}

fn progress(len: u64, hidden: bool, what: &str) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}

/// Runs `matchmaker replay`.
pub fn replay_main(args: ReplayArgs) -> Result<(), ToolError> {
    let reports = replay_reports(&args, &mut |report| {
        if args.json {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, report)?;
            writeln!(out)?;
        }
        Ok(())
    })?;
    if !args.json {
        print_replay_table(&args, &reports)?;
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)
            .map_err(ToolError::read(format!("--plot {}", dir.display())))?;
        let title = format!(
            "Calibration: {}{}",
            args.file
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
            args.score_from
                .as_deref()
                .map_or_else(String::new, |d| format!(", from {d}"))
        );
        let mut curves: Vec<(String, Vec<CalibrationBin>)> = Vec::new();
        for r in &reports {
            if r.system != "peer" && r.calibration_uncalibrated != r.calibration {
                curves.push((
                    format!("{} uncalibrated", r.label),
                    r.calibration_uncalibrated.clone(),
                ));
            }
            curves.push((r.label.clone(), r.calibration.clone()));
        }
        let path = dir.join("calibration.svg");
        plot::calibration(&path, &title, &curves, Format::Svg)?;
        if args.png {
            plot::calibration(&path.with_extension("png"), &title, &curves, Format::Png)?;
        }
        if !args.json {
            println!("plots written to {}", dir.display());
        }
    }
    Ok(())
}

/// Everything `matchmaker replay` computes for `args`, one report per row in order (the
/// `--system` ones, then the `--rating` files, the `--reference` files, then the peers), without printing or plotting;
/// `on_report` sees each report once every row (and so the comparison with `--baseline`) is
/// ready. Reads the history, the `--rating` files and `--peers`; the progress bar shows on
/// stderr while tuning unless `args.json`.
pub fn replay_reports(
    args: &ReplayArgs,
    on_report: &mut dyn FnMut(&ReplayReport) -> Result<(), ToolError>,
) -> Result<Vec<ReplayReport>, ToolError> {
    // (label, system, tuned under --tune)
    let mut systems: Vec<(String, SystemConfig, bool)> = Vec::new();
    for s in &args.systems {
        if s == "all" {
            for name in SYSTEM_NAMES {
                systems.push((name.to_string(), system_by_name(name)?, true));
            }
        } else {
            systems.push((s.clone(), system_by_name(s)?, true));
        }
    }
    let files = args
        .rating_files
        .iter()
        .map(|p| (p, "--rating", true))
        .chain(args.references.iter().map(|p| (p, "--reference", false)));
    for (path, flag, tunable) in files {
        let what = || format!("{flag} {}", path.display());
        let text = std::fs::read_to_string(path).map_err(ToolError::read(what()))?;
        let system: SystemConfig = toml::from_str(&text).map_err(ToolError::toml(what()))?;
        system
            .validate()
            .map_err(|e| ToolError::flag(&what(), e.to_string()))?;
        let label = path.file_stem().map_or_else(
            || system.name().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        systems.push((label, system, tunable));
    }
    let score_from_day = args
        .score_from
        .as_deref()
        .map(parse_date)
        .transpose()
        .map_err(|e| ToolError::flag("--score-from", e))?;

    let t = Instant::now();
    let history = History::read_file(&args.file)?;
    let parse_seconds = t.elapsed().as_secs_f64();
    let score_from = score_from_day.map_or(0, |d| history.first_on_or_after(d));
    if args.tune && score_from < 2 {
        return Err(ToolError::flag(
            "--tune",
            "needs --score-from with matches before it (tuning never sees scored matches)",
        ));
    }

    let mut reports = Vec::new();
    for (label, mut system, tunable) in systems {
        if args.calibrate && tunable {
            system.calibration_mut().enabled = true;
        }
        let (system, tuned, tune_seconds) = if args.tune && tunable {
            let bar = progress(
                replay::tune_budget(&system, &history, score_from) as u64,
                args.json,
                system.name(),
            );
            let t = Instant::now();
            let result = replay::tune(&history, &system, score_from, &|| bar.inc(1));
            bar.finish_and_clear();
            (
                result.system.clone(),
                Some(result),
                Some(t.elapsed().as_secs_f64()),
            )
        } else {
            (system, None, None)
        };
        let t = Instant::now();
        let out = replay::replay(&history, &system, score_from, true);
        let seconds = t.elapsed().as_secs_f64();
        if let Some((i, e)) = &out.first_error {
            eprintln!(
                "warning: {}: {} matches refused; first at line {}: {e}",
                system.name(),
                out.skipped,
                i + 1
            );
        }
        let s = out.measures.summary();
        reports.push(ReplayReport {
            label: if tuned.is_some() {
                format!("{label} (tuned)")
            } else {
                label
            },
            system: system.name().to_string(),
            n: s.n,
            log_loss: s.log_loss,
            brier: s.brier,
            accuracy: s.accuracy,
            ece: s.ece,
            ece_noise: measures::ece_noise_expected(&out.predictions),
            uncalibrated: out.uncalibrated.summary(),
            calibrated: out.calibrated.summary(),
            calibration_slope: out.calibration.slope,
            vs_baseline: None,
            seconds,
            parse_seconds,
            skipped: out.skipped,
            matches: history.matches.len(),
            players: history.player_count(),
            score_from: args.score_from.clone(),
            tuned,
            tune_seconds,
            calibration: out.measures.calibration(),
            calibration_uncalibrated: out.uncalibrated.calibration(),
            predictions: out.predicted.iter().copied().zip(out.predictions).collect(),
        });
    }
    if let Some(path) = &args.peers {
        reports.extend(peer_reports(
            path,
            &history,
            score_from,
            args,
            parse_seconds,
        )?);
    }
    if let Some(name) = &args.baseline {
        compare_with_baseline(&mut reports, name, &history)?;
    }
    for r in &reports {
        on_report(r)?;
    }
    Ok(reports)
}

/// One line of a `--peers` file: a system's name and its win probabilities per team for every
/// match of the history, in order.
#[derive(serde::Deserialize)]
struct PeerLine {
    system: String,
    win_probability: Vec<Vec<f64>>,
}

/// The `--peers` rows: each peer's predictions scored on the matches from the scoring start.
fn peer_reports(
    path: &std::path::Path,
    history: &History,
    score_from: usize,
    args: &ReplayArgs,
    parse_seconds: f64,
) -> Result<Vec<ReplayReport>, ToolError> {
    let what = || format!("--peers {}", path.display());
    let text = std::fs::read_to_string(path).map_err(ToolError::read(what()))?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let peer: PeerLine = serde_json::from_str(line).map_err(|source| ToolError::Json {
            what: what(),
            source,
        })?;
        if peer.win_probability.len() != history.matches.len() {
            return Err(ToolError::flag(
                &what(),
                format!(
                    "{}: {} predictions for {} matches",
                    peer.system,
                    peer.win_probability.len(),
                    history.matches.len()
                ),
            ));
        }
        let mut acc = measures::Accumulator::new();
        let mut predictions = Vec::new();
        let mut skipped = 0;
        for (i, (m, p)) in history
            .matches
            .iter()
            .zip(&peer.win_probability)
            .enumerate()
            .skip(score_from)
        {
            let t0 = m.first_team as usize;
            match measures::score(p, &history.placements[t0..t0 + m.teams as usize]) {
                Some(s) => {
                    acc.add(s);
                    predictions.push((i as u32, s));
                }
                None => skipped += 1,
            }
        }
        let s = acc.summary();
        let shown: Vec<Scored> = predictions.iter().map(|p| p.1).collect();
        out.push(ReplayReport {
            label: peer.system,
            system: "peer".to_string(),
            n: s.n,
            log_loss: s.log_loss,
            brier: s.brier,
            accuracy: s.accuracy,
            ece: s.ece,
            ece_noise: measures::ece_noise_expected(&shown),
            uncalibrated: s,
            calibrated: s,
            calibration_slope: 1.0,
            vs_baseline: None,
            seconds: 0.0,
            parse_seconds,
            skipped,
            matches: history.matches.len(),
            players: history.player_count(),
            score_from: args.score_from.clone(),
            tuned: None,
            tune_seconds: None,
            calibration: acc.calibration(),
            calibration_uncalibrated: acc.calibration(),
            predictions,
        });
    }
    Ok(out)
}

/// Fills every row's `vs_baseline`: the paired difference with the row named `name` (or the
/// best peer) on the matches both scored.
fn compare_with_baseline(
    reports: &mut [ReplayReport],
    name: &str,
    history: &History,
) -> Result<(), ToolError> {
    let index = if name == "best-peer" {
        reports
            .iter()
            .enumerate()
            .filter(|(_, r)| r.system == "peer")
            .min_by(|a, b| a.1.log_loss.total_cmp(&b.1.log_loss))
            .map(|(i, _)| i)
    } else {
        reports
            .iter()
            .position(|r| r.label == name)
            .or_else(|| reports.iter().position(|r| r.system == name))
    };
    let Some(index) = index else {
        let known: Vec<&str> = reports.iter().map(|r| r.label.as_str()).collect();
        return Err(ToolError::flag(
            "--baseline",
            format!(
                "no row is {name:?} (rows: {}; or best-peer with --peers)",
                known.join(", ")
            ),
        ));
    };
    let baseline_label = reports[index].label.clone();
    let baseline: std::collections::HashMap<u32, Scored> =
        reports[index].predictions.iter().copied().collect();
    for (i, r) in reports.iter_mut().enumerate() {
        if i == index {
            continue;
        }
        let differences: Vec<(i32, f64)> = r
            .predictions
            .iter()
            .filter_map(|(m, s)| {
                let b = baseline.get(m)?;
                let day = history.matches[*m as usize].day;
                Some((
                    day,
                    measures::log_loss(s.p, s.y) - measures::log_loss(b.p, b.y),
                ))
            })
            .collect();
        r.vs_baseline = bootstrap::paired_difference(
            &baseline_label,
            &differences,
            bootstrap::RESAMPLES,
            bootstrap::SEED,
        );
    }
    Ok(())
}

fn print_replay_table(args: &ReplayArgs, reports: &[ReplayReport]) -> Result<(), ToolError> {
    let mut out = std::io::stdout().lock();
    let (matches, players) = reports.first().map_or((0, 0), |r| (r.matches, r.players));
    writeln!(
        out,
        "{}: {matches} matches, {players} players; scored from {}",
        args.file.display(),
        args.score_from.as_deref().unwrap_or("the start")
    )?;
    let width = reports
        .iter()
        .map(|r| r.label.len())
        .max()
        .unwrap_or(6)
        .max(6);
    writeln!(
        out,
        "{:<width$} {:>7} {:>8} {:>7} {:>8} {:>7} {:>9} | {:>8} {:>7} | {:>8} {:>7} {:>6} | {:>7}",
        "system",
        "n",
        "logloss",
        "brier",
        "accuracy",
        "ece",
        "ece-noise",
        "own-ll",
        "own-ece",
        "cal-ll",
        "cal-ece",
        "slope",
        "seconds"
    )?;
    for r in reports {
        writeln!(
            out,
            "{:<width$} {:>7} {:>8.4} {:>7.4} {:>8.4} {:>7.4} {:>9.4} | {:>8.4} {:>7.4} | {:>8.4} {:>7.4} {:>6.3} | {:>7.3}",
            r.label,
            r.n,
            r.log_loss,
            r.brier,
            r.accuracy,
            r.ece,
            r.ece_noise,
            r.uncalibrated.log_loss,
            r.uncalibrated.ece,
            r.calibrated.log_loss,
            r.calibrated.ece,
            r.calibration_slope,
            r.seconds
        )?;
    }
    writeln!(
        out,
        "(own: the system's probabilities; cal: through the pool's online calibration, slope = \
         its final temperature; the first columns show what the pool shows)"
    )?;
    if let Some(base) = reports.iter().find_map(|r| r.vs_baseline.as_ref()) {
        writeln!(
            out,
            "log loss minus {} (95% interval, {} weeks resampled {} times):",
            base.baseline, base.weeks, base.resamples
        )?;
        for r in reports {
            if let Some(d) = &r.vs_baseline {
                writeln!(
                    out,
                    "  {:<width$} {:+.4} [{:+.4}, {:+.4}]{}",
                    r.label,
                    d.mean,
                    d.low,
                    d.high,
                    if d.high < 0.0 {
                        "  better"
                    } else if d.low > 0.0 {
                        "  worse"
                    } else {
                        ""
                    }
                )?;
            }
        }
    }
    for r in reports {
        if let Some(t) = &r.tuned {
            writeln!(
                out,
                "tuned {}: {} (tuning log loss {:.4} -> {:.4}, {} replays)",
                r.system,
                t.printed(),
                t.log_loss_start,
                t.log_loss_tuned,
                t.evaluations
            )?;
        }
    }
    Ok(())
}

/// `matchmaker simulate [--config FILE] [--players N] [--queue Q] [--days D] [--seed S] [--json]
/// [--plot DIR]`: a simulated population through the real matcher and rating system.
#[derive(Args, Clone, Debug)]
pub struct SimulateArgs {
    /// A matchmaker TOML file merged over the defaults (queues, their systems and matching).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Queue to simulate (its shape, rating system and optimizer config).
    #[arg(long, default_value = "1v1")]
    pub queue: String,
    /// Players at the start.
    #[arg(long)]
    pub players: Option<usize>,
    /// Simulated days.
    #[arg(long)]
    pub days: Option<f64>,
    /// RNG seed; the same seed gives the same report.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Rating system instead of the queue's (glicko2, glicko, weng-lin-bt, weng-lin-pl,
    /// weng-lin-tm, elo), with its defaults.
    #[arg(long)]
    pub system: Option<String>,
    /// Population parameters as TOML (keys of `SimParams`: skill_sd, performance_sd,
    /// drift_sd_per_day, arrivals_per_day, retire_per_day, party_fraction, ...); flags win.
    #[arg(long)]
    pub population: Option<PathBuf>,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write plots into this directory.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also write PNG files next to the SVGs.
    #[arg(long)]
    pub png: bool,
}

/// Runs `matchmaker simulate`.
pub fn simulate_main(args: SimulateArgs) -> Result<(), ToolError> {
    let config = Config::load(args.config.as_deref(), &Overrides::default())?;
    let Some(q) = config.queues.get(&args.queue) else {
        let known: Vec<&str> = config.queues.keys().map(String::as_str).collect();
        return Err(ToolError::flag(
            "--queue",
            format!(
                "unknown queue {:?} (configured: {})",
                args.queue,
                known.join(", ")
            ),
        ));
    };
    let mut params: SimParams = match &args.population {
        Some(path) => {
            let what = || format!("--population {}", path.display());
            let text = std::fs::read_to_string(path).map_err(ToolError::read(what()))?;
            toml::from_str(&text).map_err(ToolError::toml(what()))?
        }
        None => SimParams::default(),
    };
    if let Some(n) = args.players {
        params.players = n;
    }
    if let Some(d) = args.days {
        params.days = d;
    }
    if let Some(s) = args.seed {
        params.seed = s;
    }
    let system = match &args.system {
        Some(name) => system_by_name(name)?,
        None => q.rating.clone(),
    };
    if system.is_periodic() {
        return Err(ToolError::flag(
            "--queue",
            format!(
                "queue {:?} rates in periodic mode; the simulator rates match by match (use a \
                 continuous queue or --system)",
                args.queue
            ),
        ));
    }
    // The queue's windows are in its own system's units: under another system they are carried
    // over to that one's scale (5v5's ±1.9 μ window would be ±1.9 points on the 1500 scale).
    let matching = q
        .matching
        .rescaled(system.odds_scale() / q.rating.odds_scale());
    let queue = simulate::SimQueue {
        name: args.queue.clone(),
        shape: q.shape(),
        max_party_size: q.max_party_size,
        system,
        matching,
        ranking: q.ranking,
        ranking_config: config.ranking.clone(),
    };
    let bar = progress(params.days.ceil() as u64, args.json, "days");
    let t = Instant::now();
    let mut report =
        simulate::simulate(&params, &queue, &|_| bar.inc(1)).map_err(ToolError::Flag)?;
    bar.finish_and_clear();
    report.seconds = t.elapsed().as_secs_f64();
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_sim_report(&params, &report)?;
    }
    if let Some(dir) = &args.plot {
        write_sim_plots(dir, &report, args.png)?;
        if !args.json {
            println!("plots written to {}", dir.display());
        }
    }
    Ok(())
}

fn print_sim_report(params: &SimParams, r: &simulate::SimReport) -> Result<(), ToolError> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "simulate queue {} with {} (seed {}): {} players at start, {} in all, {} retired, {} days",
        r.queue, r.system, r.seed, params.players, r.players_total, r.players_retired, params.days
    )?;
    writeln!(
        out,
        "matches {}  expired tickets {}  wait p50 {:.0}s p95 {:.0}s  quality p50 {:.3} mean {:.3}",
        r.matches, r.expired_tickets, r.wait_p50_s, r.wait_p95_s, r.quality_p50, r.quality_mean
    )?;
    let opt = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.4}"));
    let pct =
        |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |x| format!("{:.1}%", 100.0 * x));
    writeln!(
        out,
        "prediction: n {}  log loss {:.4} (oracle {})  brier {:.4}  accuracy {:.4}  ece {:.4} (oracle {})",
        r.n,
        r.log_loss,
        opt(r.log_loss_truth),
        r.brier,
        r.accuracy,
        r.ece,
        opt(r.ece_truth)
    )?;
    writeln!(
        out,
        "convergence: median {} games to within {} of the truth; {:.1}% of players with 10+ games converged",
        r.games_to_converge,
        params.convergence_band,
        100.0 * r.converged_fraction
    )?;
    let b = &r.match_balance;
    let fair = 100.0 * simulate::FAIR_CHANCE;
    writeln!(
        out,
        "match balance (Samuel White, \"Rated Multiplayer Competitions\", 2011; his targets in brackets):"
    )?;
    writeln!(
        out,
        "  upsets, the weaker team by true skill won       {:>6}  (over 20%)",
        pct(Some(b.upset_rate))
    )?;
    writeln!(
        out,
        "  fair by true skill, underdog had {fair:.0}%+ chance   {:>6}  (over 65%)",
        pct(b.fair_by_true_skill)
    )?;
    writeln!(
        out,
        "  fair by rating, predicted underdog {fair:.0}%+ chance {:>6}",
        pct(Some(b.fair_by_rating))
    )?;
    writeln!(
        out,
        "  rating gap within {:.0} of the true skill gap    {:>6}  (50%, 70% highly useful); {} predicted blowouts left out",
        simulate::GAP_TOLERANCE,
        pct(b.rating_gap_tracks_skill_gap),
        b.blowouts_excluded
    )?;
    writeln!(out, "calibration (favourite's predicted vs actual):")?;
    for b in &r.calibration {
        writeln!(
            out,
            "  [{:.2}, {:.2})  n {:>6}  predicted {:.3}  actual {:.3}",
            b.low, b.high, b.n, b.predicted, b.actual
        )?;
    }
    writeln!(out, "seconds {:.2}", r.seconds)?;
    Ok(())
}

fn write_sim_plots(
    dir: &std::path::Path,
    r: &simulate::SimReport,
    png: bool,
) -> Result<(), ToolError> {
    std::fs::create_dir_all(dir).map_err(ToolError::read(format!("--plot {}", dir.display())))?;
    let formats: &[(Format, &str)] = if png {
        &[(Format::Svg, "svg"), (Format::Png, "png")]
    } else {
        &[(Format::Svg, "svg")]
    };
    let label = format!("{} / {}", r.queue, r.system);
    // Rank points are what players see; queues without a ranking show the display rating.
    let (by_decile, what, axis) = if r.rank_points_by_decile.is_empty() {
        (
            &r.display_by_decile,
            "Display rating",
            "mean display rating",
        )
    } else {
        (&r.rank_points_by_decile, "Rank points", "mean rank points")
    };
    let deciles: Vec<(String, Vec<(f64, f64)>)> = by_decile
        .iter()
        .enumerate()
        .map(|(d, s)| (format!("skill decile {}", d + 1), s.clone()))
        .collect();
    for &(format, ext) in formats {
        plot::calibration(
            &dir.join(format!("calibration.{ext}")),
            &format!("Calibration: {label}"),
            &[(r.system.clone(), r.calibration.clone())],
            format,
        )?;
        plot::rating_histogram(
            &dir.join(format!("rating_histogram.{ext}")),
            &format!("Ratings vs true skill: {label}"),
            &r.final_ratings,
            &r.final_truths,
            format,
        )?;
        plot::lines_over_time(
            &dir.join(format!("rank_over_time.{ext}")),
            &format!("{what} over time per true-skill decile: {label}"),
            axis,
            &deciles,
            format,
        )?;
        plot::wait_vs_quality(
            &dir.join(format!("wait_vs_quality.{ext}")),
            &format!("Wait vs match quality: {label}"),
            &r.wait_quality,
            format,
        )?;
    }
    Ok(())
}
