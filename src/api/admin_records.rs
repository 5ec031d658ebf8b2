//! `AdminService`'s player and match records: `DeletePlayer`, `BanPlayer`, `UnbanPlayer`,
//! `GetPlayerBan`, `ListLiveMatches`, `ListRecentResults`, `ListAuditLog`, `WatchEvents`.
//! Handlers validate, note what they name for the audit log, call the state or the ledger, and
//! map back; the records live in `state::records` and `store::admin_records`.

use std::pin::Pin;
use std::time::Duration;

use serde_json::json;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::Admin;
use super::audit::note;
use super::convert;
use crate::ids::PlayerId;
use crate::matchmaker::{Command, HandleError};
use crate::proto;
use crate::rejection::Rejection;
use crate::state::{TicketState, Watched, unix_now};
use crate::store::{Ban, EventKind, EventRecord};

/// Longest ban reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Audit entries per page when the request says 0, and at most.
pub const AUDIT_PAGE: u32 = 100;
const MAX_AUDIT_PAGE: u32 = 1000;
/// The header of a `ListAuditLog` answer that numbers its entries in the log (runs of
/// consecutive numbers, `4-9,12`), so a node merging several shards' logs knows where it
/// stopped in each ([`audit_seqs`]); the entries on the wire carry no number.
pub const AUDIT_SEQS: &str = "x-matchmaker-audit-seqs";
/// `ListLiveMatches` and `ListRecentResults` page when the request says 0, and the most it may
/// ask for.
pub const LIVE_MATCHES_PAGE: usize = 50;
const LIVE_MATCHES_MAX: usize = 1000;
/// Events `ListRecentResults` reads from the log at a time, newest window first, and the most
/// it reads for one call (a queue whose results are rare among many others' stops there).
const RESULT_SCAN_WINDOW: usize = 1024;
const RESULT_SCAN_MAX: usize = 200_000;
/// A `WatchEvents` request header asking for closing marks too: every
/// [`CLOSING_EVERY`] while no event is sent, an event of no kind and no time whose cursor says
/// that no later event has a cursor at or below it (how a front merges several shards' logs,
/// `cluster::front::events`). The answer then names its last durable cursor in
/// [`EVENTS_LAST`] instead of refusing a cursor past it: another shard may have given it.
pub const EVENTS_CLOSING: &str = "x-matchmaker-events-closing";
/// The response header of a [`EVENTS_CLOSING`] stream with the log's last durable cursor.
pub const EVENTS_LAST: &str = "x-matchmaker-events-last";
/// How often a [`EVENTS_CLOSING`] stream says how far its log is closed.
const CLOSING_EVERY: Duration = Duration::from_millis(25);

/// Whether `event` is a closing mark ([`EVENTS_CLOSING`]): a real event has a kind or a time.
#[must_use]
pub fn is_closing_mark(event: &proto::Event) -> bool {
    event.kind == 0 && event.unix == 0.0
}

/// Events a `WatchEvents` stream buffers for a slow reader.
const EVENT_BUFFER: usize = 64;

/// A `WatchEvents` stream.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<proto::Event, Status>> + Send>>;

