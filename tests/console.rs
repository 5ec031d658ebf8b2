//! The operator console in a real browser: headless Chromium (Debian's `chromium`, driven over
//! the DevTools protocol by `console/cdp.rs`) against the real binary under `matchmaker
//! loadgen` traffic. The numbers the page shows equal `GetQueueStats` within one refresh; a
//! player's page draws their rating chart after results are reported; a soft reset from the
//! page changes the week through the `SeasonReset` RPC, its journal entry and the audit log;
//! with auth on and no token the page shows no data. A player's chart, matches and ban and a
//! match's result are read from the durable records, so they are still shown after a restart;
//! a cluster node that does not own the queues serves the console through its front (against
//! a real `redis-server`); a ban past any date and a malformed link still render.
//!
//! The same views also run in headless Firefox (Debian's `firefox-esr`, driven over WebDriver
//! BiDi by `console/bidi.rs`).
//!
//! Screenshots of each view are written to a temporary directory, or to the directory named by
//! `MATCHMAKER_CONSOLE_SCREENSHOTS` (scripts/console-screenshots.sh: docs/console/).

#[path = "console/bidi.rs"]
mod bidi;
#[path = "console/cdp.rs"]
mod cdp;
mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use cdp::Browser;
use common::{EVENT_TIMEOUT, ServerProcess, next, poll_until_blocking};
use matchmaker::proto;
use matchmaker::proto::admin_service_client::AdminServiceClient;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;

/// The page's refresh interval (console.js `REFRESH_MS`).
const REFRESH: Duration = Duration::from_secs(2);
/// How long the page may take to show something: a few refreshes on a loaded 2-core machine.
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

const SECRET: &str = "console-secret-0123456789abcdef01";

/// `matchmaker serve` with the console sampling every second on a metrics listener on a port
/// the system chooses ([`ServerProcess::metrics_addr`]).
fn start_server(dir: &std::path::Path, extra_toml: &str) -> ServerProcess {
    let config = dir.join("console.toml");
    std::fs::write(
        &config,
        format!("[console]\nsample_seconds = 1.0\n{extra_toml}"),
    )
    .unwrap();
    let mut command = common::serve_command(&config, "127.0.0.1:0");
    command.arg("--data-dir").arg(dir.join("data"));
    ServerProcess::spawn(command)
}

fn screenshots() -> (PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("MATCHMAKER_CONSOLE_SCREENSHOTS") {
        Some(dir) => (PathBuf::from(dir), None),
        None => {
            let temp = tempfile::tempdir().unwrap();
            (temp.path().to_path_buf(), Some(temp))
        }
    }
}

fn token(sub: &str, role: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({ "sub": sub, "role": role, "exp": now + 3600 }),
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// A plain HTTP/1.0 GET on the metrics listener: (status line, body).
fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(EVENT_TIMEOUT)).unwrap();
    let mut request = format!("GET {path} HTTP/1.0\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The page's shown value of `stat` for `queue`: (its text, the raw number behind it).
fn shown(browser: &mut Browser, queue: &str, stat: &str) -> (String, f64) {
    let v = browser.eval(&format!(
        "(() => {{ const e = document.querySelector('[data-queue=\"{queue}\"][data-stat=\"{stat}\"]');
                   return e && e.dataset.value !== undefined ? [e.textContent, e.dataset.value] : null; }})()"
    ));
    let pair = v
        .as_array()
        .unwrap_or_else(|| panic!("{queue}.{stat} not shown: {v}"));
    (
        pair[0].as_str().unwrap().to_owned(),
        pair[1].as_str().unwrap().parse().unwrap(),
    )
}

/// Integer stats as `(name, value)`, and float stats the same way, from one `QueueStat`.
fn stat_numbers(s: &proto::QueueStat) -> Vec<(&'static str, f64, bool)> {
    vec![
        ("tickets_waiting", s.tickets_waiting as f64, true),
        ("players_waiting", s.players_waiting as f64, true),
        ("matches_formed", s.matches_formed as f64, true),
        ("tickets_expired", s.tickets_expired as f64, true),
        ("wait_p50_seconds", s.wait_p50_seconds, false),
        ("wait_p95_seconds", s.wait_p95_seconds, false),
        ("quality_mean", s.quality_mean, false),
        ("skill_window", s.skill_window, false),
        ("accept_rate", s.accept_rate, false),
        (
            "backfill_fill_p50_seconds",
            s.backfill_fill_p50_seconds,
            false,
        ),
    ]
}

async fn queue_stats(
    admin: &mut AdminServiceClient<tonic::transport::Channel>,
) -> Vec<proto::QueueStat> {
    admin
        .get_queue_stats(proto::GetQueueStatsRequest::default())
        .await
        .expect("GetQueueStats")
        .into_inner()
        .queues
}

