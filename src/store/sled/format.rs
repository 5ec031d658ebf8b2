//! The embedded store's format marker, `meta` key `format`. Every build refuses a marker it
//! does not read, so the marker changes whenever a build changes the layout in a way an older
//! build would misread:
//! - `matchmaker-store/1`: stores of older builds. Some kept the event log in the admin tree,
//!   and some had no past indexes or no time index of the acknowledgements.
//! - `matchmaker-store/2`: the event log in the journal tree, and the past indexes and the
//!   acknowledgements' time index kept by every write. An older build would find no event log
//!   and number events from 1 again, and its writes would leave records out of the indexes
//!   that erasures and trims read, with the marks saying they were complete.
//!
//! A `/1` store is moved to this layout at open (see `admin.rs`, `past.rs`, `acks.rs`; both
//! indexes are built again whatever their marks say, since an older build may have written
//! after a later one marked them) and then marked `/2`, so from then on an older build refuses
//! it instead of writing into it. A marker of a later release is refused with an error naming
//! both.

use std::path::Path;

use crate::store::StoreError;

/// `meta` key of the marker.
pub(super) const KEY: &str = "format";
const FAMILY: &str = "matchmaker-store/";
/// The format this build writes.
pub(super) const CURRENT: u32 = 2;
/// The oldest format this build opens (and upgrades to [`CURRENT`]).
const OLDEST: u32 = 1;

/// The marker of format `version`.
pub(super) fn marker(version: u32) -> Vec<u8> {
    format!("{FAMILY}{version}").into_bytes()
}

/// What the marker found at open says.
#[derive(Debug, PartialEq)]
pub(super) enum Found {
    /// No marker and no data: a new store, to be marked [`CURRENT`].
    New,
    /// A store of this format or of an older one this build upgrades (its version).
    Readable(u32),
}

/// Reads the marker of the store at `path`: `Err` for a marker of another program or of a
/// later release, or for data without a marker (`has_data` is asked only then).
pub(super) fn check(
    meta: &sled::Tree,
    has_data: impl FnOnce() -> bool,
    path: &Path,
) -> Result<Found, StoreError> {
    let Some(v) = meta.get(KEY)? else {
        if has_data() {
            return Err(StoreError::Foreign {
                path: path.to_path_buf(),
                detail: "a sled database without the matchmaker format marker".into(),
            });
        }
        return Ok(Found::New);
    };
    let text = String::from_utf8_lossy(&v);
    match text
        .strip_prefix(FAMILY)
        .and_then(|n| n.parse::<u32>().ok())
    {
        Some(n) if (OLDEST..=CURRENT).contains(&n) => Ok(Found::Readable(n)),
        Some(n) if n > CURRENT => Err(StoreError::Newer {
            location: format!("data dir {}", path.display()),
            found: text.into_owned(),
            reads: String::from_utf8_lossy(&marker(CURRENT)).into_owned(),
        }),
        _ => Err(StoreError::Foreign {
            path: path.to_path_buf(),
            detail: format!(
                "format marker is {text:?}, expected {:?}",
                String::from_utf8_lossy(&marker(CURRENT))
            ),
        }),
    }
}

/// Takes out the marks that say the past indexes and the acknowledgements' time index are
/// complete, so the open builds both again (adding only what is missing): called for a `/1`
/// store, which an older build may have written to after a later one marked it, leaving its
/// records out of the indexes that erasures and trims read.
pub(super) fn forget_index_marks(meta: &sled::Tree) -> Result<(), StoreError> {
    meta.remove(super::past::PAST_INDEX)?;
    meta.remove(super::acks::ACK_INDEX)?;
    Ok(())
}

/// Marks the store [`CURRENT`] and flushes: called once its layout is this format's, so an
/// older build refuses it from now on.
pub(super) fn upgrade(db: &sled::Db, meta: &sled::Tree) -> Result<(), StoreError> {
    meta.insert(KEY, marker(CURRENT))?;
    db.flush()?;
    Ok(())
}

