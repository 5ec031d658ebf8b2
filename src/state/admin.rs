//! Admin changes to player records: rating edits, season resets, the end of a season, migration
//! from Elo, and the export order.
//!
//! Each `prepare_*` reads the current records and returns journal entries of absolute
//! after-records; it changes nothing. The ledger calls it under the write side of its reset gate
//! (so no result is between its prepare and its apply), journals the entries in one atomic batch,
//! and then applies them with [`State::apply_admin`], the same code path start-up replay uses.
//!
//! Definitions (the Skyweaver white paper leaves these open):
//! - Seasons are kept per rating pool (`season`, `week`), so a reset named to one queue moves
//!   only that pool's clock. With no queue, a reset covers every pool of a queue with a ranking.
//! - Soft reset: ladder RP above the tier's `soft_reset_cap` is cut (Grandweaver from the
//!   leaderboard, so the top-N rule applies); INVERSUS RP is untouched (it has no caps); every
//!   player's skill gets `SystemConfig::decay` for one `rating_period_seconds`. The RP recorded
//!   as end-of-week RP is the RP *before* the cut (what the player reached that week). Note that
//!   results also widen the deviation for inactivity since the last game, so a player idle over
//!   a soft reset gets both. In a periodic Glicko pool every open rating period is closed first
//!   (`results::close_period_now`), ended or not: the week's games are rated on the deviations
//!   they were played with and their Δr·F is in the week's RP, then the period of growth.
//! - Hard reset: ladder RP becomes the `hard_reset_rp` of the season rank recorded by
//!   `EndSeason` if there is one, else of the tier held now (a tier without a value keeps its
//!   RP), with the floor that RP earns and no streak; INVERSUS RP restarts at 0 (its start value).
//!   The MMR rescale and deviation reset apply to Glicko-2 and Glicko-1 pools as written, and to
//!   Weng-Lin pools carried over to their own scale (`ranking::season::hard_reset_skill`); Elo
//!   pools keep their skills (no deviation to reset). In a periodic Glicko pool every open
//!   rating period is closed first (`results::close_period_now`), ended or not, and the tiers,
//!   season ranks and rescale are taken from the closed records: the old season's games are
//!   rated on the old scale.
//! - End of season: every ladder player's tier; "Master and above" are the tiers with a soft
//!   cap, placed by the mean of their end-of-week RP (their current RP if no week ended). In a
//!   periodic Glicko pool every open rating period is closed first, as at a reset, and the
//!   closed records are journaled with the ranks.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{MatchId, PlayerId};
use crate::ranking::RankingKind;
use crate::ranking::season::{self, SeasonRank, SeasonState};
use crate::ranking::{LadderState, RankIndex, RankPoints};
use crate::rating::{Skill, SystemConfig};
use crate::records::{PartyRecord, ResultAck};
use crate::results::{PeriodClose, QueueRanker};
use crate::store::{EntryKind, EventRecord, JournalEntry, SeasonWrite, StoreError};

use super::events::period_close_events;
use super::{PoolRecord, QueueInfo, Rejection, State, unix_now};

/// Which reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetKind {
    /// Weekly: RP cut to tier caps, one rating period of deviation growth, week + 1.
    Soft,
    /// Monthly: RP to the hard-reset value of the tier reached, Glicko MMR rescaled with
    /// deviation reset, next season.
    Hard,
}

/// What a reset or the end of a season did, per pool.
#[derive(Clone, Debug, PartialEq)]
pub struct SeasonOutcome {
    /// The season clock after the change (of the first pool; pools reset together agree).
    pub state: SeasonState,
    /// Players whose record changed (reset) or who were ranked (end of season).
    pub players: u64,
    /// Resets only: what the reset does to each pool (the preview a dry run answers).
    pub pools: Vec<PoolReset>,
}

/// What a season reset does to one rating pool.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolReset {
    pub pool: String,
    pub before: SeasonState,
    pub after: SeasonState,
    /// Players with a record in the pool.
    pub players: u64,
    /// Ladder pools: `(tier, players before, players after)` in tier order; empty otherwise.
    pub tiers: Vec<(String, u64, u64)>,
}

