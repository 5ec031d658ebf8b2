//! What `admin migrate-store` moves from the embedded store besides players, parties and the
//! journal: every result's acknowledgement still kept (with its time) and the season records,
//! all in the journal tree.

use super::{
    SledStore, decode, encode, player_rank_key, player_week_key, ranks_key, state_key, week_key,
};
use crate::ids::MatchId;
use crate::store::{AckRecord, History, StoreError};

impl SledStore {
    pub(super) fn export_all(&self) -> Result<History, StoreError> {
        let mut history = History::default();
        for item in self.journal.scan_prefix(b"r/") {
            let (k, v) = item?;
            let key = String::from_utf8_lossy(&k[2..]).into_owned();
            history.results.push((
                MatchId::new(key.as_str()),
                decode::<AckRecord>(&v, &format!("result/{key}"))?,
            ));
        }
        for item in self.journal.scan_prefix(b"s/s/") {
            let (k, v) = item?;
            let pool = String::from_utf8_lossy(&k[4..]).into_owned();
            let state = decode(&v, &format!("season state {pool}"))?;
            history.seasons.push((pool, state));
        }
        for item in self.journal.scan_prefix(b"s/w/") {
            let (k, v) = item?;
            let key = String::from_utf8_lossy(&k[4..]).into_owned();
            let (pool, at) = key.split_once('\u{1f}').unwrap_or((key.as_str(), ""));
            let at: Vec<u32> = at.split('/').filter_map(|n| n.parse().ok()).collect();
            let rp = decode(&v, &format!("week {key}"))?;
            history.weeks.push((
                pool.to_string(),
                at.first().copied().unwrap_or(0),
                at.get(1).copied().unwrap_or(0),
                rp,
            ));
        }
        for item in self.journal.scan_prefix(b"s/r/") {
            let (k, v) = item?;
            let key = String::from_utf8_lossy(&k[4..]).into_owned();
            let (pool, season) = key.split_once('\u{1f}').unwrap_or((key.as_str(), ""));
            let ranks = decode(&v, &format!("ranks {key}"))?;
            history
                .ranks
                .push((pool.to_string(), season.parse().unwrap_or(0), ranks));
        }
        Ok(history)
    }

    pub(super) fn import_all(&self, history: &History) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        for (match_id, record) in &history.results {
            self.ack_replacing(&mut batch, match_id, record)?;
        }
        for (pool, state) in &history.seasons {
            batch.insert(state_key(pool), encode(state)?);
        }
        for (pool, season, week, rp) in &history.weeks {
            batch.insert(week_key(pool, *season, *week), encode(rp)?);
            for (player, points) in rp {
                batch.insert(
                    player_week_key(pool, player, *season, *week),
                    &points.to_be_bytes(),
                );
            }
        }
        for (pool, season, ranks) in &history.ranks {
            batch.insert(ranks_key(pool, *season), encode(ranks)?);
            for rank in ranks {
                batch.insert(player_rank_key(pool, &rank.player, *season), encode(rank)?);
            }
        }
        self.journal.apply_batch(batch)?;
        Ok(())
    }
}
