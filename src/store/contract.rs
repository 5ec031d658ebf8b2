//! What every storage backend must do, as tests run against each of them. A new backend adds
//! one line per test at the bottom with its own `reopen` (a fresh handle on the same data).

use std::collections::BTreeMap;

use super::memory::MemoryStore;
use super::sled::SledStore;
use super::*;
use crate::rating::Skill;
use crate::records::MatchRecord;

type Reopen<'a> = &'a mut dyn FnMut() -> Store;

pub(super) fn record(mean: f64) -> BTreeMap<String, PoolRecord> {
    BTreeMap::from([(
        "1v1".to_string(),
        PoolRecord {
            skill: Skill {
                mean,
                deviation: 80.0,
                volatility: 0.06,
            },
            rank_points: 1234,
            games: 7,
            wins: 4,
            last_played_unix: Some(1_700_000_000),
            ladder_floor: 0,
            win_streak: 0,
            period: None,
        },
    )])
}

pub(super) fn entry(match_id: &str, player: &str, mean: f64) -> JournalEntry {
    JournalEntry {
        match_id: MatchId::from(match_id),
        applied_unix: 1.0,
        pool: "1v1".into(),
        records: vec![(PlayerId::from(player), record(mean)["1v1"].clone())],
        parties: Vec::new(),
        ack: ResultAck {
            queue: "1v1".into(),
            changes: Vec::new(),
            report: None,
        },
        kind: EntryKind::Result,
        season: None,
        calibration: None,
        history: None,
    }
}

pub(super) fn stored(id: &str, server: &str, formed_unix: f64) -> StoredMatch {
    StoredMatch {
        match_id: MatchId::from(id),
        queue: "1v1".into(),
        teams: vec![vec![PlayerId::from("a")], vec![PlayerId::from("b")]],
        win_probability: vec![0.5, 0.5],
        region: None,
        server_address: server.into(),
        formed_unix,
        parties: Vec::new(),
        backfill: Vec::new(),
        left: Vec::new(),
        roles: BTreeMap::new(),
        attributes: BTreeMap::from([(
            "mode".to_string(),
            crate::matching::AttributeValue::Text("ranked".into()),
        )]),
        started_unix: None,
        tickets: Vec::new(),
        kept_unix: None,
        backfill_opened_unix: None,
    }
}

pub(super) fn encoded(matches: &[StoredMatch]) -> Vec<Vec<u8>> {
    matches.iter().map(|m| encode_match(m).unwrap()).collect()
}

