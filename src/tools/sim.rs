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
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::ToolError;
use crate::config::{Config, Overrides};
use crate::rating::SystemConfig;
use crate::sim::history::{History, parse_date};
use crate::sim::measures::{self, CalibrationBin};
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

/// `matchmaker replay FILE --system NAME [--system NAME ...] [--score-from DATE] [--tune]
/// [--json] [--plot DIR]`: how well each rating system would have predicted a real history.
#[derive(Args, Clone, Debug)]
pub struct ReplayArgs {
    /// A match history, one JSON object per line (the format of docs/match-history.md).
    pub file: PathBuf,
    /// Rating system with its default parameters: glicko2, glicko, weng-lin-bt, weng-lin-pl,
    /// weng-lin-tm, elo, or `all`. Repeat to compare several side by side.
    #[arg(long = "system", required_unless_present = "rating_files")]
    pub systems: Vec<String>,
    /// A rating system with parameters, as TOML in the form of a queue's `[rating]` table
    /// (`system = "glicko2"`, `tau = 0.3`, ...), e.g. the values `--tune` printed. Repeatable;
    /// these run after the `--system` ones.
    #[arg(long = "rating")]
    pub rating_files: Vec<PathBuf>,
    /// Score only matches on or after this date (YYYY-MM-DD); earlier ones warm the ratings up.
    #[arg(long)]
    pub score_from: Option<String>,
    /// Search each system's parameters on the matches before --score-from only, then score
    /// the tuned system; the chosen values are printed.
    #[arg(long)]
    pub tune: bool,
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

/// One system's replay report: what `--json` prints per system.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// System name.
    pub system: String,
    /// Matches scored.
    pub n: u64,
    /// Mean log loss.
    pub log_loss: f64,
    /// Mean Brier score.
    pub brier: f64,
    /// How often the favourite won.
    pub accuracy: f64,
    /// Expected calibration error (10 bins).
    pub ece: f64,
    /// The ECE a perfectly calibrated system would show on the same predictions (sampling
    /// noise, 100 redraws): compare `ece` with it.
    pub ece_noise: f64,
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
    /// Predicted vs actual per bucket of the favourite's probability.
    pub calibration: Vec<CalibrationBin>,
}

impl ReplayReport {
    /// The system's name, with " (tuned)" when `--tune` chose its parameters: how tables, plots
    /// and `docs/replay-results.md` name a row.
    #[must_use]
    pub fn label(&self) -> String {
        if self.tuned.is_some() {
            format!("{} (tuned)", self.system)
        } else {
            self.system.clone()
        }
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
            println!("{}", serde_json::to_string(report)?);
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
        let curves: Vec<(String, Vec<CalibrationBin>)> = reports
            .iter()
            .map(|r| (r.label(), r.calibration.clone()))
            .collect();
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

/// Everything `matchmaker replay` computes for `args`, one report per system in order (the
/// `--system` ones, then the `--rating` files), without printing or plotting; `on_report` sees
/// each report as soon as it is ready. Reads the history and the `--rating` files; the progress
/// bar shows on stderr while tuning unless `args.json`.
pub fn replay_reports(
    args: &ReplayArgs,
    on_report: &mut dyn FnMut(&ReplayReport) -> Result<(), ToolError>,
) -> Result<Vec<ReplayReport>, ToolError> {
    let mut names: Vec<String> = Vec::new();
    for s in &args.systems {
        if s == "all" {
            names.extend(SYSTEM_NAMES.iter().map(|s| s.to_string()));
        } else {
            names.push(s.clone());
        }
    }
    let mut systems: Vec<SystemConfig> = names
        .iter()
        .map(|n| system_by_name(n))
        .collect::<Result<_, _>>()?;
    for path in &args.rating_files {
        let what = || format!("--rating {}", path.display());
        let text = std::fs::read_to_string(path).map_err(ToolError::read(what()))?;
        let system: SystemConfig = toml::from_str(&text).map_err(ToolError::toml(what()))?;
        system
            .validate()
            .map_err(|e| ToolError::flag(&what(), e.to_string()))?;
        systems.push(system);
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
    for system in systems {
        let (system, tuned, tune_seconds) = if args.tune {
            let bar = progress(
                replay::tune_budget(&system) as u64,
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
        let mut rng = StdRng::seed_from_u64(7);
        let ece_noise =
            measures::ece_noise_floor(&out.predictions, 100, &mut || rng.random::<f64>());
        let s = out.measures.summary();
        if let Some((i, e)) = &out.first_error {
            eprintln!(
                "warning: {}: {} matches refused; first at line {}: {e}",
                system.name(),
                out.skipped,
                i + 1
            );
        }
        let report = ReplayReport {
            system: system.name().to_string(),
            n: s.n,
            log_loss: s.log_loss,
            brier: s.brier,
            accuracy: s.accuracy,
            ece: s.ece,
            ece_noise,
            seconds,
            parse_seconds,
            skipped: out.skipped,
            matches: history.matches.len(),
            players: history.player_count(),
            score_from: args.score_from.clone(),
            tuned,
            tune_seconds,
            calibration: out.measures.calibration(),
        };
        on_report(&report)?;
        reports.push(report);
    }
    Ok(reports)
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
    writeln!(
        out,
        "{:<12} {:>7} {:>8} {:>7} {:>8} {:>7} {:>9} {:>8}",
        "system", "n", "logloss", "brier", "accuracy", "ece", "ece-noise", "seconds"
    )?;
    for r in reports {
        writeln!(
            out,
            "{:<12} {:>7} {:>8.4} {:>7.4} {:>8.4} {:>7.4} {:>9.4} {:>8.3}",
            r.system, r.n, r.log_loss, r.brier, r.accuracy, r.ece, r.ece_noise, r.seconds
        )?;
    }
    for r in reports {
        if let Some(t) = &r.tuned {
            let chosen: Vec<String> = t.chosen.iter().map(|(k, v)| format!("{k}={v}")).collect();
            writeln!(
                out,
                "tuned {}: {} (tuning log loss {:.4} -> {:.4}, {} replays)",
                r.system,
                chosen.join(" "),
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
