//! The event hub's tests: watchers, closing marks, the writer's failures.

use super::*;
use std::time::Duration;

use crate::ids::{MatchId, QueueId};
use crate::rating::Skill;
use crate::records::PlayerChange;

#[test]
fn a_result_gives_one_completed_event_then_one_rating_change_per_player() {
    let skill = |mean| Skill {
        mean,
        deviation: 50.0,
        volatility: 0.06,
    };
    let ack = ResultAck {
        queue: "1v1".into(),
        changes: vec![PlayerChange {
            player_id: PlayerId::new("p1"),
            before: skill(1500.0),
            after: skill(1516.0),
            rank_points_before: 10,
            rank_points_after: 30,
        }],
        report: None,
    };
    let events = result_events("m1", &ack, 7.0, false, &[]);
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![EventKind::MatchCompleted, EventKind::RatingChanged]
    );
    assert_eq!(events[1].player_id, "p1");
    let detail: serde_json::Value = serde_json::from_str(&events[1].detail_json).unwrap();
    assert_eq!(detail["mean_after"], 1516.0);
    assert_eq!(detail["rank_points_after"], 30);
}

/// A periodic pool's result waits for the period: its changes say so; a streaming pool's
/// do not carry the mark at all, nor does the change of a player for whom the match was
/// void (nothing of theirs waits), which says it was void.
#[test]
fn a_periodic_pools_result_marks_its_rating_changes_as_pending_the_period() {
    let skill = Skill {
        mean: 1500.0,
        deviation: 200.0,
        volatility: 0.06,
    };
    let ack = ResultAck {
        queue: "1v1".into(),
        changes: vec![PlayerChange {
            player_id: PlayerId::new("p1"),
            before: skill,
            after: skill,
            rank_points_before: 700,
            rank_points_after: 708,
        }],
        report: None,
    };
    let detail = |pending, void: &[PlayerId]| {
        let events = result_events("m1", &ack, 7.0, pending, void);
        serde_json::from_str::<serde_json::Value>(&events[1].detail_json).unwrap()
    };
    let periodic = detail(true, &[]);
    assert_eq!(periodic["pending_period"], true);
    assert_eq!(periodic["mean_before"], periodic["mean_after"]);
    assert_eq!(periodic["rank_points_after"], 708);
    assert!(periodic.get("void").is_none());
    assert!(detail(false, &[]).get("pending_period").is_none());
    let void = detail(true, &[PlayerId::new("p1")]);
    assert!(void.get("pending_period").is_none());
    assert_eq!(void["void"], true);
}

#[test]
fn a_period_close_is_one_rating_change_per_player_with_no_match() {
    let skill = |mean, deviation| Skill {
        mean,
        deviation,
        volatility: 0.06,
    };
    let closes = [crate::results::PeriodClose {
        period: 41,
        change: PlayerChange {
            player_id: PlayerId::new("p1"),
            before: skill(1500.0, 200.0),
            after: skill(1420.0, 150.0),
            rank_points_before: 700,
            rank_points_after: 668,
        },
    }];
    let events = period_close_events("ranked", "ranked-pool", &closes, 9.0);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        (e.kind, e.match_id.as_str(), e.player_id.as_str(), e.unix),
        (EventKind::RatingChanged, "", "p1", 9.0)
    );
    let detail: serde_json::Value = serde_json::from_str(&e.detail_json).unwrap();
    assert_eq!(
        detail,
        json!({
            "queue": "ranked",
            "pool": "ranked-pool",
            "period": 41,
            "period_close": true,
            "mean_before": 1500.0,
            "mean_after": 1420.0,
            "deviation_before": 200.0,
            "deviation_after": 150.0,
            "rank_points_before": 700,
            "rank_points_after": 668,
        })
    );
}

/// A match's cancel event, as the tests emit it.
fn cancelled(match_id: &str) -> EventRecord {
    EventRecord {
        kind: EventKind::MatchCancelled,
        unix: 1.0,
        match_id: match_id.into(),
        player_id: String::new(),
        detail_json: "{}".into(),
    }
}

