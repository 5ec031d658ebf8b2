//! `GameServerService`: dedicated servers receive matches, report results, cancel matches.

use std::collections::BTreeMap;
use std::pin::Pin;

use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::convert;
use crate::auth::{AuthError, Identity, MayAct, Role};
use crate::ids::MatchId;
use crate::ledger::Ledger;
use crate::matchmaker::{Command, Handle};
use crate::proto;
use crate::proto::game_server_service_server::GameServerService;
use crate::rejection::{MatchRefusal, Rejection};
use crate::state::State;

/// The server-facing service.
pub struct GameServer {
    pub state: State,
    pub ledger: Ledger,
    pub matchmaker: Handle,
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<proto::MatchAssignment, Status>> + Send>>;

/// A game server's `ServeMatches` stream: the matches sent again, then each new one. A cluster
/// engine that stops ends it saying so, and the node the game server is connected to moves it
/// to the next owner.
fn assignments(
    state: &State,
    rx: tokio::sync::mpsc::Receiver<std::sync::Arc<crate::state::Assignment>>,
    again: Vec<std::sync::Arc<crate::state::Assignment>>,
) -> AssignmentStream {
    let closing = state.clone();
    let stopped = std::iter::once_with(move || {
        (closing.is_cluster_engine() && closing.closing()).then(super::error::engine_stopped)
    });
    let stream = tokio_stream::iter(again)
        .chain(ReceiverStream::new(rx))
        .map(|a| Ok(convert::assignment(&a)))
        .chain(tokio_stream::iter(stopped.flatten()).map(Err));
    Box::pin(Served {
        stream: Some(Box::pin(stream)),
        state: state.clone(),
    })
}

/// A `ServeMatches` stream that, once it ends (its game server went, or the engine closed it),
/// has the gauge of connected servers count it out.
struct Served {
    /// `None` once dropped, so that its stream has closed when the gauge counts.
    stream: Option<AssignmentStream>,
    state: State,
}

impl Stream for Served {
    type Item = Result<proto::MatchAssignment, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.stream.as_mut() {
            Some(stream) => stream.as_mut().poll_next(cx),
            None => std::task::Poll::Ready(None),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        drop(self.stream.take());
        self.state.server_stream_ended();
    }
}

#[tonic::async_trait]
impl GameServerService for GameServer {
    type ServeMatchesStream = AssignmentStream;

    async fn serve_matches(
        &self,
        request: Request<proto::ServeMatchesRequest>,
    ) -> Result<Response<Self::ServeMatchesStream>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("server_address", &req.server_address)?;
        identity.may_serve_as(&req.server_address, "serve matches under this address")?;
        // Empty: any region. Otherwise a region name, as tickets give them.
        if !req.region.is_empty() {
            convert::id("region", &req.region)?;
            let config = self.state.config();
            if !config
                .queues
                .values()
                .any(|q| q.matching.regions.contains(&req.region))
            {
                tracing::warn!(server = %req.server_address, region = %req.region, "a game server registered for a region no queue names; it gets only matches of queues without regions");
            }
        }
        if self.state.closing() {
            return Err(super::error::streams_closed(&self.state));
        }
        let (address, region) = (req.server_address.clone(), req.region.clone());
        let (rx, again) =
            register(&self.state, req.server_address, req.region, req.capacity).await?;
        tracing::info!(server = %address, region = %region, capacity = req.capacity, "game server registered");
        if !again.is_empty() {
            tracing::info!(server = %address, matches = again.len(), "matches not started sent again to a server that connected again");
        }
        Ok(Response::new(assignments(&self.state, rx, again)))
    }

