//! `replay` on the real ATP histories in `../shared/data/` (issue #7). These files are not in the
//! repository; where that folder is absent each test prints why it skips and passes.

use std::path::{Path, PathBuf};

use matchmaker::rating::{SystemConfig, elo, glicko2};
use matchmaker::sim::cli::{ReplayArgs, replay_main, system_by_name};
use matchmaker::sim::history::{History, parse_date};
use matchmaker::sim::replay::replay;

fn data(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(name);
    if p.is_file() {
        Some(p)
    } else {
        println!(
            "skipped: {} is absent (real data lives outside the repo)",
            p.display()
        );
        None
    }
}

#[test]
fn singles_history_parses_and_glicko2_predicts_better_than_a_coin() {
    let Some(path) = data("atp_singles_2000_2014.jsonl") else {
        return;
    };
    let h = History::read_file(&path).unwrap();
    assert_eq!(h.matches.len(), 47_002);
    let from = h.first_on_or_after(parse_date("2010-01-01").unwrap());
    let out = replay(
        &h,
        &SystemConfig::Glicko2(glicko2::Config::default()),
        from,
        false,
    );
    let s = out.measures.summary();
    assert_eq!(out.skipped, 0);
    assert_eq!(s.n, 14_800);
    assert!(s.log_loss < 0.60, "log loss {}", s.log_loss);
    assert!(s.accuracy > 0.66, "accuracy {}", s.accuracy);
    // Plain Elo K = 32, as scripts/peers_replay.py computes it: 0.5889 there.
    let elo32 = SystemConfig::Elo(elo::Config {
        k: 32.0,
        ..elo::Config::plain()
    });
    let e = replay(&h, &elo32, from, false).measures.summary();
    assert!(
        (e.log_loss - 0.5889).abs() < 0.0005,
        "elo k32 {}",
        e.log_loss
    );
}

#[test]
fn doubles_history_replays_every_system_through_the_cli() {
    let Some(path) = data("atp_doubles_2000_2014.jsonl") else {
        return;
    };
    let h = History::read_file(&path).unwrap();
    assert_eq!(h.matches.len(), 19_033);
    for name in ["glicko2", "weng-lin-bt", "elo"] {
        let out = replay(&h, &system_by_name(name).unwrap(), 0, false);
        assert_eq!(out.skipped, 0, "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    let rating = dir.path().join("glicko.toml");
    std::fs::write(
        &rating,
        "system = \"glicko\"\nteam_strategy = \"composite-opponent\"\ninitial_deviation = 100\n",
    )
    .unwrap();
    replay_main(ReplayArgs {
        file: path,
        systems: vec!["glicko".into(), "elo".into()],
        score_from: Some("2014-01-01".into()),
        rating_files: vec![rating.clone()],
        tune: false,
        json: true,
        plot: Some(dir.path().to_path_buf()),
        png: false,
    })
    .unwrap();
    assert!(dir.path().join("calibration.svg").is_file());
}

#[test]
fn unknown_systems_and_bad_dates_are_named() {
    let err = system_by_name("trueskill").unwrap_err().to_string();
    assert!(err.contains("--system") && err.contains("glicko2"), "{err}");
    let err = replay_main(ReplayArgs {
        file: PathBuf::from("/nonexistent.jsonl"),
        systems: vec!["elo".into()],
        rating_files: Vec::new(),
        score_from: Some("2010/01/01".into()),
        tune: false,
        json: true,
        plot: None,
        png: false,
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("--score-from"), "{err}");
}

/// The target, pinned with the values `--tune` chose on the pre-2010 matches: the best
/// of ours beats the best peer measured by `scripts/peers_replay.py` (Elo K=32: singles 0.5889,
/// doubles 0.6376) with ECE at most 0.02. A change in the rating library that loses this fails
/// here, not silently in the README.
#[test]
fn tuned_systems_beat_the_best_peer_with_ece_within_two_percent() {
    use matchmaker::rating::{TeamStrategy, glicko, weng_lin};
    let cases: [(&str, SystemConfig, f64); 2] = [
        (
            "atp_singles_2000_2014.jsonl",
            SystemConfig::WengLinBt(weng_lin::Config {
                beta: 8.0,
                sigma: 6.5,
                tau: 0.15,
                sigma_decay_per_period: 0.5,
                ..weng_lin::Config::default()
            }),
            0.5889,
        ),
        (
            "atp_doubles_2000_2014.jsonl",
            SystemConfig::Glicko(glicko::Config {
                initial_deviation: 100.0,
                periods_to_unrated: 100.0,
                min_deviation: 30.0,
                team_strategy: TeamStrategy::CompositeOpponent,
                ..glicko::Config::default()
            }),
            0.6376,
        ),
    ];
    for (file, system, peer) in cases {
        let Some(path) = data(file) else {
            return;
        };
        let h = History::read_file(&path).unwrap();
        let from = h.first_on_or_after(parse_date("2010-01-01").unwrap());
        let s = replay(&h, &system, from, false).measures.summary();
        assert!(s.log_loss < peer, "{file}: {} vs peer {peer}", s.log_loss);
        assert!(s.ece <= 0.02, "{file}: ece {}", s.ece);
    }
}
