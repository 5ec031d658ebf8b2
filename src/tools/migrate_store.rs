//! `matchmaker admin migrate-store --from-data-dir DIR --to-redis URL`: moves an embedded
//! deployment (players, parties, the result journal and every result's acknowledgement,
//! seasons and their history, live matches, calibrations, `PartyService` parties, the match
//! history, bans, the audit log and the event log under their own sequence numbers) into a
//! cluster's Redis.
//!
//! The server on DIR must be stopped (its data dir lock says so) and no cluster node may run on
//! the Redis: the migration holds the queues' lease itself, so its writes are fenced like an
//! owner's and no node starts meanwhile. Every step is idempotent and flushed before the next,
//! and records already in Redis with the same value are not written again, so a migration that
//! was interrupted continues where it stopped when run again. At the end it reads everything
//! back from Redis into a fresh store and compares counts and a SHA-1 checksum of every record
//! with the source.
//!
//! It writes only into an empty keyspace or one holding its own migration from the same data
//! dir that no node has written to since, and only while the source is as it was when that
//! migration began (see [`target`]): run again after a cluster has played on the keyspace, it
//! would put the source's older records back; resumed after the server ran on the source, it
//! would keep what the server removed from it.

mod target;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::cluster::lease::{Acquired, LeaseClient, Owner};
use crate::ids::{MatchId, PlayerId};
use crate::records::{MatchRecord, PartyRecord, PartyRoster, PoolRecord};
use crate::store::{
    AdminRecords, History, Patience, RecordStorage, RedisOptions, RedisStore, Storage, StoreError,
    encode_match, redact, segment_bounds,
};

/// The migration's own lease: a node cannot start while it runs, and an interrupted migration's
/// lease is gone after this long.
const LEASE: Duration = Duration::from_secs(5);
/// The lease holder's name while a migration runs.
const NODE_ID: &str = "migrate-store";

/// The most records per write (`--batch`): each write is one Redis command of that many.
const MAX_BATCH: usize = 100_000;

/// Why a migration stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// A flag's value breaks its rule.
    #[error(transparent)]
    Flag(#[from] crate::rejection::FieldError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("--to-redis {url}: {detail}")]
    Redis { url: String, detail: String },
    #[error(
        "--to-redis: cluster node {0} owns this Redis: stop every node before migrating into it"
    )]
    NodeRunning(String),
    #[error("verification failed: {0}")]
    Mismatch(String),
    #[error("--to-redis {url}: {detail}; nothing was written")]
    TargetInUse { url: String, detail: String },
}

/// What a migration moved, and the checksum both sides agree on.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub players: usize,
    pub parties: usize,
    pub journal_entries: usize,
    pub results: usize,
    pub seasons: usize,
    pub weeks: usize,
    pub season_ranks: usize,
    pub live_matches: usize,
    pub calibrations: usize,
    /// `PartyService` parties.
    pub rosters: usize,
    /// Players with a match history, and the match records their histories hold.
    pub history_players: usize,
    pub history_records: usize,
    /// Entries of the players' past indexes (records that left a list while others held them).
    pub past_entries: usize,
    pub bans: usize,
    pub audit_entries: usize,
    pub events: usize,
    /// SHA-1 over every record above, in a canonical order.
    pub checksum: String,
}

/// `migrate-store --json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub from: String,
    pub to: String,
    /// Players whose records were already in Redis (a resumed migration).
    pub players_already_there: usize,
    pub counts: Counts,
    pub verified: bool,
}