    async fn report_match_result(
        &self,
        request: Request<proto::MatchResult>,
    ) -> Result<Response<proto::MatchResultAck>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("match_id", &req.match_id)?;
        let match_id = MatchId::new(req.match_id.as_str());
        // A live match may be reported only by the server it is assigned to; one no longer
        // live (already reported) answers its stored acknowledgement, which changes nothing
        // but names every player's ratings: to its own server only, while the match history
        // still says which that was, and to an admin only once it does not (every player
        // erased, or every player's history past it).
        match self.state.match_slot(&match_id) {
            Ok(slot) => {
                identity.may_serve_as(&slot.assignment().server_address, "report this match")?;
            }
            Err(_) => match self.state.store().match_record(&match_id).await? {
                Some(record) => {
                    identity.may_serve_as(&record.server_address, "report this match")?;
                }
                None => {
                    if let Some(id) = identity.as_ref().filter(|id| id.role != Role::Admin)
                        && self.state.store().result_of(&match_id)?.is_some()
                    {
                        return Err(AuthError::Denied(format!(
                            "{:?} {:?} may not report this match: its record is gone, so the \
                             server it was assigned to cannot be checked; an admin token may \
                             read its acknowledgement",
                            id.role, id.sub
                        ))
                        .into());
                    }
                }
            },
        }
        let performance: BTreeMap<String, f64> = req.performance.into_iter().collect();
        let ledger = self.ledger.clone();
        // Spawned so a client that hangs up cannot stop a result between journal and memory.
        let reported = tokio::spawn(async move {
            ledger
                .report(
                    &match_id,
                    req.placements,
                    req.team_scores,
                    performance,
                    req.abandoned_player_ids,
                )
                .await
        })
        .await
        .map_err(super::error::task_failed)??;
        Ok(Response::new(result_ack(&self.state, &reported)))
    }

    async fn cancel_match(
        &self,
        request: Request<proto::CancelMatchRequest>,
    ) -> Result<Response<proto::CancelMatchResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("match_id", &req.match_id)?;
        if req.reason.len() > 1024 {
            return Err(Rejection::invalid("reason", "must be at most 1024 bytes").into());
        }
        if req.reason.chars().any(char::is_control) {
            // It is copied into the tickets' reasons and the match's event.
            return Err(Rejection::invalid("reason", "must not contain control characters").into());
        }
        let match_id = MatchId::new(req.match_id.as_str());
        let slot = match self.state.match_slot(&match_id) {
            Ok(slot) => slot,
            Err(not_found) => {
                // A cancel repeated after it went through is answered OK (nothing requeued
                // now); a completed match refuses it.
                ended(&self.state, &identity, &match_id, not_found).await?;
                return Ok(Response::new(proto::CancelMatchResponse::default()));
            }
        };
        identity.may_serve_as(&slot.assignment().server_address, "cancel this match")?;
        let requeued = self
            .matchmaker
            .ask(|reply| Command::CancelMatch {
                match_id,
                reason: req.reason,
                reply,
            })
            .await??;
        // The cancel, its record, its event and the requeued tickets are durable before the
        // answer.
        self.state.flush_with_events().await?;
        Ok(Response::new(proto::CancelMatchResponse {
            requeued_ticket_ids: requeued.iter().map(ToString::to_string).collect(),
        }))
    }

    async fn start_match(
        &self,
        request: Request<proto::StartMatchRequest>,
    ) -> Result<Response<proto::StartMatchResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("match_id", &req.match_id)?;
        let match_id = MatchId::new(req.match_id.as_str());
        let slot = match self.state.match_slot(&match_id) {
            Ok(slot) => slot,
            Err(not_found) => {
                ended(&self.state, &identity, &match_id, not_found).await?;
                return Err(Rejection::for_match(&match_id, MatchRefusal::Cancelled).into());
            }
        };
        identity.may_serve_as(&slot.assignment().server_address, "start this match")?;
        // Written with its start, and flushed: OK means a restart keeps it STARTED.
        let started = self.state.start_match(&slot)??;
        self.state.store().flush_async().await?;
        Ok(Response::new(proto::StartMatchResponse {
            started_unix: started as i64,
        }))
    }

    async fn request_backfill(
        &self,
        request: Request<proto::BackfillRequest>,
    ) -> Result<Response<proto::BackfillResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("match_id", &req.match_id)?;
        let match_id = MatchId::new(req.match_id.as_str());
        let slot = match self.state.match_slot(&match_id) {
            Ok(slot) => slot,
            Err(not_found) => {
                // An ended match is not running: its server learns how it ended.
                ended(&self.state, &identity, &match_id, not_found).await?;
                return Err(Rejection::for_match(&match_id, MatchRefusal::Cancelled).into());
            }
        };
        identity.may_serve_as(&slot.assignment().server_address, "backfill this match")?;
        let leavers = req
            .open_slots
            .iter()
            .enumerate()
            .map(|(k, team)| {
                convert::player_ids(&format!("open_slots[{k}].player_ids"), &team.player_ids)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let backfill_id = self
            .matchmaker
            .ask(|reply| Command::Backfill {
                match_id,
                leavers,
                reply,
            })
            .await???;
        Ok(Response::new(proto::BackfillResponse { backfill_id }))
    }
}

/// A result's acknowledgement on the wire: ratings in its queue system's display units, or as
/// stored when the queue is no longer configured (a repeated report after a restart whose
/// config dropped it: the result was applied, and the request names no queue to refuse).
fn result_ack(state: &State, reported: &crate::ledger::Reported) -> proto::MatchResultAck {
    let queue = state.queue_of(&crate::ids::QueueId::new(reported.ack.queue.as_str()));
    proto::MatchResultAck {
        changes: convert::player_changes(
            queue.as_ref().map(|q| &q.config.rating),
            &reported.ack.changes,
        ),
        duplicate: reported.duplicate,
    }
}

