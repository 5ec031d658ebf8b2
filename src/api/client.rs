//! `ClientService`: validate, call the state/loop, map back.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::convert;
use crate::auth::{Identity, MayAct};
use crate::ids::{MatchId, PlayerId, TicketId};
use crate::matching;
use crate::matchmaker::{Clock, Command, Handle};
use crate::proto;
use crate::proto::client_service_server::ClientService;
use crate::ranking::leaderboard::{MAX_OFFSET, MAX_PAGE_SIZE};
use crate::rating::Skill;
use crate::rejection::{Rejection, TicketRefusal};
use crate::state::State;

/// How long EnterQueue waits for room in the matchmaker's command queue before shedding.
const ENTER_WAIT: Duration = Duration::from_millis(500);

/// The client-facing service.
pub struct Client {
    pub state: State,
    pub matchmaker: Handle,
    pub clock: Clock,
    pub shutdown: CancellationToken,
    pub load: QueueLoad,
}

/// Waiting tickets per queue for the capacity check (`server.max_tickets_per_queue`), without a
/// round trip to the matchmaker loop on every EnterQueue: the loop's count from its last tick,
/// fetched at most once per tick interval, plus the tickets admitted here over the last two
/// fetch windows. It errs on the full side by at most that many entries and never lets a queue
/// grow past the cap by more than the entries of one fetch window racing each other.
#[derive(Default)]
pub struct QueueLoad {
    inner: std::sync::Mutex<LoadInner>,
    refreshing: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct LoadInner {
    fetched_at: Option<std::time::Instant>,
    /// Estimated waiting tickets per queue.
    waiting: std::collections::HashMap<String, u64>,
    /// Admitted since the last fetch, and in the window before it.
    admitted_now: std::collections::HashMap<String, u64>,
    admitted_before: std::collections::HashMap<String, u64>,
}

impl QueueLoad {
    fn lock(&self) -> std::sync::MutexGuard<'_, LoadInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stale(&self, every: Duration) -> bool {
        self.lock()
            .fetched_at
            .is_none_or(|at| at.elapsed() >= every)
    }

    fn refresh(&self, stats: &[crate::matchmaker::QueueStats]) {
        let mut inner = self.lock();
        let before = std::mem::take(&mut inner.admitted_before);
        let now = std::mem::take(&mut inner.admitted_now);
        inner.waiting = stats
            .iter()
            .map(|q| {
                let recent = before.get(&q.queue).copied().unwrap_or(0)
                    + now.get(&q.queue).copied().unwrap_or(0);
                (q.queue.clone(), q.tickets_waiting + recent)
            })
            .collect();
        inner.admitted_before = now;
        inner.fetched_at = Some(std::time::Instant::now());
    }

    /// Counts one more ticket for `queue` unless it holds `max` already. Allocates a key only
    /// the first time a map sees a queue (this runs on every EnterQueue).
    fn try_admit(&self, queue: &str, max: u64) -> bool {
        fn bump(map: &mut std::collections::HashMap<String, u64>, queue: &str) {
            match map.get_mut(queue) {
                Some(n) => *n += 1,
                None => {
                    map.insert(queue.to_string(), 1);
                }
            }
        }
        let mut inner = self.lock();
        if inner.waiting.get(queue).copied().unwrap_or(0) >= max {
            return false;
        }
        bump(&mut inner.waiting, queue);
        bump(&mut inner.admitted_now, queue);
        true
    }

    /// Gives back a slot admitted by `try_admit` whose ticket was not created.
    fn release(&self, queue: &str) {
        let mut inner = self.lock();
        if let Some(w) = inner.waiting.get_mut(queue) {
            *w = w.saturating_sub(1);
        }
        if let Some(a) = inner.admitted_now.get_mut(queue) {
            *a = a.saturating_sub(1);
        }
    }
}

