//! Durable storage in sled (0.34): player records now; the result journal and snapshots build on
//! the same handle. Kept behind this narrow type so the engine could be swapped without touching
//! the core.
//!
//! Architecture invariant: nothing outside this module names sled.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::ids::PlayerId;
use crate::state::PoolRecord;

/// The format marker written into every store this server creates.
const FORMAT: &[u8] = b"matchmaker-store/1";
const META_TREE: &str = "meta";
const PLAYERS_TREE: &str = "players";

/// A fail-stop storage problem (disk, corruption, a data dir that is not ours).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data dir {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data dir {path} is corrupt ({detail}); restore it from a backup or move it away to start empty"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error("data dir {path} is not a matchmaker store ({detail}); point --data-dir elsewhere")]
    Foreign { path: PathBuf, detail: String },
    #[error("store: {0}")]
    Sled(String),
    #[error("store record {key:?} cannot be decoded: {detail}")]
    Decode { key: String, detail: String },
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        Self::Sled(e.to_string())
    }
}

/// One decoded player record: its id and its per-pool standing.
pub type StoredPlayer = Result<(PlayerId, BTreeMap<String, PoolRecord>), StoreError>;

/// The open store. Cheap to clone (sled handles are reference counted).
#[derive(Clone)]
pub struct Store {
    path: PathBuf,
    db: sled::Db,
    players: sled::Tree,
}

impl Store {
    /// Opens (or creates) the store in `dir`, refusing corrupt or foreign directories.
    pub fn open(dir: &Path, cache_capacity_bytes: u64) -> Result<Self, StoreError> {
        let path = dir.to_path_buf();
        if dir.exists() {
            let mut entries = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
            let non_empty = entries.next().is_some();
            if non_empty && !dir.join("db").exists() {
                return Err(StoreError::Foreign {
                    path,
                    detail: "the directory is not empty and holds no sled database".into(),
                });
            }
        } else {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
        }
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_capacity_bytes)
            .open()
            .map_err(|e| match e {
                sled::Error::Corruption { .. } => StoreError::Corrupt {
                    path: path.clone(),
                    detail: e.to_string(),
                },
                sled::Error::Io(source) => StoreError::Io {
                    path: path.clone(),
                    source,
                },
                other => StoreError::Sled(other.to_string()),
            })?;
        let meta = db.open_tree(META_TREE)?;
        match meta.get("format")? {
            Some(v) if v.as_ref() == FORMAT => {}
            Some(v) => {
                return Err(StoreError::Foreign {
                    path,
                    detail: format!(
                        "format marker is {:?}, expected {:?}",
                        String::from_utf8_lossy(&v),
                        String::from_utf8_lossy(FORMAT)
                    ),
                });
            }
            None => {
                let has_data = db.tree_names().iter().any(|name| {
                    name.as_ref() != META_TREE.as_bytes()
                        && db.open_tree(name).map(|t| !t.is_empty()).unwrap_or(true)
                }) || !db.is_empty();
                if has_data {
                    return Err(StoreError::Foreign {
                        path,
                        detail: "a sled database without the matchmaker format marker".into(),
                    });
                }
                meta.insert("format", FORMAT)?;
                db.flush()?;
            }
        }
        let players = db.open_tree(PLAYERS_TREE)?;
        Ok(Self { path, db, players })
    }

    /// The directory the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one player's pool records (durable after the next flush).
    pub fn put_player(
        &self,
        id: &PlayerId,
        pools: &BTreeMap<String, PoolRecord>,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(pools).map_err(|e| StoreError::Sled(e.to_string()))?;
        self.players.insert(id.as_str(), bytes)?;
        Ok(())
    }

    /// Every stored player, in id order.
    pub fn load_players(&self) -> Result<impl Iterator<Item = StoredPlayer>, StoreError> {
        Ok(self.players.iter().map(|item| {
            let (k, v) = item?;
            let key = String::from_utf8_lossy(&k).into_owned();
            let pools = serde_json::from_slice(&v).map_err(|e| StoreError::Decode {
                key: key.clone(),
                detail: e.to_string(),
            })?;
            Ok((PlayerId::new(key), pools))
        }))
    }

    /// Number of stored players.
    pub fn player_count(&self) -> usize {
        self.players.len()
    }

    /// Makes every write so far durable (blocking; for shutdown and tests).
    pub fn flush(&self) -> Result<usize, StoreError> {
        Ok(self.db.flush()?)
    }

    /// Makes every write so far durable without blocking the runtime.
    pub async fn flush_async(&self) -> Result<usize, StoreError> {
        Ok(self.db.flush_async().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::Skill;

    fn record() -> BTreeMap<String, PoolRecord> {
        BTreeMap::from([(
            "1v1".to_string(),
            PoolRecord {
                skill: Skill {
                    mean: 1612.5,
                    deviation: 80.0,
                    volatility: 0.06,
                },
                rank_points: 1234,
                games: 7,
                wins: 4,
                last_played_unix: Some(1_700_000_000),
            },
        )])
    }

    #[test]
    fn players_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), 1 << 20).unwrap();
            store.put_player(&PlayerId::from("p1"), &record()).unwrap();
            store.flush().unwrap();
        }
        let store = Store::open(dir.path(), 1 << 20).unwrap();
        let players: Vec<_> = store.load_players().unwrap().map(Result::unwrap).collect();
        assert_eq!(players, vec![(PlayerId::from("p1"), record())]);
    }

    #[test]
    fn a_foreign_directory_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
        let e = Store::open(dir.path(), 1 << 20).err().unwrap().to_string();
        assert!(e.contains("not a matchmaker store"), "{e}");
    }

    #[test]
    fn a_sled_database_of_another_program_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.insert("k", "v").unwrap();
            db.flush().unwrap();
        }
        let e = Store::open(dir.path(), 1 << 20).err().unwrap().to_string();
        assert!(e.contains("format marker"), "{e}");
    }

    #[test]
    fn a_corrupt_database_is_refused_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), 1 << 20).unwrap();
            store.put_player(&PlayerId::from("p1"), &record()).unwrap();
            store.flush().unwrap();
        }
        // Overwrite the middle of the data file with garbage.
        let db_file = dir.path().join("db");
        let mut bytes = std::fs::read(&db_file).unwrap();
        for b in bytes.iter_mut().skip(16) {
            *b = 0xA5;
        }
        std::fs::write(&db_file, bytes).unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let p = entry.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("snap.")
            {
                std::fs::remove_file(p).unwrap();
            }
        }
        match Store::open(dir.path(), 1 << 20) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("data dir") || msg.contains("store"), "{msg}");
            }
            Ok(store) => {
                // sled may recover to an empty prefix; then the record must not be half-read.
                assert!(
                    store.load_players().map(|it| it.count()).unwrap_or(0) <= 1,
                    "a recovered store holds at most the one record"
                );
            }
        }
    }
}