/// Registers a game server's new stream under `address`, replacing the one it had, and returns
/// it with the matches not started to send again on it. The matches go out only once durable,
/// as every match does: when the address has some, the store is flushed before the registry
/// changes, so a flush that fails leaves the address's stream as it was (the call fails, the
/// old stream keeps getting matches); and again after it, for an allocation made in between. A
/// server with nothing to send again registers without a flush: while the store cannot flush
/// (a Redis failover) it is not refused for the sake of nothing.
async fn register(
    state: &State,
    address: String,
    region: String,
    capacity: u32,
) -> Result<
    (
        tokio::sync::mpsc::Receiver<std::sync::Arc<crate::state::Assignment>>,
        Vec<std::sync::Arc<crate::state::Assignment>>,
    ),
    Status,
> {
    if state.has_unstarted_on(&address) {
        state.store().flush_async().await?;
    }
    let (rx, again) = state.register_server(address, region, capacity);
    if !again.is_empty() {
        state.store().flush_async().await?;
    }
    Ok((rx, again))
}

/// A match no longer live, for a call that needs a live one: `Ok` when it ended cancelled (the
/// caller may answer a repeat of a cancel), FAILED_PRECONDITION when it completed, else
/// `not_found`. Only the match's server (or an admin) learns which.
async fn ended(
    state: &State,
    identity: &Option<Identity>,
    id: &MatchId,
    not_found: Rejection,
) -> Result<(), Status> {
    if let Some(record) = state.store().match_record(id).await? {
        identity.may_serve_as(&record.server_address, "act on this match")?;
        return match record.phase {
            crate::records::EndedPhase::Cancelled => Ok(()),
            crate::records::EndedPhase::Completed => {
                Err(Rejection::for_match(id, MatchRefusal::Completed).into())
            }
        };
    }
    if state.store().result_of(id)?.is_some() {
        return Err(Rejection::for_match(id, MatchRefusal::Completed).into());
    }
    Err(not_found.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connected servers' gauge in `recorder`, of the engine of the default keyspace's
    /// shard (the test state's).
    fn connected(recorder: &metrics_exporter_prometheus::PrometheusRecorder) -> Option<f64> {
        let page = recorder.handle().render();
        let series = format!(
            "{}{{shard=\"{}\"}} ",
            crate::telemetry::SERVERS_CONNECTED,
            crate::store::DEFAULT_KEYSPACE
        );
        page.lines()
            .find_map(|l| l.strip_prefix(&series)?.parse().ok())
    }

    #[test]
    fn a_game_server_whose_stream_ends_is_no_longer_counted_as_connected() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let state = crate::state::test_util::state();
        let (one, two) = metrics::with_local_recorder(&recorder, || {
            let (rx, again) = state.register_server("gs-1:7777".into(), String::new(), 0);
            let one = assignments(&state, rx, again);
            let (rx, again) = state.register_server("gs-2:7777".into(), String::new(), 0);
            (one, assignments(&state, rx, again))
        });
        assert_eq!(connected(&recorder), Some(2.0));
        metrics::with_local_recorder(&recorder, || drop(one));
        assert_eq!(connected(&recorder), Some(1.0));
        metrics::with_local_recorder(&recorder, || drop(two));
        assert_eq!(connected(&recorder), Some(0.0));
    }

    #[tokio::test]
    async fn a_registration_whose_flush_fails_leaves_the_address_on_its_old_stream() {
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        let (mut old, _) = register(&state, "gs-1:7777".into(), String::new(), 0)
            .await
            .unwrap();
        // A match the server holds unstarted: registering again sends it again, once durable.
        let held = crate::state::test_util::formed_1v1(&state, "m1", "a", "b", "");
        let crate::state::Allocation::Placed(placement) = state.try_allocate(&held) else {
            panic!("the server has room");
        };
        placement.deliver();
        assert_eq!(old.try_recv().unwrap().match_id.as_str(), "m1");
        memory.fail_flushes(Some(crate::store::FlushFailure::Disk));
        let refused = register(&state, "gs-1:7777".into(), String::new(), 0).await;
        assert_eq!(refused.err().map(|s| s.code()), Some(tonic::Code::Internal));
        // The old stream is still the address's: what the loop sends there reaches it.
        let tx = state
            .server_stream("gs-1:7777")
            .expect("the old stream is still registered");
        let m = crate::state::test_util::formed_1v1(&state, "m2", "c", "d", "gs-1:7777");
        tx.try_send(m.assignment()).unwrap();
        assert_eq!(old.try_recv().unwrap().match_id.as_str(), "m2");
    }

    #[tokio::test]
    async fn a_server_with_nothing_to_send_again_registers_while_the_store_cannot_flush() {
        let memory = std::sync::Arc::new(crate::store::MemoryStore::default());
        let state = crate::state::test_util::state_on(memory.clone());
        memory.fail_flushes(Some(crate::store::FlushFailure::Disk));
        let (_rx, again) = register(&state, "gs-1:7777".into(), String::new(), 0)
            .await
            .expect("nothing to make durable");
        assert!(again.is_empty());
        assert!(state.server_stream("gs-1:7777").is_some());
    }
}
