//! `GameServerService`: dedicated servers receive matches and (with issue #4) report results.

use std::pin::Pin;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::convert;
use super::error::unimplemented;
use crate::proto;
use crate::proto::game_server_service_server::GameServerService;
use crate::state::{Rejection, State};

/// The server-facing service.
pub struct GameServer {
    pub state: State,
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<proto::MatchAssignment, Status>> + Send>>;

#[tonic::async_trait]
impl GameServerService for GameServer {
    type ServeMatchesStream = AssignmentStream;

    async fn serve_matches(
        &self,
        request: Request<proto::ServeMatchesRequest>,
    ) -> Result<Response<Self::ServeMatchesStream>, Status> {
        let req = request.into_inner();
        convert::id("server_address", &req.server_address)?;
        if req.region.len() > convert::MAX_ID_LEN {
            return Err(Rejection::invalid("region", "must be at most 128 bytes").into());
        }
        tracing::info!(server = %req.server_address, region = %req.region, capacity = req.capacity, "game server registered");
        let rx = self
            .state
            .register_server(req.server_address, req.region, req.capacity);
        let stream = ReceiverStream::new(rx).map(|a| Ok(convert::assignment(&a)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_match_result(
        &self,
        _request: Request<proto::MatchResult>,
    ) -> Result<Response<proto::MatchResultAck>, Status> {
        Err(unimplemented(
            "ReportMatchResult",
            "rating updates and the result journal (issue #4)",
        ))
    }

    async fn cancel_match(
        &self,
        _request: Request<proto::CancelMatchRequest>,
    ) -> Result<Response<proto::CancelMatchResponse>, Status> {
        Err(unimplemented(
            "CancelMatch",
            "the match lifecycle (issue #4)",
        ))
    }

    async fn request_backfill(
        &self,
        _request: Request<proto::BackfillRequest>,
    ) -> Result<Response<proto::BackfillResponse>, Status> {
        Err(unimplemented("RequestBackfill", "backfill (issue #9)"))
    }
}
