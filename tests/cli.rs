//! The `matchmaker` binary: bad config is refused before binding; serve starts on flags and stops
//! cleanly on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::KillOnDrop;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_matchmaker"))
}

#[test]
fn a_bad_config_exits_naming_the_key_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[server]\ntick_interval_ms = 5000\n").unwrap();
    let out = bin()
        .args(["serve", "--config"])
        .arg(&file)
        .args(["--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("server.tick_interval_ms"), "{stderr}");
    assert!(stderr.contains("1..=1000"), "{stderr}");
    assert!(
        !dir.path().join("data").exists(),
        "nothing was created before validation"
    );
}

#[test]
fn an_environment_variable_is_validated_like_the_file() {
    let out = bin()
        .args(["config"])
        .env("MATCHMAKER_SERVER__TICK_INTERVAL_MS", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.tick_interval_ms"));
}

#[cfg(unix)]
#[test]
fn serve_logs_the_chosen_port_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = KillOnDrop(
        bin()
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--metrics-addr",
                "",
                "--data-dir",
            ])
            .arg(dir.path())
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut serving = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("serving gRPC") {
            serving = Some(line);
            break;
        }
        assert!(Instant::now() < deadline, "server did not start");
    }
    let serving = serving.expect("server logged its address");
    assert!(
        serving.contains("127.0.0.1:") && !serving.contains("127.0.0.1:0 "),
        "{serving}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let exit = child.0.wait().unwrap();
    assert!(exit.success(), "exit {exit:?}; log tail {rest:?}");
    assert!(rest.iter().any(|l| l.contains("state flushed")), "{rest:?}");
}
