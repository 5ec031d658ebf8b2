//! Headless Firefox driven over WebDriver BiDi (the W3C protocol Firefox speaks natively), with
//! the same minimal WebSocket client as the Chromium driver: Debian's `firefox-esr` started
//! with `--remote-debugging-port`, one session, its first browsing context. Only what the
//! console test needs: open a page and evaluate JavaScript.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cdp::{WebSocket, listening_address, truthy};

/// Longest one answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The Firefox binaries tried in order (Debian's package installs `firefox-esr`).
const BINARIES: &[&str] = &["firefox-esr", "firefox"];

/// Preferences for a quiet test profile: no first-run pages, updates or telemetry, and no
/// calls to Mozilla's services (the test machine has no network).
const PREFS: &str = r#"
user_pref("browser.shell.checkDefaultBrowser", false);
user_pref("browser.startup.homepage_override.mstone", "ignore");
user_pref("app.update.enabled", false);
user_pref("datareporting.policy.dataSubmissionEnabled", false);
user_pref("toolkit.telemetry.enabled", false);
user_pref("network.captive-portal-service.enabled", false);
user_pref("network.connectivity-service.enabled", false);
user_pref("services.settings.server", "http://127.0.0.1:9/");
"#;

/// A headless Firefox with one session; killed on drop.
pub struct Firefox {
    child: Child,
    ws: WebSocket,
    context: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Firefox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Firefox {
    /// Starts headless Firefox with a `width` x `height` window. Fails the test with an
    /// install hint when no Firefox is installed.
    pub fn launch(width: u32, height: u32) -> Self {
        let profile = tempfile::tempdir().expect("profile dir");
        std::fs::write(profile.path().join("user.js"), PREFS).expect("profile prefs");
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
            probe.local_addr().expect("port").port()
        };
        let mut last = None;
        for binary in BINARIES {
            let spawned = Command::new(binary)
                .args(["--headless", "--no-remote", "--remote-debugging-port"])
                .arg(port.to_string())
                .args([
                    "--width",
                    &width.to_string(),
                    "--height",
                    &height.to_string(),
                ])
                .arg("--profile")
                .arg(profile.path())
                .arg("about:blank")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn();
            match spawned {
                Ok(child) => return Self::connect(child, profile),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => last = Some(e),
                Err(e) => panic!("cannot start {binary}: {e}"),
            }
        }
        panic!(
            "the console tests need a headless Firefox and none is installed ({last:?}): \
             install Debian's package (`sudo apt-get install -y firefox-esr`), or run \
             scripts/test.sh, which installs it"
        );
    }

    fn connect(mut child: Child, profile: tempfile::TempDir) -> Self {
        let url = listening_address(&mut child, "WebDriver BiDi listening on ", "firefox");
        let mut firefox = Self {
            child,
            ws: WebSocket::connect(&format!("{}/session", url.trim_end_matches('/'))),
            context: String::new(),
            next_id: 0,
            _profile: profile,
        };
        firefox.send("session.new", json!({"capabilities": {}}));
        let tree = firefox.send("browsingContext.getTree", json!({}));
        firefox.context = tree["contexts"][0]["context"]
            .as_str()
            .expect("a browsing context")
            .to_owned();
        firefox
    }

    /// Sends one command and waits for its answer; events in between are skipped. An error
    /// answer fails the test.
    fn send(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let message = json!({"id": id, "method": method, "params": params});
        self.ws.send_text(&message.to_string());
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            assert!(
                Instant::now() < deadline,
                "no answer to {method} within {ANSWER_TIMEOUT:?}"
            );
            let answer: Value =
                serde_json::from_str(&self.ws.read_text()).expect("WebDriver BiDi sends JSON");
            if answer["id"] == json!(id) {
                assert_ne!(answer["type"], "error", "{method} failed: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Opens `url` and waits for the document to load.
    pub fn open(&mut self, url: &str) {
        let context = self.context.clone();
        self.send(
            "browsingContext.navigate",
            json!({"context": context, "url": url, "wait": "complete"}),
        );
    }

    /// The value of a JavaScript expression (promises awaited), through JSON; `Err` with the
    /// exception's text when it throws.
    fn evaluate(&mut self, expression: &str) -> Result<Value, String> {
        let context = self.context.clone();
        let r = self.send(
            "script.evaluate",
            json!({
                "expression": format!("(async () => JSON.stringify(await ({expression})))()"),
                "target": {"context": context},
                "awaitPromise": true,
            }),
        );
        if r["type"] == "success" {
            let text = r["result"]["value"].as_str().unwrap_or("null");
            Ok(serde_json::from_str(text).unwrap_or(Value::Null))
        } else {
            Err(r["exceptionDetails"].to_string())
        }
    }

    /// Evaluates `expression` until it is truthy, looking again every 100 ms for at most
    /// `timeout`; returns its value, or fails the test with `what` and the last value.
    /// Exceptions count as "not yet" (the page may still be loading).
    pub fn wait_for(&mut self, what: &str, expression: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = Value::Null;
        loop {
            if let Ok(value) = self.evaluate(expression) {
                last = value;
                if truthy(&last) {
                    return last;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {timeout:?}; last value: {last}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
