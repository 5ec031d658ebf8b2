//! Loading the mirror when the store opens: every hash but the match history, read a page
//! at a time (HSCAN) and decoded on threads of their own as the pages arrive, so the reading
//! goes on meanwhile, and so does the node's runtime (its lease renewals above all): a
//! million rated players take seconds of CPU to decode.

use std::collections::BTreeMap;

use super::{Data, Fields, Hash, Keys, MemoryStore, Pools, StoreError, admin, decode, loaded_hash};
use super::{RedisConn, redact, redis_error};
use crate::ids::{MatchId, PartyId, PlayerId, TicketId};
use crate::ranking::RankPoints;
use crate::ranking::season::{SeasonRank, SeasonState};
use crate::rating::calibration::Calibration;
use crate::records::{PartyRecord, PartyRoster};
use crate::store::{AckRecord, StoredMatch, StoredTicket};

/// Reads and decodes everything the mirror holds.
pub(super) async fn mirror(
    conn: &mut RedisConn,
    url: &str,
    keys: &Keys,
) -> Result<MemoryStore, StoreError> {
    let (mirror, rest) = read(conn, url, keys).await?;
    // The other hashes (acknowledgements, the journal, the event log) can be large too.
    crate::store::heavy(|| fill(&mut mirror.data(), rest))?;
    Ok(mirror)
}

/// Reads every hash the mirror holds: the players decoded into a mirror, the other hashes
/// as they came (see [`fill`]).
pub(super) async fn read(
    conn: &mut RedisConn,
    url: &str,
    keys: &Keys,
) -> Result<(MemoryStore, Loaded), StoreError> {
    let mirror = std::sync::Arc::new(MemoryStore::mirror());
    // The players' pages are most of the work: decoders on up to four cores take them in turn
    // (each page a lock of the mirror to put it in); the first also keeps the other hashes.
    let decoders = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4));
    let mut senders = Vec::with_capacity(decoders);
    let mut workers = Vec::with_capacity(decoders);
    for _ in 0..decoders {
        let (pages, mut arriving) = tokio::sync::mpsc::channel::<(Hash, Fields)>(2);
        let mirror = std::sync::Arc::clone(&mirror);
        senders.push(pages);
        workers.push(tokio::task::spawn_blocking(move || {
            let mut rest = Loaded::new();
            while let Some((hash, page)) = arriving.blocking_recv() {
                if hash == Hash::Players {
                    let decoded = decode_players(page)?;
                    mirror.data().players.extend(decoded);
                } else {
                    rest.entry(hash).or_default().extend(page);
                }
            }
            Ok::<_, StoreError>(rest)
        }));
    }
    let read = load_all(conn, url, keys, &senders).await;
    drop(senders);
    let mut rest = Loaded::new();
    for worker in workers {
        let decoded = worker
            .await
            .map_err(|e| StoreError::Redis(format!("{}: loading: {e}", redact(url))))?;
        // A decoding error stops the reading too: it is the one to report.
        for (hash, fields) in decoded? {
            rest.entry(hash).or_default().extend(fields);
        }
    }
    read?;
    // Every decoder has ended, and with it its handle on the mirror.
    let mirror = std::sync::Arc::into_inner(mirror).ok_or_else(|| {
        StoreError::Redis(format!("{}: loading: a decoder outlived it", redact(url)))
    })?;
    Ok((mirror, rest))
}

/// Everything read from Redis at open: each hash's fields and values.
pub(super) type Loaded = BTreeMap<Hash, Fields>;

