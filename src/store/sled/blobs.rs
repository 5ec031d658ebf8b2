//! sled writes a value larger than about 128 KB (a quarter of its 512 KB log segment) to a file
//! of its own under `blobs/`, named in the log, and syncs neither that file nor the directory.
//! A power loss could then keep the log entry and lose the value: a large batch half there (a
//! season reset's journal entry gone while the season clock written with it stays). Every
//! flush therefore syncs the blob files it has not synced yet, and the directory when it found
//! any, before the flush counts as durable.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Mutex;

use crate::store::StoreError;

/// The blob files of one store already synced.
#[derive(Default)]
pub(super) struct SyncedBlobs(Mutex<HashSet<OsString>>);

impl SyncedBlobs {
    /// Syncs the files under `dir/blobs` not synced yet, then the directory if there were any;
    /// how many it synced. Files sled removed meanwhile are skipped, and forgotten.
    pub(super) fn sync_new(&self, dir: &Path) -> Result<usize, StoreError> {
        let blobs = dir.join("blobs");
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        let entries = match std::fs::read_dir(&blobs) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(&blobs)(e)),
        };
        let mut synced = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut present = HashSet::new();
        let mut new = 0;
        for entry in entries {
            let entry = entry.map_err(io(&blobs))?;
            let name = entry.file_name();
            present.insert(name.clone());
            if synced.contains(&name) {
                continue;
            }
            match std::fs::File::open(entry.path()).and_then(|f| f.sync_all()) {
                Ok(()) => {
                    synced.insert(name);
                    new += 1;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io(&entry.path())(e)),
            }
        }
        synced.retain(|name| present.contains(name));
        if new > 0 {
            std::fs::File::open(&blobs)
                .and_then(|d| d.sync_all())
                .map_err(io(&blobs))?;
        }
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_past_the_blob_threshold_has_its_file_synced_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::SledStore::open(dir.path(), 1 << 20).unwrap();
        let synced = SyncedBlobs::default();
        assert_eq!(synced.sync_new(dir.path()).unwrap(), 0);
        store.put_raw(b"large", &vec![7u8; 600 << 10]).unwrap();
        crate::store::Storage::flush(&store).unwrap();
        let files = std::fs::read_dir(dir.path().join("blobs")).unwrap().count();
        assert!(files >= 1, "sled keeps a 600 KB value in a blob file");
        assert_eq!(synced.sync_new(dir.path()).unwrap(), files);
        assert_eq!(synced.sync_new(dir.path()).unwrap(), 0, "each file once");
    }
}