/// The queue a MATCH_COMPLETED event names in its detail.
fn completed_queue(event: &EventRecord) -> String {
    serde_json::from_str::<serde_json::Value>(&event.detail_json)
        .ok()
        .and_then(|d| d.get("queue")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The proto kind of an event kind.
pub fn kind_to_proto(kind: EventKind) -> proto::EventKind {
    match kind {
        EventKind::MatchFormed => proto::EventKind::MatchFormed,
        EventKind::MatchAllocated => proto::EventKind::MatchAllocated,
        EventKind::MatchStarted => proto::EventKind::MatchStarted,
        EventKind::MatchCompleted => proto::EventKind::MatchCompleted,
        EventKind::MatchCancelled => proto::EventKind::MatchCancelled,
        EventKind::RatingChanged => proto::EventKind::RatingChanged,
        EventKind::SeasonReset => proto::EventKind::SeasonReset,
        EventKind::PlayerDeleted => proto::EventKind::PlayerDeleted,
        EventKind::PlayerBanned => proto::EventKind::PlayerBanned,
        EventKind::PlayerUnbanned => proto::EventKind::PlayerUnbanned,
        EventKind::Unknown => proto::EventKind::Unspecified,
    }
}

/// The event kinds a request names, or the field and rule it breaks.
fn kinds_filter(kinds: &[i32]) -> Result<Vec<i32>, Rejection> {
    for (i, k) in kinds.iter().enumerate() {
        match proto::EventKind::try_from(*k) {
            Ok(proto::EventKind::Unspecified) | Err(_) => {
                return Err(Rejection::invalid(
                    format!("kinds[{i}]"),
                    format!("must be a known EventKind other than UNSPECIFIED (got {k})"),
                ));
            }
            Ok(_) => {}
        }
    }
    // Each kind once: the filter is tested against every event sent, so its length must not
    // be the caller's to choose.
    let mut kept = kinds.to_vec();
    kept.sort_unstable();
    kept.dedup();
    Ok(kept)
}

fn player_event(kind: EventKind, player: &PlayerId, detail: serde_json::Value) -> EventRecord {
    EventRecord {
        kind,
        unix: unix_now(),
        match_id: String::new(),
        player_id: player.to_string(),
        detail_json: detail.to_string(),
    }
}

/// A validated `BanPlayerRequest`, or the field and rule it breaks (pure: `now` is given).
pub fn ban_from(req: &proto::BanPlayerRequest, now: f64) -> Result<Ban, Rejection> {
    convert::id("player_id", &req.player_id)?;
    if req.until_unix < 0 || (req.until_unix != 0 && (req.until_unix as f64) <= now) {
        return Err(Rejection::invalid(
            "until_unix",
            format!(
                "must be a unix time in the future, or 0 to ban for good (got {}, now {})",
                req.until_unix, now as i64
            ),
        ));
    }
    let reason = req.reason.trim();
    if reason.is_empty() {
        return Err(Rejection::invalid("reason", "must not be empty"));
    }
    if reason.chars().count() > MAX_REASON_CHARS || reason.chars().any(char::is_control) {
        return Err(Rejection::invalid(
            "reason",
            format!(
                "must be at most {MAX_REASON_CHARS} characters, none of them control characters"
            ),
        ));
    }
    Ok(Ban {
        player: PlayerId::new(req.player_id.as_str()),
        until_unix: req.until_unix,
        reason: reason.to_string(),
        since_unix: now,
    })
}

/// A stored ban as `GetPlayerBan` answers it, with whether it holds at `now` (pure).
pub fn ban_to_proto(ban: &Ban, now: f64) -> proto::PlayerBan {
    proto::PlayerBan {
        until_unix: ban.until_unix,
        reason: ban.reason.clone(),
        since_unix: ban.since_unix,
        active: ban.holds_at(now),
    }
}

impl Admin {
    /// Cancels the player's waiting ticket, if any; whether one was cancelled.
    async fn cancel_waiting(&self, player: &PlayerId) -> Result<bool, Status> {
        Ok(self.cancel_waiting_or(player, None).await?)
    }

    /// [`Self::cancel_waiting`], or cancels `known` (the player's ticket seen earlier), which
    /// the matchmaker may have ended meanwhile for the same reason (a ban seen as it took it).
    async fn cancel_waiting_or(
        &self,
        player: &PlayerId,
        known: Option<crate::ids::TicketId>,
    ) -> Result<bool, HandleError> {
        let Some(ticket) = self.state.waiting_ticket_of(player).or(known) else {
            return Ok(false);
        };
        let state = self
            .matchmaker
            .ask(|reply| Command::Cancel { ticket, reply })
            .await?;
        Ok(state == TicketState::Cancelled)
    }

    pub(super) async fn delete_player_call(
        &self,
        request: Request<proto::DeletePlayerRequest>,
    ) -> Result<Response<proto::DeletePlayerResponse>, Status> {
        note(
            &request,
            format!("player_id={:?}", request.get_ref().player_id),
        );
        let req = request.into_inner();
        convert::erasable_id("player_id", &req.player_id)?;
        let player = PlayerId::new(req.player_id.as_str());
        let ticket_cancelled = self.cancel_waiting(&player).await?;
        // Events naming the player (a cancelled match's, emitted before its players were free)
        // are written first, so that the erasure finds them.
        self.state.flush_with_events().await?;
        let p = player.clone();
        let erased = self
            .ledger
            .exclusive(move |state| state.erase_player(&p))
            .await??;
        // A match cancelled between that flush and the erasure emitted its event before the
        // player was free, and it may have been on its way to the store while the erasure
        // rewrote it: once everything emitted so far is durable, the store is erased again.
        // The player is erased by now whatever this pass does, so it only logs a failure.
        let again = async {
            self.state.flush_with_events().await?;
            let (p, marker) = (player.clone(), erased.marker.clone());
            self.ledger
                .exclusive(move |state| state.erase_stored_again(&p, &marker))
                .await
        };
        match again.await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                player = %player,
                "the id was taken again during its erasure; events on their way then may still name it"
            ),
            Err(e) => tracing::warn!(
                player = %player,
                error = %e,
                "the erasure's second pass over the store failed; events on their way then may still name the player"
            ),
        }
        self.state
            .emit_durable(&[player_event(
                EventKind::PlayerDeleted,
                &player,
                json!({ "pools": erased.pools, "ticket_cancelled": ticket_cancelled }),
            )])
            .await?;
        tracing::info!(player = %player, pools = ?erased.pools, "player erased");
        Ok(Response::new(proto::DeletePlayerResponse {
            pools: erased.pools,
            ticket_cancelled,
        }))
    }

    pub(super) async fn ban_player_call(
        &self,
        request: Request<proto::BanPlayerRequest>,
    ) -> Result<Response<proto::BanPlayerResponse>, Status> {
        let r = request.get_ref();
        note(
            &request,
            format!(
                "player_id={:?} until_unix={} reason={:?}",
                r.player_id, r.until_unix, r.reason
            ),
        );
        let ban = ban_from(request.get_ref(), unix_now())?;
        let player = ban.player.clone();
        let event = player_event(
            EventKind::PlayerBanned,
            &player,
            json!({ "until_unix": ban.until_unix, "reason": ban.reason }),
        );
        // The ban first, so no new ticket gets in, with its event in the same flush; then the
        // waiting one goes. Alone among results and erasures (the ledger's gate): an erasure of
        // the same id running meanwhile would otherwise leave the store and memory disagreeing
        // about the ban.
        let waiting = self.state.waiting_ticket_of(&player);
        let last_event = self
            .ledger
            .exclusive(move |state| {
                state.ban(ban)?;
                state.store().append_events(&[event])
            })
            .await?;
        self.state.events_durable(last_event);
        // From here no match is formed with the player (the tick returns a match holding a
        // banned player's ticket to the queue and ends that ticket), so a matchmaker that is
        // closing (shutdown, a lost lease) leaves nothing to undo: the ban stands, answered.
        let ticket_cancelled = self
            .cancel_waiting_or(&player, waiting)
            .await
            .unwrap_or(false);
        Ok(Response::new(proto::BanPlayerResponse { ticket_cancelled }))
    }

    pub(super) async fn unban_player_call(
        &self,
        request: Request<proto::UnbanPlayerRequest>,
    ) -> Result<Response<proto::UnbanPlayerResponse>, Status> {
        note(
            &request,
            format!("player_id={:?}", request.get_ref().player_id),
        );
        let req = request.into_inner();
        convert::id("player_id", &req.player_id)?;
        let player = PlayerId::new(req.player_id.as_str());
        let unbanned = player.clone();
        let was_banned = self
            .ledger
            .exclusive(move |state| state.unban(&unbanned))
            .await?;
        self.state
            .emit_durable(&[player_event(
                EventKind::PlayerUnbanned,
                &player,
                json!({ "was_banned": was_banned }),
            )])
            .await?;
        Ok(Response::new(proto::UnbanPlayerResponse { was_banned }))
    }

    pub(super) async fn get_player_ban_call(
        &self,
        request: Request<proto::GetPlayerBanRequest>,
    ) -> Result<Response<proto::GetPlayerBanResponse>, Status> {
        note(
            &request,
            format!("player_id={:?}", request.get_ref().player_id),
        );
        let req = request.into_inner();
        convert::id("player_id", &req.player_id)?;
        let ban = self.state.ban_of(&PlayerId::new(req.player_id.as_str()));
        Ok(Response::new(proto::GetPlayerBanResponse {
            ban: ban.map(|b| ban_to_proto(&b, unix_now())),
        }))
    }

    /// A `ListLiveMatches` or `ListRecentResults` request's queue (`None`: every queue's) and
    /// limit, or the field and rule one breaks.
    fn match_page<'a>(
        &self,
        queue: &'a str,
        limit: u32,
    ) -> Result<(Option<&'a str>, usize), Status> {
        if !queue.is_empty() {
            self.state.queue("queue", queue)?;
        }
        let limit = match limit {
            0 => LIVE_MATCHES_PAGE,
            n if n as usize > LIVE_MATCHES_MAX => {
                return Err(Rejection::invalid(
                    "limit",
                    format!("must be at most {LIVE_MATCHES_MAX} (got {n})"),
                )
                .into());
            }
            n => n as usize,
        };
        Ok(((!queue.is_empty()).then_some(queue), limit))
    }

    pub(super) async fn list_recent_results_call(
        &self,
        request: Request<proto::ListRecentResultsRequest>,
    ) -> Result<Response<proto::ListRecentResultsResponse>, Status> {
        note(&request, format!("queue={:?}", request.get_ref().queue));
        let req = request.into_inner();
        let (queue, limit) = self.match_page(&req.queue, req.limit)?;
        let store = self.state.store();
        let mut ids = Vec::new();
        // Only what is durable, as WatchEvents reads: a result still on its way to the disk
        // could be lost to a crash after it was listed.
        let mut before = self.state.last_durable_event().saturating_add(1);
        let mut scanned = 0;
        while ids.len() < limit && scanned < RESULT_SCAN_MAX {
            let window = store.events_before(before, RESULT_SCAN_WINDOW)?;
            let Some(&(oldest, _)) = window.last() else {
                break;
            };
            scanned += RESULT_SCAN_WINDOW;
            ids.extend(
                window
                    .iter()
                    .filter(|(_, e)| {
                        e.kind == EventKind::MatchCompleted
                            && queue.is_none_or(|q| completed_queue(e) == q)
                    })
                    .map(|(_, e)| crate::ids::MatchId::new(e.match_id.as_str())),
            );
            before = oldest;
        }
        ids.truncate(limit);
        let mut found: std::collections::HashMap<_, _> = store
            .match_records(&ids)
            .await?
            .into_iter()
            .map(|r| (r.match_id.clone(), r))
            .collect();
        Ok(Response::new(proto::ListRecentResultsResponse {
            matches: ids
                .iter()
                .filter_map(|id| found.remove(id))
                .map(|r| super::records::match_record(&self.state, &r))
                .collect(),
        }))
    }

    pub(super) async fn list_live_matches_call(
        &self,
        request: Request<proto::ListLiveMatchesRequest>,
    ) -> Result<Response<proto::ListLiveMatchesResponse>, Status> {
        note(&request, format!("queue={:?}", request.get_ref().queue));
        let req = request.into_inner();
        let (queue, limit) = self.match_page(&req.queue, req.limit)?;
        let (total, live) = self.state.live_matches(queue, limit);
        Ok(Response::new(proto::ListLiveMatchesResponse {
            total: total as u64,
            matches: live
                .iter()
                .map(|m| super::records::live_match(&m.live()))
                .collect(),
        }))
    }

    pub(super) async fn list_audit_log_call(
        &self,
        request: Request<proto::ListAuditLogRequest>,
    ) -> Result<Response<proto::ListAuditLogResponse>, Status> {
        let req = request.into_inner();
        let after: u64 = if req.page_token.is_empty() {
            0
        } else {
            req.page_token.parse().map_err(|_| {
                Rejection::invalid(
                    "page_token",
                    "must be a next_page_token from an earlier response",
                )
            })?
        };
        let limit = match req.limit {
            0 => AUDIT_PAGE,
            n if n > MAX_AUDIT_PAGE => {
                return Err(Rejection::invalid(
                    "limit",
                    format!("must be at most {MAX_AUDIT_PAGE} (got {n})"),
                )
                .into());
            }
            n => n,
        } as usize;
        let page = self.state.store().audit_after(after, limit)?;
        let next_page_token = match page.last() {
            Some((seq, _)) if page.len() == limit => seq.to_string(),
            _ => String::new(),
        };
        let seqs = audit_seqs(page.iter().map(|(seq, _)| *seq));
        let mut response = Response::new(proto::ListAuditLogResponse {
            entries: page
                .into_iter()
                .map(|(_, a)| proto::AuditEntry {
                    unix: a.unix,
                    actor: a.actor,
                    action: a.action,
                    detail: a.detail,
                })
                .collect(),
            next_page_token,
        });
        if let Ok(value) = seqs.parse() {
            response.metadata_mut().insert(AUDIT_SEQS, value);
        }
        Ok(response)
    }

    pub(super) async fn watch_events_call(
        &self,
        request: Request<proto::WatchEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let r = request.get_ref();
        note(
            &request,
            format!("after_cursor={} kinds={:?}", r.after_cursor, r.kinds),
        );
        let closing = request.metadata().contains_key(EVENTS_CLOSING);
        let req = request.into_inner();
        let kinds = kinds_filter(&req.kinds)?;
        // A cursor this log never reached (a store restored from an older backup, a Redis
        // failover that lost writes): the events numbered after it anew would be skipped
        // without a word, so the consumer hears it instead.
        let last = self.state.last_durable_event();
        // A merge of several shards' logs checks the cursor against them all.
        if !closing && req.after_cursor > last {
            return Err(Status::out_of_range(format!(
                "after_cursor: {} is past the last event written ({last}); resume from {last} \
                 or 0",
                req.after_cursor
            )));
        }
        // A cursor whose next events retention dropped: resuming would skip them without a
        // word, so the consumer hears it and resyncs (from 0, the oldest kept).
        self.state.resumable_after(req.after_cursor)??;
        let (tx, rx) = tokio::sync::mpsc::channel(EVENT_BUFFER);
        tokio::spawn(self.state.clone().send_events(
            req.after_cursor,
            move |kind| kinds.is_empty() || kinds.contains(&(kind_to_proto(kind) as i32)),
            tx,
            self.shutdown.clone(),
            closing.then_some(CLOSING_EVERY),
        ));
        let events = tokio_stream::wrappers::ReceiverStream::new(rx).map(|item| {
            item.map(|watched| match watched {
                Watched::Event(cursor, e) => proto::Event {
                    cursor,
                    kind: kind_to_proto(e.kind) as i32,
                    unix: e.unix,
                    match_id: e.match_id,
                    player_id: e.player_id,
                    detail_json: e.detail_json,
                },
                Watched::Closed(cursor) => proto::Event {
                    cursor,
                    ..proto::Event::default()
                },
            })
            .map_err(Status::from)
        });
        let mut response = Response::new(Box::pin(super::closing::UntilClosed::new(
            &self.state,
            Box::pin(events),
        )) as EventStream);
        if closing && let Ok(value) = last.to_string().parse() {
            response.metadata_mut().insert(EVENTS_LAST, value);
        }
        Ok(response)
    }
}
/// Audit sequence numbers in increasing order as [`AUDIT_SEQS`] spells them: runs of
/// consecutive numbers (`4-9,12`), so a page of a log without gaps costs a few bytes.
#[must_use]
pub fn audit_seqs(seqs: impl IntoIterator<Item = u64>) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for seq in seqs {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(seq) => *last = seq,
            _ => runs.push((seq, seq)),
        }
    }
    runs.iter()
        .map(|&(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The numbers an [`AUDIT_SEQS`] header names, in order; `None` when it is not one
/// [`audit_seqs`] wrote (a run backwards, or more than `at_most` numbers).
#[must_use]
pub fn parse_audit_seqs(header: &str, at_most: usize) -> Option<Vec<u64>> {
    let mut seqs = Vec::new();
    if header.is_empty() {
        return Some(seqs);
    }
    for run in header.split(',') {
        let (first, last) = match run.split_once('-') {
            Some((first, last)) => (first.parse::<u64>().ok()?, last.parse::<u64>().ok()?),
            None => {
                let seq = run.parse::<u64>().ok()?;
                (seq, seq)
            }
        };
        if last < first || usize::try_from(last - first).ok()? >= at_most.saturating_sub(seqs.len())
        {
            return None;
        }
        seqs.extend(first..=last);
    }
    Some(seqs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_numbers_cross_as_runs_and_come_back_the_same() {
        for seqs in [
            vec![],
            vec![7],
            vec![4, 5, 6, 7, 8, 9, 12],
            vec![1, 3, 5, u64::MAX],
        ] {
            let header = audit_seqs(seqs.iter().copied());
            assert_eq!(parse_audit_seqs(&header, 10), Some(seqs), "{header}");
        }
        assert_eq!(audit_seqs([4, 5, 6, 7, 8, 9, 12]), "4-9,12");
        for bad in ["x", "9-4", "1,,2", "-3", "1-"] {
            assert_eq!(parse_audit_seqs(bad, 10), None, "{bad}");
        }
        assert_eq!(parse_audit_seqs("1-10", 10).map(|s| s.len()), Some(10));
        assert_eq!(parse_audit_seqs("1-10,12", 10), None, "more than the page");
        assert_eq!(parse_audit_seqs("0-18446744073709551615", 1000), None);
    }

    fn req(player: &str, until: i64, reason: &str) -> proto::BanPlayerRequest {
        proto::BanPlayerRequest {
            player_id: player.into(),
            until_unix: until,
            reason: reason.into(),
        }
    }

    fn field(r: Result<Ban, Rejection>) -> String {
        match r {
            Err(Rejection::Invalid(f)) => f.field.clone(),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_stored_ban_answers_whether_it_holds_now() {
        let ban = ban_from(&req("p1", 2_000, "smurfing"), 1_000.0).unwrap();
        let during = ban_to_proto(&ban, 1_999.0);
        assert_eq!(
            (during.until_unix, during.reason.as_str(), during.since_unix),
            (2_000, "smurfing", 1_000.0)
        );
        assert!(during.active);
        assert!(!ban_to_proto(&ban, 2_000.0).active, "ended at until_unix");
        let for_good = ban_from(&req("p1", 0, "cheating"), 1_000.0).unwrap();
        assert!(ban_to_proto(&for_good, 1e12).active);
    }

    #[test]
    fn a_ban_is_validated_field_by_field() {
        let now = 1_000.0;
        let ban = ban_from(&req("p1", 0, "  cheating "), now).unwrap();
        assert_eq!(
            (ban.until_unix, ban.reason.as_str(), ban.since_unix),
            (0, "cheating", now)
        );
        assert_eq!(
            ban_from(&req("p1", 1_001, "x"), now).unwrap().until_unix,
            1_001
        );
        assert_eq!(field(ban_from(&req("", 0, "x"), now)), "player_id");
        assert_eq!(field(ban_from(&req("p1", 1_000, "x"), now)), "until_unix");
        assert_eq!(field(ban_from(&req("p1", -5, "x"), now)), "until_unix");
        assert_eq!(field(ban_from(&req("p1", 0, "   "), now)), "reason");
        assert_eq!(field(ban_from(&req("p1", 0, "a\u{0}b"), now)), "reason");
        let long = "x".repeat(MAX_REASON_CHARS + 1);
        assert_eq!(field(ban_from(&req("p1", 0, &long), now)), "reason");
    }

    #[test]
    fn event_kinds_are_checked_and_every_store_kind_has_a_proto_kind() {
        assert!(kinds_filter(&[1, 6]).is_ok());
        assert!(kinds_filter(&[0]).is_err());
        assert!(kinds_filter(&[99]).is_err());
        // Repeats are kept once, so a long filter costs nothing per event.
        assert_eq!(kinds_filter(&[1; 100_000]).unwrap(), vec![1]);
        assert_eq!(kinds_filter(&[6, 1, 6]).unwrap(), vec![1, 6]);
        let all = [
            EventKind::MatchFormed,
            EventKind::MatchAllocated,
            EventKind::MatchStarted,
            EventKind::MatchCompleted,
            EventKind::MatchCancelled,
            EventKind::RatingChanged,
            EventKind::SeasonReset,
            EventKind::PlayerDeleted,
            EventKind::PlayerBanned,
            EventKind::PlayerUnbanned,
        ];
        let mut seen: Vec<i32> = all.iter().map(|k| kind_to_proto(*k) as i32).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), all.len());
        assert!(!seen.contains(&0));
    }
}