/// Whether every number the page shows for every queue equals `stats`.
fn page_equals(browser: &mut Browser, stats: &[proto::QueueStat]) -> Result<(), String> {
    for q in stats {
        for (name, want, integer) in stat_numbers(q) {
            let (text, value) = shown(browser, &q.queue, name);
            if value != want {
                return Err(format!(
                    "{}.{name}: page {value}, GetQueueStats {want}",
                    q.queue
                ));
            }
            if integer && text.replace(',', "") != format!("{want}") {
                return Err(format!(
                    "{}.{name}: page shows {text:?}, GetQueueStats {want}",
                    q.queue
                ));
            }
        }
    }
    Ok(())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The open player page shows a ban in force with `reason`.
fn assert_ban_shown(browser: &mut Browser, reason: &str) {
    let ban = browser.wait_for(
        "the player's ban",
        "(() => { const e = document.querySelector('#player-ban');
                  return e && e.dataset.banned === 'true' ? e.textContent : null; })()",
        PAGE_TIMEOUT,
    );
    let text = ban.as_str().unwrap_or_default();
    assert!(text.contains(reason), "{text}");
}

/// `matchmaker loadgen` against `addr` for 8 s in one round with `concurrency` callers.
fn spawn_loadgen(addr: &str, rpc: &[&str], concurrency: u32) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .args(["loadgen", "--addr", addr])
        .args(rpc)
        .args(["--seconds", "8", "--rounds", "1", "--json", "--concurrency"])
        .arg(concurrency.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start loadgen")
}