type UpdateStream = Pin<Box<dyn Stream<Item = Result<proto::TicketUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl ClientService for Client {
    async fn enter_queue(
        &self,
        request: Request<proto::EnterQueueRequest>,
    ) -> Result<Response<proto::EnterQueueResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        let queue = self.state.queue("queue", &req.queue)?;
        let q = &queue.config;
        // A PartyService party enters by id: its members, leader first.
        let (party_ids, party_leader, party) = if req.party_id.is_empty() {
            (None, None, None)
        } else {
            if !req.player_ids.is_empty() {
                return Err(Rejection::invalid(
                    "player_ids",
                    "must be empty when party_id names the party",
                )
                .into());
            }
            convert::id("party_id", &req.party_id)?;
            // Touched only once its ticket is created: a refused entry (by anyone but its
            // leader or an admin, or failing a check below) does not keep it from expiring.
            // In a shard other than the home one, the roster is the home shard's.
            let roster = self
                .state
                .party_for_entry(
                    &crate::ids::PartyId::new(req.party_id.as_str()),
                    self.clock.now(),
                )
                .await?;
            // Before anything else tells of the party (its size): an outsider learns nothing.
            super::party::hidden_from_outsiders(&identity, &roster)?;
            identity.may_enter(&[], Some(&roster.leader))?;
            let mut ids = vec![roster.leader.to_string()];
            ids.extend(
                roster
                    .members
                    .iter()
                    .filter(|m| **m != roster.leader)
                    .map(ToString::to_string),
            );
            (Some(ids), Some(roster.leader), Some(roster.party_id))
        };
        let (field, player_ids) = match &party_ids {
            Some(ids) => ("party_id", ids),
            None => ("player_ids", &req.player_ids),
        };
        if player_ids.is_empty() {
            return Err(Rejection::invalid("player_ids", "must name at least one player").into());
        }
        if player_ids.len() > q.max_party_size as usize {
            return Err(Rejection::invalid(
                field,
                format!(
                    "a party of {} exceeds queue {:?}'s max_party_size {}",
                    player_ids.len(),
                    req.queue,
                    q.max_party_size
                ),
            )
            .into());
        }
        let players = convert::player_ids(field, player_ids)?;
        convert::new_player_ids(field, &players)?;
        identity.may_enter(&players, party_leader.as_ref())?;
        self.state.check_bans(&players, crate::state::unix_now())?;
        let regions = &q.matching.regions;
        let region_latency_ms = region_latencies(&req.region_latency_ms, regions)?;
        if !regions.is_empty() && !req.region_latency_ms.is_empty() && region_latency_ms.is_empty()
        {
            // Such a ticket could play in none of the queue's regions: it would wait until it
            // expired.
            return Err(Rejection::invalid(
                "region_latency_ms",
                format!(
                    "names none of queue {:?}'s regions ({})",
                    req.queue,
                    regions.join(", ")
                ),
            )
            .into());
        }
        let known_roles = &q.matching.roles;
        for (i, role) in req.roles.iter().enumerate() {
            convert::id_at("roles", i, role)?;
            if !known_roles.iter().any(|r| &r.name == role) {
                let names: Vec<&str> = known_roles.iter().map(|r| r.name.as_str()).collect();
                return Err(Rejection::invalid(
                    format!("roles[{i}]"),
                    if names.is_empty() {
                        format!("queue {:?} has no roles", req.queue)
                    } else {
                        format!("unknown role {role:?} (queue roles: {})", names.join(", "))
                    },
                )
                .into());
            }
        }
        let roles = roles_per_player(&req.roles, players.len())?;
        let (attributes, avoid) = convert::ticket_rules(
            &req.attributes,
            &req.avoid_player_ids,
            &q.matching.rules,
            &players,
        )?;

        // The queues' sizes, when stale, before this call holds a place in the loop's channel:
        // asking takes a place of its own, and waiting for it while holding one could wait on
        // itself (a channel of one place).
        let tick = Duration::from_millis(self.state.config().server.tick_interval_ms);
        if self.load.stale(tick)
            && let Some(_refreshing) = Refreshing::start(&self.load)
        {
            let stats = self.matchmaker.ask(|reply| Command::Stats { reply }).await;
            self.load.refresh(&stats?);
        }
        // Room in the loop's queue next, so a full queue rejects before any state changes.
        let permit = self.matchmaker.reserve_owned(ENTER_WAIT).await?;
        let max = self.state.config().server.max_tickets_per_queue as u64;
        if !self.load.try_admit(queue.id.as_str(), max) {
            return Err(Rejection::QueueFull {
                queue: req.queue.clone(),
                max: max as usize,
            }
            .into());
        }
        let admitted = Admitted {
            load: &self.load,
            queue: queue.id.as_str(),
            kept: false,
        };
        // With the queues split over shards, no other shard may queue these players meanwhile.
        let claim = self.state.claim_for_entry(&players).await??;
        let now = self.clock.now();
        let ticket_id = TicketId::new(self.state.new_id("t"));
        // A party is matched on its own skill, made on its first entry in the pool.
        let crate::state::Entered {
            ticket: slot,
            skills,
            party_skill,
        } = self
            .state
            .enter_ticket(&queue, players.clone(), ticket_id.clone(), now)??;
        claim.keep();
        let skills = skills.iter().map(|s| (s.mean, s.deviation)).collect();
        let entry = matching::Ticket {
            id: ticket_id.clone(),
            players,
            skills,
            party_skill: party_skill.map(|s| (s.mean, s.deviation)),
            entered_at: now,
            region_latency_ms,
            roles,
            attributes,
            avoid,
        };
        if self.state.store().keeps_tickets() {
            // A cluster store keeps waiting tickets: answer only once this one is durable. The
            // write and the entry run on their own, so a caller that goes away meanwhile (its
            // deadline) leaves no ticket that is in the state but in no queue.
            let state = self.state.clone();
            tokio::spawn(async move {
                state.persist_ticket(&slot, &entry, now).await?;
                permit.send(Command::Enter {
                    ticket: slot,
                    entry,
                });
                Ok::<(), crate::store::StoreError>(())
            })
            .await
            .map_err(super::error::task_failed)??;
        } else {
            permit.send(Command::Enter {
                ticket: slot,
                entry,
            });
        }
        admitted.keep();
        if let Some(party) = &party {
            self.state.party_entered(party, self.clock.now()).await;
        }
        tracing::debug!(ticket = %ticket_id, queue = %queue.id, "ticket entered");
        Ok(Response::new(proto::EnterQueueResponse {
            ticket_id: ticket_id.to_string(),
        }))
    }

    async fn cancel_ticket(
        &self,
        request: Request<proto::CancelTicketRequest>,
    ) -> Result<Response<proto::CancelTicketResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("ticket_id", &req.ticket_id)?;
        let id = TicketId::new(req.ticket_id.as_str());
        let ticket = self.state.ticket(&id)?;
        identity.may_act_for(&ticket.players, "cancel this ticket")?;
        ticket.touch(self.clock.now());
        let state = self
            .matchmaker
            .ask(|reply| Command::Cancel { ticket: id, reply })
            .await?;
        if self.state.store().keeps_tickets() {
            // The cancel is durable before it is acknowledged.
            self.state.store().flush_async().await?;
        }
        if state == crate::state::TicketState::Matched {
            return Err(Rejection::Ticket {
                ticket: TicketId::new(req.ticket_id.as_str()),
                refusal: TicketRefusal::AlreadyMatched,
            }
            .into());
        }
        Ok(Response::new(proto::CancelTicketResponse {
            state: convert::ticket_state(state) as i32,
        }))
    }

    type WatchTicketStream = UpdateStream;

    async fn watch_ticket(
        &self,
        request: Request<proto::WatchTicketRequest>,
    ) -> Result<Response<Self::WatchTicketStream>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("ticket_id", &req.ticket_id)?;
        let ticket = self.state.ticket(&TicketId::new(req.ticket_id.as_str()))?;
        identity.may_act_for(&ticket.players, "watch this ticket")?;
        if self.state.closing() {
            return Err(super::error::streams_closed(&self.state));
        }
        // A ticket is one player's or one party's: a few streams each is plenty, and a cap
        // keeps a caller from holding a task and a buffer per call it opens.
        let Some(mut rx) = ticket.subscribe(MAX_WATCHERS_PER_TICKET) else {
            return Err(Status::resource_exhausted(format!(
                "ticket_id: at most {MAX_WATCHERS_PER_TICKET} WatchTicket streams per ticket are open at once; close one first"
            )));
        };
        let (tx, out) = mpsc::channel(self.state.config().server.stream_buffer);
        let shutdown = self.shutdown.clone();
        let closed = self.state.streams_closed();
        let ticket_id = req.ticket_id;
        let clock = self.clock.clone();
        let cluster = self.state.is_cluster_engine();
        tokio::spawn(async move {
            // The heartbeat counts from when the last watcher went away.
            let _touch_on_exit = TouchOnDrop { ticket, clock };
            loop {
                let view = rx.borrow_and_update().clone();
                let last = view.is_final();
                let update = convert::ticket_update(&ticket_id, &view);
                tokio::select! {
                    sent = tx.send(Ok(update)) => if sent.is_err() { return },
                    () = shutdown.cancelled() => break,
                    () = closed.cancelled() => break,
                }
                if last {
                    return;
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() { return },
                    () = tx.closed() => return,
                    () = shutdown.cancelled() => break,
                    () = closed.cancelled() => break,
                }
            }
            // A cluster engine that stops says so: the node the watcher is connected to moves
            // the stream to the next owner.
            if cluster {
                let _ = tx.send(Err(super::error::engine_stopped())).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }

    async fn get_player(
        &self,
        request: Request<proto::GetPlayerRequest>,
    ) -> Result<Response<proto::PlayerView>, Status> {
        let req = request.into_inner();
        convert::id("player_id", &req.player_id)?;
        let queue = self.state.queue("queue", &req.queue)?;
        let id = PlayerId::new(req.player_id.as_str());
        let (status, record) = self.state.player(&id, &queue.pool);
        let record = record.unwrap_or_else(|| self.state.initial_record(&queue));
        let tier = self.state.tier(&queue, &id, &record);
        let store = self.state.store();
        let season = store.season_state(&queue.pool)?;
        let mut view = convert::player_view(
            &req.player_id,
            &queue,
            &status,
            &record,
            tier.as_ref(),
            season,
        );
        view.week_history = store
            .player_weeks(&queue.pool, &id)?
            .into_iter()
            .map(|(season, week, rp)| proto::WeekRankPoints {
                season,
                week,
                rank_points: i64::from(rp),
            })
            .collect();
        view.season_history = store
            .player_season_ranks(&queue.pool, &id)?
            .into_iter()
            .map(|(season, r)| proto::SeasonResult {
                season,
                tier: r.tier,
                rank_points: i64::from(r.rank_points),
                mean_week_rank_points: r.mean_week_rp.unwrap_or(0.0),
                place: r.place.unwrap_or(0),
            })
            .collect();
        Ok(Response::new(view))
    }

    async fn get_leaderboard(
        &self,
        request: Request<proto::GetLeaderboardRequest>,
    ) -> Result<Response<proto::Leaderboard>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        let queue = self.state.queue("queue", &req.queue)?;
        let limit = match req.limit {
            0 => 100,
            n if n as usize > MAX_PAGE_SIZE => {
                return Err(Rejection::invalid(
                    "limit",
                    format!("must be at most {MAX_PAGE_SIZE} (got {n})"),
                )
                .into());
            }
            n => n as usize,
        };
        if req.offset as usize > MAX_OFFSET
            && identity.is_some_and(|id| id.role != crate::auth::Role::Admin)
        {
            return Err(Rejection::invalid(
                "offset",
                format!(
                    "must be at most {MAX_OFFSET} for a player or server token (got {})",
                    req.offset
                ),
            )
            .into());
        }
        let (total, page) = self.state.leaderboard(&queue, req.offset as usize, limit);
        let season = self.state.store().season_state(&queue.pool)?;
        let entries = page
            .iter()
            .map(|(id, record)| {
                let tier = self.state.tier(&queue, id, record);
                convert::player_view(
                    id.as_str(),
                    &queue,
                    &self.state.player(id, &queue.pool).0,
                    record,
                    tier.as_ref(),
                    season,
                )
            })
            .collect();
        Ok(Response::new(proto::Leaderboard {
            entries,
            total: total as u64,
        }))
    }

    async fn predict_match(
        &self,
        request: Request<proto::PredictMatchRequest>,
    ) -> Result<Response<proto::Prediction>, Status> {
        let req = request.into_inner();
        let queue = self.state.queue("queue", &req.queue)?;
        // The shape first, before any per-player work: a request as big as the message limit
        // allows is refused in time proportional to its team count.
        let (teams, team_size) = (queue.config.teams as usize, queue.config.team_size as usize);
        if req.teams.len() != teams {
            return Err(Rejection::invalid(
                "teams",
                format!(
                    "queue {:?} plays {teams} teams (got {})",
                    req.queue,
                    req.teams.len()
                ),
            )
            .into());
        }
        for (i, team) in req.teams.iter().enumerate() {
            if team.player_ids.is_empty() || team.player_ids.len() > team_size {
                return Err(Rejection::invalid(
                    format!("teams[{i}].player_ids"),
                    format!(
                        "must hold 1..={team_size} players in queue {:?} (got {})",
                        req.queue,
                        team.player_ids.len()
                    ),
                )
                .into());
            }
        }
        let mut all: std::collections::HashSet<&String> = std::collections::HashSet::new();
        let mut skills: Vec<Vec<Skill>> = Vec::with_capacity(req.teams.len());
        for (i, team) in req.teams.iter().enumerate() {
            let ids = convert::player_ids(&format!("teams[{i}].player_ids"), &team.player_ids)?;
            for (j, p) in team.player_ids.iter().enumerate() {
                if !all.insert(p) {
                    return Err(Rejection::invalid(
                        format!("teams[{i}].player_ids[{j}]"),
                        format!("player {p:?} is on more than one team"),
                    )
                    .into());
                }
            }
            skills.push(
                ids.iter()
                    .map(|p| self.state.skill_for_matching(p, &queue))
                    .collect(),
            );
        }
        let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
        let calibration = self.state.calibration(&queue.pool);
        let p = queue
            .config
            .rating
            .predict_calibrated(&refs, calibration.as_ref())
            .map_err(|e| Rejection::invalid("teams", e.to_string()))?;
        Ok(Response::new(proto::Prediction {
            win_probability: p.win_probability,
            draw_probability: p.draw_probability,
        }))
    }

    // --- Records ---

    async fn get_active_ticket(
        &self,
        request: Request<proto::GetActiveTicketRequest>,
    ) -> Result<Response<proto::TicketUpdate>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let now = self.clock.now();
        super::records::get_active_ticket(&self.state, &identity, request.get_ref(), now)
            .map(Response::new)
    }

    async fn get_match(
        &self,
        request: Request<proto::GetMatchRequest>,
    ) -> Result<Response<proto::MatchRecord>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        super::records::get_match(&self.state, &identity, request.get_ref())
            .await
            .map(Response::new)
    }

    async fn list_player_matches(
        &self,
        request: Request<proto::ListPlayerMatchesRequest>,
    ) -> Result<Response<proto::ListPlayerMatchesResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        super::records::list_player_matches(&self.state, &identity, request.get_ref())
            .await
            .map(Response::new)
    }

    async fn accept_match(
        &self,
        request: Request<proto::AcceptMatchRequest>,
    ) -> Result<Response<proto::AcceptMatchResponse>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("ticket_id", &req.ticket_id)?;
        convert::id("match_id", &req.match_id)?;
        let id = TicketId::new(req.ticket_id.as_str());
        let ticket = self.state.ticket(&id)?;
        identity.may_act_for(&ticket.players, "answer this ticket's ready-check")?;
        ticket.touch(self.clock.now());
        let match_id = MatchId::new(req.match_id.as_str());
        let state = self
            .matchmaker
            .ask(|reply| Command::Accept {
                ticket: id,
                match_id,
                accept: req.accept,
                reply,
            })
            .await??;
        if state == crate::state::TicketState::Cancelled && self.state.store().keeps_tickets() {
            // A decline ends the ticket like a cancel: durable before it is acknowledged.
            self.state.store().flush_async().await?;
        }
        Ok(Response::new(proto::AcceptMatchResponse {
            state: convert::ticket_state(state) as i32,
        }))
    }
}

