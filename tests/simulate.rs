//! `matchmaker simulate` through its command-line layer: the default queues run, plots appear,
//! and the text and JSON reports name the match-balance measures by what they measure.

use std::process::Command;

use matchmaker::tools::sim::{SimulateArgs, simulate_main};

fn args(queue: &str, plot: Option<std::path::PathBuf>) -> SimulateArgs {
    SimulateArgs {
        config: None,
        queue: queue.into(),
        players: Some(200),
        days: Some(0.5),
        seed: Some(3),
        system: None,
        population: None,
        json: true,
        plot,
        png: false,
    }
}

/// Runs the real binary's `simulate` with `extra` arguments and returns its stdout.
fn simulate_cli(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .args([
            "simulate",
            "--players",
            "200",
            "--days",
            "0.5",
            "--seed",
            "3",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn default_queues_simulate_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    simulate_main(args("1v1", Some(dir.path().to_path_buf()))).unwrap();
    for f in [
        "calibration.svg",
        "rating_histogram.svg",
        "rank_over_time.svg",
        "wait_vs_quality.svg",
    ] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    for q in ["2v2", "5v5", "ffa8"] {
        simulate_main(args(q, None)).unwrap();
    }
}

#[test]
fn an_unknown_queue_is_named() {
    let err = simulate_main(args("3v3", None)).unwrap_err().to_string();
    assert!(err.contains("--queue") && err.contains("1v1"), "{err}");
}

#[test]
fn the_text_report_names_the_balance_measures_and_their_source() {
    let text = simulate_cli(&["--queue", "2v2"]);
    for want in [
        "match balance (Samuel White, \"Rated Multiplayer Competitions\", 2011",
        "upsets, the weaker team by true skill won",
        "fair by true skill, underdog had 25%+ chance",
        "fair by rating, predicted underdog 25%+ chance",
        "rating gap within 200 of the true skill gap",
        "predicted blowouts left out",
        "prediction: n ",
        "calibration (favourite's predicted vs actual):",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // Measures are named by what they measure, not by where the project found them.
    assert!(!text.lines().any(|l| l.starts_with("seed ")), "{text}");
}

#[test]
fn the_json_report_carries_the_balance_measures_as_fractions() {
    for queue in ["1v1", "ffa8"] {
        let line = simulate_cli(&["--queue", queue, "--json"]);
        let r: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(r["queue"], queue);
        assert!(r["matches"].as_u64().unwrap() > 0, "{r}");
        let b = &r["match_balance"];
        let fraction = |v: &serde_json::Value| (0.0..=1.0).contains(&v.as_f64().unwrap());
        assert!(fraction(&b["upset_rate"]), "{b}");
        assert!(fraction(&b["fair_by_rating"]), "{b}");
        assert!(b["blowouts_excluded"].is_u64(), "{b}");
        if queue == "1v1" {
            assert!(fraction(&b["fair_by_true_skill"]), "{b}");
            assert!(fraction(&b["rating_gap_tracks_skill_gap"]), "{b}");
            assert!(r["ece_truth"].is_f64(), "{r}");
        } else {
            // Free-for-all: the two-team measures and the oracle do not apply.
            assert!(b["fair_by_true_skill"].is_null(), "{b}");
            assert!(b["rating_gap_tracks_skill_gap"].is_null(), "{b}");
            assert!(r["ece_truth"].is_null(), "{r}");
        }
    }
}