/// One validated migration row.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationRow {
    pub index: u32,
    pub player: PlayerId,
    pub elo: f64,
    pub legacy_rank: String,
}

/// What a migration did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigrationOutcome {
    pub migrated: u64,
    pub unchanged: u64,
    /// (row index, player id, reason).
    pub rejected: Vec<(u32, String, String)>,
}

/// A journal entry of an admin change with the events that report it: a `RATING_CHANGED` for
/// each rating period it closes (the ledger journals them in the entry's batch where it can).
#[derive(Clone, Debug)]
pub struct EntryWithEvents {
    pub entry: JournalEntry,
    pub events: Vec<EventRecord>,
}

/// The `SEASON_RESET` event of a reset of `queues` with `outcome`.
fn season_reset_event(
    kind: ResetKind,
    queues: &[std::sync::Arc<QueueInfo>],
    outcome: &SeasonOutcome,
    unix: f64,
) -> EventRecord {
    let names: Vec<String> = queues.iter().map(|q| q.id.to_string()).collect();
    EventRecord {
        kind: crate::store::EventKind::SeasonReset,
        unix,
        match_id: String::new(),
        player_id: String::new(),
        detail_json: serde_json::json!({
            "kind": if kind == ResetKind::Hard { "hard" } else { "soft" },
            "queues": names,
            "season": outcome.state.season,
            "week": outcome.state.week,
            "players_changed": outcome.players,
        })
        .to_string(),
    }
}

/// A party's rating in `pool` that an admin change cannot carry through its system (`key`:
/// the party's members, as [`crate::records::party_key`] joins them): refused, named by the
/// party's first member, as a player's would be.
fn party_rating_refused(key: &str, pool: &str, e: &impl std::fmt::Display) -> Rejection {
    let members: Vec<&str> = key.split('\u{1f}').collect();
    Rejection::Rating {
        player: PlayerId::new(members[0]),
        pool: pool.to_string(),
        detail: format!("the rating of their party ({}): {e}", members.join(", ")),
    }
}

type Prepared<T> = Result<Result<(Vec<EntryWithEvents>, T), Rejection>, StoreError>;

impl State {
    /// Applies a durable admin entry in memory (records, leaderboard order).
    pub fn apply_admin(&self, entry: &JournalEntry) {
        self.apply_records(entry);
    }