#[tokio::test]
async fn a_change_answering_after_its_events_waits_for_events_another_writer_took() {
    let state = crate::state::test_util::state();
    // A cancel's event, taken by a result's batch that is not durable yet.
    state.emit([cancelled("m-1")]);
    let (taken_events, taken) = state.take_emitted();
    assert_eq!(taken_events.len(), 1);
    let flushing = tokio::spawn({
        let state = state.clone();
        async move { state.flush_with_events().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !flushing.is_finished(),
        "answered before the taken event was durable"
    );
    // The batch is durable (or given up): the cancel answers.
    drop(taken);
    tokio::time::timeout(Duration::from_secs(5), flushing)
        .await
        .expect("answers once the earlier take settled")
        .unwrap()
        .unwrap();
    // With nothing on its way, it answers at once.
    tokio::time::timeout(Duration::from_secs(5), state.flush_with_events())
        .await
        .expect("nothing to wait for")
        .unwrap();
}

/// Events taken by a write that wrote nothing come back ahead of those emitted since.
#[test]
fn events_given_back_go_ahead_of_later_ones() {
    let state = crate::state::test_util::state();
    state.emit([cancelled("m-1"), cancelled("m-2")]);
    let (taken_events, taken) = state.take_emitted();
    state.emit([cancelled("m-3")]);
    state.emit_first(taken_events);
    drop(taken);
    let (all, _taken) = state.take_emitted();
    let ids: Vec<&str> = all.iter().map(|e| e.match_id.as_str()).collect();
    assert_eq!(ids, ["m-1", "m-2", "m-3"]);
}

#[test]
fn a_match_event_names_its_queue_teams_and_server() {
    let a = Assignment {
        match_id: MatchId::new("m9"),
        queue: QueueId::new("2v2"),
        teams: vec![vec![PlayerId::new("a")], vec![PlayerId::new("b")]],
        win_probability: vec![0.5, 0.5],
        region: None,
        server_address: "gs-1:7777".into(),
        parties: Vec::new(),
        backfill: Vec::new(),
        left: Vec::new(),
        attributes: Default::default(),
    };
    let e = match_event(EventKind::MatchAllocated, &a, 1.0, "");
    assert_eq!(e.match_id, "m9");
    let detail: serde_json::Value = serde_json::from_str(&e.detail_json).unwrap();
    assert_eq!(detail["queue"], "2v2");
    assert_eq!(detail["teams"], json!([["a"], ["b"]]));
    assert_eq!(detail["server_address"], "gs-1:7777");
}

/// The detail is written straight from the assignment; its text is what the map it was
/// built as before printed, key for key, so stored events read the same either way.
#[test]
fn a_match_events_detail_is_the_text_its_json_map_prints() {
    let mut a = Assignment {
        match_id: MatchId::new("m9"),
        queue: QueueId::new("2v2 \"x\""),
        teams: vec![
            vec![PlayerId::new("a"), PlayerId::new("c\u{e9}")],
            vec![PlayerId::new("b")],
        ],
        win_probability: vec![0.5, 0.5],
        region: None,
        server_address: String::new(),
        parties: Vec::new(),
        backfill: Vec::new(),
        left: Vec::new(),
        attributes: Default::default(),
    };
    let teams = json!([["a", "c\u{e9}"], ["b"]]);
    for (server, reason) in [("", ""), ("gs-1:7777", ""), ("", "no server"), ("gs", "r")] {
        a.server_address = server.into();
        let mut map = json!({ "queue": "2v2 \"x\"", "teams": teams });
        if !server.is_empty() {
            map["server_address"] = json!(server);
        }
        if !reason.is_empty() {
            map["reason"] = json!(reason);
        }
        let e = match_event(EventKind::MatchCancelled, &a, 1.0, reason);
        assert_eq!(e.detail_json, map.to_string(), "{server:?} {reason:?}");
    }
}

fn event(kind: EventKind, player: &str) -> EventRecord {
    EventRecord {
        kind,
        unix: 1.0,
        match_id: String::new(),
        player_id: player.into(),
        detail_json: "{}".into(),
    }
}

async fn recv(rx: &mut mpsc::Receiver<Result<Watched, WatchError>>) -> (u64, String) {
    let watched = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("an event within 5 s")
        .expect("the sender is alive")
        .expect("no store error");
    match watched {
        Watched::Event(seq, e) => (seq, e.player_id),
        Watched::Closed(c) => panic!("a closing mark ({c}) where an event was due"),
    }
}

#[tokio::test]
async fn a_watcher_gets_durable_events_only_and_skips_what_was_trimmed() {
    let config = std::sync::Arc::new(crate::config::Config::from_toml_str("").unwrap());
    let store: crate::store::Store = std::sync::Arc::new(crate::store::MemoryStore::default());
    let state = State::load(config, store.clone()).unwrap();
    let stop = CancellationToken::new();
    state
        .emit_durable(&[
            event(EventKind::PlayerBanned, "a"),
            event(EventKind::PlayerUnbanned, "a"),
        ])
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    tokio::spawn(state.clone().send_events(
        0,
        |k| k == EventKind::PlayerBanned,
        tx,
        stop.clone(),
        None,
    ));
    assert_eq!(recv(&mut rx).await, (1, "a".to_string()));
    // Every event so far is trimmed, and one more is written but not yet durable: a new
    // watcher from 0 waits (it must not spin on what it may not read yet) ...
    store.trim_events(1e12, 0).unwrap();
    store
        .append_events(&[event(EventKind::PlayerBanned, "b")])
        .unwrap();
    let (tx2, mut rx2) = mpsc::channel(8);
    tokio::spawn(
        state
            .clone()
            .send_events(0, |_| true, tx2, stop.clone(), None),
    );
    tokio::task::yield_now().await;
    assert!(rx2.try_recv().is_err(), "nothing durable to send yet");
    // ... until the next durable write publishes both.
    state
        .emit_durable(&[event(EventKind::PlayerBanned, "c")])
        .await
        .unwrap();
    assert_eq!(recv(&mut rx2).await, (3, "b".to_string()));
    assert_eq!(recv(&mut rx2).await, (4, "c".to_string()));
    // The first watcher, filtering, sees only the bans.
    assert_eq!(recv(&mut rx).await, (3, "b".to_string()));
    assert_eq!(recv(&mut rx).await, (4, "c".to_string()));
    stop.cancel();
}

/// A watcher resuming after a cursor whose next events retention dropped hears it (at the
/// call, and from the stream when they go while it waits), with the oldest kept; from 0, or
/// from a cursor whose next event is kept, it reads on.
#[tokio::test]
async fn a_watcher_behind_what_retention_dropped_is_told_so_and_the_oldest_kept() {
    let config = std::sync::Arc::new(crate::config::Config::from_toml_str("").unwrap());
    let store: crate::store::Store = std::sync::Arc::new(crate::store::MemoryStore::default());
    let state = State::load(config, store.clone()).unwrap();
    let stop = CancellationToken::new();
    let five: Vec<EventRecord> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|p| event(EventKind::PlayerBanned, p))
        .collect();
    state.emit_durable(&five).await.unwrap();
    store.trim_events(0.0, 2).unwrap();
    let trimmed = EventsTrimmed {
        after: 1,
        oldest: Some(4),
        last: 5,
    };
    assert_eq!(state.resumable_after(1).unwrap(), Err(trimmed));
    assert!(
        trimmed.to_string().contains("the oldest kept is 4"),
        "{trimmed}"
    );
    for fine in [0, 3, 4, 5, 6] {
        assert_eq!(state.resumable_after(fine).unwrap(), Ok(()), "{fine}");
    }
    let (tx, mut rx) = mpsc::channel(8);
    tokio::spawn(
        state
            .clone()
            .send_events(1, |_| true, tx, stop.clone(), None),
    );
    let told = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("an answer within 5 s")
        .expect("the sender is alive");
    assert!(
        matches!(told, Err(WatchError::Trimmed(t)) if t == trimmed),
        "{told:?}"
    );
    let (tx, mut from_zero) = mpsc::channel(8);
    tokio::spawn(
        state
            .clone()
            .send_events(0, |_| true, tx, stop.clone(), None),
    );
    assert_eq!(recv(&mut from_zero).await, (4, "d".to_string()));
    // A watcher that read up to 5 waits; what comes next is dropped before it reads it.
    let (tx, mut waiting) = mpsc::channel(8);
    tokio::spawn(
        state
            .clone()
            .send_events(5, |_| true, tx, stop.clone(), None),
    );
    store.trim_events(1e12, 0).unwrap();
    state
        .emit_durable(&[event(EventKind::PlayerBanned, "f")])
        .await
        .unwrap();
    store.trim_events(1e12, 0).unwrap();
    state
        .emit_durable(&[event(EventKind::PlayerBanned, "g")])
        .await
        .unwrap();
    let told = tokio::time::timeout(Duration::from_secs(5), waiting.recv())
        .await
        .expect("an answer within 5 s")
        .expect("the sender is alive");
    // It may have read f before the trim; if not, it is told f went.
    match told {
        Ok(Watched::Event(6, _)) => assert_eq!(recv(&mut waiting).await, (7, "g".to_string())),
        Err(WatchError::Trimmed(t)) => assert_eq!(t.after, 5),
        other => panic!("{other:?}"),
    }
    stop.cancel();
}

/// A closing watcher says how far the log is closed once it sent every durable event, and
/// events whose write failed become durable (and sent) by its own flush after a second
/// without progress, though nothing else is written.
#[tokio::test]
async fn a_closing_watcher_marks_the_log_closed_and_flushes_what_a_failed_write_left() {
    let config = std::sync::Arc::new(crate::config::Config::from_toml_str("").unwrap());
    let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
    let store: crate::store::Store = memory.clone();
    memory.number_events_as_shard(3);
    let state = State::load(config, store.clone()).unwrap();
    let stop = CancellationToken::new();
    state
        .emit_durable(&[event(EventKind::PlayerBanned, "a")])
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    tokio::spawn(state.clone().send_events(
        0,
        |_| true,
        tx,
        stop.clone(),
        Some(Duration::from_millis(10)),
    ));
    async fn recv(rx: &mut mpsc::Receiver<Result<Watched, WatchError>>) -> Watched {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("sent within 5 s")
            .unwrap()
            .unwrap()
    }
    let Watched::Event(a, _) = recv(&mut rx).await else {
        panic!("the event first");
    };
    assert_eq!(a & 0xF, 3, "numbered as shard 3");
    // Closed past it, further as time passes.
    let Watched::Closed(mark) = recv(&mut rx).await else {
        panic!("a closing mark");
    };
    assert!(mark >= a);
    let Watched::Closed(later) = recv(&mut rx).await else {
        panic!("a closing mark");
    };
    assert!(later > mark);
    // A write whose flush fails: given a cursor, neither durable nor sent, and never closed
    // over.
    memory.fail_flushes(Some(crate::store::FlushFailure::Disk));
    assert!(
        state
            .emit_durable(&[event(EventKind::PlayerBanned, "b")])
            .await
            .is_err()
    );
    let given = store.append_events(&[]).unwrap();
    let mut last_mark = later;
    let until = tokio::time::Instant::now() + Duration::from_millis(300);
    while let Ok(Some(w)) = tokio::time::timeout_at(until, rx.recv()).await {
        match w.unwrap() {
            Watched::Closed(c) => {
                assert!(c < given, "{c} closes over {given}, not durable");
                last_mark = c;
            }
            other => panic!("nothing durable came: {other:?}"),
        }
    }
    // Once flushes go through again, the watcher's own flush makes it durable.
    memory.fail_flushes(None);
    let got = loop {
        match recv(&mut rx).await {
            Watched::Closed(c) => assert!(c < given && c >= last_mark),
            got => break got,
        }
    };
    assert!(
        matches!(&got, Watched::Event(b, e) if *b == given && e.player_id == "b"),
        "{got:?}"
    );
    stop.cancel();
}

/// A buffer the test's log lines go to.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn lines_with(&self, text: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(text))
            .map(str::to_owned)
            .collect()
    }
}

