//! `matchmaker admin migrate-store`: an embedded deployment, populated through the real server
//! (results, rating edits, a season reset, an end of season, a live match, a `PartyService`
//! party, a ban, the match history, the audit and event logs) and with tens of
//! thousands of stored players, moves into a real `redis-server` (started by the test on a free
//! loopback port). The first run is killed part-way; the second continues and verifies; a
//! cluster node on that Redis then serves the same players, seasons and live match. A run is
//! refused, writing nothing, when the keyspace was played on since, or when the server ran on
//! the source between an interrupted run and the next.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::TestServer;
use matchmaker::config::Config;
use matchmaker::proto;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::store::RedisServer;

/// Stored players beside the ones that played, so the copy takes many batches.
const BULK_PLAYERS: usize = 30_000;

fn migrate_command(data: &std::path::Path, url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_matchmaker"));
    command
        .args([
            "admin",
            "migrate-store",
            "--batch",
            "1000",
            "--from-data-dir",
        ])
        .arg(data)
        .args(["--to-redis", url]);
    command
}

/// Runs a migration with `--json` and returns its report, once it succeeded.
fn migrated(mut command: Command) -> serde_json::Value {
    let out = command.arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn view(channel: &tonic::transport::Channel, player: &str, queue: &str) -> proto::PlayerView {
    ClientServiceClient::new(channel.clone())
        .get_player(proto::GetPlayerRequest {
            player_id: player.into(),
            queue: queue.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_store_moves_into_redis_resumably_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();

    // Play on the embedded server: results, rating edits, a soft reset and an end of season.
    let mut server = TestServer::start_in(&data, "").await;
    let ch = server.channel().await;
    let mut client = ClientServiceClient::new(ch.clone());
    let mut gs = GameServerServiceClient::new(ch.clone());
    let mut offers = common::serve(&mut gs, "gs:1").await;
    let mut reported = Vec::new();
    for i in 0..3 {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        common::enter(&mut client, "1v1", &[a.as_str()]).await;
        common::enter(&mut client, "1v1", &[b.as_str()]).await;
        let m = common::next(&mut offers).await;
        let ack = gs
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: common::placements_with_winner(&m, &a),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        reported.push((m, ack));
    }
    // A match still running when the deployment moves.
    common::enter(&mut client, "1v1", &["live-a"]).await;
    common::enter(&mut client, "1v1", &["live-b"]).await;
    let live = common::next(&mut offers).await;
    let mut admin = server.admin().await;
    for (p, rp) in [("m-high", 1350), ("m-low", 1100)] {
        admin
            .set_rating(proto::SetRatingRequest {
                player_id: p.into(),
                queue: "5v5".into(),
                rating: Some(proto::Rating {
                    mean: 30.0,
                    deviation: 4.0,
                    ..Default::default()
                }),
                rank_points: Some(rp),
            })
            .await
            .unwrap();
    }
    admin
        .season_reset(proto::SeasonResetRequest {
            kind: proto::SeasonResetKind::Soft as i32,
            queue: "5v5".into(),
            dry_run: false,
        })
        .await
        .unwrap();
    admin
        .end_season(proto::EndSeasonRequest {
            queue: "5v5".into(),
        })
        .await
        .unwrap();
    let mut before = BTreeMap::new();
    for p in ["a0", "b0", "a2", "live-a"] {
        before.insert((p, "1v1"), view(&ch, p, "1v1").await);
    }
    for p in ["m-high", "m-low"] {
        before.insert((p, "5v5"), view(&ch, p, "5v5").await);
    }
    assert_eq!(before[&("m-high", "5v5")].season_history.len(), 1);
    // Records beside the ratings: a party, a ban, the history, the audit and event logs.
    let party = matchmaker::proto::party_service_client::PartyServiceClient::new(ch.clone())
        .create_party(proto::CreatePartyRequest {
            player_id: "host".into(),
        })
        .await
        .unwrap()
        .into_inner();
    admin
        .ban_player(proto::BanPlayerRequest {
            player_id: "cheat".into(),
            until_unix: 0,
            reason: "aimbot".into(),
        })
        .await
        .unwrap();
    let history = list_matches(&ch, "a0").await;
    assert_eq!(history.len(), 1);
    let audit = audit_log(&ch).await;
    let events = common::watch_events(&ch, 0, &[], 8).await;
    drop((client, gs, offers, admin));
    server.stop().await.unwrap();

    // Many more stored players, written straight into the stopped server's store.
    let config = Config::from_toml_str("").unwrap();
    {
        let store = matchmaker::store::open(&data, &config.store).unwrap();
        let template = store.load_players().unwrap().next().unwrap().unwrap().1;
        let bulk: Vec<_> = (0..BULK_PLAYERS)
            .map(|i| {
                (
                    matchmaker::ids::PlayerId::new(format!("bulk-{i:06}").as_str()),
                    template.clone(),
                )
            })
            .collect();
        let refs: Vec<_> = bulk.iter().map(|(id, r)| (id, r)).collect();
        for part in refs.chunks(5000) {
            store.put_players(part).unwrap();
        }
        // keeper keeps "kept", which left leaver's list: leaver's past index, which an
        // erasure after the move must still find.
        let write = |id: &str, teams: &[&str]| matchmaker::store::HistoryWrite {
            record: matchmaker::records::MatchRecord {
                match_id: id.into(),
                queue: "1v1".into(),
                phase: matchmaker::records::EndedPhase::Cancelled,
                teams: teams.iter().map(|p| vec![(*p).into()]).collect(),
                placements: Vec::new(),
                changes: Vec::new(),
                server_address: "gs".into(),
                win_probability: Vec::new(),
                formed_unix: 1.0,
                started_unix: None,
                ended_unix: 2.0,
            },
            keep: 1,
        };
        store
            .append_history(&[write("kept", &["leaver", "keeper"])])
            .unwrap();
        store
            .append_history(&[write("newer", &["leaver"])])
            .unwrap();
        store.flush().unwrap();
    }
    // As an earlier release left it: no past index and no mark of one. Opening the store
    // builds it back.
    forget_past_indexes(&data);
    let expected = {
        let store = matchmaker::store::open(&data, &config.store).unwrap();
        let players = store.history_players().unwrap();
        matchmaker::tools::migrate_store::digest(store.as_ref(), &players)
            .await
            .unwrap()
    };

    // The first run is killed once it has written some players.
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let mut first = migrate_command(&data, &redis.url())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(first.stderr.take().unwrap()).lines();
    let mut progress = Vec::new();
    for line in lines {
        let line = line.unwrap();
        let copying = line.starts_with("players: ") && line.contains(" of ");
        progress.push(line);
        if copying {
            break;
        }
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(
        progress.iter().any(|l| l.starts_with("players: ")),
        "never copied a batch: {progress:?}"
    );

    // The second run continues and verifies.
    let report = migrated(migrate_command(&data, &redis.url()));
    assert_eq!(report["verified"], true);
    assert!(
        report["players_already_there"].as_u64().unwrap() >= 1000,
        "the second run started over: {report}"
    );
    assert_eq!(report["counts"]["checksum"], expected.checksum.as_str());
    assert_eq!(
        report["counts"]["players"].as_u64().unwrap() as usize,
        expected.players
    );
    assert!(expected.players > BULK_PLAYERS);
    assert_eq!(expected.live_matches, 1);
    assert!(expected.results >= 3);
    assert_eq!(
        (expected.rosters, expected.bans, expected.history_players),
        (1, 1, 8)
    );
    assert_eq!(expected.history_records, 5);
    assert_eq!(expected.past_entries, 1);
    assert!(
        expected.audit_entries >= 6 && expected.events >= 8,
        "{expected:?}"
    );
    for key in [
        "rosters",
        "history_records",
        "past_entries",
        "bans",
        "audit_entries",
        "events",
    ] {
        assert_eq!(
            report["counts"][key],
            serde_json::json!(expected_count(&expected, key))
        );
    }
    // The keyspace is marked indexed: the first node to take it over does not scan it again.
    let mark: Option<String> = redis::cmd("HGET")
        .arg("{mm}:meta")
        .arg("past_index")
        .query(
            &mut redis::Client::open(redis.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(mark.as_deref(), Some("1"));
    // Once more: nothing to write, the same checksum.
    let again = migrated(migrate_command(&data, &redis.url()));
    assert_eq!(again["counts"]["checksum"], expected.checksum.as_str());
    assert_eq!(
        again["players_already_there"].as_u64().unwrap() as usize,
        expected.players
    );

    // A cluster node on that Redis serves what the embedded server did.
    let cluster = dir.path().join("cluster.toml");
    std::fs::write(
        &cluster,
        format!(
            "[cluster]\nredis_url = \"{}\"\nlease_ms = 1000\n",
            redis.url()
        ),
    )
    .unwrap();
    let node = common::cluster_node(&cluster, "after-migration", None);
    let ch = node.channel().await;
    for ((player, queue), was) in &before {
        let now = common::poll_until(&format!("{player} served"), || {
            let ch = ch.clone();
            async move {
                ClientServiceClient::new(ch)
                    .get_player(proto::GetPlayerRequest {
                        player_id: player.to_string(),
                        queue: queue.to_string(),
                    })
                    .await
                    .map(|v| v.into_inner())
            }
        })
        .await;
        assert_eq!(&now, was, "{player} in {queue}");
    }
    let mut gs = GameServerServiceClient::new(ch.clone());
    // Results reported before the move are duplicates, with the same changes.
    for (i, (m, ack)) in reported.iter().enumerate() {
        let again = gs
            .report_match_result(proto::MatchResult {
                match_id: m.match_id.clone(),
                placements: common::placements_with_winner(m, &format!("a{i}")),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(again.duplicate, "{}", m.match_id);
        assert_eq!(again.changes, ack.changes);
    }
    // The live match's result applies now.
    let ack = gs
        .report_match_result(proto::MatchResult {
            match_id: live.match_id.clone(),
            placements: common::placements_with_winner(&live, "live-a"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!ack.duplicate);
    assert_eq!(view(&ch, "live-a", "1v1").await.games, 1);

    // The records moved too: the party, the ban, the history, the logs under their numbers.
    let moved = matchmaker::proto::party_service_client::PartyServiceClient::new(ch.clone())
        .get_party(proto::GetPartyRequest {
            party_id: party.party_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(moved, party);
    let refused = ClientServiceClient::new(ch.clone())
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec!["cheat".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(refused.message().contains("aimbot"), "{refused:?}");
    assert_eq!(list_matches(&ch, "a0").await, history);
    assert_eq!(audit_log(&ch).await[..audit.len()], audit[..]);
    assert_eq!(common::watch_events(&ch, 0, &[], 8).await, events);
}

/// Takes the past indexes (`h/x/…` in the journal tree) and their mark (`past_index` in the
/// meta tree) out of a stopped server's sled directory.
fn forget_past_indexes(data: &std::path::Path) {
    let db = (0..40)
        .find_map(|_| {
            sled::open(data)
                .inspect_err(|_| std::thread::sleep(std::time::Duration::from_millis(50)))
                .ok()
        })
        .expect("the store's sled database opens");
    let journal = db.open_tree("journal").unwrap();
    let entries: Vec<_> = journal
        .scan_prefix(b"h/x/")
        .keys()
        .map(Result::unwrap)
        .collect();
    assert!(!entries.is_empty());
    for key in entries {
        journal.remove(key).unwrap();
    }
    db.open_tree("meta").unwrap().remove("past_index").unwrap();
    db.flush().unwrap();
}

async fn list_matches(
    channel: &tonic::transport::Channel,
    player: &str,
) -> Vec<proto::MatchRecord> {
    ClientServiceClient::new(channel.clone())
        .list_player_matches(proto::ListPlayerMatchesRequest {
            player_id: player.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .matches
}

async fn audit_log(channel: &tonic::transport::Channel) -> Vec<proto::AuditEntry> {
    matchmaker::proto::admin_service_client::AdminServiceClient::new(channel.clone())
        .list_audit_log(proto::ListAuditLogRequest {
            page_token: String::new(),
            limit: 1000,
        })
        .await
        .unwrap()
        .into_inner()
        .entries
}

fn expected_count(counts: &matchmaker::tools::migrate_store::Counts, key: &str) -> usize {
    match key {
        "rosters" => counts.rosters,
        "history_records" => counts.history_records,
        "past_entries" => counts.past_entries,
        "bans" => counts.bans,
        "audit_entries" => counts.audit_entries,
        _ => counts.events,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_reaches_a_redis_that_takes_only_tls_with_the_nodes_certificate_flags() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Two rated players: a player who only queued has no record to move.
    played_once(&data, "moved", "other").await;
    let (redis, cert_file, key_file, _) = common::tls_redis(dir.path());

    // Half a client certificate is refused before anything is read, naming the missing flag.
    let half = migrate_command(&data, &redis.url())
        .arg("--redis-cert-file")
        .arg(&cert_file)
        .output()
        .unwrap();
    assert!(!half.status.success());
    let said = String::from_utf8_lossy(&half.stderr);
    assert!(said.contains("--redis-key-file"), "{said}");

    let mut command = migrate_command(&data, &redis.url());
    command
        .arg("--redis-ca-file")
        .arg(&cert_file)
        .arg("--redis-cert-file")
        .arg(&cert_file)
        .arg("--redis-key-file")
        .arg(&key_file);
    let report = migrated(command);
    assert_eq!(report["verified"], true);
    assert_eq!(report["counts"]["players"].as_u64().unwrap(), 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_into_a_keyspace_is_what_a_cluster_in_that_keyspace_loads() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    played_once(&data, "moved", "other").await;
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));

    // A keyspace that is no hash tag is refused before anything is written, naming the flag.
    let bad = migrate_command(&data, &redis.url())
        .args(["--keyspace", "e{u}"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(said.contains("--keyspace"), "{said}");

    let mut command = migrate_command(&data, &redis.url());
    command.args(["--keyspace", "eu"]);
    let report = migrated(command);
    assert_eq!(report["verified"], true);
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut players =
        |key: &str| -> usize { redis::cmd("HLEN").arg(key).query(&mut conn).unwrap() };
    assert_eq!(players("{eu}:players"), 2);
    assert_eq!(players("{mm}:players"), 0);

    // A node of the `eu` keyspace serves the migrated player's game; one of the default
    // keyspace does not know it.
    for (keyspace, games) in [("eu", 1), ("mm", 0)] {
        let path = dir.path().join(format!("{keyspace}.toml"));
        std::fs::write(
            &path,
            format!(
                "[cluster]\nredis_url = \"{}\"\nlease_ms = 1000\nkeyspace = \"{keyspace}\"\n",
                redis.url()
            ),
        )
        .unwrap();
        let node = common::cluster_node(&path, keyspace, None);
        let channel = node.channel().await;
        let view = common::poll_until("the node answers", || {
            let mut client = ClientServiceClient::new(channel.clone());
            async move {
                client
                    .get_player(proto::GetPlayerRequest {
                        player_id: "moved".into(),
                        queue: "1v1".into(),
                    })
                    .await
            }
        })
        .await
        .into_inner();
        assert_eq!(view.games, games, "keyspace {keyspace}");
    }
}

/// An embedded deployment in `data` where `winner` beat `loser` once, its server stopped.
async fn played_once(data: &std::path::Path, winner: &str, loser: &str) {
    std::fs::create_dir_all(data).unwrap();
    let mut server = TestServer::start_in(data, "").await;
    let channel = server.channel().await;
    let mut offers =
        common::serve(&mut GameServerServiceClient::new(channel.clone()), "gs:1").await;
    let mut client = ClientServiceClient::new(channel.clone());
    common::enter(&mut client, "1v1", &[winner]).await;
    common::enter(&mut client, "1v1", &[loser]).await;
    let m = common::next(&mut offers).await;
    common::report_winner_on(&channel, &m, winner).await;
    drop((client, offers));
    server.stop().await.unwrap();
}

/// Every key of the default keyspace and its value (`DUMP`), but the lease and the fencing
/// counter, which a migration takes before it decides anything.
fn keyspace(url: &str) -> BTreeMap<String, Vec<u8>> {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("{mm}:*").query(&mut conn).unwrap();
    keys.into_iter()
        .filter(|k| k != "{mm}:lease" && k != "{mm}:fence")
        .map(|k| {
            let value: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut conn).unwrap();
            (k, value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_run_again_after_a_cluster_played_on_its_redis_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    played_once(&data, "moved", "other").await;
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        migrated(migrate_command(&data, &redis.url()))["verified"],
        true
    );

    // On a cluster node on the migrated Redis, an admin sets `moved`'s rank points; it stops.
    let config = common::cluster_config(dir.path(), &redis.url(), 1000, "");
    let mut node = common::cluster_node(&config, "after-migration", None);
    let channel = node.channel().await;
    common::queues_answer(&channel).await;
    let was = common::player_on(&channel, "moved", "1v1").await;
    assert_eq!(was.games, 1);
    assert_ne!(was.rank_points, 777);
    matchmaker::proto::admin_service_client::AdminServiceClient::new(channel.clone())
        .set_rating(proto::SetRatingRequest {
            player_id: "moved".into(),
            queue: "1v1".into(),
            rating: was.rating,
            rank_points: Some(777),
        })
        .await
        .unwrap();
    assert_eq!(
        common::player_on(&channel, "moved", "1v1")
            .await
            .rank_points,
        777
    );
    node.signal("TERM");
    node.child.wait().unwrap();
    // The node gives the lease up as it stops; should its last renewal or the release not
    // reach Redis in time, the lease expires a lease (1 s) later.
    common::poll_until("the lease is free", || {
        let holder = common::lease_holder(&redis);
        async move { holder.map_or(Ok(()), Err) }
    })
    .await;
    let played = keyspace(&redis.url());

    // The same migration again would put back `moved`'s old rank points: refused, untouched.
    let again = migrate_command(&data, &redis.url()).output().unwrap();
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("a cluster node has started on keyspace mm")
            && said.contains("nothing was written"),
        "{said}"
    );
    assert!(
        keyspace(&redis.url()) == played,
        "the refused run changed the keyspace"
    );

    // So is a migration from another data dir.
    let other = dir.path().join("other");
    played_once(&other, "x", "y").await;
    let foreign = migrate_command(&other, &redis.url()).output().unwrap();
    assert!(!foreign.status.success());
    let said = String::from_utf8_lossy(&foreign.stderr);
    assert!(said.contains("holds a migration from"), "{said}");
    assert!(
        keyspace(&redis.url()) == played,
        "the refused run changed the keyspace"
    );

    // The cluster still has the admin's edit.
    let node = common::cluster_node(&config, "later", None);
    let channel = node.channel().await;
    common::queues_answer(&channel).await;
    assert_eq!(
        common::player_on(&channel, "moved", "1v1")
            .await
            .rank_points,
        777
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_without_a_store_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    // A mistyped path, and an empty directory (a volume that was not mounted).
    let missing = dir.path().join("dta");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for data in [&missing, &empty] {
        let out = migrate_command(data, &redis.url()).output().unwrap();
        assert!(!out.status.success(), "{data:?} was migrated");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--from-data-dir") && stderr.contains("no matchmaker store"),
            "{stderr}"
        );
    }
    assert!(!missing.exists(), "no store was created there");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert!(
        keyspace(&redis.url()).is_empty(),
        "nothing written to Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_resumed_after_the_server_ran_on_its_source_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    played_once(&data, "moved", "other").await;
    // Enough stored players that the copy takes several batches.
    {
        let config = Config::from_toml_str("").unwrap();
        let store = matchmaker::store::open(&data, &config.store).unwrap();
        let template = store.load_players().unwrap().next().unwrap().unwrap().1;
        let bulk: Vec<_> = (0..3000)
            .map(|i| {
                (
                    matchmaker::ids::PlayerId::new(format!("bulk-{i:04}").as_str()),
                    template.clone(),
                )
            })
            .collect();
        let refs: Vec<_> = bulk.iter().map(|(id, r)| (id, r)).collect();
        store.put_players(&refs).unwrap();
        store.flush().unwrap();
    }

    // The first run is killed once it has written a batch of players.
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let mut first = migrate_command(&data, &redis.url())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let copying = BufReader::new(first.stderr.take().unwrap())
        .lines()
        .map(Result::unwrap)
        .any(|line| line.starts_with("players: ") && line.contains(" of "));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(copying, "the first run never copied a batch");

    // The embedded server runs on the data dir again: a result, and an erasure.
    let mut server = TestServer::start_in(&data, "").await;
    let channel = server.channel().await;
    let mut offers =
        common::serve(&mut GameServerServiceClient::new(channel.clone()), "gs:1").await;
    let mut client = ClientServiceClient::new(channel.clone());
    common::enter(&mut client, "1v1", &["third"]).await;
    common::enter(&mut client, "1v1", &["fourth"]).await;
    let m = common::next(&mut offers).await;
    common::report_winner_on(&channel, &m, "third").await;
    server
        .admin()
        .await
        .delete_player(proto::DeletePlayerRequest {
            player_id: "bulk-0000".into(),
        })
        .await
        .unwrap();
    drop((client, offers));
    server.stop().await.unwrap();
    let interrupted = keyspace(&redis.url());
    assert!(
        interrupted.contains_key("{mm}:migration"),
        "{:?}",
        interrupted.keys()
    );

    // Resuming cannot bring the keyspace to the source (it would keep the erased player):
    // refused, naming why and what to do, before anything is written.
    let again = migrate_command(&data, &redis.url()).output().unwrap();
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains("changed since the migration into keyspace mm began")
            && said.contains("delete this keyspace's keys")
            && said.contains("nothing was written"),
        "{said}"
    );
    assert!(
        keyspace(&redis.url()) == interrupted,
        "the refused run changed the keyspace"
    );

    // As it says: with the keyspace's keys deleted, the migration starts over and verifies.
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("{mm}:*").query(&mut conn).unwrap();
    let _: usize = redis::cmd("DEL").arg(&keys).query(&mut conn).unwrap();
    let expected = {
        let config = Config::from_toml_str("").unwrap();
        let store = matchmaker::store::open(&data, &config.store).unwrap();
        let players = store.history_players().unwrap();
        matchmaker::tools::migrate_store::digest(store.as_ref(), &players)
            .await
            .unwrap()
    };
    let report = migrated(migrate_command(&data, &redis.url()));
    assert_eq!(report["verified"], true);
    assert_eq!(report["counts"]["checksum"], expected.checksum.as_str());
}
