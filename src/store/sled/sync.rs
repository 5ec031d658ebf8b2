//! A failed flush stays failed. Linux reports a failed write-back once per open file
//! description and then clears it, and every flush of the store syncs the same data file
//! through one descriptor: if a flush that only logs its error (events, matches handed to game
//! servers, parties) took the report, the next flush (the result journal's, whose failure stops
//! the server) would return Ok though pages written before it never reached the disk. So the
//! store keeps the first failure of sled's flush or of the sync, and every later flush returns
//! it: the journal's fail-stop and the liveness check trip, and the server restarts to find out
//! what the disk really holds.

use std::io::ErrorKind;
use std::path::Path;
use std::sync::OnceLock;

use crate::store::StoreError;

/// The store's first flush failure, if any.
#[derive(Default)]
pub(super) struct FlushHealth {
    failed: OnceLock<(ErrorKind, String)>,
    /// Tests: the next sync fails as a disk would.
    #[cfg(test)]
    fail_next: std::sync::atomic::AtomicBool,
}

impl FlushHealth {
    /// `Err` (naming the first failure) once a flush failed: nothing written since is known
    /// to be durable, and no later flush can tell.
    pub(super) fn check(&self, path: &Path) -> Result<(), StoreError> {
        match self.failed.get() {
            None => Ok(()),
            Some((kind, first)) => Err(StoreError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    *kind,
                    format!("an earlier flush failed, so no later write is known durable: {first}"),
                ),
            }),
        }
    }

    /// Keeps `e`, a flush's failure, if it is the first; returns it.
    pub(super) fn failed(&self, e: StoreError) -> StoreError {
        let kind = match &e {
            StoreError::Io { source, .. } => source.kind(),
            _ => ErrorKind::Other,
        };
        let _ = self.failed.set((kind, e.to_string()));
        e
    }

    /// Runs a sync of the store's files, unless a flush failed before; keeps its failure.
    pub(super) fn sync(
        &self,
        path: &Path,
        sync: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.check(path)?;
        #[cfg(test)]
        if self
            .fail_next
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            return Err(self.failed(StoreError::Io {
                path: path.join("db"),
                source: std::io::Error::other("fdatasync failed (test)"),
            }));
        }
        sync().map_err(|e| self.failed(e))
    }

    /// Tests: the next sync fails, once, as a disk reports a failed write-back.
    #[cfg(test)]
    pub(super) fn fail_next_sync(&self) {
        self.fail_next
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use crate::store::Storage;

    /// The disk reports one failed write-back; every later flush, of either kind, still fails,
    /// as the report is gone from the file.
    #[tokio::test]
    async fn a_flush_after_a_failed_one_fails_too() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::SledStore::open(dir.path(), 1 << 20).unwrap();
        store.put_raw(b"k", b"v").unwrap();
        store.flush().unwrap();
        store.flush_health.fail_next_sync();
        assert!(store.flush_async().await.is_err(), "the failing sync");
        store.put_raw(b"k2", b"v").unwrap();
        let later = store.flush().expect_err("a later flush");
        assert!(
            later.to_string().contains("an earlier flush failed")
                && later.to_string().contains("fdatasync failed (test)"),
            "{later}"
        );
        assert!(store.flush_async().await.is_err(), "a later async flush");
        // Every handle of the store shares it.
        assert!(store.clone().flush().is_err());
    }
}