/// Records a heartbeat for a ticket when its watch stream ends.
struct TouchOnDrop {
    ticket: std::sync::Arc<crate::state::TicketSlot>,
    clock: Clock,
}

impl Drop for TouchOnDrop {
    fn drop(&mut self) {
        self.ticket.touch(self.clock.now());
    }
}

/// Open `WatchTicket` streams one ticket may have.
pub const MAX_WATCHERS_PER_TICKET: usize = 16;

/// The one `EnterQueue` fetching the loop's counts: the next may start once this is dropped,
/// also when its call is (a deadline while it waits for the loop).
struct Refreshing<'a>(&'a QueueLoad);

impl<'a> Refreshing<'a> {
    fn start(load: &'a QueueLoad) -> Option<Self> {
        (!load
            .refreshing
            .swap(true, std::sync::atomic::Ordering::AcqRel))
        .then_some(Self(load))
    }
}

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0
            .refreshing
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// A capacity slot that is given back unless the ticket was created.
struct Admitted<'a> {
    load: &'a QueueLoad,
    queue: &'a str,
    kept: bool,
}

impl Admitted<'_> {
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.load.release(self.queue);
        }
    }
}

/// The proto's flat `roles` as per-player role lists. A solo ticket lists the roles its player
/// can fill (empty = any); a party lists either nothing or exactly one role per member, in order.
/// The roles are known ones (checked before): a solo player naming one twice is refused, so a
/// ticket never lists more roles than its queue has.
fn roles_per_player(roles: &[String], players: usize) -> Result<Vec<Vec<String>>, Rejection> {
    match (players, roles.len()) {
        (_, 0) => Ok(vec![Vec::new(); players]),
        (1, _) => {
            for (i, r) in roles.iter().enumerate() {
                if roles[..i].contains(r) {
                    return Err(Rejection::invalid(
                        format!("roles[{i}]"),
                        format!("repeats role {r:?}"),
                    ));
                }
            }
            Ok(vec![roles.to_vec()])
        }
        (n, k) if n == k => Ok(roles.iter().map(|r| vec![r.clone()]).collect()),
        (n, k) => Err(Rejection::invalid(
            "roles",
            format!("a party of {n} gives one role per member or none (got {k})"),
        )),
    }
}

