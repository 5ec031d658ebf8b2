//! The `matchmaker` binary: bad config is refused before binding; serve starts on flags and stops
//! cleanly on SIGTERM.

mod common;

use std::process::Command;

use common::{ServerProcess, poll_until_blocking};

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

/// A key file that is not a key stops `serve` before it opens the data dir or binds a port,
/// and `config` reports it the same way.
#[test]
fn an_unreadable_public_key_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.pem");
    std::fs::write(&key, "not a PEM key").unwrap();
    let file = dir.path().join("auth.toml");
    std::fs::write(
        &file,
        format!(
            "[auth]\nenabled = true\njwt_secret = \"\"\npublic_key_file = {:?}\n\
             public_key_algorithm = \"EdDSA\"\n",
            key.display().to_string()
        ),
    )
    .unwrap();
    let serve = bin()
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "",
            "--config",
        ])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!serve.status.success());
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(stderr.contains("auth.public_key_file"), "{stderr}");
    assert!(
        !dir.path().join("data").exists(),
        "the data dir is not opened before the key is read"
    );
    let config = bin()
        .args(["config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!config.status.success());
    let stderr = String::from_utf8_lossy(&config.stderr);
    assert!(stderr.contains("auth.public_key_file"), "{stderr}");
}

/// Kubernetes injects `MATCHMAKER_PORT=tcp://...` and friends for a Service named `matchmaker`;
/// they are not config.
#[test]
fn kubernetes_service_links_do_not_stop_the_binary() {
    let out = bin()
        .args(["config"])
        .env("MATCHMAKER_PORT", "tcp://10.0.0.1:50051")
        .env("MATCHMAKER_SERVICE_HOST", "10.0.0.1")
        .env("MATCHMAKER_PORT_50051_TCP_PROTO", "tcp")
        .env("MATCHMAKER_SERVER__TICK_INTERVAL_MS", "40")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("tick_interval_ms = 40"), "{stdout}");
}

/// `config` output gets pasted into tickets and logs: the HS256 secret and the credentials in
/// URLs do not appear in it, and the rest still does.
#[test]
fn config_prints_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets.toml");
    std::fs::write(
        &file,
        "[auth]\nenabled = true\njwt_secret = \"hs256-secret-0123456789abcdef012\"\n\
         jwks_url = \"https://keys:jwks-token@login.example.com/jwks.json\"\n\
         [cluster]\nredis_url = \"redis://default:redis-p@ss@db.internal:6379/0\"\n\
         [telemetry]\notlp_endpoint = \"http://otel:otlp-pass@collector:4317\"\n",
    )
    .unwrap();
    let out = bin()
        .args(["config", "--config"])
        .arg(&file)
        .env("MATCHMAKER_SERVER__TICK_INTERVAL_MS", "40")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for secret in [
        "hs256-secret",
        "jwks-token",
        "redis-p",
        "ss@db",
        "otlp-pass",
    ] {
        assert!(!stdout.contains(secret), "{secret} in:\n{stdout}");
    }
    for shown in [
        "jwt_secret = \"<redacted>\"",
        "redis_url = \"redis://***@db.internal:6379/0\"",
        "jwks_url = \"https://***@login.example.com/jwks.json\"",
        "otlp_endpoint = \"http://***@collector:4317\"",
        "tick_interval_ms = 40",
    ] {
        assert!(stdout.contains(shown), "{shown} not in:\n{stdout}");
    }
}

/// `--help` names the token's variable without printing the token it holds.
#[test]
fn admin_help_does_not_show_the_token() {
    for args in [&["admin", "--help"][..], &["admin", "snapshot", "--help"]] {
        let out = bin()
            .args(args)
            .env("MATCHMAKER_ADMIN_TOKEN", "admin-jwt-do-not-print")
            .output()
            .unwrap();
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("MATCHMAKER_ADMIN_TOKEN"), "{stdout}");
        assert!(!stdout.contains("admin-jwt-do-not-print"), "{stdout}");
    }
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
    let mut command = bin();
    command
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "",
            "--data-dir",
        ])
        .arg(dir.path());
    let mut server = ServerProcess::spawn(command);
    let port = server
        .addr
        .strip_prefix("127.0.0.1:")
        .expect("the loopback address");
    assert_ne!(port.parse::<u16>().expect("a port"), 0, "{}", server.addr);
    server.signal("TERM");
    let exit = server.child.wait().unwrap();
    // The log's last lines arrive as the pipe drains after the exit.
    poll_until_blocking("a clean exit whose log says the state was flushed", || {
        if exit.success() && server.logged("state flushed") {
            Ok(())
        } else {
            Err((exit, server.log_lines()))
        }
    });
}

/// SIGHUP reloads the config file like `ReloadConfig`: a good file is applied, a bad one is
/// refused in the log while the server keeps running on the config it had.
#[test]
fn sighup_reloads_queue_settings_and_a_bad_file_is_refused_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("matchmaker.toml");
    std::fs::write(&file, "[queues.1v1.matching]\nwindow = 50.0\n").unwrap();
    let server = ServerProcess::start(&dir.path().join("data"), &file);
    let hup = || {
        let status = Command::new("kill")
            .args(["-HUP", &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    std::fs::write(&file, "[queues.1v1.matching]\nwindow = 70.0\n").unwrap();
    hup();
    poll_until_blocking("the reload is logged with the changed queue", || {
        let lines = server.log_lines();
        if lines
            .iter()
            .any(|l| l.contains("SIGHUP: config reloaded") && l.contains("1v1"))
        {
            Ok(())
        } else {
            Err(lines)
        }
    });
    std::fs::write(&file, "[queues.1v1.matching]\nmin_quality = 7.0\n").unwrap();
    hup();
    poll_until_blocking("the refusal is logged naming the key", || {
        let lines = server.log_lines();
        if lines.iter().any(|l| {
            l.contains("SIGHUP: config reload refused")
                && l.contains("queues.1v1.matching.min_quality")
        }) {
            Ok(())
        } else {
            Err(lines)
        }
    });
    // Still serving after both signals (SIGHUP's default action would have ended it).
    let mut server = server;
    assert!(server.child.try_wait().unwrap().is_none(), "still running");
}
