//! Result acknowledgements as the stores keep them, and how long they are kept.
//!
//! An acknowledgement is what `ReportMatchResult` answered; a repeat of the report is answered
//! with it again, so a match's result is applied once however often it is reported. Every
//! store keeps each acknowledgement with the time its result was applied ([`AckRecord`]) and
//! drops it `[results] ack_retention_seconds` later ([`super::Storage::trim_acks`], which the
//! ledger runs every minute): a store holds about the match rate times the retention of them,
//! not every match ever played.
//!
//! An acknowledgement written by a release that kept no time counts as applied when its match
//! formed: the time in the match id the server minted ([`crate::ids::minted_unix`]), a little
//! earlier than its result. One whose id carries no time (no id the server mints) is kept.
//!
//! Dropping an acknowledgement takes nothing from start-up recovery: replaying a journal entry
//! writes the players' records only, never its acknowledgement. What reads acknowledgements
//! besides repeated reports is the restore of live matches, which skips a stored copy of a
//! match whose result is acknowledged; the ledger keeps every acknowledgement a stored copy
//! could still need (see `ledger/retention.rs`).
//!
//! This module also holds the in-memory index the memory backend and the Redis backend's
//! mirror share.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::ids::{MatchId, PlayerId};
use crate::records::{PlayerChange, ReportDigest, ResultAck};
use crate::rejection::FieldError;

/// The shortest `[results] ack_retention_seconds`: a game server retries a report it got no
/// answer to for minutes, not hours, and the same answer must come back meanwhile.
pub const MIN_ACK_RETENTION_SECONDS: u64 = 3600;

/// The longest `[results] ack_retention_seconds` (ten years).
const MAX_ACK_RETENTION_SECONDS: u64 = 10 * 366 * 24 * 3600;

/// Acknowledgements one trim drops at most, in one atomic batch (one script in cluster mode).
pub const ACK_TRIM_BATCH: usize = 5_000;

/// `[results]`: how long a result's acknowledgement is kept to answer repeated reports of its
/// match.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResultsConfig {
    /// Acknowledgements of results applied longer ago than this are dropped (checked every
    /// minute); a later report of the match is refused, never applied again.
    pub ack_retention_seconds: u64,
}

impl Default for ResultsConfig {
    fn default() -> Self {
        Self {
            ack_retention_seconds: 24 * 3600,
        }
    }
}

impl ResultsConfig {
    /// Checks the section, naming the key.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(MIN_ACK_RETENTION_SECONDS..=MAX_ACK_RETENTION_SECONDS)
            .contains(&self.ack_retention_seconds)
        {
            return Err(FieldError::new(
                "results.ack_retention_seconds",
                format!(
                    "must be in {MIN_ACK_RETENTION_SECONDS}..={MAX_ACK_RETENTION_SECONDS} (an \
                     hour, as game servers retry reports, to ten years; got {})",
                    self.ack_retention_seconds
                ),
            ));
        }
        Ok(())
    }
}

/// A result's acknowledgement as stored: the [`ResultAck`] (its JSON fields, so a release that
/// reads a bare `ResultAck` still reads it) and when the result was applied.
#[derive(Clone, Debug, PartialEq)]
pub struct AckRecord {
    pub ack: ResultAck,
    /// Unix seconds when the result was applied; `None` in acknowledgements written before the
    /// time was kept.
    pub applied_unix: Option<f64>,
}

impl AckRecord {
    /// The acknowledgement of a result applied at `applied_unix`.
    #[must_use]
    pub fn applied(ack: ResultAck, applied_unix: f64) -> Self {
        Self {
            ack,
            applied_unix: Some(applied_unix),
        }
    }

    /// The acknowledgement a result's journal entry carries, timed as the entry.
    #[must_use]
    pub fn of_entry(entry: &super::JournalEntry) -> Self {
        Self::applied(entry.ack.clone(), entry.applied_unix)
    }

    /// The time the retention counts from: when the result was applied, or for an
    /// acknowledgement without that time, when match `id` formed; `None` (kept) when the id
    /// carries no time either.
    #[must_use]
    pub fn kept_since(&self, id: &MatchId) -> Option<f64> {
        self.applied_unix
            .or_else(|| crate::ids::minted_unix(id.as_str()))
    }
}

impl Serialize for AckRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // Every field of the acknowledgement, named here so that a new one cannot be left out.
        let ResultAck {
            queue,
            changes,
            report,
        } = &self.ack;
        let fields = 2 + usize::from(self.applied_unix.is_some()) + usize::from(report.is_some());
        let mut s = serializer.serialize_struct("AckRecord", fields)?;
        s.serialize_field("queue", queue)?;
        s.serialize_field("changes", changes)?;
        if let Some(report) = report {
            s.serialize_field("report", report)?;
        }
        if let Some(unix) = self.applied_unix {
            s.serialize_field("applied_unix", &unix)?;
        }
        s.end()
    }
}

impl<'de> Deserialize<'de> for AckRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Stored {
            queue: String,
            changes: Vec<PlayerChange>,
            #[serde(default)]
            report: Option<ReportDigest>,
            #[serde(default)]
            applied_unix: Option<f64>,
        }
        let Stored {
            queue,
            changes,
            report,
            applied_unix,
        } = Stored::deserialize(deserializer)?;
        Ok(Self {
            ack: ResultAck {
                queue,
                changes,
                report,
            },
            applied_unix,
        })
    }
}

/// Whole milliseconds of `unix` seconds: the order acknowledgements are trimmed in.
pub(super) fn millis(unix: f64) -> u64 {
    (unix.max(0.0) * 1000.0) as u64
}

