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
//! A `/1` store is moved to this layout at open (see `admin.rs`, `past.rs`, `acks.rs`) and then
//! marked `/2`, so from then on an older build refuses it instead of writing into it. A marker
//! of a later release is refused with an error naming both.

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

/// Marks the store [`CURRENT`] and flushes: called once its layout is this format's, so an
/// older build refuses it from now on.
pub(super) fn upgrade(db: &sled::Db, meta: &sled::Tree) -> Result<(), StoreError> {
    meta.insert(KEY, marker(CURRENT))?;
    db.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sled::SledStore;
    use crate::store::{AdminRecords, EventKind, EventRecord};

    fn marker_of(dir: &Path) -> String {
        let db = sled::open(dir).unwrap();
        let v = db.open_tree("meta").unwrap().get(KEY).unwrap().unwrap();
        String::from_utf8_lossy(&v).into_owned()
    }

    fn set_marker(dir: &Path, marker: &str) {
        let db = sled::open(dir).unwrap();
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
            crate::store::Storage::flush(&store).unwrap();
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
}