fn events_errors(recorder: &metrics_exporter_prometheus::PrometheusRecorder) -> String {
    recorder
        .handle()
        .render()
        .lines()
        .find(|l| l.starts_with(crate::telemetry::STORE_ERRORS) && l.contains("op=\"events\""))
        .map_or("0".into(), |l| l.rsplit(' ').next().unwrap().to_string())
}

/// Once the store's flushes fail for good, every pass of the writer fails: each is counted,
/// and logged once (then at most once a minute). A fenced store's are not counted.
#[tokio::test]
async fn a_writer_whose_flushes_keep_failing_counts_each_pass_and_logs_once() {
    for (how, counted, level) in [
        (crate::store::FlushFailure::Disk, "3", "ERROR"),
        (crate::store::FlushFailure::Fenced, "0", "WARN"),
    ] {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer({
                let logs = logs.clone();
                move || logs.clone()
            })
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let _local = metrics::set_default_local_recorder(&recorder);
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        memory.fail_flushes(Some(how));
        let failing = LogLimit::new(LOG_EVERY);
        for player in ["a", "b", "c"] {
            state.emit([event(EventKind::PlayerBanned, player)]);
            state.write_emitted(&failing).await;
        }
        assert_eq!(events_errors(&recorder), counted, "{how:?}");
        let logged = logs.lines_with("events not written");
        assert_eq!(logged.len(), 1, "{how:?}: {logged:?}");
        assert!(logged[0].contains(level), "{how:?}: {logged:?}");
    }
}