/// One 1v1 match of `winner` against `loser`, served to `stream`'s game server and reported.
async fn play(
    client: &mut ClientServiceClient<tonic::transport::Channel>,
    game_server: &mut GameServerServiceClient<tonic::transport::Channel>,
    stream: &mut tonic::Streaming<proto::MatchAssignment>,
    winner: &str,
    loser: &str,
) -> String {
    common::enter(client, "1v1", &[winner]).await;
    common::enter(client, "1v1", &[loser]).await;
    let assignment = next(stream).await;
    let placements = common::placements_with_winner(&assignment, winner);
    game_server
        .report_match_result(proto::MatchResult {
            match_id: assignment.match_id.clone(),
            placements,
            ..Default::default()
        })
        .await
        .expect("report");
    assignment.match_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_servers_numbers_draws_ratings_and_resets_a_season() {
    let (shots, _keep) = screenshots();
    let dir = tempfile::tempdir().unwrap();
    // 1v1 matches any two players at once, so the same two can play again after a result
    // pulled their ratings apart.
    let server = start_server(
        dir.path(),
        "[queues.1v1.matching]\nwindow = 5000.0\nmin_quality = 0.0\nexpansion = []\n",
    );
    let metrics = server.metrics_addr();
    let console = format!("http://{metrics}/console/");
    let channel = server.channel().await;
    let mut admin = AdminServiceClient::new(channel.clone());
    let mut client = ClientServiceClient::new(channel.clone());

    // The API refuses calls without the console header (another site cannot make the browser
    // send it) and, with auth off, on a Host that is not loopback (DNS rebinding).
    let (status, _) = http_get(&metrics, "/console/api/queues", &[]);
    assert!(status.contains(" 403 "), "{status}");
    let (status, _) = http_get(
        &metrics,
        "/console/api/queues",
        &[
            ("x-matchmaker-console", "1"),
            ("Host", "rebound.example:80"),
        ],
    );
    assert!(status.contains(" 403 "), "{status}");
    let (status, body) = http_get(
        &metrics,
        "/console/api/queues",
        &[("x-matchmaker-console", "1")],
    );
    assert!(status.contains(" 200 "), "{status} {body}");
    let (status, _) = http_get(&metrics, "/console/nothing-here", &[]);
    assert!(status.contains(" 404 "), "{status}");
    // /metrics still answers on the same listener.
    let (status, body) = http_get(&metrics, "/metrics", &[]);
    assert!(
        status.contains(" 200 ") && body.contains("matchmaker_build_info"),
        "{status}"
    );

    // Ladder players spread over the tiers, for the leaderboard and the reset preview.
    for i in 0..40u32 {
        admin
            .set_rating(proto::SetRatingRequest {
                player_id: format!("ladder-{i:02}"),
                queue: "5v5".into(),
                rating: Some(proto::Rating {
                    mean: 20.0 + f64::from(i % 10),
                    deviation: 5.0,
                    ..Default::default()
                }),
                rank_points: Some(i64::from(i) * 37),
            })
            .await
            .expect("set_rating");
    }

    // Results for two known players (before the load, so no other game server or waiting
    // ticket is in their way); their page is checked below.
    let mut game_server = GameServerServiceClient::new(channel.clone());
    let mut stream = common::serve(&mut game_server, "console-gs").await;
    let mut last_match = String::new();
    for (winner, loser) in [
        ("console-alice", "console-bob"),
        ("console-alice", "console-bob"),
        ("console-bob", "console-alice"),
        ("console-alice", "console-bob"),
    ] {
        last_match = play(&mut client, &mut game_server, &mut stream, winner, loser).await;
    }
    drop(stream);

    // The page is open before the traffic starts, so what it shows first is from before the
    // load: the generator forms all its 1v1 matches at its start, possibly before a page
    // opened later would first draw.
    let mut browser = Browser::launch(1400, 1000);
    browser.open(&format!("{console}#/queues"));
    browser.wait_for(
        "the 1v1 numbers",
        "document.querySelector('[data-queue=\"1v1\"][data-stat=\"matches_formed\"]')?.dataset.value",
        PAGE_TIMEOUT,
    );
    let (_, before_load) = shown(&mut browser, "1v1", "matches_formed");

    // Traffic: the real load generator forms, serves and reports 1v1 matches.
    let loadgen = spawn_loadgen(&server.addr, &["--rpc", "report-result"], 8);
    // And team matching: solo players entering 5v5 (its game servers are the generator's own).
    let loadgen_5v5 = spawn_loadgen(&server.addr, &["--rpc", "enter-queue", "--queue", "5v5"], 2);

    // Under load: what the page shows is never ahead of the server and moves without a reload.
    let deadline = std::time::Instant::now() + PAGE_TIMEOUT;
    loop {
        let (_, formed) = shown(&mut browser, "1v1", "matches_formed");
        let after = queue_stats(&mut admin).await;
        let now = after
            .iter()
            .find(|q| q.queue == "1v1")
            .unwrap()
            .matches_formed;
        assert!(
            formed <= now as f64,
            "page {formed} ahead of the server {now}"
        );
        assert!(
            formed >= before_load,
            "page {formed} went back from {before_load}"
        );
        if formed > before_load {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the page did not update under load: still {formed} matches formed, the server {now}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    browser.open(&format!("{console}#/matches"));
    browser.wait_for(
        "recent results",
        "document.querySelectorAll('#recent-matches tbody a').length",
        PAGE_TIMEOUT,
    );
    browser.screenshot(&shots.join("matches.png"), 1400);

    for mut generator in [loadgen, loadgen_5v5] {
        let status = tokio::task::spawn_blocking(move || generator.wait())
            .await
            .unwrap()
            .expect("loadgen ran");
        assert!(status.success(), "loadgen failed: {status}");
    }

    // At rest, the page comes to equal GetQueueStats. The 5v5 tickets the generator left
    // waiting still change a few numbers now and then (a wider skill window as they wait, an
    // expiry at the heartbeat), each change a refresh away from the page: it gets a few.
    browser.open(&format!("{console}#/queues"));
    browser.wait_for(
        "the queues",
        "document.querySelector('[data-queue=\"ffa8\"][data-stat=\"tickets_waiting\"]')?.dataset.value",
        PAGE_TIMEOUT,
    );
    let deadline = std::time::Instant::now() + PAGE_TIMEOUT;
    loop {
        let stats = queue_stats(&mut admin).await;
        match page_equals(&mut browser, &stats) {
            Ok(()) => break,
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The charts have the last hour's samples (one a second here).
    browser.wait_for(
        "the matches-per-minute chart",
        "Number(document.querySelector('[data-chart=\"1v1.rate\"] svg').dataset.points) >= 5",
        PAGE_TIMEOUT,
    );
    browser.screenshot(&shots.join("queues.png"), 2200);

    let alice = client
        .get_player(proto::GetPlayerRequest {
            player_id: "console-alice".into(),
            queue: "1v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    // A player's page draws the rating chart of the results reported, and shows their ban.
    admin
        .ban_player(proto::BanPlayerRequest {
            player_id: "console-alice".into(),
            until_unix: unix_now() + 7 * 86_400,
            reason: "abusive chat".into(),
        })
        .await
        .expect("ban");
    browser.open(&format!("{console}#/players/console-alice"));
    // Before the first result, then after each of the four, then now.
    browser.wait_for(
        "the rating chart",
        "Number(document.querySelector('[data-chart=\"player-rating\"] svg')?.dataset.points) >= 6",
        PAGE_TIMEOUT,
    );
    let rating =
        browser.eval("[...document.querySelectorAll('#player-summary .value')][0].textContent");
    let want = format!("{:.1}", alice.rating.unwrap().display);
    assert_eq!(rating.as_str(), Some(want.as_str()), "the player's rating");
    let rows = browser.eval("document.querySelectorAll('#player-matches tbody tr').length");
    assert_eq!(rows.as_u64(), Some(4), "alice's four matches");
    assert_ban_shown(&mut browser, "abusive chat");
    browser.screenshot(&shots.join("player.png"), 1400);

    browser.open(&format!("{console}#/matches/{last_match}"));
    browser.wait_for(
        "the match's result",
        "document.querySelectorAll('#match-result tbody tr').length == 2",
        PAGE_TIMEOUT,
    );
    browser.screenshot(&shots.join("match.png"), 1000);

    browser.open(&format!("{console}#/leaderboards/5v5"));
    browser.wait_for(
        "the 5v5 leaderboard",
        "document.querySelectorAll('#leaderboard tbody tr').length >= 40",
        PAGE_TIMEOUT,
    );
    browser.screenshot(&shots.join("leaderboard.png"), 1400);

    // A soft reset from the page: preview, confirm, and the week moves.
    browser.open(&format!("{console}#/seasons"));
    let week = browser.wait_for(
        "the seasons table",
        "document.querySelector('#seasons tr[data-pool=\"5v5\"] [data-field=\"week\"]')?.textContent",
        PAGE_TIMEOUT,
    );
    assert_eq!(week.as_str(), Some("0"));
    browser.eval(
        "document.querySelector('[data-action=\"preview-soft\"][data-queue=\"5v5\"]').click()",
    );
    browser.wait_for(
        "the reset preview",
        "document.querySelectorAll('#reset-tiers tbody tr').length",
        PAGE_TIMEOUT,
    );
    // The preview changed nothing.
    let before = client
        .get_player(proto::GetPlayerRequest {
            player_id: "ladder-39".into(),
            queue: "5v5".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((before.week, before.rank_points), (0, 39 * 37));
    browser.screenshot(&shots.join("seasons.png"), 1400);
    browser.eval("document.querySelector('#confirm-reset').click()");
    browser.wait_for(
        "the reset applied",
        "document.querySelector('#reset-done')?.textContent",
        PAGE_TIMEOUT,
    );
    let week = browser.eval(
        "document.querySelector('#seasons tr[data-pool=\"5v5\"] [data-field=\"week\"]').textContent",
    );
    assert_eq!(week.as_str(), Some("1"));
    let after = client
        .get_player(proto::GetPlayerRequest {
            player_id: "ladder-39".into(),
            queue: "5v5".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.week, 1, "the soft reset moved the week");
    assert_eq!(
        after.week_history.last().map(|w| w.rank_points),
        Some(39 * 37),
        "the week's rank points were recorded"
    );
    // It went through the SeasonReset RPC (dry run, then the reset) and its journal entry.
    poll_until_blocking("the reset's journal entry", || {
        if server.logged("label=admin:season-reset:soft:5v5:1:1") {
            Ok(())
        } else {
            Err(server
                .log_lines()
                .into_iter()
                .rev()
                .take(5)
                .collect::<Vec<_>>())
        }
    });
    let (_, body) = http_get(&metrics, "/metrics", &[]);
    let resets: f64 = body
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_handled_total{")
                && l.contains("grpc_method=\"SeasonReset\"")
                && l.contains("grpc_code=\"OK\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(resets, 2.0, "preview and reset were SeasonReset calls");
    // Both are in the audit log, like the admin CLI's calls.
    let audit = admin
        .list_audit_log(proto::ListAuditLogRequest {
            page_token: String::new(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner();
    let logged: Vec<&proto::AuditEntry> = audit
        .entries
        .iter()
        .filter(|e| e.action == "SeasonReset")
        .collect();
    assert_eq!(logged.len(), 2, "{:?}", audit.entries);
    assert!(
        logged.iter().all(|e| e.detail.ends_with("OK")),
        "{logged:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_and_no_token_the_console_shows_no_data() {
    let (shots, _keep) = screenshots();
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(
        dir.path(),
        &format!("[auth]\nenabled = true\njwt_secret = \"{SECRET}\"\n"),
    );
    let metrics = server.metrics_addr();
    let console = format!("http://{metrics}/console/");
    // The API itself: nothing without a token, nothing for a player's token.
    let (status, body) = http_get(
        &metrics,
        "/console/api/queues",
        &[("x-matchmaker-console", "1")],
    );
    assert!(status.contains(" 401 "), "{status} {body}");
    let player = format!("Bearer {}", token("p1", "player"));
    let (status, _) = http_get(
        &metrics,
        "/console/api/queues",
        &[("x-matchmaker-console", "1"), ("authorization", &player)],
    );
    assert!(status.contains(" 403 "), "{status}");

    let mut browser = Browser::launch(1400, 900);
    for view in [
        "queues",
        "matches",
        "players/ladder-01",
        "leaderboards",
        "seasons",
    ] {
        browser.open(&format!("{console}#/{view}"));
        browser.wait_for(
            "the token form",
            "!document.querySelector('#login').hidden",
            PAGE_TIMEOUT,
        );
        // A refresh later, still nothing.
        tokio::time::sleep(REFRESH).await;
        let shown: Value = browser.eval(
            "[document.querySelector('#view').childElementCount,
              document.querySelectorAll('[data-stat]').length,
              getComputedStyle(document.querySelector('#nav')).display,
              document.querySelector('#view').innerText.trim()]",
        );
        assert_eq!(
            shown,
            serde_json::json!([0, 0, "none", ""]),
            "{view}: data without a token"
        );
    }
    browser.screenshot(&shots.join("login.png"), 900);

    // A player's token is refused and the page stays empty.
    let js_token = |t: &str| {
        format!(
            "(() => {{ document.querySelector('#token').value = '{t}';
                  document.querySelector('#login-form').requestSubmit(); return true; }})()"
        )
    };
    browser.open(&format!("{console}#/queues"));
    browser.wait_for(
        "the token form",
        "!document.querySelector('#login').hidden",
        PAGE_TIMEOUT,
    );
    browser.eval(&js_token(&token("p1", "player")));
    browser.wait_for(
        "the refusal",
        "document.querySelector('#login-error').textContent",
        PAGE_TIMEOUT,
    );
    assert_eq!(
        browser
            .eval("document.querySelectorAll('[data-stat]').length")
            .as_u64(),
        Some(0)
    );
    // An admin's token shows the numbers.
    browser.eval(&js_token(&token("ops", "admin")));
    browser.wait_for(
        "the numbers with an admin token",
        "document.querySelector('[data-queue=\"1v1\"][data-stat=\"matches_formed\"]')?.dataset.value",
        PAGE_TIMEOUT,
    );
}

/// The console's match and player pages read the durable match records: after the server is
/// killed and started again on the same data dir (nothing is left in its memory), a player's
/// chart, matches and ban and a match's result are all still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_console_still_shows_a_players_chart_their_match_and_their_ban() {
    let dir = tempfile::tempdir().unwrap();
    let queues = "[queues.1v1.matching]\nwindow = 5000.0\nmin_quality = 0.0\nexpansion = []\n";
    let server = start_server(dir.path(), queues);
    let channel = server.channel().await;
    let mut client = ClientServiceClient::new(channel.clone());
    let mut game_server = GameServerServiceClient::new(channel.clone());
    let mut stream = common::serve(&mut game_server, "restart-gs").await;
    let mut played = Vec::new();
    for (winner, loser) in [
        ("restart-alice", "restart-bob"),
        ("restart-bob", "restart-alice"),
        ("restart-alice", "restart-bob"),
    ] {
        played.push(play(&mut client, &mut game_server, &mut stream, winner, loser).await);
    }
    drop(stream);
    AdminServiceClient::new(channel.clone())
        .ban_player(proto::BanPlayerRequest {
            player_id: "restart-bob".into(),
            until_unix: 0,
            reason: "boosting accounts".into(),
        })
        .await
        .expect("ban");
    let alice = client
        .get_player(proto::GetPlayerRequest {
            player_id: "restart-alice".into(),
            queue: "1v1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    // SIGKILL: what was acknowledged is on disk, and nothing else survives.
    drop(server);

    let server = start_server(dir.path(), queues);
    let metrics = server.metrics_addr();
    let console = format!("http://{metrics}/console/");
    let mut browser = Browser::launch(1400, 1000);
    browser.open(&format!("{console}#/players/restart-alice"));
    // Before the first match, after each of the three, then now.
    browser.wait_for(
        "the rating chart after the restart",
        "Number(document.querySelector('[data-chart=\"player-rating\"] svg')?.dataset.points) >= 5",
        PAGE_TIMEOUT,
    );
    let rating =
        browser.eval("[...document.querySelectorAll('#player-summary .value')][0].textContent");
    let want = format!("{:.1}", alice.rating.unwrap().display);
    assert_eq!(rating.as_str(), Some(want.as_str()), "the player's rating");
    let links = browser.eval(
        "[...document.querySelectorAll('#player-matches tbody tr td:first-child')].map((td) => td.textContent)",
    );
    let newest_first: Vec<&str> = played.iter().rev().map(String::as_str).collect();
    assert_eq!(links, serde_json::json!(newest_first), "alice's matches");
    assert_eq!(
        browser.eval("document.querySelector('#player-ban').dataset.banned"),
        Value::from("none")
    );

    browser.open(&format!("{console}#/players/restart-bob"));
    assert_ban_shown(&mut browser, "boosting accounts");
    // The page read it with the admin call the CLI makes, audited like the CLI's.
    let audit = AdminServiceClient::new(server.channel().await)
        .list_audit_log(proto::ListAuditLogRequest {
            page_token: String::new(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert!(
        audit.iter().any(|e| e.action == "GetPlayerBan"
            && e.actor == "anonymous"
            && e.detail == "player_id=\"restart-bob\": OK"),
        "{audit:?}"
    );

    browser.open(&format!("{console}#/matches/{}", played[0]));
    let rows = browser.wait_for(
        "the first match's result",
        "document.querySelectorAll('#match-result tbody tr').length",
        PAGE_TIMEOUT,
    );
    assert_eq!(rows.as_u64(), Some(2));
    let shown = browser.eval(
        "[...document.querySelectorAll('#match-result tbody tr')].map((tr) =>
           [...tr.querySelectorAll('td')].map((td) => td.textContent))",
    );
    // The winner placed first and gained rating; the loser placed second and lost some.
    let rows = shown.as_array().unwrap();
    let row = |player: &str| {
        rows.iter()
            .find(|r| r[3] == player)
            .unwrap_or_else(|| panic!("{player} not in {shown}"))
    };
    assert_eq!(row("restart-alice")[1], "1");
    assert!(row("restart-alice")[5].as_str().unwrap().starts_with('+'));
    assert_eq!(row("restart-bob")[1], "2");
    assert!(row("restart-bob")[5].as_str().unwrap().starts_with('-'));
    let summary = browser.eval("document.querySelector('#match-summary').textContent");
    assert!(
        summary.as_str().unwrap().contains("server restart-gs"),
        "{summary}"
    );
    drop(server);
}

/// What the page cannot turn into a date or a page still renders: a ban until a time past any
/// date shows the number it was given, and a link with a malformed escape (`%E0`) shows the
/// unknown page instead of leaving the last page up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_past_any_date_and_a_malformed_link_still_render() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), "");
    let metrics = server.metrics_addr();
    // Past the last time a JavaScript Date holds (8.64e12 s), and exact as a JSON number.
    let until = 1_000_000_000_000_000_i64;
    AdminServiceClient::new(server.channel().await)
        .ban_player(proto::BanPlayerRequest {
            player_id: "banned-for-ages".into(),
            until_unix: until,
            reason: "ban for ages".into(),
        })
        .await
        .expect("ban");
    let console = format!("http://{metrics}/console/");
    let mut browser = Browser::launch(1400, 1000);
    browser.open(&format!("{console}#/players/banned-for-ages"));
    assert_ban_shown(&mut browser, &format!("Banned until {until} (since "));
    assert_ban_shown(&mut browser, "ban for ages");
    browser.open(&format!("{console}#/players/%E0"));
    let shown = browser.wait_for(
        "the unknown page",
        "(() => { const v = document.querySelector('#view');
                  return v.dataset.view === 'unknown' ? v.textContent : null; })()",
        PAGE_TIMEOUT,
    );
    assert_eq!(shown.as_str(), Some("Unknown page."));
    drop(server);
}

/// The console on a cluster node that does not own the queues: its calls go through the
/// node's front to the owner, so it shows the owner's queue numbers and a player's ban; once
/// the owner died and the node took over, the ban its engine loaded from Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_that_does_not_own_the_queues_serves_the_console() {
    let redis = matchmaker::store::RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cluster.toml");
    // The heartbeat is off: the ticket that waits in 1v1 is never watched, and must still be
    // waiting when its opponent comes, however long the browser took in between. A lease the
    // browsers' load does not lapse: the queues move only when the test kills the owner.
    std::fs::write(
        &config,
        format!(
            "[server]\ntick_interval_ms = 20\nticket_heartbeat_seconds = 0.0\n\
             [cluster]\nredis_url = \"{}\"\nlease_ms = 3000\n\
             [console]\nsample_seconds = 1.0\n",
            redis.url()
        ),
    )
    .unwrap();
    let node =
        |name: &str, metrics: &str| common::cluster_node_with_metrics(&config, name, None, metrics);
    let owner = node("owner", "");
    let lease = redis::Client::open(redis.url()).unwrap();
    poll_until_blocking("the first node owns the queues", || {
        let mut conn = lease.get_connection().map_err(|e| e.to_string())?;
        let value: Option<String> = redis::cmd("GET")
            .arg("{mm}:lease")
            .query(&mut conn)
            .map_err(|e| e.to_string())?;
        match value {
            Some(v) if v.split('|').nth(1) == Some("owner") => Ok(()),
            other => Err(format!("lease: {other:?}")),
        }
    });
    let other = node("other", "127.0.0.1:0");
    let metrics = other.metrics_addr();
    let channel = owner.channel().await;
    common::queues_answer(&channel).await;
    // One player waits in 1v1 (nobody to play), one is banned: both on the owner.
    common::enter(
        &mut ClientServiceClient::new(channel.clone()),
        "1v1",
        &["cluster-waiting"],
    )
    .await;
    AdminServiceClient::new(channel.clone())
        .ban_player(proto::BanPlayerRequest {
            player_id: "cluster-banned".into(),
            until_unix: 0,
            reason: "ban kept in redis".into(),
        })
        .await
        .expect("ban");

    // The API on the other node answers with the owner's numbers.
    poll_until_blocking("the other node's console API", || {
        std::net::TcpStream::connect(&metrics).map_err(|e| e.to_string())?;
        let (status, body) = http_get(
            &metrics,
            "/console/api/queues",
            &[("x-matchmaker-console", "1")],
        );
        let parsed: Value = serde_json::from_str(&body).map_err(|e| format!("{status}: {e}"))?;
        let waiting = parsed["queues"]
            .as_array()
            .and_then(|q| q.iter().find(|q| q["queue"] == "1v1"))
            .map(|q| q["stats"]["tickets_waiting"].clone());
        if waiting == Some(Value::from(1)) {
            Ok(())
        } else {
            Err(format!("{status}: {waiting:?}"))
        }
    });
    // The season clocks are the owner's: a soft reset there moves 1v1's pool to week 1.
    AdminServiceClient::new(channel.clone())
        .season_reset(proto::SeasonResetRequest {
            kind: proto::SeasonResetKind::Soft as i32,
            queue: "1v1".into(),
            dry_run: false,
        })
        .await
        .expect("season reset");
    let (status, body) = http_get(
        &metrics,
        "/console/api/seasons",
        &[("x-matchmaker-console", "1")],
    );
    let seasons: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{status}: {e}"));
    let pool = seasons["pools"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["queues"][0] == "1v1"))
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(
        (&pool["season"], &pool["week"]),
        (&Value::from(1), &Value::from(1))
    );
    let console = format!("http://{metrics}/console/");
    let mut browser = Browser::launch(1400, 1000);
    browser.open(&format!("{console}#/queues"));
    let shown = browser.wait_for(
        "the owner's 1v1 numbers",
        "document.querySelector('[data-queue=\"1v1\"][data-stat=\"tickets_waiting\"]')?.dataset.value",
        PAGE_TIMEOUT,
    );
    assert_eq!(shown.as_str(), Some("1"));
    // The node samples the charts itself, as the page asks.
    browser.wait_for(
        "the waiting-tickets chart",
        "Number(document.querySelector('[data-chart=\"1v1.waiting\"] svg').dataset.points) >= 2",
        PAGE_TIMEOUT,
    );
    browser.open(&format!("{console}#/players/cluster-banned"));
    assert_ban_shown(&mut browser, "ban kept in redis");

    // An opponent arrives: the match forms on the owner (no game server takes it, so it stays
    // live) and this node's console lists it, by the owner's ListLiveMatches.
    common::enter(
        &mut ClientServiceClient::new(channel.clone()),
        "1v1",
        &["cluster-opponent"],
    )
    .await;
    poll_until_blocking("the owner's live match listed", || {
        let (status, body) = http_get(
            &metrics,
            "/console/api/matches",
            &[("x-matchmaker-console", "1")],
        );
        let parsed: Value = serde_json::from_str(&body).map_err(|e| format!("{status}: {e}"))?;
        let teams = parsed["live"]["matches"][0]["teams"].to_string();
        if parsed["live"]["total"] == 1 && teams.contains("cluster-waiting") {
            Ok(())
        } else {
            Err(body)
        }
    });
    browser.open(&format!("{console}#/matches"));
    browser.wait_for(
        "the live match in the page",
        "document.querySelectorAll('#live-matches tr[data-match]').length === 1",
        PAGE_TIMEOUT,
    );
    // Its result, reported through this node, is in this node's recent results: the cluster's,
    // by ListRecentResults.
    let (_, body) = http_get(
        &metrics,
        "/console/api/matches",
        &[("x-matchmaker-console", "1")],
    );
    let parsed: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let played = parsed["live"]["matches"][0]["match_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string();
    assert_eq!(parsed["recent_from"], "cluster", "{body}");
    assert_eq!(parsed["recent"].as_array().map(Vec::len), Some(0), "{body}");
    matchmaker::proto::game_server_service_client::GameServerServiceClient::new(channel.clone())
        .report_match_result(proto::MatchResult {
            match_id: played.clone(),
            placements: vec![1, 2],
            ..Default::default()
        })
        .await
        .expect("result");
    let (_, body) = http_get(
        &metrics,
        "/console/api/matches",
        &[("x-matchmaker-console", "1")],
    );
    let parsed: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(parsed["recent"][0]["match_id"], played.as_str(), "{body}");
    assert_eq!(
        parsed["recent"][0]["placements"],
        serde_json::json!([1, 2]),
        "{body}"
    );
    assert!(
        parsed["recent"][0]["applied_unix"].as_i64() > Some(0),
        "{body}"
    );
    assert_eq!(parsed["live"]["total"], 0, "{body}");
    browser.wait_for(
        "the result in the page's recent results",
        &format!(
            "document.querySelector('#recent-matches tbody').textContent.includes('{played}')"
        ),
        PAGE_TIMEOUT,
    );

    // The owner dies. The other node takes the queues over with the bans its engine loads from
    // Redis, and its console reads the ban from there.
    drop(owner);
    poll_until_blocking("the other node owns the queues", || {
        let mut conn = lease.get_connection().map_err(|e| e.to_string())?;
        let value: Option<String> = redis::cmd("GET")
            .arg("{mm}:lease")
            .query(&mut conn)
            .map_err(|e| e.to_string())?;
        match value {
            Some(v) if v.split('|').nth(1) == Some("other") => Ok(()),
            other => Err(format!("lease: {other:?}")),
        }
    });
    let channel = other.channel().await;
    common::queues_answer(&channel).await;
    // Away from the player's page first, so the ban checked is the one read now.
    browser.open(&format!("{console}#/queues"));
    browser.wait_for(
        "the queues view",
        "document.querySelector('#view').dataset.view === 'queues' && !document.querySelector('#player-ban')",
        PAGE_TIMEOUT,
    );
    browser.open(&format!("{console}#/players/cluster-banned"));
    assert_ban_shown(&mut browser, "ban kept in redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_player_leaves_the_consoles_recent_results() {
    let dir = tempfile::tempdir().unwrap();
    let queues = "[queues.1v1.matching]\nwindow = 5000.0\nmin_quality = 0.0\nexpansion = []\n";
    let server = start_server(dir.path(), queues);
    let metrics = server.metrics_addr();
    let channel = server.channel().await;
    let mut client = ClientServiceClient::new(channel.clone());
    let mut game_server = GameServerServiceClient::new(channel.clone());
    let mut stream = common::serve(&mut game_server, "erase-gs").await;
    play(
        &mut client,
        &mut game_server,
        &mut stream,
        "erase-alice",
        "erase-bob",
    )
    .await;
    let recent = || {
        http_get(
            &metrics,
            "/console/api/matches",
            &[("x-matchmaker-console", "1")],
        )
        .1
    };
    poll_until_blocking("the result in the recent list", || {
        let body = recent();
        if body.contains("erase-alice") {
            Ok(())
        } else {
            Err(body)
        }
    });
    AdminServiceClient::new(channel.clone())
        .delete_player(proto::DeletePlayerRequest {
            player_id: "erase-alice".into(),
        })
        .await
        .expect("delete");
    let body = poll_until_blocking("the erased player gone from the recent list", || {
        let body = recent();
        if body.contains("erase-alice") {
            Err(body)
        } else {
            Ok(body)
        }
    });
    assert!(body.contains("erased:"), "{body}");
    assert!(body.contains("erase-bob"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_in_firefox_too() {
    let dir = tempfile::tempdir().unwrap();
    let queues = "[queues.1v1.matching]\nwindow = 5000.0\nmin_quality = 0.0\nexpansion = []\n";
    let server = start_server(dir.path(), queues);
    let metrics = server.metrics_addr();
    let channel = server.channel().await;
    let mut client = ClientServiceClient::new(channel.clone());
    let mut game_server = GameServerServiceClient::new(channel.clone());
    let mut stream = common::serve(&mut game_server, "firefox-gs").await;
    let mut last_match = String::new();
    for (winner, loser) in [("ff-alice", "ff-bob"), ("ff-alice", "ff-bob")] {
        last_match = play(&mut client, &mut game_server, &mut stream, winner, loser).await;
    }
    let formed = queue_stats(&mut AdminServiceClient::new(channel.clone()))
        .await
        .into_iter()
        .find(|q| q.queue == "1v1")
        .unwrap()
        .matches_formed;
    let console = format!("http://{metrics}/console/");
    let mut firefox = bidi::Firefox::launch(1400, 1000);

    firefox.open(&format!("{console}#/queues"));
    let shown = firefox.wait_for(
        "the 1v1 numbers in Firefox",
        "document.querySelector('[data-queue=\"1v1\"][data-stat=\"matches_formed\"]')?.dataset.value",
        PAGE_TIMEOUT,
    );
    let shown: f64 = shown.as_str().and_then(|v| v.parse().ok()).unwrap_or(-1.0);
    assert_eq!(
        shown, formed as f64,
        "matches formed, as GetQueueStats says"
    );

    firefox.open(&format!("{console}#/players/ff-alice"));
    // Before the first result, then after each of the two.
    firefox.wait_for(
        "the rating chart in Firefox",
        "Number(document.querySelector('[data-chart=\"player-rating\"] svg')?.dataset.points) >= 3",
        PAGE_TIMEOUT,
    );
    firefox.wait_for(
        "the player's two matches in Firefox",
        "document.querySelectorAll('#player-matches tbody tr').length == 2",
        PAGE_TIMEOUT,
    );

    firefox.open(&format!("{console}#/matches/{last_match}"));
    firefox.wait_for(
        "the match's result in Firefox",
        "document.querySelectorAll('#match-result tbody tr').length == 2",
        PAGE_TIMEOUT,
    );
}