/// Counts and checksum of everything `store` holds that a migration moves; the match history
/// of `history_players` (a cluster store cannot list them: pass the source's).
pub async fn digest(
    store: &dyn Storage,
    history_players: &[PlayerId],
) -> Result<Counts, StoreError> {
    let mut sha = sha1_smol::Sha1::new();
    let mut add = |label: &str, value: &[u8]| {
        sha.update(label.as_bytes());
        sha.update(&(value.len() as u64).to_be_bytes());
        sha.update(value);
    };
    let mut counts = Counts::default();
    // Records as the server sees them after start-up: the snapshot with the journal's entries
    // after it laid over (a cluster store writes them through at once; sled at the next
    // snapshot), so both sides compare what players are rated, however it is stored.
    let mut players: BTreeMap<PlayerId, BTreeMap<String, PoolRecord>> =
        store.load_players()?.collect::<Result<_, _>>()?;
    let mut parties: BTreeMap<String, BTreeMap<String, PartyRecord>> =
        store.load_parties()?.into_iter().collect();
    add("snapshot", &store.snapshot_seq()?.to_be_bytes());
    for entry in store.journal_after(store.snapshot_seq()?) {
        let (seq, entry) = entry?;
        add("entry", &seq.to_be_bytes());
        add("entry", &serde_json::to_vec(&entry)?);
        counts.journal_entries += 1;
        for (player, record) in entry.records {
            players
                .entry(player)
                .or_default()
                .insert(entry.pool.clone(), record);
        }
        for (party, record) in entry.parties {
            parties
                .entry(party)
                .or_default()
                .insert(entry.pool.clone(), record);
        }
    }
    for (id, pools) in &players {
        add("player", id.as_str().as_bytes());
        add("pools", &serde_json::to_vec(pools)?);
    }
    counts.players = players.len();
    for (key, pools) in &parties {
        add("party", key.as_bytes());
        add("pools", &serde_json::to_vec(pools)?);
    }
    counts.parties = parties.len();
    let mut history = store.export_history()?;
    history.results.sort_by(|a, b| a.0.cmp(&b.0));
    history.seasons.sort_by(|a, b| a.0.cmp(&b.0));
    history
        .weeks
        .sort_by(|a, b| (&a.0, a.1, a.2).cmp(&(&b.0, b.1, b.2)));
    history.ranks.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    add("history", &serde_json::to_vec(&history)?);
    counts.results = history.results.len();
    counts.seasons = history.seasons.len();
    counts.weeks = history.weeks.len();
    counts.season_ranks = history.ranks.len();
    let (mut matches, _) = store.load_matches()?;
    matches.sort_by(|a, b| a.match_id.cmp(&b.match_id));
    add("matches", &serde_json::to_vec(&matches)?);
    counts.live_matches = matches.len();
    let mut calibrations = store.load_calibrations()?;
    calibrations.sort_by(|a, b| a.0.cmp(&b.0));
    add("calibrations", &serde_json::to_vec(&calibrations)?);
    counts.calibrations = calibrations.len();
    let rosters = store.load_rosters()?;
    add("rosters", &serde_json::to_vec(&rosters)?);
    counts.rosters = rosters.len();
    let mut held = std::collections::BTreeSet::new();
    for player in history_players {
        let list = store.player_matches(player).await?;
        add("history", player.as_str().as_bytes());
        add("list", &serde_json::to_vec(&list)?);
        held.extend(list);
        counts.history_players += 1;
        // The records that left the list but still name the player, so an erasure finds them.
        let past = store.past_matches(player).await?;
        add("past", &serde_json::to_vec(&past)?);
        counts.past_entries += past.len();
    }
    let held: Vec<MatchId> = held.into_iter().collect();
    for part in held.chunks(1000) {
        for record in store.match_records(part).await? {
            add("record", &serde_json::to_vec(&record)?);
            counts.history_records += 1;
        }
    }
    let bans = store.load_bans()?;
    add("bans", &serde_json::to_vec(&bans)?);
    counts.bans = bans.len();
    let mut log = |prefix: &str, page: Vec<(u64, Vec<u8>)>| {
        for (seq, value) in &page {
            add(prefix, &seq.to_be_bytes());
            add(prefix, value);
        }
        page.len()
    };
    let (mut after, mut n) = (0, 0);
    loop {
        let page = store.audit_after(after, 1000)?;
        let Some(last) = page.last().map(|(s, _)| *s) else {
            break;
        };
        let page = page
            .iter()
            .map(|(s, a)| Ok((*s, serde_json::to_vec(a)?)))
            .collect::<Result<_, StoreError>>()?;
        n += log("audit", page);
        after = last;
    }
    counts.audit_entries = n;
    let (mut after, mut n) = (0, 0);
    loop {
        let page = store.events_after(after, 1000)?;
        let Some(last) = page.last().map(|(s, _)| *s) else {
            break;
        };
        let page = page
            .iter()
            .map(|(s, e)| Ok((*s, serde_json::to_vec(e)?)))
            .collect::<Result<_, StoreError>>()?;
        n += log("event", page);
        after = last;
    }
    counts.events = n;
    add("last audit", &store.last_audit()?.to_be_bytes());
    add("last event", &store.append_events(&[])?.to_be_bytes());
    counts.checksum = sha.digest().to_string();
    Ok(counts)
}

