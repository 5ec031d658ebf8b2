//! `AdminService`: rating edits, season resets and ranks, migration from Elo, queue statistics,
//! snapshots and the player export. Handlers validate, call the ledger or state, and map back;
//! what a reset does lives in `ranking::season` and `state::admin`.

use std::pin::Pin;

use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::convert;
use crate::ids::PlayerId;
use crate::ledger::Batching;
use crate::matchmaker::{Command, Handle};
use crate::proto;
use crate::proto::admin_service_server::AdminService;
use crate::ranking::RankPoints;
use crate::rating::{Skill, SystemConfig};
use crate::rejection::Rejection;
use crate::state::{MigrationOutcome, MigrationRow, ResetKind, State};

/// Most rows one `MigrateFromElo` request may carry (the CLI sends batches).
pub const MAX_MIGRATION_ROWS: usize = 10_000;

/// Accepted legacy Elo ratings.
const ELO_RANGE: std::ops::RangeInclusive<f64> = 0.0..=4000.0;

/// The admin service.
pub struct Admin {
    pub state: State,
    pub matchmaker: Handle,
    pub ledger: crate::ledger::Ledger,
    /// Ends `WatchEvents` streams.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Reloads queue settings (`ReloadConfig`; SIGHUP calls the same).
    pub reloader: crate::reload::Reloader,
}

type PlayerStream = Pin<Box<dyn Stream<Item = Result<proto::PlayerView, Status>> + Send>>;

impl Admin {
    fn view(&self, queue: &crate::state::QueueInfo, id: &PlayerId) -> Option<proto::PlayerView> {
        let (status, record) = self.state.player(id, &queue.pool);
        let record = record?;
        let tier = self.state.tier(queue, id, &record);
        let season = self
            .state
            .store()
            .season_state(&queue.pool)
            .unwrap_or_default();
        Some(convert::player_view(
            id.as_str(),
            queue,
            &status,
            &record,
            tier.as_ref(),
            season,
        ))
    }
}

/// A `Rating` as a skill in the queue system's units, or the field and rule it breaks.
fn skill(system: &SystemConfig, rating: Option<&proto::Rating>) -> Result<Skill, Rejection> {
    let r = rating.ok_or_else(|| Rejection::invalid("rating", "is required"))?;
    if !r.mean.is_finite() {
        return Err(Rejection::invalid("rating.mean", "must be finite"));
    }
    let elo = matches!(system, SystemConfig::Elo(_));
    if !r.deviation.is_finite() || r.deviation < 0.0 || (!elo && r.deviation == 0.0) {
        return Err(Rejection::invalid(
            "rating.deviation",
            if elo {
                "must be finite and >= 0"
            } else {
                "must be finite and > 0"
            },
        ));
    }
    if !r.volatility.is_finite() || r.volatility < 0.0 {
        return Err(Rejection::invalid(
            "rating.volatility",
            "must be finite and >= 0 (0 keeps the current one)",
        ));
    }
    Ok(Skill {
        mean: r.mean,
        deviation: if elo { 0.0 } else { r.deviation },
        volatility: r.volatility,
    })
}