/// Every acknowledgement, by match and by the time the retention counts from (those with one),
/// as the memory backend and the Redis mirror hold them.
#[derive(Default)]
pub(super) struct Acks {
    records: HashMap<MatchId, AckRecord>,
    /// (milliseconds of [`AckRecord::kept_since`], match), oldest first.
    by_time: BTreeSet<(u64, MatchId)>,
}

impl Acks {
    /// Keeps `record` for `id`, replacing the one there was.
    pub(super) fn insert(&mut self, id: MatchId, record: AckRecord) {
        if let Some(since) = self.records.get(&id).and_then(|old| old.kept_since(&id)) {
            self.by_time.remove(&(millis(since), id.clone()));
        }
        if let Some(since) = record.kept_since(&id) {
            self.by_time.insert((millis(since), id.clone()));
        }
        self.records.insert(id, record);
    }

    pub(super) fn get(&self, id: &MatchId) -> Option<&AckRecord> {
        self.records.get(id)
    }

    /// Every acknowledgement, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&MatchId, &AckRecord)> {
        self.records.iter()
    }

    /// Drops the acknowledgements kept since before `before_unix`, oldest first, at most
    /// `at_most`; their matches.
    pub(super) fn trim(&mut self, before_unix: f64, at_most: usize) -> Vec<MatchId> {
        let before = millis(before_unix);
        let old: Vec<(u64, MatchId)> = self
            .by_time
            .iter()
            .take_while(|(at, _)| *at < before)
            .take(at_most)
            .cloned()
            .collect();
        old.into_iter()
            .map(|key| {
                self.by_time.remove(&key);
                self.records.remove(&key.1);
                key.1
            })
            .collect()
    }

    /// Puts `marker` in `player`'s place in every acknowledgement naming them; those matches,
    /// in order. Their times stay.
    pub(super) fn erase(&mut self, player: &PlayerId, marker: &PlayerId) -> Vec<MatchId> {
        let mut rewritten: Vec<MatchId> = self
            .records
            .iter_mut()
            .filter_map(|(id, r)| r.ack.erase(player, marker).then(|| id.clone()))
            .collect();
        rewritten.sort();
        rewritten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(queue: &str) -> ResultAck {
        ResultAck {
            queue: queue.into(),
            changes: Vec::new(),
            report: None,
        }
    }

    #[test]
    fn a_record_is_an_acknowledgement_with_its_time_and_reads_one_written_without() {
        let change = PlayerChange {
            player_id: PlayerId::new("p1"),
            before: crate::store::contract::record(1500.0)["1v1"].skill,
            after: crate::store::contract::record(1_512.345_678_901_234)["1v1"].skill,
            rank_points_before: 10,
            rank_points_after: 3,
        };
        let acked = ResultAck {
            queue: "1v1".into(),
            changes: vec![change],
            report: Some(ReportDigest {
                placements: vec![2, 1],
                team_scores: vec![3.0, 16.0],
            }),
        };
        let record = AckRecord::applied(acked.clone(), 1_700_000_000.125);
        let bytes = serde_json::to_vec(&record).unwrap();
        // A reader of bare acknowledgements (an earlier release) still reads it.
        let bare: ResultAck = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(bare, acked);
        assert_eq!(serde_json::from_slice::<AckRecord>(&bytes).unwrap(), record);
        // One written before the time was kept.
        let old: AckRecord = serde_json::from_slice(&serde_json::to_vec(&acked).unwrap()).unwrap();
        assert_eq!(old.ack, acked);
        assert_eq!(old.applied_unix, None);
        // One written before the report was kept.
        let unreported: AckRecord =
            serde_json::from_str(r#"{"queue":"1v1","changes":[],"applied_unix":5.0}"#).unwrap();
        assert_eq!(
            (unreported.ack.report, unreported.applied_unix),
            (None, Some(5.0))
        );
        let minted = MatchId::new("m-0000000003e8ffffffffffffffffffff");
        assert_eq!(old.kept_since(&minted), Some(1.0), "formed at 1000 ms");
        assert_eq!(old.kept_since(&MatchId::new("m1")), None, "kept");
        assert_eq!(record.kept_since(&minted), Some(1_700_000_000.125));
    }

    #[test]
    fn the_index_trims_oldest_first_within_the_bound_and_keeps_untimed_ones() {
        let mut acks = Acks::default();
        for (id, at) in [("m3", 30.0), ("m1", 10.0), ("m2", 20.0), ("m4", 40.0)] {
            acks.insert(MatchId::new(id), AckRecord::applied(ack("1v1"), at));
        }
        acks.insert(
            MatchId::new("untimed"),
            AckRecord {
                ack: ack("1v1"),
                applied_unix: None,
            },
        );
        // Written again with another time: only the new one counts.
        acks.insert(MatchId::new("m4"), AckRecord::applied(ack("2v2"), 5.0));
        assert_eq!(acks.trim(35.0, 2), [MatchId::new("m4"), MatchId::new("m1")]);
        assert_eq!(
            acks.trim(35.0, 10),
            [MatchId::new("m2"), MatchId::new("m3")]
        );
        assert!(acks.trim(1e12, 10).is_empty(), "an id without a time stays");
        assert_eq!(acks.iter().count(), 1);
        assert!(acks.get(&MatchId::new("untimed")).is_some());
    }

    #[test]
    fn the_retention_is_at_least_an_hour_and_the_error_names_the_key() {
        assert!(ResultsConfig::default().validate().is_ok());
        let short = ResultsConfig {
            ack_retention_seconds: 3599,
        };
        let e = short.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("results.ack_retention_seconds: must be in 3600.."),
            "{e}"
        );
        assert!(e.contains("got 3599"), "{e}");
    }
}
