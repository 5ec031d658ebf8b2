//! `AdminService`: queue statistics now; seasons, migration and exports with issue #6.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::error::unimplemented;
use crate::matchmaker::{Command, Handle};
use crate::proto;
use crate::proto::admin_service_server::AdminService;
use crate::state::State;

/// The admin service.
pub struct Admin {
    pub state: State,
    pub matchmaker: Handle,
    pub ledger: crate::ledger::Ledger,
}

type PlayerStream = Pin<Box<dyn Stream<Item = Result<proto::PlayerView, Status>> + Send>>;

#[tonic::async_trait]
impl AdminService for Admin {
    async fn set_rating(
        &self,
        _request: Request<proto::SetRatingRequest>,
    ) -> Result<Response<proto::PlayerView>, Status> {
        Err(unimplemented("SetRating", "admin rating edits (issue #6)"))
    }

    async fn season_reset(
        &self,
        _request: Request<proto::SeasonResetRequest>,
    ) -> Result<Response<proto::SeasonResetResponse>, Status> {
        Err(unimplemented("SeasonReset", "seasons (issue #6)"))
    }

    async fn end_season(
        &self,
        _request: Request<proto::EndSeasonRequest>,
    ) -> Result<Response<proto::EndSeasonResponse>, Status> {
        Err(unimplemented("EndSeason", "seasons (issue #6)"))
    }

    async fn migrate_from_elo(
        &self,
        _request: Request<proto::MigrateFromEloRequest>,
    ) -> Result<Response<proto::MigrateFromEloResponse>, Status> {
        Err(unimplemented("MigrateFromElo", "Elo migration (issue #6)"))
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
        let queues = stats
            .into_iter()
            .filter(|s| req.queue.is_empty() || s.queue == req.queue)
            .map(|s| proto::QueueStat {
                queue: s.queue,
                tickets_waiting: s.tickets_waiting,
                players_waiting: s.players_waiting,
                matches_formed: s.matches_formed,
                wait_p50_seconds: s.wait_p50_seconds,
                wait_p95_seconds: s.wait_p95_seconds,
                quality_mean: s.quality_mean,
                last_tick_ms: s.last_tick_ms,
                tickets_expired: s.tickets_expired,
            })
            .collect();
        Ok(Response::new(proto::QueueStats { queues }))
    }

    async fn snapshot(
        &self,
        _request: Request<proto::SnapshotRequest>,
    ) -> Result<Response<proto::SnapshotResponse>, Status> {
        let started = std::time::Instant::now();
        let players = self.ledger.snapshot().await?;
        Ok(Response::new(proto::SnapshotResponse {
            players: players as u64,
            bytes: self.state.store().size_on_disk(),
            seconds: started.elapsed().as_secs_f64(),
        }))
    }

    type ExportPlayersStream = PlayerStream;

    async fn export_players(
        &self,
        _request: Request<proto::ExportPlayersRequest>,
    ) -> Result<Response<Self::ExportPlayersStream>, Status> {
        Err(unimplemented("ExportPlayers", "player export (issue #6)"))
    }
}
