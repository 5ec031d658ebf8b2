//! Replay speed against the `skillratings` crate: the whole ATP singles history, read + parse +
//! predict + update, with Glicko-2, measured two ways.
//!
//! `cargo build --release --bin matchmaker --example sim_replay_speed &&
//!  target/release/examples/sim_replay_speed [FILE [ROUNDS]]`
//! (default FILE = `atp_singles_2000_2014.jsonl` in `ATP_DATA_DIR`, else in `../shared/data` next
//! to the repository; 15 rounds). The history is not in the repository
//! (docs/replay-results.md); a missing file stops with exit status 2 and its path.
//!
//! - **Whole processes** (the headline): `matchmaker replay FILE --system glicko2` (the
//!   release binary next to this example's folder, or `MATCHMAKER_BIN`), everything a user waits for — start-up,
//!   reading, parsing, interning, the replay, the calibration, the report — against this
//!   example run as `sim_replay_speed --skillratings-loop FILE`, a process that does the plain
//!   loop below once and prints its log loss. The two alternate, round by round, so load on a
//!   shared machine hits both alike; the minimum and the median of each are reported.
//! - **In process**: the two loops timed back to back in this process, best round.
//!
//! Ours: `History::read_file` (interning parser) + `sim::replay::replay` with the default
//! `glicko2` (which also grows deviations for the days between matches). Baseline: the same
//! loop written plainly over `skillratings::glicko2` — `serde_json` per line into a borrowed
//! struct, a `HashMap<&str, Glicko2Rating>`, `expected_score` then `glicko2`.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use matchmaker::rating::{SystemConfig, glicko2};
use matchmaker::sim::history::History;
use matchmaker::sim::replay::replay;
use skillratings::Outcomes;
use skillratings::glicko2::{Glicko2Config, Glicko2Rating, expected_score, glicko2 as sr_glicko2};

#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    teams: Vec<Vec<&'a str>>,
    placements: Vec<u32>,
}

fn baseline(path: &Path) -> (f64, usize) {
    let text = std::fs::read_to_string(path).expect("read");
    let config = Glicko2Config::new();
    let mut ratings: HashMap<&str, Glicko2Rating> = HashMap::new();
    let mut loss = 0.0;
    let mut n = 0;
    for line in text.lines() {
        let m: Line = serde_json::from_str(line).expect("json");
        if m.teams.len() != 2 || m.teams[0].len() != 1 || m.teams[1].len() != 1 {
            continue;
        }
        let (a, b) = (m.teams[0][0], m.teams[1][0]);
        let ra = *ratings.entry(a).or_default();
        let rb = *ratings.entry(b).or_default();
        let (pa, _) = expected_score(&ra, &rb);
        let outcome = if m.placements[0] < m.placements[1] {
            Outcomes::WIN
        } else if m.placements[0] > m.placements[1] {
            Outcomes::LOSS
        } else {
            Outcomes::DRAW
        };
        let y = match outcome {
            Outcomes::WIN => 1.0,
            Outcomes::LOSS => 0.0,
            Outcomes::DRAW => 0.5,
        };
        loss -= y * pa.ln() + (1.0 - y) * (1.0 - pa).ln();
        let (na, nb) = sr_glicko2(&ra, &rb, &outcome, &config);
        ratings.insert(a, na);
        ratings.insert(b, nb);
        n += 1;
    }
    (loss / n as f64, n)
}

fn ours(path: &Path) -> (f64, usize) {
    let h = History::read_file(path).expect("read");
    let out = replay(
        &h,
        &SystemConfig::Glicko2(glicko2::Config::default()),
        0,
        false,
    );
    let s = out.measures.summary();
    (s.log_loss, s.n as usize)
}