fn players_and_parties_survive_a_reopen(reopen: Reopen<'_>) {
    {
        let store = reopen();
        let (p1, p2) = (PlayerId::from("p1"), PlayerId::from("p2"));
        store
            .put_players(&[(&p1, &record(1500.0)), (&p2, &record(1600.0))])
            .unwrap();
        store.put_players(&[(&p1, &record(1510.0))]).unwrap();
        let party = BTreeMap::from([(
            "2v2".to_string(),
            PartyRecord {
                skill: record(1400.0)["1v1"].skill,
                games: 2,
                last_played_unix: None,
            },
        )]);
        store.put_parties(&[("p1\u{1f}p2", &party)]).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let players: Vec<_> = store.load_players().unwrap().map(Result::unwrap).collect();
    assert_eq!(
        players,
        vec![
            (PlayerId::from("p1"), record(1510.0)),
            (PlayerId::from("p2"), record(1600.0))
        ]
    );
    assert_eq!(store.player_count(), 2);
    let parties = store.load_parties().unwrap();
    assert_eq!(parties.len(), 1);
    assert_eq!(parties[0].0, "p1\u{1f}p2");
    assert_eq!(parties[0].1["2v2"].games, 2);
}

fn the_journal_replays_in_order_and_a_snapshot_trims_it_but_keeps_acknowledgements(
    reopen: Reopen<'_>,
) {
    {
        let store = reopen();
        assert_eq!(
            (store.last_seq().unwrap(), store.snapshot_seq().unwrap()),
            (0, 0)
        );
        store
            .append_journal(1, &[entry("m1", "a", 1510.0), entry("m2", "b", 1490.0)])
            .unwrap();
        store
            .append_journal(3, &[entry("m3", "a", 1520.0)])
            .unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let replayed: Vec<(u64, String)> = store
        .journal_after(1)
        .map(|e| e.map(|(seq, e)| (seq, e.match_id.to_string())).unwrap())
        .collect();
    assert_eq!(replayed, vec![(2, "m2".to_string()), (3, "m3".to_string())]);
    assert_eq!(store.last_seq().unwrap(), 3);
    assert_eq!(
        store
            .result_of(&MatchId::from("m2"))
            .unwrap()
            .unwrap()
            .queue,
        "1v1"
    );
    assert_eq!(store.result_of(&MatchId::from("m9")).unwrap(), None);
    store.finish_snapshot(2).unwrap();
    assert_eq!(store.snapshot_seq().unwrap(), 2);
    let left: Vec<u64> = store.journal_after(0).map(|e| e.unwrap().0).collect();
    assert_eq!(left, vec![3]);
    assert!(store.result_of(&MatchId::from("m1")).unwrap().is_some());
    store.finish_snapshot(3).unwrap();
    assert_eq!(store.journal_after(0).count(), 0);
    assert_eq!(
        store.last_seq().unwrap(),
        3,
        "sequence numbers never go back"
    );
}

fn an_admin_entry_writes_season_state_but_no_acknowledgement(reopen: Reopen<'_>) {
    let store = reopen();
    let p1 = PlayerId::from("p1");
    let rank = SeasonRank {
        player: "p1".into(),
        tier: "Master".into(),
        rank_points: 1350,
        mean_week_rp: Some(1300.0),
        place: Some(1),
    };
    let admin = |week_rp, ranks| JournalEntry {
        match_id: MatchId::new("admin:season-reset:soft:lad:1:1"),
        pool: "lad".into(),
        kind: EntryKind::Admin,
        season: Some(SeasonWrite {
            state: SeasonState { season: 1, week: 1 },
            week_rp,
            ranks,
        }),
        ..entry("unused", "p1", 1500.0)
    };
    store
        .append_journal(
            1,
            &[
                admin(Some((1, 1, vec![(p1.clone(), 1350)])), None),
                admin(None, Some((1, vec![rank.clone()]))),
            ],
        )
        .unwrap();
    assert_eq!(
        store
            .result_of(&MatchId::new("admin:season-reset:soft:lad:1:1"))
            .unwrap(),
        None
    );
    assert_eq!(
        store.season_state("lad").unwrap(),
        SeasonState { season: 1, week: 1 }
    );
    assert_eq!(store.season_state("other").unwrap(), SeasonState::default());
    assert_eq!(
        store.week_rp("lad", 1).unwrap(),
        vec![vec![(p1.clone(), 1350)]]
    );
    assert!(store.week_rp("lad", 2).unwrap().is_empty());
    assert_eq!(store.player_weeks("lad", &p1).unwrap(), vec![(1, 1, 1350)]);
    assert_eq!(
        store.player_season_ranks("lad", &p1).unwrap(),
        vec![(1, rank.clone())]
    );
    assert_eq!(store.season_ranks("lad", 1).unwrap(), Some(vec![rank]));
    assert_eq!(store.season_ranks("lad", 2).unwrap(), None);
    // A snapshot trims the entries but keeps the season records.
    store.finish_snapshot(2).unwrap();
    assert_eq!(store.journal_after(0).count(), 0);
    assert_eq!(store.season_state("lad").unwrap().week, 1);
    assert_eq!(store.player_weeks("lad", &p1).unwrap().len(), 1);
}

fn live_matches_load_newest_copy_without_ended_ones_across_a_reopen(reopen: Reopen<'_>) {
    {
        let store = reopen();
        store
            .put_segments(
                &[
                    (
                        1,
                        &encoded(&[stored("m1", "s1", 1.0), stored("m2", "s1", 2.0)]),
                    ),
                    (2, &encoded(&[stored("m3", "s2", 3.0)])),
                ],
                &[],
            )
            .unwrap();
        // m1 rewritten (a backfill) into segment 3; m3 cancelled, segment 2 dropped with it.
        store
            .put_segments(&[(3, &encoded(&[stored("m1", "s1-again", 1.0)]))], &[])
            .unwrap();
        store.end_matches(&[MatchId::from("m3")], &[2]).unwrap();
        // m2's stale copy in segment 1 must not outlive a cancel either.
        store.end_matches(&[MatchId::from("m2")], &[]).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let (live, last) = store.load_matches().unwrap();
    let ids: Vec<(&str, &str)> = live
        .iter()
        .map(|m| (m.match_id.as_str(), m.server_address.as_str()))
        .collect();
    assert_eq!(ids, vec![("m1", "s1-again")]);
    assert_eq!(last, 3);
    // Compaction leaves exactly the survivors, in the given segments, with no marks.
    let more = [stored("m4", "s4", 4.0)];
    store
        .compact_matches(&[(4, &encoded(&live)), (5, &encoded(&more))])
        .unwrap();
    let (again, last) = store.load_matches().unwrap();
    assert_eq!(again, vec![live[0].clone(), more[0].clone()]);
    assert_eq!(last, 5);
    store.compact_matches(&[]).unwrap();
    assert_eq!(store.load_matches().unwrap(), (Vec::new(), 0));
}

fn pool_calibrations_survive_a_reopen_and_the_latest_wins(reopen: Reopen<'_>) {
    use crate::rating::calibration::Calibration;
    let first = Calibration {
        slope: 1.25,
        variance: 0.001,
        results: 40,
    };
    let later = Calibration {
        slope: 1.5,
        variance: 0.000_5,
        results: 90,
    };
    {
        let store = reopen();
        assert_eq!(store.load_calibrations().unwrap(), Vec::new());
        store
            .put_calibrations(&[("1v1", &first), ("5v5", &first)])
            .unwrap();
        // A snapshot's mark writes the later one with it, and its trim leaves them alone.
        store.finish_snapshot_with(0, &[("1v1", &later)]).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    assert_eq!(
        store.load_calibrations().unwrap(),
        vec![("1v1".to_string(), later), ("5v5".to_string(), first)]
    );
    // A journal entry carries its observation through the store unchanged.
    let mut e = entry("m-cal", "p1", 1500.0);
    e.calibration = Some(crate::rating::calibration::Observation::two(0.7, 1.0));
    store.append_journal(1, std::slice::from_ref(&e)).unwrap();
    let back: Vec<JournalEntry> = store.journal_after(0).map(|r| r.unwrap().1).collect();
    assert_eq!(back, vec![e]);
}

fn waiting_tickets_survive_a_reopen_oldest_first(reopen: Reopen<'_>) {
    let store = reopen();
    if !store.keeps_tickets() {
        // The embedded store keeps no tickets: every call is a no-op and nothing loads.
        store.put_ticket(&ticket("t-x", 1.0)).unwrap();
        assert!(store.load_tickets().unwrap().is_empty());
        return;
    }
    store.put_ticket(&ticket("t-late", 30.0)).unwrap();
    store.put_ticket(&ticket("t-early", 10.0)).unwrap();
    store.put_ticket(&ticket("t-gone", 20.0)).unwrap();
    store.remove_tickets(&[TicketId::new("t-gone")]).unwrap();
    store.flush().unwrap();
    drop(store);
    let back = reopen().load_tickets().unwrap();
    assert_eq!(back, vec![ticket("t-early", 10.0), ticket("t-late", 30.0)]);
}

pub(super) fn ticket(id: &str, entered_unix: f64) -> StoredTicket {
    StoredTicket {
        ticket_id: TicketId::new(id),
        queue: "2v2".into(),
        players: vec![PlayerId::from("a"), PlayerId::from("b")],
        entered_unix,
        party_skill: Some((1500.0, 120.0)),
        region_latency_ms: vec![("eu".into(), 30)],
        roles: vec![vec!["tank".into()], Vec::new()],
        attributes: BTreeMap::from([
            (
                "mode".to_string(),
                crate::matching::AttributeValue::Text("ranked".into()),
            ),
            (
                "maps".to_string(),
                crate::matching::AttributeValue::Tags(vec!["dust".into(), "nuke".into()]),
            ),
            (
                "level".to_string(),
                crate::matching::AttributeValue::Number(12.5),
            ),
        ]),
        avoid: vec![PlayerId::from("griefer")],
    }
}

fn history_exports_and_imports_every_result_and_season_record(reopen: Reopen<'_>) {
    let store = reopen();
    let p1 = PlayerId::from("p1");
    let rank = SeasonRank {
        player: "p1".into(),
        tier: "Master".into(),
        rank_points: 1350,
        mean_week_rp: Some(1300.0),
        place: Some(1),
    };
    let history = History {
        results: vec![acks::acked("m-1"), acks::acked("m-2")],
        seasons: vec![("lad".into(), SeasonState { season: 2, week: 3 })],
        weeks: vec![("lad".into(), 2, 3, vec![(p1.clone(), 1200)])],
        ranks: vec![("lad".into(), 1, vec![rank.clone()])],
    };
    store.import_history(&history).unwrap();
    store.flush().unwrap();
    drop(store);
    let store = reopen();
    assert_eq!(store.export_history().unwrap(), history);
    assert!(store.result_of(&MatchId::new("m-2")).unwrap().is_some());
    assert_eq!(store.season_state("lad").unwrap().week, 3);
    assert_eq!(store.player_weeks("lad", &p1).unwrap(), vec![(2, 3, 1200)]);
    assert_eq!(
        store.player_season_ranks("lad", &p1).unwrap(),
        vec![(1, rank)]
    );
    // A journaled result joins the history.
    store
        .append_journal(1, &[entry("m-3", "p2", 1500.0)])
        .unwrap();
    assert_eq!(store.export_history().unwrap().results.len(), 3);
}

/// Waits for a store future: on the runtime when there is one (Redis reads need its
/// connection), else by polling it once (sled and memory answer at once).
pub(super) fn wait<T>(f: StoreFuture<'_, T>) -> T {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        return handle.block_on(f).unwrap();
    }
    let mut f = f;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r.unwrap(),
        std::task::Poll::Pending => panic!("an embedded store's read waited"),
    }
}

pub(super) fn history(id: &str, teams: &[&[&str]], keep: u32) -> HistoryWrite {
    HistoryWrite {
        record: MatchRecord {
            match_id: MatchId::from(id),
            queue: "1v1".into(),
            phase: crate::records::EndedPhase::Completed,
            teams: teams
                .iter()
                .map(|t| t.iter().map(|p| PlayerId::from(*p)).collect())
                .collect(),
            placements: vec![1, 2],
            changes: Vec::new(),
            server_address: "gs-1".into(),
            win_probability: vec![0.625, 0.375],
            formed_unix: 1_700_000_000.25,
            started_unix: Some(1_700_000_010.5),
            ended_unix: 1_700_000_100.75,
        },
        keep,
    }
}

fn ids(store: &Store, player: &str) -> Vec<String> {
    wait(store.player_matches(&PlayerId::from(player)))
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn past(store: &Store, player: &str) -> Vec<String> {
    wait(store.past_matches(&PlayerId::from(player)))
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn match_history_keeps_each_players_newest_and_survives_a_reopen(reopen: Reopen<'_>) {
    {
        let store = reopen();
        store
            .append_history(&[history("a", &[&["p1"], &["p2"]], 2)])
            .unwrap();
        // A result's record rides in its journal entry's batch.
        let mut e = entry("b", "p1", 1500.0);
        e.history = Some(history("b", &[&["p1"], &["p3"]], 2));
        store.append_journal(1, std::slice::from_ref(&e)).unwrap();
        store
            .append_history(&[history("c", &[&["p1"]], 2), history("d", &[&["p2"]], 2)])
            .unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    assert_eq!(ids(&store, "p1"), ["c", "b"]);
    assert_eq!(ids(&store, "p2"), ["d", "a"]);
    assert_eq!(ids(&store, "p3"), ["b"]);
    assert!(ids(&store, "nobody").is_empty());
    // p1 no longer holds a, p2 still does.
    let a = wait(store.match_record(&MatchId::from("a"))).expect("a is p2's");
    assert_eq!(a, history("a", &[&["p1"], &["p2"]], 2).record);
    // A snapshot's trim of the journal leaves the history alone.
    store.finish_snapshot(1).unwrap();
    store
        .append_history(&[history("e", &[&["p2"]], 2)])
        .unwrap();
    assert_eq!(ids(&store, "p2"), ["e", "d"]);
    assert_eq!(
        wait(store.match_record(&MatchId::from("a"))),
        None,
        "held by nobody"
    );
    let wanted: Vec<MatchId> = ["c", "a", "b"].into_iter().map(MatchId::from).collect();
    let found: Vec<String> = wait(store.match_records(&wanted))
        .iter()
        .map(|r| r.match_id.to_string())
        .collect();
    assert_eq!(found, ["c", "b"]);
    assert!(wait(store.match_records(&[])).is_empty());
}

fn party_rosters_survive_a_reopen(reopen: Reopen<'_>) {
    let roster = |id: &str, members: &[&str]| PartyRoster {
        party_id: PartyId::from(id),
        invite_code: format!("CODE{id}"),
        members: members.iter().map(|m| PlayerId::from(*m)).collect(),
        leader: PlayerId::from(members[0]),
        created_unix: 1_700_000_000.5,
        active_unix: 1_700_000_100.5,
    };
    {
        let store = reopen();
        assert!(store.load_rosters().unwrap().is_empty());
        store
            .put_rosters(&[&roster("x1", &["a"]), &roster("x2", &["b", "c"])])
            .unwrap();
        store.put_rosters(&[&roster("x1", &["a", "d"])]).unwrap();
        store.put_rosters(&[&roster("x3", &["e"])]).unwrap();
        store.remove_rosters(&[PartyId::from("x3")]).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    assert_eq!(
        store.load_rosters().unwrap(),
        vec![roster("x1", &["a", "d"]), roster("x2", &["b", "c"])]
    );
}

fn event(kind: EventKind, unix: f64, player: &str) -> EventRecord {
    EventRecord {
        kind,
        unix,
        match_id: String::new(),
        player_id: player.into(),
        detail_json: "{}".into(),
    }
}

fn bans_audit_and_events_survive_a_reopen_and_numbers_are_never_reused(reopen: Reopen<'_>) {
    {
        let store = reopen();
        let ban = |p: &str, until| Ban {
            player: PlayerId::from(p),
            until_unix: until,
            reason: format!("reason {p}"),
            since_unix: 1.0,
        };
        store.put_ban(&ban("p2", 0)).unwrap();
        store.put_ban(&ban("p1", 99)).unwrap();
        store.put_ban(&ban("p3", 5)).unwrap();
        assert!(store.remove_ban(&PlayerId::from("p3")).unwrap());
        assert!(!store.remove_ban(&PlayerId::from("nobody")).unwrap());
        for i in 1..=3u32 {
            let a = AuditRecord {
                unix: f64::from(i),
                actor: "ops".into(),
                action: format!("Call{i}"),
                detail: String::new(),
            };
            assert_eq!(store.append_audit(&a).unwrap(), u64::from(i));
        }
        assert_eq!(store.append_events(&[]).unwrap(), 0);
        let last = store
            .append_events(&[
                event(EventKind::PlayerBanned, 10.0, "p1"),
                event(EventKind::MatchFormed, 20.0, ""),
            ])
            .unwrap();
        assert_eq!(last, 2);
        assert_eq!(
            store
                .append_events(&[event(EventKind::RatingChanged, 30.0, "p2")])
                .unwrap(),
            3
        );
        store.flush().unwrap();
    }
    let store = reopen();
    let bans = store.load_bans().unwrap();
    let players: Vec<&str> = bans.iter().map(|b| b.player.as_str()).collect();
    assert_eq!(players, vec!["p1", "p2"]);
    assert_eq!(
        (bans[0].until_unix, bans[0].reason.as_str()),
        (99, "reason p1")
    );
    let audit = store.audit_after(1, 10).unwrap();
    let actions: Vec<(u64, &str)> = audit.iter().map(|(s, a)| (*s, a.action.as_str())).collect();
    assert_eq!(actions, vec![(2, "Call2"), (3, "Call3")]);
    assert_eq!(store.audit_after(0, 1).unwrap()[0].0, 1);
    let events = store.events_after(1, 10).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!((events[0].0, events[0].1.kind), (2, EventKind::MatchFormed));
    // Trimming drops the events beyond a count, then the old ones, and a later event still
    // gets a new number.
    assert_eq!(store.trim_events(0.0, 2).unwrap(), 1);
    assert_eq!(store.events_after(0, 10).unwrap()[0].0, 2);
    assert_eq!(store.trim_events(25.0, 100).unwrap(), 1);
    assert_eq!(store.events_after(0, 10).unwrap().len(), 1);
    assert_eq!(store.trim_events(0.0, 100).unwrap(), 0);
    assert_eq!(store.trim_events(1e12, 100).unwrap(), 1);
    // The audit log trims the same way: beyond a count, then by age.
    assert_eq!(store.trim_audit(0.0, 2).unwrap(), 1);
    assert_eq!(store.trim_audit(2.5, 100).unwrap(), 1);
    assert_eq!(store.trim_audit(0.0, 100).unwrap(), 0);
    store.flush().unwrap();
    drop(store);
    let store = reopen();
    assert!(store.events_after(0, 10).unwrap().is_empty());
    let kept: Vec<u64> = store
        .audit_after(0, 10)
        .unwrap()
        .iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(kept, vec![3], "trimmed audit entries stay gone");
    assert_eq!(
        store
            .append_events(&[event(EventKind::PlayerDeleted, 40.0, "p9")])
            .unwrap(),
        4,
        "cursors are never reused"
    );
    assert_eq!(
        store
            .append_audit(&AuditRecord {
                unix: 4.0,
                actor: "ops".into(),
                action: "Call4".into(),
                detail: String::new(),
            })
            .unwrap(),
        4
    );
}

fn erasing_a_player_removes_every_record_naming_them_and_only_them(reopen: Reopen<'_>) {
    let (p1, p2) = (PlayerId::from("p1"), PlayerId::from("p2"));
    {
        let store = reopen();
        store
            .put_players(&[(&p1, &record(1500.0)), (&p2, &record(1600.0))])
            .unwrap();
        let party = BTreeMap::from([(
            "2v2".to_string(),
            PartyRecord {
                skill: record(1400.0)["1v1"].skill,
                games: 2,
                last_played_unix: None,
            },
        )]);
        store
            .put_parties(&[("p1\u{1f}p2", &party), ("p2\u{1f}p3", &party)])
            .unwrap();
        // A result naming both, and an admin entry with season records naming both.
        let mut both = entry("m1", "p1", 1510.0);
        both.records
            .push((p2.clone(), record(1590.0)["1v1"].clone()));
        let rank = |p: &str| SeasonRank {
            player: p.into(),
            tier: "Gold".into(),
            rank_points: 10,
            mean_week_rp: None,
            place: None,
        };
        let season = JournalEntry {
            match_id: MatchId::new("admin:x"),
            kind: EntryKind::Admin,
            season: Some(SeasonWrite {
                state: SeasonState { season: 1, week: 1 },
                week_rp: Some((1, 1, vec![(p1.clone(), 5), (p2.clone(), 6)])),
                ranks: Some((1, vec![rank("p1"), rank("p2")])),
            }),
            ..entry("unused", "p1", 1500.0)
        };
        store.append_journal(1, &[both, season]).unwrap();
        store
            .put_ban(&Ban {
                player: p1.clone(),
                until_unix: 0,
                reason: "x".into(),
                since_unix: 0.0,
            })
            .unwrap();
        store
            .erase_player(&p1, &PlayerId::from("erased:1"))
            .unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let players: Vec<PlayerId> = store
        .load_players()
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(players, vec![p2.clone()]);
    let parties: Vec<String> = store
        .load_parties()
        .unwrap()
        .into_iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(parties, vec!["p2\u{1f}p3".to_string()]);
    let journal: Vec<JournalEntry> = store.journal_after(0).map(|r| r.unwrap().1).collect();
    assert_eq!(journal.len(), 2, "entries stay, without the erased player");
    for e in &journal {
        assert!(e.records.iter().all(|(p, _)| p != &p1), "{e:?}");
    }
    assert_eq!(journal[0].records.len(), 1);
    assert_eq!(journal[0].records[0].0, p2);
    assert_eq!(
        store.week_rp("lad", 1).unwrap(),
        Vec::<Vec<(PlayerId, RankPoints)>>::new()
    );
    assert_eq!(
        store.week_rp("1v1", 1).unwrap(),
        vec![vec![(p2.clone(), 6)]]
    );
    assert!(store.player_weeks("1v1", &p1).unwrap().is_empty());
    assert_eq!(store.player_weeks("1v1", &p2).unwrap(), vec![(1, 1, 6)]);
    assert!(store.player_season_ranks("1v1", &p1).unwrap().is_empty());
    let ranks = store.season_ranks("1v1", 1).unwrap().unwrap();
    assert_eq!(ranks.len(), 1);
    assert_eq!(ranks[0].player, "p2");
    assert!(store.load_bans().unwrap().is_empty());
}

fn erasing_a_player_drops_their_history_and_marks_them_where_others_keep_it(reopen: Reopen<'_>) {
    let (gone, marker) = (
        PlayerId::from("gone"),
        PlayerId::from("erased:0123456789ab"),
    );
    let change = |p: &str| crate::records::PlayerChange {
        player_id: PlayerId::from(p),
        before: record(1500.0)["1v1"].skill,
        after: record(1510.0)["1v1"].skill,
        rank_points_before: 0,
        rank_points_after: 10,
    };
    {
        let store = reopen();
        // "alone" only gone's history holds; "shared" gone and p2's; "other" only p2's.
        store
            .append_history(&[
                history("alone", &[&["gone"]], 3),
                history("other", &[&["p2"], &["p3"]], 3),
            ])
            .unwrap();
        // A result: its record, its acknowledgement and its journal entry name gone.
        let mut e = entry("shared", "gone", 1510.0);
        e.records
            .push((PlayerId::from("p2"), record(1490.0)["1v1"].clone()));
        e.ack.changes = vec![change("gone"), change("p2")];
        let mut h = history("shared", &[&["gone"], &["p2"]], 3);
        h.record.changes = e.ack.changes.clone();
        e.history = Some(h);
        // An older result, its entry already trimmed by a snapshot: only its ack stays.
        let mut old = entry("old", "p3", 1500.0);
        old.ack.changes = vec![change("p3"), change("gone")];
        store.append_journal(1, std::slice::from_ref(&old)).unwrap();
        store.finish_snapshot(1).unwrap();
        store.append_journal(2, std::slice::from_ref(&e)).unwrap();
        store.flush().unwrap();
        assert_eq!(ids(&store, "gone"), ["shared", "alone"]);
        store.erase_player(&gone, &marker).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    assert!(ids(&store, "gone").is_empty());
    assert_eq!(wait(store.match_record(&MatchId::from("alone"))), None);
    let shared = wait(store.match_record(&MatchId::from("shared"))).expect("p2 keeps it");
    assert_eq!(
        shared.teams,
        vec![vec![marker.clone()], vec![PlayerId::from("p2")]]
    );
    let named: Vec<&PlayerId> = shared.changes.iter().map(|c| &c.player_id).collect();
    assert_eq!(named, [&marker, &PlayerId::from("p2")]);
    assert_eq!(ids(&store, "p2"), ["shared", "other"]);
    // Acknowledgements stay (a repeated report is still a duplicate) and name the marker.
    for (id, at) in [("shared", 0), ("old", 1)] {
        let ack = store.result_of(&MatchId::from(id)).unwrap().expect(id);
        assert_eq!(ack.changes[at].player_id, marker, "{id}");
        assert_eq!(ack.changes.len(), 2);
    }
    let journal: Vec<JournalEntry> = store.journal_after(1).map(|r| r.unwrap().1).collect();
    assert_eq!(journal.len(), 1, "the result's entry stays for p2");
    let text = serde_json::to_string(&journal).unwrap();
    assert!(!text.contains("\"gone\""), "{text}");
    assert!(text.contains(marker.as_str()), "{text}");
    // The record left with its last holder: p2's next two matches push it out of p2's list.
    store
        .append_history(&[history("n1", &[&["p2"]], 2), history("n2", &[&["p2"]], 2)])
        .unwrap();
    assert_eq!(wait(store.match_record(&MatchId::from("shared"))), None);
    assert!(
        wait(store.match_record(&MatchId::from("other"))).is_some(),
        "p3's"
    );
    // The id starts again with a history of its own.
    store
        .append_history(&[history("new", &[&["gone"]], 3)])
        .unwrap();
    assert_eq!(ids(&store, "gone"), ["new"]);
}

fn imports_keep_lists_holders_and_log_numbers_and_events_ride_with_their_entry(reopen: Reopen<'_>) {
    let audit = AuditRecord {
        unix: 1.0,
        actor: "ops".into(),
        action: "BanPlayer".into(),
        detail: String::new(),
    };
    {
        let store = reopen();
        let (a, b) = (
            history("a", &[&["p1"], &["p2", "p3"]], 1),
            history("b", &[&["p1"]], 1),
        );
        store
            .import_match_history(
                &[
                    (
                        PlayerId::from("p1"),
                        vec![MatchId::from("a"), MatchId::from("b")],
                    ),
                    (PlayerId::from("p2"), vec![MatchId::from("a")]),
                ],
                // "a" left p3's list while the others held it.
                &[(PlayerId::from("p3"), vec![MatchId::from("a")])],
                &[(a.record, 2), (b.record, 1)],
            )
            .unwrap();
        store
            .import_log(
                &[(5, audit.clone())],
                &[
                    (7, event(EventKind::PlayerBanned, 1.0, "x")),
                    (9, event(EventKind::PlayerUnbanned, 2.0, "x")),
                ],
                8,
                12,
            )
            .unwrap();
        // A result's events go in its entry's batch, after the last cursor.
        let last = store
            .append_journal_with_events(
                1,
                &[entry("m", "p3", 1500.0)],
                &[event(EventKind::MatchCompleted, 3.0, "")],
            )
            .unwrap();
        assert_eq!(last, 13);
        store.flush().unwrap();
    }
    let store = reopen();
    assert_eq!(ids(&store, "p1"), ["a", "b"]);
    assert_eq!(ids(&store, "p2"), ["a"]);
    assert_eq!(past(&store, "p3"), ["a"]);
    assert_eq!(store.journal_after(0).count(), 1);
    let events: Vec<u64> = store
        .events_after(0, 10)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(events, [7, 9, 13]);
    assert_eq!(store.audit_after(0, 10).unwrap(), vec![(5, audit.clone())]);
    // Numbers up to the source's last one (its entries 6 to 8 trimmed) are not handed out again.
    assert_eq!(store.last_audit().unwrap(), 8);
    assert_eq!(store.append_audit(&audit).unwrap(), 9);
    // The imported holder counts hold: p2's next match leaves "a" to p1, p1's next drops both.
    store
        .append_history(&[history("c", &[&["p2"]], 1)])
        .unwrap();
    assert!(wait(store.match_record(&MatchId::from("a"))).is_some());
    store
        .append_history(&[history("d", &[&["p1"]], 1)])
        .unwrap();
    let gone = [MatchId::from("a"), MatchId::from("b")];
    assert!(wait(store.match_records(&gone)).is_empty());
    assert!(
        past(&store, "p3").is_empty(),
        "a dropped record leaves every index"
    );
}

fn sled_reopen(dir: &std::path::Path) -> impl FnMut() -> Store + '_ {
    move || Arc::new(SledStore::open(dir, 1 << 20).unwrap()) as Store
}

fn memory_reopen() -> impl FnMut() -> Store {
    let store: Store = Arc::new(MemoryStore::default());
    move || store.clone()
}

/// A fresh handle on the same Redis data, holding the lease's token 1.
fn redis_reopen(
    server: &RedisServer,
    runtime: tokio::runtime::Handle,
) -> impl FnMut() -> Store + '_ {
    let url = server.url();
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let () = ::redis::cmd("SET")
        .arg("{mm}:lease")
        .arg("1|contract|127.0.0.1:1")
        .query(&mut conn)
        .unwrap();
    move || {
        let store = runtime
            .block_on(RedisStore::open(&url, 1, &RedisOptions::default()))
            .unwrap();
        Arc::new(store) as Store
    }
}

/// Runs `test` on a blocking thread of a multi-threaded runtime that outlives it, as the
/// server calls the store (its connection's task runs on that runtime).
pub(super) fn with_redis(
    test: impl FnOnce(&mut RedisServer, tokio::runtime::Handle) + Send + 'static,
) {
    let mut server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let task = runtime.spawn_blocking(move || test(&mut server, handle));
    runtime.block_on(task).unwrap();
}

fn erasing_a_player_marks_them_in_the_event_log(reopen: Reopen<'_>) {
    let (gone, marker) = (
        PlayerId::from("gone"),
        PlayerId::from("erased:0123456789ab"),
    );
    let formed = |players: &str| EventRecord {
        kind: EventKind::MatchFormed,
        unix: 1.0,
        match_id: "m1".into(),
        player_id: String::new(),
        detail_json: format!(r#"{{"queue":"1v1","teams":[[{players}],["p2"]]}}"#),
    };
    {
        let store = reopen();
        store
            .append_events(&[
                formed(r#""gone""#),
                event(EventKind::RatingChanged, 2.0, "gone"),
                event(EventKind::RatingChanged, 2.0, "p2"),
                formed(r#""gone2""#),
            ])
            .unwrap();
        store.erase_player(&gone, &marker).unwrap();
        store.flush().unwrap();
    }
    let store = reopen();
    let events: Vec<EventRecord> = store
        .events_after(0, 10)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(
        events,
        vec![
            formed(r#""erased:0123456789ab""#),
            event(EventKind::RatingChanged, 2.0, "erased:0123456789ab"),
            event(EventKind::RatingChanged, 2.0, "p2"),
            // A longer id that contains the erased one is another player.
            formed(r#""gone2""#),
        ]
    );
}

macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sled_backend {
            $(
                #[test]
                fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    super::$name(&mut super::sled_reopen(dir.path()));
                }
            )*
        }
        mod memory_backend {
            $(
                #[test]
                fn $name() {
                    super::$name(&mut super::memory_reopen());
                }
            )*
        }
        mod redis_backend {
            $(
                #[test]
                fn $name() {
                    super::with_redis(|server, runtime| {
                        super::$name(&mut super::redis_reopen(server, runtime))
                    });
                }
            )*
        }
    };
}

on_every_backend!(
    players_and_parties_survive_a_reopen,
    the_journal_replays_in_order_and_a_snapshot_trims_it_but_keeps_acknowledgements,
    an_admin_entry_writes_season_state_but_no_acknowledgement,
    live_matches_load_newest_copy_without_ended_ones_across_a_reopen,
    pool_calibrations_survive_a_reopen_and_the_latest_wins,
    waiting_tickets_survive_a_reopen_oldest_first,
    history_exports_and_imports_every_result_and_season_record,
    match_history_keeps_each_players_newest_and_survives_a_reopen,
    party_rosters_survive_a_reopen,
    bans_audit_and_events_survive_a_reopen_and_numbers_are_never_reused,
    erasing_a_player_removes_every_record_naming_them_and_only_them,
    erasing_a_player_drops_their_history_and_marks_them_where_others_keep_it,
    erasing_a_player_marks_them_in_the_event_log,
    imports_keep_lists_holders_and_log_numbers_and_events_ride_with_their_entry,
);

mod acks;
pub(super) mod past;
