//! `simulate` through its CLI entry point (issue #7): the default queues run and plots appear.

use matchmaker::sim::cli::{SimulateArgs, simulate_main};

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