/// Seconds of one run of a whole process (its output discarded); `None` if it failed.
fn time_process(program: &Path, args: &[&std::ffi::OsStr]) -> Option<f64> {
    let t = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    status.success().then(|| t.elapsed().as_secs_f64())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).peekable();
    if args.peek().is_some_and(|a| a == "--skillratings-loop") {
        args.next();
        let Some(path) = args.next() else {
            eprintln!("sim_replay_speed: --skillratings-loop FILE");
            return ExitCode::from(2);
        };
        let (loss, n) = baseline(Path::new(&path));
        println!("skillratings glicko2: {n} matches, log loss {loss:.4}");
        return ExitCode::SUCCESS;
    }
    let path = args.next().map_or_else(
        || {
            std::env::var_os("ATP_DATA_DIR")
                .map_or_else(
                    || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"),
                    PathBuf::from,
                )
                .join("atp_singles_2000_2014.jsonl")
        },
        PathBuf::from,
    );
    if !path.is_file() {
        eprintln!(
            "sim_replay_speed: {} is missing (the ATP histories are not in the repository; see \
             docs/replay-results.md)",
            path.display()
        );
        return ExitCode::from(2);
    }
    let rounds: usize = args
        .next()
        .and_then(|r| r.to_str()?.parse().ok())
        .unwrap_or(15);
    let exe = std::env::current_exe().unwrap_or_default();
    // `MATCHMAKER_BIN` times another build (an older one, to compare).
    let matchmaker = std::env::var_os("MATCHMAKER_BIN").map_or_else(
        || {
            exe.parent()
                .and_then(Path::parent)
                .map(|dir| dir.join("matchmaker"))
                .unwrap_or_default()
        },
        PathBuf::from,
    );
    if !matchmaker.is_file() {
        eprintln!(
            "sim_replay_speed: {} is missing: build it with `cargo build --release --bin \
             matchmaker`",
            matchmaker.display()
        );
        return ExitCode::from(2);
    }
    let file = path.as_os_str();
    let ours_args: [&std::ffi::OsStr; 4] = [
        "replay".as_ref(),
        file,
        "--system".as_ref(),
        "glicko2".as_ref(),
    ];
    let base_args: [&std::ffi::OsStr; 2] = ["--skillratings-loop".as_ref(), file];
    let (mut ours_process, mut base_process) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so neither always runs on a warmer machine.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for ours in order {
            let t = if ours {
                time_process(&matchmaker, &ours_args)
            } else {
                time_process(&exe, &base_args)
            };
            let Some(t) = t else {
                eprintln!("sim_replay_speed: a timed process failed");
                return ExitCode::from(2);
            };
            if ours {
                ours_process.push(t);
            } else {
                base_process.push(t);
            }
        }
    }
    let ours_min = ours_process.iter().copied().fold(f64::INFINITY, f64::min);
    let base_min = base_process.iter().copied().fold(f64::INFINITY, f64::min);
    let (ours_median, base_median) = (median(&mut ours_process), median(&mut base_process));
    let (mut best_ours, mut best_base) = (f64::INFINITY, f64::INFINITY);
    let (mut r_ours, mut r_base) = ((0.0, 0), (0.0, 0));
    for _ in 0..rounds {
        let t = Instant::now();
        r_base = black_box(baseline(&path));
        best_base = best_base.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        r_ours = black_box(ours(&path));
        best_ours = best_ours.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{}",
        serde_json::json!({
            "file": path.display().to_string(),
            "matches": r_ours.1,
            "rounds": rounds,
            "process": {
                "ours_command": "matchmaker replay FILE --system glicko2",
                "ours_min_seconds": ours_min,
                "ours_median_seconds": ours_median,
                "skillratings_min_seconds": base_min,
                "skillratings_median_seconds": base_median,
                "ratio_min": ours_min / base_min,
                "ratio_median": ours_median / base_median,
            },
            "in_process": {
                "ours_seconds": best_ours,
                "skillratings_seconds": best_base,
                "ratio": best_ours / best_base,
            },
            "ours_log_loss_all": r_ours.0,
            "skillratings_log_loss_all": r_base.0,
        })
    );
    ExitCode::SUCCESS
}