fn optional_queue(queue: &str) -> Option<&str> {
    (!queue.is_empty()).then_some(queue)
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn set_rating(
        &self,
        request: Request<proto::SetRatingRequest>,
    ) -> Result<Response<proto::PlayerView>, Status> {
        let r = request.get_ref();
        super::audit::note(
            &request,
            format!(
                "player_id={:?} queue={:?} rating={:?} rank_points={:?}",
                r.player_id,
                r.queue,
                r.rating
                    .as_ref()
                    .map(|x| (x.mean, x.deviation, x.volatility)),
                r.rank_points
            ),
        );
        let req = request.into_inner();
        convert::new_player_id("player_id", &req.player_id)?;
        let queue = self.state.queue("queue", &req.queue)?;
        let skill = skill(&queue.config.rating, req.rating.as_ref())?;
        let rank_points = req
            .rank_points
            .map(|rp| {
                RankPoints::try_from(rp).map_err(|_| {
                    Rejection::invalid(
                        "rank_points",
                        format!("must be in 0..={} (got {rp})", RankPoints::MAX),
                    )
                })
            })
            .transpose()?;
        let player = PlayerId::new(req.player_id.as_str());
        let (q, p) = (queue.clone(), player.clone());
        // With its RATING_CHANGED, in the change's own atomic batch.
        self.ledger
            .admin_with_events(Batching::EachAlone, move |state| {
                let entry = state.prepare_set_rating(&q, &p, skill, rank_points)?;
                Ok((vec![entry], ()))
            })
            .await?;
        let view = self.view(&queue, &player).ok_or_else(|| {
            super::error::internal("the rating was written but cannot be read back")
        })?;
        Ok(Response::new(view))
    }

    async fn season_reset(
        &self,
        request: Request<proto::SeasonResetRequest>,
    ) -> Result<Response<proto::SeasonResetResponse>, Status> {
        let r = request.get_ref();
        super::audit::note(&request, format!("kind={} queue={:?}", r.kind, r.queue));
        let req = request.into_inner();
        let kind = match proto::SeasonResetKind::try_from(req.kind) {
            Ok(proto::SeasonResetKind::Soft) => ResetKind::Soft,
            Ok(proto::SeasonResetKind::Hard) => ResetKind::Hard,
            _ => return Err(Rejection::invalid("kind", "must be SOFT or HARD").into()),
        };
        let queues = self.state.season_queues(optional_queue(&req.queue))?;
        let dry_run = req.dry_run;
        // A dry run computes the same entries under the same gate and journals none of them.
        // A periodic pool's open rating periods close first, in the reset's entries, with a
        // RATING_CHANGED for each, and the reset's SEASON_RESET rides in the same atomic batch
        // (none for a dry run, which journals nothing).
        let outcome = self
            .ledger
            .admin_with_events(Batching::Together, move |state| {
                let (entries, outcome) = state.prepare_season_reset(kind, &queues)??;
                Ok((if dry_run { Vec::new() } else { entries }, outcome))
            })
            .await?;
        Ok(Response::new(proto::SeasonResetResponse {
            season: outcome.state.season,
            week: outcome.state.week,
            players_changed: outcome.players,
            tiers: outcome
                .pools
                .iter()
                .flat_map(|p| {
                    p.tiers
                        .iter()
                        .map(|(tier, before, after)| proto::TierCount {
                            pool: p.pool.clone(),
                            tier: tier.clone(),
                            before: *before,
                            after: *after,
                        })
                })
                .collect(),
            dry_run,
            pools: outcome
                .pools
                .iter()
                .map(|p| proto::PoolSeason {
                    pool: p.pool.clone(),
                    season_before: p.before.season,
                    week_before: p.before.week,
                    season: p.after.season,
                    week: p.after.week,
                    players: p.players,
                })
                .collect(),
        }))
    }

    async fn end_season(
        &self,
        request: Request<proto::EndSeasonRequest>,
    ) -> Result<Response<proto::EndSeasonResponse>, Status> {
        super::audit::note(&request, format!("queue={:?}", request.get_ref().queue));
        let req = request.into_inner();
        let queues: Vec<_> = self
            .state
            .season_queues(optional_queue(&req.queue))?
            .into_iter()
            .filter(|q| {
                !req.queue.is_empty() || q.config.ranking == crate::ranking::RankingKind::Ladder
            })
            .collect();
        let outcome = self
            .ledger
            .admin_with_events(Batching::Together, move |state| {
                Ok(state.prepare_end_season(&queues)??)
            })
            .await?;
        Ok(Response::new(proto::EndSeasonResponse {
            season: outcome.state.season,
            players_ranked: outcome.players,
        }))
    }

    async fn migrate_from_elo(
        &self,
        request: Request<proto::MigrateFromEloRequest>,
    ) -> Result<Response<proto::MigrateFromEloResponse>, Status> {
        let r = request.get_ref();
        super::audit::note(
            &request,
            format!("queue={:?} rows={}", r.queue, r.rows.len()),
        );
        let req = request.into_inner();
        let queue = self.state.queue("queue", &req.queue)?;
        if req.rows.len() > MAX_MIGRATION_ROWS {
            return Err(Rejection::invalid(
                "rows",
                format!(
                    "at most {MAX_MIGRATION_ROWS} rows per request (got {}); send batches",
                    req.rows.len()
                ),
            )
            .into());
        }
        let mut outcome = MigrationOutcome::default();
        let mut rows = Vec::with_capacity(req.rows.len());
        for (i, row) in req.rows.into_iter().enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            let bad = |reason: String| (index, row.player_id.clone(), reason);
            if let Err(r) = convert::new_player_id("player_id", &row.player_id) {
                outcome.rejected.push(bad(r.to_string()));
            } else if !row.elo.is_finite() || !ELO_RANGE.contains(&row.elo) {
                outcome.rejected.push(bad(format!(
                    "elo: must be a finite number in {}..={} (got {})",
                    ELO_RANGE.start(),
                    ELO_RANGE.end(),
                    row.elo
                )));
            } else if row.legacy_rank.trim().is_empty() {
                outcome
                    .rejected
                    .push(bad("legacy_rank: must not be empty".into()));
            } else {
                rows.push(MigrationRow {
                    index,
                    player: PlayerId::new(row.player_id.as_str()),
                    elo: row.elo,
                    legacy_rank: row.legacy_rank.trim().to_owned(),
                });
            }
        }
        let outcome = self
            .ledger
            .admin(move |state| Ok(state.prepare_migration(&queue, rows, outcome)?))
            .await?;
        let mut rejected: Vec<proto::RejectedRow> = outcome
            .rejected
            .into_iter()
            .map(|(index, player_id, reason)| proto::RejectedRow {
                index,
                player_id,
                reason,
            })
            .collect();
        rejected.sort_by_key(|r| r.index);
        Ok(Response::new(proto::MigrateFromEloResponse {
            migrated: outcome.migrated,
            unchanged: outcome.unchanged,
            rejected,
        }))
    }

    async fn get_queue_stats(
        &self,
        request: Request<proto::GetQueueStatsRequest>,
    ) -> Result<Response<proto::QueueStats>, Status> {
        let req = request.into_inner();
        if !req.queue.is_empty() {
            self.state.queue("queue", &req.queue)?;
        }
        let stats = self
            .matchmaker
            .ask(|reply| Command::Stats { reply })
            .await?;
        // Each ranked queue's season clock, read once per rating pool.
        let mut pools: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
        let mut clocks: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
        for info in self.state.queues() {
            if info.config.ranking == crate::ranking::RankingKind::None {
                continue;
            }
            if !pools.contains_key(&info.pool) {
                let clock = self
                    .state
                    .store()
                    .season_state(&info.pool)
                    .map_err(|e| Status::internal(format!("reading the season clock: {e}")))?;
                pools.insert(info.pool.clone(), (clock.season, clock.week));
            }
            clocks.insert(info.id.to_string(), pools[&info.pool]);
        }
        let queues = stats
            .into_iter()
            .filter(|s| req.queue.is_empty() || s.queue == req.queue)
            .map(|s| {
                let (season, week) = clocks.get(&s.queue).copied().unwrap_or_default();
                (s, season, week)
            })
            .map(|(s, season, week)| proto::QueueStat {
                season,
                week,
                accept_rate: s.accept_rate(),
                waiting_by_value: s
                    .waiting_by_value
                    .iter()
                    .map(|(attribute, value, tickets)| proto::WaitingByValue {
                        attribute: attribute.clone(),
                        value: value.clone(),
                        tickets: *tickets,
                    })
                    .collect(),
                queue: s.queue,
                tickets_waiting: s.tickets_waiting,
                players_waiting: s.players_waiting,
                matches_formed: s.matches_formed,
                wait_p50_seconds: s.wait_p50_seconds,
                wait_p95_seconds: s.wait_p95_seconds,
                quality_mean: s.quality_mean,
                last_tick_ms: s.last_tick_ms,
                tickets_expired: s.tickets_expired,
                tickets_expired_heartbeat: s.tickets_expired_heartbeat,
                ready_checks: s.ready_checks,
                ready_checks_passed: s.ready_checks_passed,
                ready_checks_declined: s.ready_checks_declined,
                ready_checks_timed_out: s.ready_checks_timed_out,
                backfill_requests: s.backfill_requests,
                backfill_slots_opened: s.backfill_slots_opened,
                backfill_slots_filled: s.backfill_slots_filled,
                backfill_requests_expired: s.backfill_requests_expired,
                backfill_fill_p50_seconds: s.backfill_fill_p50_seconds,
                backfill_fill_p95_seconds: s.backfill_fill_p95_seconds,
                longest_wait_seconds: s.longest_wait_seconds,
                skill_window: s.skill_window,
                starving: s.starving,
            })
            .collect();
        Ok(Response::new(proto::QueueStats { queues }))
    }

    async fn snapshot(
        &self,
        request: Request<proto::SnapshotRequest>,
    ) -> Result<Response<proto::SnapshotResponse>, Status> {
        let started = std::time::Instant::now();
        let players = self.ledger.snapshot().await?;
        super::audit::note(&request, format!("players={players}"));
        Ok(Response::new(proto::SnapshotResponse {
            players: players as u64,
            bytes: self.state.store().size_on_disk(),
            seconds: started.elapsed().as_secs_f64(),
        }))
    }

    type ExportPlayersStream = PlayerStream;

    async fn export_players(
        &self,
        request: Request<proto::ExportPlayersRequest>,
    ) -> Result<Response<Self::ExportPlayersStream>, Status> {
        super::audit::note(
            &request,
            format!(
                "queue={:?} after_player_id={:?} limit={}",
                request.get_ref().queue,
                request.get_ref().after_player_id,
                request.get_ref().limit
            ),
        );
        let req = request.into_inner();
        let queue = self.state.queue("queue", &req.queue)?;
        let after = if req.after_player_id.is_empty() {
            None
        } else {
            convert::id("after_player_id", &req.after_player_id)?;
            Some(PlayerId::new(req.after_player_id.as_str()))
        };
        let limit = match req.limit {
            0 => usize::MAX,
            n => n as usize,
        };
        // An export's first page walks every player (a million in a large pool) to build the
        // pool's id order: off the runtime's other tasks. The pages after it read that order.
        let ids = crate::store::heavy(|| self.state.export_ids(&queue, after.as_ref(), limit));
        let admin = Self {
            state: self.state.clone(),
            matchmaker: self.matchmaker.clone(),
            ledger: self.ledger.clone(),
            shutdown: self.shutdown.clone(),
            reloader: self.reloader.clone(),
        };
        // Views are built as the client reads (tonic pulls the stream), so a large export holds
        // only the id list, and each view is the player's record at the time it is sent.
        let stream = tokio_stream::iter(ids)
            .filter_map(move |id| admin.view(&queue, &id))
            .map(Ok);
        Ok(Response::new(Box::pin(super::closing::UntilClosed::new(
            &self.state,
            Box::pin(stream),
        ))))
    }

    // Player and match records (`admin_records.rs`) and config reloads.

    async fn delete_player(
        &self,
        request: Request<proto::DeletePlayerRequest>,
    ) -> Result<Response<proto::DeletePlayerResponse>, Status> {
        self.delete_player_call(request).await
    }

    async fn ban_player(
        &self,
        request: Request<proto::BanPlayerRequest>,
    ) -> Result<Response<proto::BanPlayerResponse>, Status> {
        self.ban_player_call(request).await
    }

    async fn unban_player(
        &self,
        request: Request<proto::UnbanPlayerRequest>,
    ) -> Result<Response<proto::UnbanPlayerResponse>, Status> {
        self.unban_player_call(request).await
    }

    async fn get_player_ban(
        &self,
        request: Request<proto::GetPlayerBanRequest>,
    ) -> Result<Response<proto::GetPlayerBanResponse>, Status> {
        self.get_player_ban_call(request).await
    }

    async fn list_live_matches(
        &self,
        request: Request<proto::ListLiveMatchesRequest>,
    ) -> Result<Response<proto::ListLiveMatchesResponse>, Status> {
        self.list_live_matches_call(request).await
    }

    async fn list_recent_results(
        &self,
        request: Request<proto::ListRecentResultsRequest>,
    ) -> Result<Response<proto::ListRecentResultsResponse>, Status> {
        self.list_recent_results_call(request).await
    }

    async fn list_audit_log(
        &self,
        request: Request<proto::ListAuditLogRequest>,
    ) -> Result<Response<proto::ListAuditLogResponse>, Status> {
        self.list_audit_log_call(request).await
    }

    type WatchEventsStream = super::admin_records::EventStream;

    async fn watch_events(
        &self,
        request: Request<proto::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        self.watch_events_call(request).await
    }

    async fn reload_config(
        &self,
        request: Request<proto::ReloadConfigRequest>,
    ) -> Result<Response<proto::ReloadConfigResponse>, Status> {
        let changed_queues = self.reloader.reload().await?;
        super::audit::note(&request, format!("changed_queues={changed_queues:?}"));
        Ok(Response::new(proto::ReloadConfigResponse {
            changed_queues,
        }))
    }
}
