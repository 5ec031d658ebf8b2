//! Headless Chromium driven over the Chrome DevTools Protocol, with nothing but the standard
//! library: Debian's `chromium` started with `--remote-debugging-port=0`, and a minimal
//! WebSocket client (RFC 6455: handshake, masked text frames out, fragmented frames in) on a
//! blocking socket. Only what the console test needs: open a page, evaluate JavaScript, click
//! by evaluating, take screenshots.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Longest one DevTools answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The Chromium binaries tried in order (Debian's package installs `chromium`).
const BINARIES: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

/// A headless browser with one page attached; killed on drop.
pub struct Browser {
    child: Child,
    ws: WebSocket,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts headless Chromium with a `width` x `height` window. Fails the test with an
    /// install hint when no Chromium is installed: the console's browser tests are part of the
    /// suite, not optional.
    pub fn launch(width: u32, height: u32) -> Self {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut last = None;
        for binary in BINARIES {
            let spawned = Command::new(binary)
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-extensions",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--hide-scrollbars",
                    "--remote-debugging-port=0",
                    "--remote-debugging-address=127.0.0.1",
                    &format!("--window-size={width},{height}"),
                ])
                .arg(format!("--user-data-dir={}", profile.path().display()))
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
            "the console tests need a headless Chromium and none is installed ({:?}): install \
             Debian's package (`sudo apt-get install -y chromium`), or run scripts/test.sh, \
             which installs it",
            last
        );
    }

    fn connect(mut child: Child, profile: tempfile::TempDir) -> Self {
        let url = listening_address(&mut child, "DevTools listening on ", "chromium");
        let mut browser = Self {
            child,
            ws: WebSocket::connect(&url),
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let targets = browser.send(None, "Target.getTargets", json!({}));
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .map(|t| t["targetId"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| {
                browser.send(None, "Target.createTarget", json!({"url": "about:blank"}))["targetId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            });
        let attached = browser.send(
            None,
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        browser.session = attached["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        browser.call("Page.enable", json!({}));
        browser.call("Runtime.enable", json!({}));
        browser
    }

    /// Sends one command (to the browser, or to the page's session) and waits for its answer;
    /// events in between are skipped. An error answer fails the test.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        self.ws.send_text(&message.to_string());
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            assert!(
                Instant::now() < deadline,
                "no answer to {method} within {ANSWER_TIMEOUT:?}"
            );
            let text = self.ws.read_text();
            let answer: Value = serde_json::from_str(&text).expect("DevTools sends JSON");
            if answer["id"] == json!(id) {
                if let Some(e) = answer.get("error") {
                    panic!("{method} failed: {e}");
                }
                return answer["result"].clone();
            }
        }
    }

    /// A command to the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params)
    }

    /// Opens `url` in the page (returns once navigation started; wait for content with
    /// [`Browser::wait_for`]).
    pub fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// The value of a JavaScript expression in the page (promises awaited). A thrown error
    /// fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Evaluates `expression` until it is truthy (not null, false, 0 or ""), looking again
    /// every 100 ms for at most `timeout`; returns its value, or fails the test with `what` and
    /// the last value. Exceptions count as "not yet" (the page may still be loading).
    pub fn wait_for(&mut self, what: &str, expression: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = Value::Null;
        loop {
            let r = self.call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            );
            if r.get("exceptionDetails").is_none() {
                last = r["result"]["value"].clone();
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

    /// A PNG of the whole page (up to `max_height` pixels tall) written to `path`.
    pub fn screenshot(&mut self, path: &std::path::Path, max_height: u32) {
        use base64::Engine;
        let height = self
            .eval("Math.ceil(document.documentElement.scrollHeight)")
            .as_u64()
            .unwrap_or(1000)
            .min(u64::from(max_height));
        let width = self.eval("window.innerWidth").as_u64().unwrap_or(1400);
        let shot = self.call(
            "Page.captureScreenshot",
            json!({
                "format": "png",
                "captureBeyondViewport": true,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            }),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

/// The address a browser prints on stderr after `marker` once it listens; stderr is drained
/// for the browser's life, so it never blocks on a full pipe. Kills the browser and fails the
/// test after 60 s.
pub fn listening_address(child: &mut Child, marker: &'static str, browser: &str) -> String {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.split(marker).nth(1)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => url,
        Err(_) => {
            let _ = child.kill();
            panic!("{browser} did not print its address ({marker:?}) within 60 s");
        }
    }
}

/// JavaScript's truthiness of a JSON value (not null, false, 0 or "").
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

/// A WebSocket client connection (no TLS, no extensions); also the Firefox driver's.
pub struct WebSocket {
    stream: TcpStream,
}

impl WebSocket {
    pub fn connect(url: &str) -> Self {
        let rest = url.strip_prefix("ws://").expect("a ws:// DevTools URL");
        let (host, path) = rest.split_once('/').expect("ws URL with a path");
        let mut stream = TcpStream::connect(host).expect("connect to DevTools");
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .expect("read timeout");
        stream.set_nodelay(true).expect("nodelay");
        write!(
            stream,
            "GET /{path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .expect("send the handshake");
        // The answer's head, byte by byte so nothing after it is consumed.
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).expect("handshake answer");
            head.push(byte[0]);
            assert!(head.len() < 16 * 1024, "handshake answer too long");
        }
        let head = String::from_utf8_lossy(&head);
        assert!(
            head.starts_with("HTTP/1.1 101"),
            "DevTools refused the WebSocket: {head}"
        );
        Self { stream }
    }

    /// One text message, in one masked frame (clients must mask; the key need not be secret
    /// here: nothing between us and the browser is a proxy to poison).
    pub fn send_text(&mut self, text: &str) {
        let payload = text.as_bytes();
        let mut frame = vec![0x81u8];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xFFFF => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let key = [0x5a, 0x13, 0xc7, 0x2e];
        frame.extend_from_slice(&key);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        self.stream.write_all(&frame).expect("send to DevTools");
    }

    /// The next text message (fragments joined; pings answered).
    pub fn read_text(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream
                .read_exact(&mut head)
                .expect("frame from DevTools");
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0f;
            let masked = head[1] & 0x80 != 0;
            let len = match head[1] & 0x7f {
                126 => {
                    let mut b = [0u8; 2];
                    self.stream.read_exact(&mut b).expect("length");
                    u64::from(u16::from_be_bytes(b))
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.stream.read_exact(&mut b).expect("length");
                    u64::from_be_bytes(b)
                }
                n => u64::from(n),
            };
            let mut key = [0u8; 4];
            if masked {
                self.stream.read_exact(&mut key).expect("mask");
            }
            let mut payload = vec![0u8; usize::try_from(len).expect("frame fits in memory")];
            self.stream.read_exact(&mut payload).expect("payload");
            if masked {
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= key[i % 4];
                }
            }
            match opcode {
                0x0..=0x2 => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8(message).expect("UTF-8 text");
                    }
                }
                0x8 => panic!("DevTools closed the connection"),
                0x9 => {
                    // Pong with the same payload (short: control frames are at most 125 bytes).
                    let mut pong = vec![0x8a, 0x80 | payload.len() as u8, 0, 0, 0, 0];
                    pong.extend_from_slice(&payload);
                    self.stream.write_all(&pong).expect("pong");
                }
                _ => {}
            }
        }
    }
}
