//! Periodic Glicko pools: a player's results wait in the record until the rating period ends,
//! then Glickman's batch update applies them together (Glickman 1999, "Parameter estimation in
//! large dynamic paired comparison experiments").

use super::Ranker;
use crate::ids::PlayerId;
use crate::rating::{RatingError, SystemConfig};
use crate::records::{PlayerChange, PoolRecord};

/// What closing one player's rating period changed, for whoever reports it (the event log): a
/// close moves the skill and, on a ladder, the rank points, with no match of its own to report
/// them.
#[derive(Clone, Debug, PartialEq)]
pub struct PeriodClose {
    /// The rating period that closed ([`period_index`] of its time).
    pub period: u64,
    /// The record's skill and rank points with the period open (before) and closed (after).
    pub change: PlayerChange,
}

/// The close of `before`'s open rating period that left `after` (the same player's record);
/// `None` when `before` had nothing pending, or `after` still holds the same period open.
#[must_use]
pub fn period_close(
    player: &PlayerId,
    before: &PoolRecord,
    after: &PoolRecord,
) -> Option<PeriodClose> {
    let open = before.period.as_deref()?;
    if after
        .period
        .as_deref()
        .is_some_and(|p| p.index == open.index)
    {
        return None;
    }
    Some(PeriodClose {
        period: open.index,
        change: PlayerChange {
            player_id: player.clone(),
            before: before.skill,
            after: after.skill,
            rank_points_before: before.rank_points,
            rank_points_after: after.rank_points,
        },
    })
}

/// The records of a match's players (same shape as `teams`) with every rating period that
/// ended before period `current` closed ([`close_period`]), and each close, in team order.
pub fn close_ended_periods(
    system: &SystemConfig,
    ranker: &dyn Ranker,
    teams: &[Vec<PlayerId>],
    records: &[Vec<PoolRecord>],
    current: u64,
) -> Result<(Vec<Vec<PoolRecord>>, Vec<PeriodClose>), RatingError> {
    let mut closed = records.to_vec();
    let mut closes = Vec::new();
    for (t, team_records) in closed.iter_mut().enumerate() {
        for (i, record) in team_records.iter_mut().enumerate() {
            let before = record.clone();
            if !close_period(system, ranker, record, current)? {
                continue;
            }
            if let Some(player) = teams.get(t).and_then(|team| team.get(i)) {
                closes.extend(period_close(player, &before, record));
            }
        }
    }
    Ok((closed, closes))
}

/// Periodic systems: the rating period `now_unix` falls in, ⌊now / period length⌋.
#[must_use]
pub fn period_index(system: &SystemConfig, now_unix: f64) -> u64 {
    (now_unix / system.rating_period_seconds()).floor().max(0.0) as u64
}

/// The rating period a result at `now_unix` opens for `record`, which has none pending: the
/// period `now_unix` falls in, but never one before the period of its `last_played_unix`. After
/// a close that holds the closed period's end, which falls in the next period: a wall clock that
/// stepped past a period's end, had the period closed, then stepped back would otherwise open
/// that period again, and its second close would rate its games twice.
#[must_use]
pub(super) fn period_to_open(system: &SystemConfig, record: &PoolRecord, now_unix: f64) -> u64 {
    let current = period_index(system, now_unix);
    record
        .last_played_unix
        .map_or(current, |t| current.max(period_index(system, t as f64)))
}

/// Closes `record`'s pending rating period if it ended before period `current`: the skill
/// becomes Glickman's batch update from the period's results (after the deviation growth of
/// any idle periods since the previous one), rank points move by the period's rating change as
/// `ranker` moves them ([`Ranker::period_closed`]: the ladder's Δr·F), nothing is pending, and
/// `last_played_unix` is the period's end (so the next close counts idle periods from there).
/// Returns whether the record changed.
pub fn close_period(
    system: &SystemConfig,
    ranker: &dyn Ranker,
    record: &mut PoolRecord,
    current: u64,
) -> Result<bool, RatingError> {
    let Some(pending) = record.period.as_deref() else {
        return Ok(false);
    };
    if pending.index >= current {
        return Ok(false);
    }
    let length = system.rating_period_seconds();
    let start = pending.index as f64 * length;
    let idle = record
        .last_played_unix
        .map_or(0.0, |t| (start - t as f64).max(0.0));
    let skill = system.rate_period(&record.skill, &pending.results, idle)?;
    let end = ((pending.index + 1) as f64 * length).floor() as i64;
    let mut next = ranker.period_closed(record, &skill);
    next.last_played_unix = Some(end);
    next.period = None;
    *record = next;
    Ok(true)
}

/// Closes `record`'s pending rating period at `now_unix`, whether or not it has ended: what a
/// season reset does first, so the games of the period are rated against the opponents as they
/// were then, on the deviation they were played with, and count toward the week's and the
/// season's rank points before a soft reset grows deviations or a hard reset rescales.
/// Otherwise as [`close_period`], except that `last_played_unix` is the period's end or
/// `now_unix`, whichever is earlier: never a time still to come, so idle time after an early
/// close counts from the close. The next results start a new pending period.
pub fn close_period_now(
    system: &SystemConfig,
    ranker: &dyn Ranker,
    record: &mut PoolRecord,
    now_unix: f64,
) -> Result<bool, RatingError> {
    if !close_period(system, ranker, record, u64::MAX)? {
        return Ok(false);
    }
    let now = now_unix.floor() as i64;
    record.last_played_unix = record.last_played_unix.map(|end| end.min(now));
    Ok(true)
}
