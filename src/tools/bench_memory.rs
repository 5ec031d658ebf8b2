//! `matchmaker bench-memory`: resident memory of a server holding N rated players in one pool
//! (target: 1M players under 512 MiB resident).
//!
//! Two processes, so the writer's allocations cannot flatter or spoil the number: this one writes
//! N player records into a scratch store (what a server that ran for a while has on disk),
//! then starts `matchmaker bench-memory-load` on it, which loads it exactly as `serve` does
//! (`State::load`, then the leaderboard indexes) and reads its own resident set size before and
//! after. The baseline is that same process before it opened the store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::ToolError;
use crate::config::Config;
use crate::ids::PlayerId;
use crate::records::PoolRecord;
use crate::state::State;

/// The resident-memory budget for a million rated players.
pub const TARGET_MIB: f64 = 512.0;

/// What `bench-memory --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryBench {
    pub players: usize,
    pub pool: String,
    /// Resident set of the loading process before it opened the store (runtime, config, code).
    pub rss_baseline_mib: f64,
    /// Resident set once every player is in memory and ranked, as a started server holds them
    /// (the store's page cache, bounded by `store.cache_capacity_bytes`, included).
    pub rss_loaded_mib: f64,
    /// `(rss_loaded - rss_baseline) / players`.
    pub bytes_per_player: f64,
    /// `rss_loaded_mib / 512` (target ≤ 1).
    pub ratio_to_target: f64,
    /// Seconds to load and rank them (the start-up cost of this many players).
    pub load_seconds: f64,
}

/// Writes `players` records into a scratch store under `scratch`, measures the load in a child
/// process, removes the store, and returns the child's report.
pub fn run(
    config: &Config,
    config_file: Option<&Path>,
    queue: &str,
    players: usize,
    scratch: &Path,
) -> Result<MemoryBench, ToolError> {
    let q = config
        .queues
        .get(queue)
        .ok_or_else(|| unknown_queue(queue))?;
    let pool = q.rating_pool.clone().unwrap_or_else(|| queue.to_string());
    let dir = scratch.join(format!("matchmaker-memory-{}", crate::ids::new_id("m")));
    let outcome = write(config, q, &pool, players, &dir).and_then(|()| {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| ToolError::Io { what, source }
        };
        let exe = std::env::current_exe().map_err(io("finding this program"))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("bench-memory-load").arg("--dir").arg(&dir);
        if let Some(f) = config_file {
            cmd.arg("--config").arg(f);
        }
        let out = cmd
            .arg("--queue")
            .arg(queue)
            .arg("--players")
            .arg(players.to_string())
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(io("starting the loading process"))?;
        if !out.status.success() {
            return Err(ToolError::Run("the loading process failed".into()));
        }
        serde_json::from_slice(&out.stdout).map_err(|source| ToolError::Json {
            what: "reading the loading process's report".into(),
            source,
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn write(
    config: &Config,
    q: &crate::config::QueueConfig,
    pool: &str,
    players: usize,
    dir: &Path,
) -> Result<(), ToolError> {
    let store = crate::store::open(dir, &config.store)?;
    let mut rated = RatedPlayers::new(q, pool);
    let mut done = 0;
    while done < players {
        let n = RatedPlayers::BATCH.min(players - done);
        rated.write(store.as_ref(), done..done + n)?;
        done += n;
    }
    store.flush()?;
    Ok(())
}

/// Rated players as a server that ran for a while holds them (seeded, so every run writes the
/// same): ratings spread around the queue's initial one, games, wins and rank points.
pub(super) struct RatedPlayers {
    rng: StdRng,
    initial: crate::rating::Skill,
    pool: String,
}

impl RatedPlayers {
    /// Players per write.
    pub(super) const BATCH: usize = 10_000;

    pub(super) fn new(q: &crate::config::QueueConfig, pool: &str) -> Self {
        Self {
            rng: StdRng::seed_from_u64(7),
            initial: q.rating.initial(),
            pool: pool.to_string(),
        }
    }

    /// Writes players `player-{i}` for `i` in `ids`, in one batch (not flushed).
    pub(super) fn write(
        &mut self,
        store: &dyn crate::store::Storage,
        ids: std::ops::Range<usize>,
    ) -> Result<(), ToolError> {
        let (rng, initial) = (&mut self.rng, self.initial);
        let rows: Vec<(PlayerId, BTreeMap<String, PoolRecord>)> = ids
            .map(|i| {
                let mut skill = initial;
                skill.mean += (rng.random::<f64>() - 0.5) * initial.deviation * 2.0;
                skill.deviation *= rng.random_range(0.15..1.0);
                let games = rng.random_range(1..400);
                let record = PoolRecord {
                    skill,
                    rank_points: rng.random_range(0..3000),
                    games,
                    wins: rng.random_range(0..=games),
                    last_played_unix: Some(1_700_000_000 + rng.random_range(0..30_000_000)),
                    ladder_floor: 0,
                    win_streak: rng.random_range(0..5),
                    period: None,
                };
                (
                    PlayerId::new(format!("player-{i:08}")),
                    BTreeMap::from([(self.pool.clone(), record)]),
                )
            })
            .collect();
        store.put_players(
            &rows
                .iter()
                .map(|(id, pools)| (id, pools))
                .collect::<Vec<_>>(),
        )?;
        Ok(())
    }
}

/// The child's half: load the store as `serve` does and measure.
pub fn load_and_measure(
    config: Config,
    dir: PathBuf,
    queue: &str,
    players: usize,
) -> Result<MemoryBench, ToolError> {
    let pool = config
        .queues
        .get(queue)
        .ok_or_else(|| unknown_queue(queue))?
        .rating_pool
        .clone()
        .unwrap_or_else(|| queue.to_string());
    let baseline = rss_bytes()?;
    let started = Instant::now();
    let store = crate::store::open(&dir, &config.store)?;
    let state = State::load(Arc::new(config), store)?;
    state.rebuild_rank_indexes();
    let load_seconds = started.elapsed().as_secs_f64();
    if state.player_count() != players {
        return Err(ToolError::Run(format!(
            "loaded {} players, expected {players}",
            state.player_count()
        )));
    }
    let loaded = rss_bytes()?;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let report = MemoryBench {
        players,
        pool,
        rss_baseline_mib: mib(baseline),
        rss_loaded_mib: mib(loaded),
        bytes_per_player: loaded.saturating_sub(baseline) as f64 / players.max(1) as f64,
        ratio_to_target: mib(loaded) / TARGET_MIB,
        load_seconds,
    };
    // Keep the state alive until after the measurement.
    drop(state);
    Ok(report)
}

/// This process's resident set size (Linux `/proc/self/status` `VmRSS`).
fn rss_bytes() -> Result<u64, ToolError> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|source| ToolError::Io {
        what: "reading /proc/self/status (bench-memory needs Linux)".into(),
        source,
    })?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| ToolError::Run("no VmRSS line in /proc/self/status".into()))?;
    Ok(kib * 1024)
}

fn unknown_queue(queue: &str) -> ToolError {
    ToolError::flag("--queue", format!("unknown queue {queue:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_and_grows_with_a_touched_allocation() {
        let before = rss_bytes().unwrap();
        let block = vec![1u8; 256 << 20];
        let after = rss_bytes().unwrap();
        assert!(before > 0);
        assert!(after >= before + (128 << 20), "{before} -> {after}");
        drop(block);
    }
}