/// Runs a migration; `progress` gets a line per step.
pub async fn migrate(
    from: &Path,
    to: &str,
    tls: Option<&crate::store::RedisTls>,
    keys: crate::store::Keys,
    batch: usize,
    mut progress: impl FnMut(&str),
) -> Result<Report, MigrateError> {
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(crate::rejection::FieldError::new(
            "--batch",
            format!("must be in 1..={MAX_BATCH} (got {batch})"),
        )
        .into());
    }
    let redis_error = |detail: String| MigrateError::Redis {
        url: redact(to),
        detail,
    };
    let config = crate::config::Config::from_toml_str("")
        .map_err(|e| redis_error(format!("default config: {e}")))?;
    // Opening a store creates one where there is none: a mistyped or unmounted directory
    // would migrate nothing and call it verified.
    if !from.join("db").is_file() {
        return Err(crate::rejection::FieldError::new(
            "--from-data-dir",
            format!(
                "{} holds no matchmaker store (no db file): name the data directory the server ran on",
                from.display()
            ),
        )
        .into());
    }
    let source = crate::store::open(from, &config.store)?;
    let options = RedisOptions {
        tls: tls.cloned(),
        keys: keys.clone(),
        patience: Patience::for_lease(LEASE),
        node: NODE_ID.to_string(),
        ..RedisOptions::default()
    };
    let conn = crate::store::RedisConn::connect(to, tls, options.patience)
        .await
        .map_err(|e| redis_error(e.to_string()))?;
    let id = std::fs::canonicalize(from).map_err(|source| StoreError::Io {
        path: from.to_path_buf(),
        source,
    })?;
    // Everything the migration moves, summed up before anything is written: the keyspace's
    // marker keeps it, and a later run of this migration goes ahead only if the source is
    // still as it was.
    let history_players = source.history_players()?;
    let summary = Summary {
        counts: digest(source.as_ref(), &history_players).await?,
        history_players,
    };
    let expected = &summary.counts;
    progress(&format!(
        "source: {} players, {} parties, {} results, {} live matches",
        expected.players, expected.parties, expected.results, expected.live_matches
    ));
    let (last_seq, snapshot_seq) = (source.last_seq()?, source.snapshot_seq()?);
    let from_source = target::Source {
        id: id.display().to_string(),
        last_seq,
        snapshot_seq,
        state: target::source_state(
            last_seq,
            snapshot_seq,
            source.append_events(&[])?,
            source.last_audit()?,
            &expected.checksum,
        ),
    };
    let lease = LeaseClient::new(conn.clone(), LEASE, keys.clone());
    let owner = take_lease(&lease, &mut progress).await?;
    let renewal = tokio::spawn({
        let (lease, owner) = (lease.clone(), owner.clone());
        async move {
            loop {
                tokio::time::sleep(crate::cluster::lease::renew_every(LEASE)).await;
                // A renewal that failed (Redis slow or briefly away) is tried again at the next
                // turn, four times a lease; only a lease that passed on ends the renewals (the
                // migration's writes are fenced from then on, and it fails saying so).
                if matches!(lease.renew(&owner).await, Ok(false)) {
                    return;
                }
            }
        }
    });
    let result = async {
        // Decided under the lease, so no node starts between the look and the first write.
        let found = target::read(&conn, &keys).await.map_err(&redis_error)?;
        if let Some(detail) = target::refusal(&found, &from_source, &keys) {
            return Err(MigrateError::TargetInUse {
                url: redact(to),
                detail,
            });
        }
        target::mark(&conn, &keys, &owner, &from_source, false)
            .await
            .map_err(&redis_error)?;
        let copied = copy_and_verify(
            source.as_ref(),
            &summary,
            to,
            &options,
            owner.token,
            batch,
            &mut progress,
        )
        .await?;
        target::mark(&conn, &keys, &owner, &from_source, true)
            .await
            .map_err(&redis_error)?;
        Ok(copied)
    }
    .await;
    renewal.abort();
    let _ = lease.release(&owner).await;
    let (players_already_there, counts) = result?;
    Ok(Report {
        from: from.display().to_string(),
        to: redact(to),
        players_already_there,
        counts,
        verified: true,
    })
}

