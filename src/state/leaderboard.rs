//! Leaderboards: each pool's rank index, kept in step with the players' records.

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use super::{QueueInfo, State};
use crate::ids::PlayerId;
use crate::ranking::{LeaderboardEntry, RankIndex, RankingKind, Tier};
use crate::records::PoolRecord;

impl State {
    /// Rebuilds every pool's leaderboard from the players in memory (after recovery).
    pub fn rebuild_rank_indexes(&self) {
        let mut rows: BTreeMap<&str, Vec<LeaderboardEntry>> = self
            .inner
            .ranks
            .keys()
            .map(|pool| (pool.as_str(), Vec::new()))
            .collect();
        for entry in self.inner.players.iter() {
            let state = entry.value().lock();
            for (pool, r) in state.pools.iter() {
                if let (Some(board), Some(row)) = (
                    rows.get_mut(pool),
                    self.leaderboard_entry(entry.key(), pool, r),
                ) {
                    board.push(row);
                }
            }
        }
        for (pool, board) in rows {
            self.rank_index(pool).rebuild(board);
        }
    }

    /// The leaderboard row of a record; `None` for a pool no queue uses any more (records of a
    /// removed queue are kept, not ranked).
    pub(super) fn leaderboard_entry(
        &self,
        player: &PlayerId,
        pool: &str,
        r: &PoolRecord,
    ) -> Option<LeaderboardEntry> {
        let system = self.inner.pool_systems.get(pool)?;
        Some(LeaderboardEntry {
            player: player.clone(),
            rank_points: r.rank_points,
            conservative_rating: system.display(&r.skill).low,
            wins: r.wins,
        })
    }

    /// Players of a queue's pool in leaderboard order: (total ranked, the requested page).
    pub fn leaderboard(
        &self,
        queue: &QueueInfo,
        offset: usize,
        limit: usize,
    ) -> (usize, Vec<(PlayerId, PoolRecord)>) {
        let (total, ids): (usize, Vec<PlayerId>) = {
            let index = self.rank_index(&queue.pool);
            let ids = index
                .page(offset, limit)
                .into_iter()
                .map(|e| e.player.clone())
                .collect();
            (index.len(), ids)
        };
        let page = ids
            .into_iter()
            .filter_map(|p| {
                let record = self.player(&p, &queue.pool).1?;
                Some((p, record))
            })
            .collect();
        (total, page)
    }

    /// The ladder tier of a player (Grandweaver needs the player's rank among Masters).
    pub fn tier(&self, queue: &QueueInfo, player: &PlayerId, record: &PoolRecord) -> Option<Tier> {
        if queue.config.ranking != RankingKind::Ladder {
            return None;
        }
        let ladder = &self.inner.config.ranking.ladder;
        let entry = self.leaderboard_entry(player, &queue.pool, record)?;
        let index = self.rank_index(&queue.pool);
        Some(
            ladder
                .tier_in(&index, &entry)
                .unwrap_or_else(|| ladder.tier_of(record.rank_points, None))
                .clone(),
        )
    }

    pub(super) fn rank_index(&self, pool: &str) -> MutexGuard<'_, RankIndex> {
        self.inner
            .ranks
            .get(pool)
            .expect("every pool has a rank index")
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}