#[cfg(test)]
impl super::SledStore {
    /// Marks the store as an older build leaves one it wrote to after a later build: the
    /// index marks set, the format marker `/1`.
    pub(in crate::store) fn mark_as_older_build_left_it(&self) {
        self.meta.insert(super::past::PAST_INDEX, b"1").unwrap();
        self.meta.insert(super::acks::ACK_INDEX, b"1").unwrap();
        self.meta.insert(KEY, marker(1)).unwrap();
        self.db.flush().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled::SledStore;
    use crate::store::{AdminRecords, EventKind, EventRecord, Storage};

    fn marker_of(dir: &Path) -> String {
        // Retried while a store just dropped still holds sled's own lock.
        let db = crate::store::sled::open_sled(dir, 1 << 20).unwrap();
        let v = db.open_tree("meta").unwrap().get(KEY).unwrap().unwrap();
        String::from_utf8_lossy(&v).into_owned()
    }

    fn set_marker(dir: &Path, marker: &str) {
        // Retried while a store just dropped still holds sled's own lock.
        let db = crate::store::sled::open_sled(dir, 1 << 20).unwrap();
        db.open_tree("meta").unwrap().insert(KEY, marker).unwrap();
        db.flush().unwrap();
    }

    /// What every older build does with the marker: it opens exactly `matchmaker-store/1`.
    fn an_older_build_opens(dir: &Path) -> bool {
        marker_of(dir) == "matchmaker-store/1"
    }

    fn event(player: &str) -> EventRecord {
        EventRecord {
            kind: EventKind::MatchFormed,
            unix: 1.0,
            match_id: String::new(),
            player_id: player.into(),
            detail_json: String::new(),
        }
    }

    #[test]
    fn a_new_store_is_marked_with_the_current_format_so_an_older_build_refuses_it() {
        let dir = tempfile::tempdir().unwrap();
        drop(SledStore::open(dir.path(), 1 << 20).unwrap());
        assert_eq!(marker_of(dir.path()), "matchmaker-store/2");
        assert!(!an_older_build_opens(dir.path()));
    }

    #[test]
    fn a_store_of_an_older_build_opens_keeps_its_data_and_is_marked_upgraded() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            store.append_events(&[event("p1"), event("p2")]).unwrap();
            store.flush().unwrap();
        }
        set_marker(dir.path(), "matchmaker-store/1");
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let events = store.events_after(0, 10).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(store.append_events(&[event("p3")]).unwrap(), 3);
        drop(store);
        assert_eq!(marker_of(dir.path()), "matchmaker-store/2");
        assert!(!an_older_build_opens(dir.path()));
    }

    #[test]
    fn a_store_of_a_later_release_is_refused_naming_both_formats() {
        let dir = tempfile::tempdir().unwrap();
        drop(SledStore::open(dir.path(), 1 << 20).unwrap());
        set_marker(dir.path(), "matchmaker-store/3");
        let e = SledStore::open(dir.path(), 1 << 20).err().unwrap();
        assert!(matches!(e, StoreError::Newer { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("matchmaker-store/3"), "{msg}");
        assert!(msg.contains("matchmaker-store/2"), "{msg}");
        assert!(msg.contains("later release"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        // Refused without being changed.
        assert_eq!(marker_of(dir.path()), "matchmaker-store/3");
    }

    #[test]
    fn a_marker_of_another_program_is_refused_as_foreign() {
        let dir = tempfile::tempdir().unwrap();
        drop(SledStore::open(dir.path(), 1 << 20).unwrap());
        for other in ["matchmaker-store/0", "matchmaker-store/x", "other/1"] {
            set_marker(dir.path(), other);
            let e = SledStore::open(dir.path(), 1 << 20).err().unwrap();
            assert!(matches!(e, StoreError::Foreign { .. }), "{other}: {e}");
        }
    }

    /// An older build journals a result without the acknowledgement's time index entry while
    /// the store's mark says the index is complete: the upgrade of the `/1` store indexes it,
    /// so the trim finds it.
    #[test]
    fn an_acknowledgement_an_older_build_left_out_of_the_time_index_is_indexed_at_upgrade() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path(), 1 << 20).unwrap();
            store
                .append_journal(1, &[crate::store::contract::entry("m-1", "p1", 1500.0)])
                .unwrap();
            let index: Vec<_> = store.journal.scan_prefix(b"t/").keys().collect();
            assert_eq!(index.len(), 1);
            for k in index {
                store.journal.remove(k.unwrap()).unwrap();
            }
            store.mark_as_older_build_left_it();
        }
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.journal.scan_prefix(b"t/").count(), 1);
        assert_eq!(store.trim_acks(f64::MAX, 10).unwrap(), 1);
    }
}