/// The lease, or an error naming the running node; waits out an interrupted migration's lease.
async fn take_lease(
    lease: &LeaseClient,
    progress: &mut impl FnMut(&str),
) -> Result<Owner, MigrateError> {
    let deadline = tokio::time::Instant::now() + LEASE * 2;
    loop {
        match lease.acquire(NODE_ID, "-").await {
            Ok(Acquired::Mine(owner)) => return Ok(owner),
            Ok(Acquired::Theirs(Some(o))) if o.node_id != NODE_ID => {
                return Err(MigrateError::NodeRunning(o.node_id));
            }
            Ok(Acquired::Theirs(_)) if tokio::time::Instant::now() < deadline => {
                progress(
                    "an interrupted migration's lease is still held; waiting for it to expire",
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(Acquired::Theirs(_)) => {
                return Err(MigrateError::NodeRunning("another migration".into()));
            }
            // Nodes whose store failed paused the lease (at most eight of their leases).
            Ok(Acquired::Paused(left)) => {
                progress("the lease is paused after nodes' stores failed; waiting for the pause");
                tokio::time::sleep(left).await;
            }
            Err(e) => {
                return Err(MigrateError::Redis {
                    url: String::new(),
                    detail: e.to_string(),
                });
            }
        }
    }
}

/// The source's [`digest`], taken once before anything is written.
struct Summary {
    /// Players with a match history: the digest covers their histories, and Redis is read
    /// back for the same players (a cluster store cannot list them).
    history_players: Vec<PlayerId>,
    counts: Counts,
}

/// Copies `source` into Redis and checks that Redis then holds what `summary` counted.
async fn copy_and_verify(
    source: &dyn Storage,
    summary: &Summary,
    to: &str,
    options: &RedisOptions,
    token: u64,
    batch: usize,
    progress: &mut impl FnMut(&str),
) -> Result<(usize, Counts), MigrateError> {
    let (history_players, expected) = (&summary.history_players, &summary.counts);
    let target = RedisStore::open(to, token, options).await?;

    // Players, a batch at a time; the ones already there with the same records cost nothing.
    let before: BTreeMap<_, _> = target.load_players()?.collect::<Result<_, _>>()?;
    let mut already = 0;
    let mut chunk = Vec::with_capacity(batch);
    let mut done = 0;
    for player in source.load_players()? {
        let (id, pools) = player?;
        if before.get(&id) == Some(&pools) {
            already += 1;
            continue;
        }
        chunk.push((id, pools));
        if chunk.len() == batch {
            done += write_players(&target, &mut chunk).await?;
            progress(&format!(
                "players: {} of {}",
                done + already,
                expected.players
            ));
        }
    }
    done += write_players(&target, &mut chunk).await?;
    drop(before);
    progress(&format!(
        "players: {} written, {already} already there",
        done
    ));

    let parties = source.load_parties()?;
    let refs: Vec<_> = parties.iter().map(|(k, v)| (k.as_str(), v)).collect();
    for part in refs.chunks(batch) {
        target.put_parties(part)?;
        target.flush_async().await?;
    }

    // The journal: the same snapshot mark and the entries after it.
    let snapshot = source.snapshot_seq()?;
    if target.snapshot_seq()? != snapshot {
        target.finish_snapshot(snapshot)?;
    }
    let have = target.last_seq()?;
    let entries: Vec<_> = source
        .journal_after(snapshot.max(have))
        .collect::<Result<_, _>>()?;
    for part in entries.chunks(batch) {
        let first = part[0].0;
        let part: Vec<_> = part.iter().map(|(_, e)| e.clone()).collect();
        target.append_journal(first, &part)?;
        target.flush_async().await?;
    }

    // Every acknowledgement and season record.
    let history = source.export_history()?;
    for part in history.results.chunks(batch) {
        target.import_history(&History {
            results: part.to_vec(),
            ..History::default()
        })?;
        target.flush_async().await?;
    }
    target.import_history(&History {
        results: Vec::new(),
        ..history
    })?;
    target.flush_async().await?;
    progress(&format!(
        "results and seasons: {} acknowledgements",
        expected.results
    ));

    // Live matches, rewritten as the source's segments would be at start.
    let (matches, _) = source.load_matches()?;
    let encoded = matches
        .iter()
        .map(encode_match)
        .collect::<Result<Vec<_>, _>>()?;
    let sizes: Vec<usize> = encoded.iter().map(Vec::len).collect();
    let segments: Vec<(u64, &[Vec<u8>])> = segment_bounds(&sizes)
        .into_iter()
        .enumerate()
        .map(|(i, range)| (i as u64 + 1, &encoded[range]))
        .collect();
    target.compact_matches(&segments)?;
    let calibrations = source.load_calibrations()?;
    let refs: Vec<_> = calibrations.iter().map(|(p, c)| (p.as_str(), c)).collect();
    target.put_calibrations(&refs)?;
    target.flush_async().await?;
    copy_records(source, &target, history_players, batch).await?;
    progress(&format!(
        "records: {} parties, {} match histories ({} records), {} bans, {} audit entries, {} \
         events",
        expected.rosters,
        expected.history_players,
        expected.history_records,
        expected.bans,
        expected.audit_entries,
        expected.events
    ));
    drop(target);

    // Read everything back from Redis, not from the mirror, and compare.
    let written = RedisStore::open(to, token, options).await?;
    let found = digest(&written, history_players).await?;
    if found != *expected {
        return Err(MigrateError::Mismatch(format!(
            "source {expected:?}, Redis {found:?}; run the migration again"
        )));
    }
    progress(&format!("verified: checksum {}", found.checksum));
    Ok((already, found))
}

/// `PartyService` parties, the match history, bans, and the audit and event logs under their
/// own numbers: each batch idempotent (whole values), so a second run rewrites the same.
async fn copy_records(
    source: &dyn Storage,
    target: &RedisStore,
    history_players: &[PlayerId],
    batch: usize,
) -> Result<(), StoreError> {
    let rosters = source.load_rosters()?;
    for part in rosters.chunks(batch) {
        let refs: Vec<&PartyRoster> = part.iter().collect();
        target.put_rosters(&refs)?;
        target.flush_async().await?;
    }
    // Each record is held by every list that names it, whichever batch the list is in.
    let mut holders: BTreeMap<MatchId, u32> = BTreeMap::new();
    for part in history_players.chunks(batch) {
        let mut lists = Vec::with_capacity(part.len());
        let mut past = Vec::with_capacity(part.len());
        for player in part {
            let list = source.player_matches(player).await?;
            for id in &list {
                *holders.entry(id.clone()).or_default() += 1;
            }
            lists.push((player.clone(), list));
            past.push((player.clone(), source.past_matches(player).await?));
        }
        target.import_match_history(&lists, &past, &[])?;
        target.flush_async().await?;
    }
    let ids: Vec<MatchId> = holders.keys().cloned().collect();
    for part in ids.chunks(batch) {
        let records: Vec<(MatchRecord, u32)> = source
            .match_records(part)
            .await?
            .into_iter()
            .map(|r| {
                let n = holders.get(&r.match_id).copied().unwrap_or(1);
                (r, n)
            })
            .collect();
        target.import_match_history(&[], &[], &records)?;
        target.flush_async().await?;
    }
    // The indexes came whole (the embedded store builds its own when opened). A keyspace empty
    // when this run opened it is marked already; one a stopped run left half-filled is scanned
    // here, finding nothing to add, and marked: the first node taking it over skips the scan.
    target.build_past_indexes().await?;
    for ban in source.load_bans()? {
        target.put_ban(&ban)?;
    }
    let last_audit = source.last_audit()?;
    let last_event = source.append_events(&[])?;
    let mut after = 0;
    loop {
        let audit = source.audit_after(after, batch)?;
        let Some(last) = audit.last().map(|(s, _)| *s) else {
            break;
        };
        target.import_log(&audit, &[], last_audit, 0)?;
        target.flush_async().await?;
        after = last;
    }
    let mut after = 0;
    loop {
        let events = source.events_after(after, batch)?;
        let Some(last) = events.last().map(|(s, _)| *s) else {
            break;
        };
        target.import_log(&[], &events, 0, last_event)?;
        target.flush_async().await?;
        after = last;
    }
    target.import_log(&[], &[], last_audit, last_event)?;
    target.flush_async().await?;
    Ok(())
}

async fn write_players(
    target: &RedisStore,
    chunk: &mut Vec<(PlayerId, BTreeMap<String, PoolRecord>)>,
) -> Result<usize, StoreError> {
    let refs: Vec<_> = chunk.iter().map(|(id, pools)| (id, pools)).collect();
    target.put_players(&refs)?;
    target.flush_async().await?;
    let n = chunk.len();
    chunk.clear();
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_out_of_bounds_is_refused_before_anything_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        for batch in [0, MAX_BATCH + 1, usize::MAX] {
            let refused = migrate(
                &data,
                "redis://127.0.0.1:1/0",
                None,
                crate::store::Keys::new("mm"),
                batch,
                |_| {},
            )
            .await
            .unwrap_err();
            match refused {
                MigrateError::Flag(e) => assert_eq!(e.field, "--batch", "{e}"),
                other => panic!("{batch}: {other}"),
            }
        }
        assert!(!data.exists(), "the data dir is not opened");
    }
}
