//! Replay speed against the `skillratings` crate, measured in the same process: the whole ATP
//! singles history, read + parse + predict + update, with Glicko-2.
//!
//! `cargo run --release --example sim_replay_speed [-- FILE [ROUNDS]]`
//! (default FILE = `atp_singles_2000_2014.jsonl` in `ATP_DATA_DIR`, else in `../shared/data` next
//! to the repository; 7 rounds; best round reported). The history is not in the repository
//! (docs/replay-results.md); a missing file stops with exit status 2 and its path.
//!
//! Ours: `History::read_file` (interning parser) + `sim::replay::replay` with the default
//! `glicko2` (which also grows deviations for the days between matches). Baseline: the same
//! loop written plainly over `skillratings::glicko2` — `serde_json` per line into a borrowed
//! struct, a `HashMap<&str, Glicko2Rating>`, `expected_score` then `glicko2`.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
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

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
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
        .unwrap_or(7);
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
            "ours_seconds": best_ours,
            "skillratings_seconds": best_base,
            "ratio": best_ours / best_base,
            "ours_log_loss_all": r_ours.0,
            "skillratings_log_loss_all": r_base.0,
            "rounds": rounds,
        })
    );
    ExitCode::SUCCESS
}