    /// The distinct pools of `queues`, each with the first queue that names it (queues sharing
    /// a pool are validated to share rating system and ranking).
    fn pools_of<'a>(
        queues: impl IntoIterator<Item = &'a std::sync::Arc<QueueInfo>>,
    ) -> Vec<std::sync::Arc<QueueInfo>> {
        let mut seen = BTreeSet::new();
        queues
            .into_iter()
            .filter(|q| seen.insert(q.pool.clone()))
            .cloned()
            .collect()
    }

    /// The queues a season command covers: the named one, or every queue with a ranking.
    pub fn season_queues(
        &self,
        queue: Option<&str>,
    ) -> Result<Vec<std::sync::Arc<QueueInfo>>, Rejection> {
        match queue {
            Some(name) => Ok(vec![self.queue("queue", name)?]),
            None => Ok(Self::pools_of(
                self.queues()
                    .iter()
                    .filter(|q| q.config.ranking != RankingKind::None),
            )),
        }
    }

    /// Every player with a record in `pool`, in id order.
    fn pool_records(&self, pool: &str) -> Vec<(PlayerId, PoolRecord)> {
        let mut rows: Vec<(PlayerId, PoolRecord)> = self
            .inner
            .players
            .iter()
            .filter_map(|e| {
                let r = e.value().lock().pools.get(pool).cloned()?;
                Some((e.key().clone(), r))
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    /// The ladder tier of each player of a pool, by the leaderboard (Grandweaver needs rank).
    /// `rows` are every record of the pool, as held (places from the pool's board) or, when
    /// `changed`, as a change about to be journaled leaves them (places from a board of `rows`
    /// themselves, since the pool's board does not hold their new rank points yet).
    fn tiers_now(
        &self,
        pool: &str,
        rows: &[(PlayerId, PoolRecord)],
        changed: bool,
    ) -> Vec<crate::ranking::Tier> {
        let ladder = &self.inner.config.ranking.ladder;
        let entries: Vec<Option<crate::ranking::LeaderboardEntry>> = rows
            .iter()
            .map(|(p, r)| self.leaderboard_entry(p, pool, r))
            .collect();
        let tiers = |index: &RankIndex| -> Vec<crate::ranking::Tier> {
            rows.iter()
                .zip(&entries)
                .map(|((_, r), entry)| {
                    entry
                        .as_ref()
                        .and_then(|e| ladder.tier_in(index, e))
                        .unwrap_or_else(|| ladder.tier_of(r.rank_points, None))
                        .clone()
                })
                .collect()
        };
        if changed {
            let mut board = RankIndex::new();
            board.rebuild(entries.iter().flatten().cloned().collect());
            tiers(&board)
        } else {
            tiers(&self.rank_index(pool))
        }
    }

    /// `rows` (records of `queue`'s pool) with every pending rating period closed at
    /// `now_unix` ([`crate::results::close_period_now`]), rank points moved as the queue's
    /// ranking moves them at a close; `None` when the pool is not periodic (nothing is pending).
    fn close_open_periods(
        &self,
        queue: &QueueInfo,
        rows: &[(PlayerId, PoolRecord)],
        now_unix: f64,
    ) -> Result<Option<Vec<(PlayerId, PoolRecord)>>, Rejection> {
        let system = &queue.config.rating;
        if !system.is_periodic() {
            return Ok(None);
        }
        let ranker = QueueRanker::new(queue.config.ranking, &self.inner.config.ranking, system);
        let mut out = rows.to_vec();
        for (p, r) in &mut out {
            crate::results::close_period_now(system, &ranker, r, now_unix).map_err(|e| {
                Rejection::Rating {
                    player: p.clone(),
                    pool: queue.pool.clone(),
                    detail: e.to_string(),
                }
            })?;
        }
        Ok(Some(out))
    }

    /// The events of the rating periods [`State::close_open_periods`] closed: `held` and
    /// `closed` are the same rows in the same order, before and after (`None`: nothing closed).
    fn closed_period_events(
        queue: &QueueInfo,
        held: &[(PlayerId, PoolRecord)],
        closed: Option<&[(PlayerId, PoolRecord)]>,
        unix: f64,
    ) -> Vec<EventRecord> {
        let Some(closed) = closed else {
            return Vec::new();
        };
        let closes: Vec<PeriodClose> = held
            .iter()
            .zip(closed)
            .filter_map(|((p, before), (_, after))| crate::results::period_close(p, before, after))
            .collect();
        period_close_events(queue.id.as_str(), &queue.pool, &closes, unix)
    }

    pub(super) fn admin_entry(
        label: String,
        pool: &str,
        records: Vec<(PlayerId, PoolRecord)>,
    ) -> JournalEntry {
        JournalEntry {
            match_id: MatchId::new(label),
            applied_unix: unix_now(),
            pool: pool.to_owned(),
            records,
            parties: Vec::new(),
            ack: ResultAck {
                queue: String::new(),
                changes: Vec::new(),
                report: None,
            },
            kind: EntryKind::Admin,
            season: None,
            calibration: None,
            history: None,
        }
    }

    /// `SetRating`: the player's record in the queue's pool with `skill` (and `rank_points`, for
    /// a ranked queue) replaced. A ladder record gets the floor its RP earns and no streak.
    pub fn prepare_set_rating(
        &self,
        queue: &QueueInfo,
        player: &PlayerId,
        skill: Skill,
        rank_points: Option<RankPoints>,
    ) -> Result<EntryWithEvents, Rejection> {
        let before = self
            .player(player, &queue.pool)
            .1
            .unwrap_or_else(|| self.initial_record(queue));
        let mut record = before.clone();
        // A zero volatility (Weng-Lin and Elo have none; a Glicko-2 caller may omit it) keeps
        // the current one.
        let volatility = record.skill.volatility;
        record.skill = skill;
        if skill.volatility == 0.0 {
            record.skill.volatility = volatility;
        }
        // The system's own domain (e.g. Glicko-2 volatility in (0, 10]): a skill every later
        // result for this player would refuse is refused here instead.
        queue
            .config
            .rating
            .validate_skill(&record.skill, "rating")
            .map_err(|e| match e {
                crate::rating::RatingError::InvalidValue { field, rule, value } => {
                    Rejection::invalid(field, format!("{rule} (got {value})"))
                }
                other => Rejection::invalid("rating", other.to_string()),
            })?;
        // Within the system's bounds (Glicko-2 keeps ratings within 6.045 internal units of the
        // centre), as every result leaves them: a rating past them would be matched above every
        // rated player and lose rank points on its first win, when the result clamps it.
        record.skill = queue
            .config
            .rating
            .decay(&record.skill, 0.0)
            .map_err(|e| Rejection::invalid("rating", e.to_string()))?;
        // The deviation set is the deviation now: no inactivity before this counts on top, and
        // no game of a rating period not closed yet (periodic pools) moves it when it closes.
        record.last_played_unix = Some(super::unix_now() as i64);
        record.period = None;
        if let Some(rp) = rank_points {
            match queue.config.ranking {
                RankingKind::None => {
                    return Err(Rejection::invalid(
                        "rank_points",
                        format!("queue {} has no ranking; leave rank_points unset", queue.id),
                    ));
                }
                RankingKind::Inversus => {
                    let max = self.inner.config.ranking.inversus.max_rp;
                    if rp > max {
                        return Err(Rejection::invalid(
                            "rank_points",
                            format!("INVERSUS rank points are 0..={max} (got {rp})"),
                        ));
                    }
                    record.rank_points = rp;
                }
                RankingKind::Ladder => {
                    let s = LadderState::with_rp(&self.inner.config.ranking.ladder, rp);
                    record.rank_points = s.rp;
                    record.ladder_floor = s.floor_rp;
                    record.win_streak = s.win_streak;
                }
            }
        }
        let event = super::events::admin_rating_event(
            queue.id.as_str(),
            &queue.pool,
            "set_rating",
            &crate::records::PlayerChange {
                player_id: player.clone(),
                before: before.skill,
                after: record.skill,
                rank_points_before: before.rank_points,
                rank_points_after: record.rank_points,
            },
            unix_now(),
        );
        Ok(EntryWithEvents {
            entry: Self::admin_entry(
                format!("admin:set-rating:{player}"),
                &queue.pool,
                vec![(player.clone(), record)],
            ),
            events: vec![event],
        })
    }

    /// `SeasonReset`: one entry per pool of `queues` with every changed record.
    pub fn prepare_season_reset(
        &self,
        kind: ResetKind,
        queues: &[std::sync::Arc<QueueInfo>],
    ) -> Prepared<SeasonOutcome> {
        let mut entries = Vec::new();
        let mut changed = 0u64;
        let mut first_state = None;
        let mut pools = Vec::new();
        for queue in Self::pools_of(queues) {
            let pool = queue.pool.as_str();
            let state = self.inner.store.season_state(pool)?;
            let held = self.pool_records(pool);
            let system = &queue.config.rating;
            let ranking = queue.config.ranking;
            // A reset of a periodic pool first closes every open rating period, in this same
            // entry: those games were played in the week (and season) the reset ends, so they
            // are rated and move rank points before the week's RP and the season's ranks are
            // taken. A hard reset then rescales the closed ratings; left pending, the games would
            // be applied at the period's end to the rescaled rating, against the opponents'
            // old-scale ratings. A soft reset then grows the closed deviations by its one period;
            // left pending, the games would be rated with that growth already in, and the
            // period's own growth on top.
            let now = unix_now();
            let closed = match self.close_open_periods(&queue, &held, now) {
                Ok(rows) => rows,
                Err(rejection) => return Ok(Err(rejection)),
            };
            let events = Self::closed_period_events(&queue, &held, closed.as_deref(), now);
            let rows = closed.as_deref().unwrap_or(&held);
            let tiers = if ranking == RankingKind::Ladder {
                Some(self.tiers_now(pool, rows, closed.is_some()))
            } else {
                None
            };
            let mut season_ranks = None;
            // Parties' own ratings in the pool go through the reset with the players'.
            let party_rows: Vec<(String, PartyRecord)> = self
                .inner
                .parties
                .iter()
                .filter_map(|e| Some((e.key().clone(), e.value().get(pool)?.clone())))
                .collect();
            let (records, next, week_rp, parties) = match kind {
                ResetKind::Soft => {
                    let period = system.rating_period_seconds();
                    // A party rating the decay refuses refuses the reset, as a player's does:
                    // dropped, the party would keep its old rating into the new week.
                    let mut parties = Vec::with_capacity(party_rows.len());
                    for (key, r) in &party_rows {
                        match system.decay(&r.skill, period) {
                            Ok(skill) => {
                                parties.push((key.clone(), PartyRecord { skill, ..r.clone() }));
                            }
                            Err(e) => return Ok(Err(party_rating_refused(key, pool, &e))),
                        }
                    }
                    let mut out = Vec::with_capacity(rows.len());
                    for (i, (p, r)) in rows.iter().enumerate() {
                        let mut next = r.clone();
                        next.skill = match system.decay(&r.skill, period) {
                            Ok(s) => s,
                            Err(e) => {
                                return Ok(Err(Rejection::Rating {
                                    player: p.clone(),
                                    pool: pool.to_string(),
                                    detail: e.to_string(),
                                }));
                            }
                        };
                        if let Some(tiers) = &tiers {
                            next.rank_points = season::soft_reset_rp(r.rank_points, &tiers[i]);
                        }
                        out.push((p.clone(), next));
                    }
                    let week_rp: Vec<(PlayerId, RankPoints)> = rows
                        .iter()
                        .map(|(p, r)| (p.clone(), r.rank_points))
                        .collect();
                    let next_state = SeasonState {
                        season: state.season,
                        week: state.week.saturating_add(1),
                    };
                    (
                        out,
                        next_state,
                        Some((state.season, next_state.week, week_rp)),
                        parties,
                    )
                }
                ResetKind::Hard => {
                    // The season's ranks decide the hard-reset RP. Without an EndSeason first
                    // the reset records them itself, in the same entry: otherwise the season
                    // would end with no ranks, and an EndSeason after it would rank the new one.
                    let recorded = self.inner.store.season_ranks(pool, state.season)?;
                    if recorded.is_none()
                        && let Some(tiers) = &tiers
                    {
                        season_ranks = Some((
                            state.season,
                            self.season_ranks_now(pool, state.season, rows, tiers)?,
                        ));
                    }
                    let ended: Option<BTreeMap<String, String>> = recorded
                        .or_else(|| season_ranks.as_ref().map(|(_, r)| r.clone()))
                        .map(|ranks| ranks.into_iter().map(|r| (r.player, r.tier)).collect());
                    let ladder = &self.inner.config.ranking.ladder;
                    let cfg = &self.inner.config.season;
                    let glicko =
                        matches!(system, SystemConfig::Glicko2(_) | SystemConfig::Glicko(_));
                    let (lowest, highest) = rows
                        .iter()
                        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, r)| {
                            (lo.min(r.skill.mean), hi.max(r.skill.mean))
                        });
                    let initial = system.initial();
                    let mut out = Vec::with_capacity(rows.len());
                    for (i, (p, r)) in rows.iter().enumerate() {
                        let mut next = r.clone();
                        if let Some(skill) =
                            season::hard_reset_skill(glicko, initial, r.skill, lowest, highest, cfg)
                        {
                            next.skill = skill;
                        }
                        match (ranking, &tiers) {
                            (RankingKind::Ladder, Some(tiers)) => {
                                // The season rank recorded by EndSeason if there is one, else
                                // the tier held now.
                                let tier = ended
                                    .as_ref()
                                    .and_then(|m| m.get(p.as_str()))
                                    .and_then(|name| ladder.tiers.iter().find(|t| &t.name == name))
                                    .unwrap_or(&tiers[i]);
                                let s = LadderState::with_rp(
                                    ladder,
                                    season::hard_reset_rp(r.rank_points, tier),
                                );
                                next.rank_points = s.rp;
                                next.ladder_floor = s.floor_rp;
                                next.win_streak = 0;
                            }
                            (RankingKind::Inversus, _) => next.rank_points = 0,
                            _ => {}
                        }
                        out.push((p.clone(), next));
                    }
                    let parties: Vec<(String, PartyRecord)> = party_rows
                        .iter()
                        .filter_map(|(key, r)| {
                            // Mapped as a player of its rating would be (a party past every
                            // player's rating maps to the span's end).
                            let mut within = r.skill;
                            if lowest <= highest {
                                within.mean = within.mean.clamp(lowest, highest);
                            }
                            let skill = season::hard_reset_skill(
                                glicko, initial, within, lowest, highest, cfg,
                            )?;
                            Some((key.clone(), PartyRecord { skill, ..r.clone() }))
                        })
                        .collect();
                    let next_state = SeasonState {
                        season: state.season.saturating_add(1),
                        week: 0,
                    };
                    (out, next_state, None, parties)
                }
            };
            pools.push(PoolReset {
                pool: pool.to_owned(),
                before: state,
                after: next,
                players: rows.len() as u64,
                tiers: tiers
                    .as_ref()
                    .map(|tiers| {
                        let names: Vec<&str> = tiers.iter().map(|t| t.name.as_str()).collect();
                        let after: Vec<RankPoints> =
                            records.iter().map(|(_, r)| r.rank_points).collect();
                        season::tier_counts(&self.inner.config.ranking.ladder, &names, &after)
                    })
                    .unwrap_or_default(),
            });
            let records: Vec<(PlayerId, PoolRecord)> = records
                .into_iter()
                .zip(&held)
                .filter(|((_, after), (_, before))| after != before)
                .map(|(after, _)| after)
                .collect();
            changed += records.len() as u64;
            first_state.get_or_insert(next);
            let mut entry = Self::admin_entry(
                format!(
                    "admin:season-reset:{}:{pool}:{}:{}",
                    if kind == ResetKind::Soft {
                        "soft"
                    } else {
                        "hard"
                    },
                    next.season,
                    next.week
                ),
                pool,
                records,
            );
            entry.season = Some(SeasonWrite {
                state: next,
                week_rp,
                ranks: season_ranks,
            });
            entry.parties = parties
                .into_iter()
                .filter(|(key, after)| {
                    party_rows
                        .iter()
                        .any(|(k, before)| k == key && before != after)
                })
                .collect();
            entries.push(EntryWithEvents { entry, events });
        }
        let outcome = SeasonOutcome {
            state: first_state.unwrap_or_default(),
            players: changed,
            pools,
        };
        // The reset's own event rides in its last entry's batch: journaled with the reset or
        // not at all, so no crash or store error leaves a reset applied and unreported.
        if let Some(last) = entries.last_mut() {
            last.events
                .push(season_reset_event(kind, queues, &outcome, unix_now()));
        }
        Ok(Ok((entries, outcome)))
    }

    /// Every ladder player's rank for `season` from the records and tiers held now and the
    /// season's end-of-week rank points (Master and above by their mean).
    fn season_ranks_now(
        &self,
        pool: &str,
        season: u32,
        rows: &[(PlayerId, PoolRecord)],
        tiers: &[crate::ranking::Tier],
    ) -> Result<Vec<SeasonRank>, crate::store::StoreError> {
        let mut weeks: BTreeMap<PlayerId, Vec<RankPoints>> = BTreeMap::new();
        for week in self.inner.store.week_rp(pool, season)? {
            for (p, rp) in week {
                weeks.entry(p).or_default().push(rp);
            }
        }
        Ok(season::season_ranks(
            rows.iter()
                .zip(tiers)
                .map(|((p, r), t)| {
                    (
                        p.to_string(),
                        r.rank_points,
                        t,
                        weeks.remove(p).unwrap_or_default(),
                    )
                })
                .collect(),
        ))
    }

    /// Periodic Glicko pools: every record whose rating period ended before `now` gets the
    /// period's batch update and, on a ladder, the period's Δr·F in rank points
    /// ([`crate::results::close_period`]), one journal entry per pool, with a `RATING_CHANGED`
    /// event per record it closes. Each pool's entry is complete alone.
    /// Results close a player's ended period themselves before they rate a new match; this
    /// covers the players who have not played since. Returns how many records changed.
    pub fn prepare_period_close(&self, now_unix: f64) -> Prepared<u64> {
        let mut entries = Vec::new();
        let mut closed = 0u64;
        for queue in self.periodic_pools() {
            let pool = queue.pool.as_str();
            let system = &queue.config.rating;
            let ranker = QueueRanker::new(queue.config.ranking, &self.inner.config.ranking, system);
            let current = crate::results::period_index(system, now_unix);
            let mut records = Vec::new();
            let mut closes = Vec::new();
            for (p, mut r) in self.pool_records(pool) {
                let open = r.period.is_some().then(|| r.clone());
                match crate::results::close_period(system, &ranker, &mut r, current) {
                    Ok(true) => {
                        closes.extend(
                            open.and_then(|before| crate::results::period_close(&p, &before, &r)),
                        );
                        records.push((p, r));
                    }
                    Ok(false) => {}
                    Err(e) => {
                        return Ok(Err(Rejection::Rating {
                            player: p.clone(),
                            pool: pool.to_string(),
                            detail: e.to_string(),
                        }));
                    }
                }
            }
            if records.is_empty() {
                continue;
            }
            closed += records.len() as u64;
            entries.push(EntryWithEvents {
                entry: Self::admin_entry(
                    format!("admin:period-close:{pool}:{current}"),
                    pool,
                    records,
                ),
                events: period_close_events(queue.id.as_str(), pool, &closes, now_unix),
            });
        }
        Ok(Ok((entries, closed)))
    }

    /// The current rating period of every periodic Glicko pool, in pool order: a closing pass
    /// has work only when one of them moved on since the last pass.
    pub fn period_indexes(&self, now_unix: f64) -> Vec<u64> {
        self.periodic_pools()
            .iter()
            .map(|q| crate::results::period_index(&q.config.rating, now_unix))
            .collect()
    }

    fn periodic_pools(&self) -> Vec<std::sync::Arc<QueueInfo>> {
        Self::pools_of(
            self.queues()
                .iter()
                .filter(|q| q.config.rating.is_periodic()),
        )
    }

    /// `EndSeason`: every player's season rank per pool, stored as history. Records are unchanged
    /// but in periodic pools, whose open rating periods close first.
    pub fn prepare_end_season(
        &self,
        queues: &[std::sync::Arc<QueueInfo>],
    ) -> Prepared<SeasonOutcome> {
        let mut entries = Vec::new();
        let mut ranked = 0u64;
        let mut first_state = None;
        for queue in Self::pools_of(queues) {
            let pool = queue.pool.as_str();
            if queue.config.ranking != RankingKind::Ladder {
                return Ok(Err(Rejection::invalid(
                    "queue",
                    format!(
                        "queue {} has no ladder; season ranks are ladder tiers",
                        queue.id
                    ),
                )));
            }
            let state = self.inner.store.season_state(pool)?;
            let held = self.pool_records(pool);
            // A periodic pool's open rating periods close first, in this same entry, as at a
            // reset: their games were played this season, so their Δr·F counts toward the
            // tiers the season ends in.
            let now = unix_now();
            let closed = match self.close_open_periods(&queue, &held, now) {
                Ok(rows) => rows,
                Err(rejection) => return Ok(Err(rejection)),
            };
            let events = Self::closed_period_events(&queue, &held, closed.as_deref(), now);
            let rows = closed.as_deref().unwrap_or(&held);
            let tiers = self.tiers_now(pool, rows, closed.is_some());
            let ranks = self.season_ranks_now(pool, state.season, rows, &tiers)?;
            ranked += ranks.len() as u64;
            first_state.get_or_insert(state);
            let records = rows
                .iter()
                .zip(&held)
                .filter(|((_, after), (_, before))| after != before)
                .map(|(after, _)| after.clone())
                .collect();
            let mut entry = Self::admin_entry(
                format!("admin:end-season:{pool}:{}", state.season),
                pool,
                records,
            );
            entry.season = Some(SeasonWrite {
                state,
                week_rp: None,
                ranks: Some((state.season, ranks)),
            });
            entries.push(EntryWithEvents { entry, events });
        }
        Ok(Ok((
            entries,
            SeasonOutcome {
                state: first_state.unwrap_or_default(),
                players: ranked,
                pools: Vec::new(),
            },
        )))
    }

    /// `MigrateFromElo`: r = Elo, deviation = `season.reset_deviation`, RP from the legacy-rank
    /// table. A player who already has a record in the pool is never overwritten: the same
    /// values count as `unchanged` (so re-running a migration is harmless), other values are
    /// rejected with the reason.
    pub fn prepare_migration(
        &self,
        queue: &QueueInfo,
        rows: Vec<MigrationRow>,
        mut outcome: MigrationOutcome,
    ) -> Result<(Vec<JournalEntry>, MigrationOutcome), Rejection> {
        let system = &queue.config.rating;
        let deviation = match system {
            SystemConfig::Glicko2(_) | SystemConfig::Glicko(_) => {
                self.inner.config.season.reset_deviation
            }
            SystemConfig::Elo(_) => 0.0,
            _ => {
                return Err(Rejection::invalid(
                    "queue",
                    format!(
                        "queue {} rates with Weng-Lin; Elo migrates only into Glicko or Elo queues",
                        queue.id
                    ),
                ));
            }
        };
        let initial = system.initial();
        let cfg = &self.inner.config.season;
        let mut records = Vec::new();
        let mut seen = BTreeSet::new();
        for row in rows {
            let reject = |reason: String| (row.index, row.player.to_string(), reason);
            if !seen.insert(row.player.clone()) {
                outcome
                    .rejected
                    .push(reject("the player appears earlier in this request".into()));
                continue;
            }
            let Some(rp) = season::legacy_rp(cfg, &row.legacy_rank) else {
                let known: Vec<&str> = cfg.legacy_ranks.keys().map(String::as_str).collect();
                outcome.rejected.push(reject(format!(
                    "unknown legacy rank {:?} (configured: {})",
                    row.legacy_rank,
                    known.join(", ")
                )));
                continue;
            };
            let mut record = self.initial_record(queue);
            let skill = Skill {
                mean: row.elo,
                deviation,
                volatility: initial.volatility,
            };
            // Within the system's bounds, as for `SetRating`.
            record.skill = queue.config.rating.decay(&skill, 0.0).unwrap_or(skill);
            match queue.config.ranking {
                RankingKind::None => {}
                RankingKind::Inversus => record.rank_points = rp,
                RankingKind::Ladder => {
                    let s = LadderState::with_rp(&self.inner.config.ranking.ladder, rp);
                    record.rank_points = s.rp;
                    record.ladder_floor = s.floor_rp;
                }
            }
            match self.player(&row.player, &queue.pool).1 {
                Some(existing) if existing == record => outcome.unchanged += 1,
                Some(existing) => outcome.rejected.push(reject(format!(
                    "already has a different record in pool {} ({} games); migration never overwrites, use SetRating",
                    queue.pool, existing.games
                ))),
                None => {
                    records.push((row.player.clone(), record));
                    outcome.migrated += 1;
                }
            }
        }
        let entries = if records.is_empty() {
            Vec::new()
        } else {
            vec![Self::admin_entry(
                format!("admin:migrate:{}", queue.pool),
                &queue.pool,
                records,
            )]
        };
        Ok((entries, outcome))
    }
}

#[cfg(test)]
mod tests;