/// Reads every loaded hash a page at a time, each page sent to a decoder as it arrives (the
/// players' pages to each in turn, the others to the first).
async fn load_all(
    conn: &mut RedisConn,
    url: &str,
    keys: &Keys,
    decoders: &[tokio::sync::mpsc::Sender<(Hash, Fields)>],
) -> Result<(), StoreError> {
    let mut turn = 0;
    for (hash, name) in keys.hashes().filter(|(h, _)| loaded_hash(*h)) {
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Fields) = ::redis::cmd("HSCAN")
                .arg(name)
                .arg(cursor)
                .arg("COUNT")
                .arg(page_of(hash))
                .query_async(conn)
                .await
                .map_err(redis_error(url))?;
            let to = if hash == Hash::Players {
                turn += 1;
                &decoders[turn % decoders.len()]
            } else {
                &decoders[0]
            };
            if to.send((hash, page)).await.is_err() {
                return Err(StoreError::Redis(format!(
                    "{}: loading stopped: a record could not be decoded",
                    redact(url)
                )));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

/// Fields one `HSCAN` page asks for: fewer of the journal's, whose parts of a large entry
/// hold 1,000 records each (a page of 10,000 of them was 150 MB in one reply).
fn page_of(hash: Hash) -> usize {
    if hash == Hash::Journal { 100 } else { 10_000 }
}

/// A player and their record in each pool.
pub(super) type Player = (PlayerId, Pools);

/// Decodes a page of the players hash.
pub(super) fn decode_players(page: Fields) -> Result<Vec<Player>, StoreError> {
    page.into_iter()
        .map(|(k, v)| {
            let id = text(&k);
            let pools = decode(&v, &format!("player {id}"))?;
            Ok((PlayerId::new(id.as_str()), Pools::from_map(pools)))
        })
        .collect()
}

pub(super) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A number kept as text in a field or in a field's name, or an error naming `key`.
fn number<T: std::str::FromStr>(
    value: &str,
    key: impl FnOnce() -> String,
) -> Result<T, StoreError> {
    value.parse().map_err(|_| StoreError::Decode {
        key: key(),
        detail: format!("{value:?} is not a number"),
    })
}

/// A field name of the weeks or ranks hash without the parts `shape` names.
fn malformed(what: &str, key: &str, shape: &str) -> StoreError {
    StoreError::Decode {
        key: format!("{what} {key}"),
        detail: format!("the field name is not {shape}"),
    }
}

/// Puts what was loaded into the mirror (HSCAN may return a field twice: the last copy wins,
/// and every copy is the same value).
pub(super) fn fill(data: &mut Data, mut loaded: Loaded) -> Result<(), StoreError> {
    let mut take = |h: Hash| loaded.remove(&h).unwrap_or_default();
    data.players.extend(decode_players(take(Hash::Players))?);
    for (k, v) in take(Hash::Parties) {
        let key = text(&k);
        let pools: BTreeMap<String, PartyRecord> = decode(&v, &format!("party {key}"))?;
        data.parties.insert(key, pools);
    }
    let (mut parts, mut expected) = (BTreeMap::new(), BTreeMap::new());
    for (k, v) in take(Hash::Journal) {
        let field = text(&k);
        let not_a_number = || StoreError::Decode {
            key: format!("journal {field}"),
            detail: "not a sequence number (and part)".into(),
        };
        if let Some((seq, part)) = super::journal::part_of(&field) {
            let at = (
                seq.parse::<u64>().map_err(|_| not_a_number())?,
                part.parse::<usize>().map_err(|_| not_a_number())?,
            );
            let part: super::journal::Part = decode(&v, &format!("journal {field}"))?;
            parts.insert(at, part);
            continue;
        }
        let seq: u64 = field.parse().map_err(|_| not_a_number())?;
        let entry = match decode(&v, &format!("journal {seq}"))? {
            super::journal::Head::Whole(entry) => entry,
            super::journal::Head::Parted { parts, entry } => {
                expected.insert(seq, parts);
                entry
            }
        };
        data.journal.insert(seq, entry);
    }
    super::journal::assemble(&mut data.journal, &expected, parts)?;
    for (k, v) in take(Hash::Acks) {
        let id = text(&k);
        let record: AckRecord = decode(&v, &format!("ack {id}"))?;
        data.acks.insert(MatchId::new(id.as_str()), record);
    }
    for (k, v) in take(Hash::Meta) {
        match text(&k).as_str() {
            "snapshot_seq" => {
                data.snapshot_seq = number(&text(&v), || "meta snapshot_seq".into())?;
            }
            "reloaded_queues" => data.reloaded = Some(decode(&v, "reloaded queues")?),
            _ => {}
        }
    }
    for (k, v) in take(Hash::Seasons) {
        let pool = text(&k);
        let state: SeasonState = decode(&v, &format!("season {pool}"))?;
        data.seasons.insert(pool, state);
    }
    for (k, v) in take(Hash::Weeks) {
        let key = text(&k);
        let parts: Vec<&str> = key.split('\u{1f}').collect();
        let [pool, season, week] = parts[..] else {
            return Err(malformed("week", &key, "POOL␟SEASON␟WEEK"));
        };
        let season: u32 = number(season, || format!("week {key}"))?;
        let week: u32 = number(week, || format!("week {key}"))?;
        let rp: Vec<(PlayerId, RankPoints)> = decode(&v, &format!("week {key}"))?;
        for (player, points) in &rp {
            data.player_weeks
                .insert((pool.to_string(), player.clone(), season, week), *points);
        }
        data.weeks.insert((pool.to_string(), season, week), rp);
    }
    for (k, v) in take(Hash::Ranks) {
        let key = text(&k);
        let Some((pool, season)) = key.split_once('\u{1f}') else {
            return Err(malformed("ranks", &key, "POOL␟SEASON"));
        };
        let season: u32 = number(season, || format!("ranks {key}"))?;
        let ranks: Vec<SeasonRank> = decode(&v, &format!("ranks {key}"))?;
        for rank in &ranks {
            data.player_ranks.insert(
                (pool.to_string(), rank.player.to_string(), season),
                rank.clone(),
            );
        }
        data.ranks.insert((pool.to_string(), season), ranks);
    }
    for (k, v) in take(Hash::Segments) {
        let id: u64 = number(&text(&k), || format!("segment {}", text(&k)))?;
        let matches: Vec<StoredMatch> = decode(&v, &format!("segment {id}"))?;
        data.segments.insert(id, matches);
    }
    for (k, _) in take(Hash::Ended) {
        data.ended.insert(MatchId::new(text(&k).as_str()));
    }
    for (k, v) in take(Hash::Calibrations) {
        let pool = text(&k);
        let c: Calibration = decode(&v, &format!("calibration {pool}"))?;
        data.calibrations.insert(pool, c);
    }
    for (k, v) in take(Hash::Tickets) {
        let id = text(&k);
        let t: StoredTicket = decode(&v, &format!("ticket {id}"))?;
        data.tickets.insert(TicketId::new(id.as_str()), t);
    }
    for (k, v) in take(Hash::Rosters) {
        let id = text(&k);
        let r: PartyRoster = decode(&v, &format!("party {id}"))?;
        data.rosters.insert(PartyId::new(id.as_str()), r);
    }
    admin::fill(data, take(Hash::Admin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(h: Hash, field: &str, value: &str) -> Loaded {
        Loaded::from([(
            h,
            vec![(field.as_bytes().to_vec(), value.as_bytes().to_vec())],
        )])
    }

    #[test]
    fn marks_and_field_names_that_are_not_numbers_are_refused_naming_them() {
        let mut data = Data::default();
        fill(&mut data, loaded(Hash::Meta, "snapshot_seq", "42")).unwrap();
        assert_eq!(data.snapshot_seq, 42);
        fill(&mut data, loaded(Hash::Weeks, "1v1\u{1f}3\u{1f}2", "[]")).unwrap();
        assert!(data.weeks.contains_key(&("1v1".to_string(), 3, 2)));
        let cases = [
            (Hash::Meta, "snapshot_seq", "4x2", "meta snapshot_seq"),
            (Hash::Meta, "snapshot_seq", "", "meta snapshot_seq"),
            (
                Hash::Weeks,
                "1v1\u{1f}three\u{1f}2",
                "[]",
                "week 1v1\u{1f}three\u{1f}2",
            ),
            (
                Hash::Weeks,
                "1v1\u{1f}3\u{1f}-1",
                "[]",
                "week 1v1\u{1f}3\u{1f}-1",
            ),
            (Hash::Weeks, "1v1\u{1f}3", "[]", "week 1v1\u{1f}3"),
            (Hash::Ranks, "1v1", "[]", "ranks 1v1"),
            (Hash::Ranks, "1v1\u{1f}s1", "[]", "ranks 1v1\u{1f}s1"),
            (Hash::Segments, "seg", "[]", "segment seg"),
        ];
        for (h, field, value, named) in cases {
            let mut data = Data::default();
            match fill(&mut data, loaded(h, field, value)) {
                Err(StoreError::Decode { key, .. }) => assert_eq!(key, named),
                other => panic!("{h:?} {field:?} = {value:?}: {other:?}"),
            }
        }
    }
}