/// Regions one ticket may list latencies to: far more than any provider has, few enough that
/// a ticket stays small in memory, in the store and in every tick's scan.
const MAX_REGION_LATENCIES: usize = 64;

/// A ticket's latencies, sorted by region: only to the queue's regions when it names some (a
/// ticket plays only there, so other entries would be carried and scanned for nothing); every
/// entry when it names none. Each region name is checked as an id.
fn region_latencies(
    given: &std::collections::HashMap<String, u32>,
    regions: &[String],
) -> Result<Vec<(String, u32)>, Rejection> {
    if given.len() > MAX_REGION_LATENCIES {
        return Err(Rejection::invalid(
            "region_latency_ms",
            format!(
                "lists {} regions; at most {MAX_REGION_LATENCIES}",
                given.len()
            ),
        ));
    }
    let mut kept = Vec::new();
    for (region, ms) in given {
        convert::id_at("region_latency_ms", format_args!("{region:?}"), region)?;
        if regions.is_empty() || regions.contains(region) {
            kept.push((region.clone(), *ms));
        }
    }
    kept.sort();
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solo_ticket_names_each_role_once() {
        let roles = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            roles_per_player(&roles(&["tank", "healer"]), 1).unwrap(),
            vec![roles(&["tank", "healer"])]
        );
        // A role named again would be carried, stored and scanned on every tick for nothing.
        let many = roles(&["tank"; 1000]);
        match roles_per_player(&many, 1) {
            Err(Rejection::Invalid(e)) => assert_eq!(e.field, "roles[1]"),
            other => panic!("{other:?}"),
        }
        // A party's members may share a role.
        assert_eq!(
            roles_per_player(&roles(&["dps", "dps"]), 2).unwrap().len(),
            2
        );
    }

    #[test]
    fn a_ticket_keeps_only_the_latencies_of_its_queues_regions() {
        let given: std::collections::HashMap<String, u32> = (0..60)
            .map(|i| (format!("made-up-{i}"), i))
            .chain([("eu".to_string(), 30), ("us".to_string(), 90)])
            .collect();
        let regions = vec!["eu".to_string(), "us".to_string()];
        assert_eq!(
            region_latencies(&given, &regions).unwrap(),
            vec![("eu".to_string(), 30), ("us".to_string(), 90)]
        );
        // A queue without regions keeps what the client measured.
        assert_eq!(region_latencies(&given, &[]).unwrap().len(), 62);
        // A ticket lists at most 64 regions, whatever the queue.
        let many: std::collections::HashMap<String, u32> =
            (0..65).map(|i| (format!("r{i}"), i)).collect();
        for queue_regions in [&regions[..], &[]] {
            match region_latencies(&many, queue_regions) {
                Err(Rejection::Invalid(e)) => assert_eq!(e.field, "region_latency_ms"),
                other => panic!("{other:?}"),
            }
        }
        let bad: std::collections::HashMap<String, u32> = [("e\u{7}u".to_string(), 1)].into();
        match region_latencies(&bad, &regions) {
            Err(Rejection::Invalid(e)) => {
                assert!(e.field.starts_with("region_latency_ms["), "{e:?}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn one_call_at_a_time_fetches_the_counts_and_a_dropped_one_lets_the_next_start() {
        let load = QueueLoad::default();
        let first = Refreshing::start(&load).expect("nobody fetches yet");
        assert!(Refreshing::start(&load).is_none(), "one at a time");
        // The call fetching is dropped mid-way (its deadline): the next may fetch.
        drop(first);
        assert!(Refreshing::start(&load).is_some());
    }
}
