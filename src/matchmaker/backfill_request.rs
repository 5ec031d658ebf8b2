//! `RequestBackfill`: a running match's leavers marked and their slots opened, answered only
//! once that is durable.
//!
//! The loop marks the leavers and writes the match; a task on the server's runtime flushes the
//! store and hands the outcome back ([`Loop::backfill_request_flushed`]). Only then are the
//! slots opened for filling and the request answered: OK means a crash keeps the leavers (they
//! are rated as abandons). A write or flush that fails answers the store's error and undoes the
//! marks, so nothing of the request stays in memory. Requests for a match whose request is
//! still being flushed wait behind it, each checked against what the one before it left.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::Loop;
use super::backfill::BackfillJob;
use crate::ids::{MatchId, PlayerId, new_id};
use crate::rejection::{MatchRefusal, Rejection};
use crate::state::MatchSlot;
use crate::store::StoreError;
use crate::telemetry as m;

/// What `RequestBackfill` is answered: the request's id, a refusal (nothing changed), or the
/// store's failure (nothing changed either).
pub type BackfillAnswer = Result<Result<String, Rejection>, StoreError>;

/// Where the loop sends a [`BackfillAnswer`].
pub type BackfillReply = oneshot::Sender<BackfillAnswer>;

/// A request's marks, written to the store.
struct Marked {
    slot: Arc<MatchSlot>,
    queue: usize,
    /// The id of the match's open request when this one came, or a new one.
    id: String,
    /// The players this request marked as left (the others it named had left before).
    newly_left: Vec<PlayerId>,
    /// When a request last opened slots of the match, before this one.
    opened_before: Option<f64>,
    /// Slots it opens, per team.
    open: Vec<u32>,
}

/// A request written to the store whose flush has not come back yet.
pub(super) struct Opening {
    marked: Marked,
    /// Every player it named.
    named: Vec<PlayerId>,
    reply: BackfillReply,
    /// Requests for the same match that came meanwhile, in order.
    behind: VecDeque<(Vec<Vec<PlayerId>>, BackfillReply)>,
}

impl Loop {
    /// RequestBackfill: marks the leavers and writes the match; the answer comes once that is
    /// flushed (see the module docs). Waits behind the match's request still being flushed.
    pub(super) fn request_backfill(
        &mut self,
        match_id: MatchId,
        leavers: Vec<Vec<PlayerId>>,
        reply: BackfillReply,
    ) {
        if let Some(ahead) = self.opening.get_mut(&match_id) {
            ahead.behind.push_back((leavers, reply));
            return;
        }
        let marked = match self.mark_leavers(&match_id, &leavers) {
            Ok(Ok(marked)) => marked,
            Ok(Err(refused)) => {
                let _ = reply.send(Ok(Err(refused)));
                return;
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        self.opening.insert(
            match_id.clone(),
            Opening {
                marked,
                named: leavers.into_iter().flatten().collect(),
                reply,
                behind: VecDeque::new(),
            },
        );
        let state = self.state.clone();
        let flushed = self.backfill_flushed_tx.clone();
        self.runtime.spawn(async move {
            let outcome = state.store().flush_async().await;
            let _ = flushed.send((match_id, outcome));
        });
    }

    /// Checks a request against the match and its open request, marks the leavers and writes
    /// the match (unflushed). Nothing stays changed on `Err` or a refusal.
    fn mark_leavers(
        &mut self,
        match_id: &MatchId,
        leavers: &[Vec<PlayerId>],
    ) -> Result<Result<Marked, Rejection>, StoreError> {
        let slot = match self.state.match_slot(match_id) {
            Ok(slot) => slot,
            Err(refused) => return Ok(Err(refused)),
        };
        let Some(&qi) = self.queue_index.get(&slot.queue) else {
            return Ok(Err(Rejection::for_match(match_id, MatchRefusal::QueueGone)));
        };
        if self.queues[qi].team_size < 2 {
            return Ok(Err(Rejection::Unsupported {
                queue: slot.queue.to_string(),
                reason: "has teams of one player; backfill needs teams of two or more",
            }));
        }
        let capacity = self.queues[qi].team_size as usize;
        // A request past its timeout that the next tick has not dropped yet is dropped now: a
        // server asking again as it times out opens its slots anew.
        let timeout = self.queues[qi].backfill.timeout_seconds;
        let now = self.clock.now();
        if let Some(at) = self
            .backfills
            .iter()
            .position(|j| j.slot.id == *match_id && now - j.requested_at > timeout)
        {
            self.backfills.remove(at);
            self.queues[qi].stats.backfill_requests_expired += 1;
        }
        let before = slot.assignment().left.clone();
        let opened_before = slot.backfill_opened_unix();
        let job = self.backfills.iter().find(|j| j.slot.id == *match_id);
        let filling = job.map_or((&[][..], &[][..]), |j| (&j.open[..], &j.asked[..]));
        let (marked, open) = match self.state.mark_left(&slot, leavers, capacity, filling) {
            Ok(marked) => marked,
            Err(refused) => return Ok(Err(refused)),
        };
        let id = job.map_or_else(|| new_id("b"), |j| j.id.clone());
        let newly_left: Vec<PlayerId> = marked
            .left
            .iter()
            .filter(|p| !before.contains(p))
            .cloned()
            .collect();
        if let Err(e) = self.state.write_matches(std::slice::from_ref(&slot)) {
            // Logged and counted by the write, which wrote nothing.
            self.state.unmark_left(&slot, &newly_left, opened_before);
            return Err(e);
        }
        Ok(Ok(Marked {
            slot,
            queue: qi,
            id,
            newly_left,
            opened_before,
            open,
        }))
    }

    /// The flush of a request's write came back: on success its slots open (merged into the
    /// match's open request, if any) and it is answered with the request's id; on failure its
    /// marks are undone and the failure answered. Then the requests behind it go, in order.
    pub(super) fn backfill_request_flushed(
        &mut self,
        match_id: &MatchId,
        flushed: Result<(), StoreError>,
    ) {
        let Some(opening) = self.opening.remove(match_id) else {
            return;
        };
        let answer = match flushed {
            Ok(()) => Ok(Ok(self.open_slots(opening.marked, &opening.named))),
            Err(e) => {
                self.undo_leavers(&opening.marked);
                Err(e)
            }
        };
        let _ = opening.reply.send(answer);
        let mut behind = opening.behind;
        while let Some((leavers, reply)) = behind.pop_front() {
            self.request_backfill(match_id.clone(), leavers, reply);
            if let Some(next) = self.opening.get_mut(match_id) {
                next.behind.append(&mut behind);
            }
        }
    }

    /// Undoes the marks of a request whose write did not flush, and writes the match again,
    /// so a store that sends the failed write later (a cluster store retries it) ends with
    /// the match as it is here. Left alone on a cluster node whose lease ran out: the write may
    /// have landed, and the next owner carries on from what the store holds.
    fn undo_leavers(&mut self, marked: &Marked) {
        let (slot, newly_left) = (&marked.slot, &marked.newly_left);
        if !self.state.may_act() {
            return;
        }
        self.state
            .unmark_left(slot, newly_left, marked.opened_before);
        self.state.persist_matches(std::slice::from_ref(slot));
        tracing::warn!(match_id = %slot.id, leavers = newly_left.len(), "a backfill request could not be stored; its leavers are in the match again");
    }

    /// Opens a durable request's slots: merged into the match's open request if any (the new
    /// slots get the whole timeout), else a request of its own. Returns the request's id.
    fn open_slots(&mut self, marked: Marked, named: &[PlayerId]) -> String {
        let Marked {
            slot,
            queue: qi,
            id,
            open,
            ..
        } = marked;
        let opened: u32 = open.iter().sum();
        let now = self.clock.now();
        let q = &mut self.queues[qi];
        q.stats.backfill_requests += 1;
        q.stats.backfill_slots_opened += u64::from(opened);
        metrics::counter!(m::BACKFILL_REQUESTS, "queue" => q.id.to_string()).increment(1);
        if let Some(job) = self.backfills.iter_mut().find(|j| j.slot.id == slot.id) {
            for (o, n) in job.open.iter_mut().zip(&open) {
                *o += n;
            }
            for p in named {
                if !job.asked.contains(p) {
                    job.asked.push(p.clone());
                }
            }
            // A request sent again opens nothing new and leaves the timeout as it was.
            if opened > 0 {
                job.requested_at = now;
            }
            return job.id.clone();
        }
        // The request it was checked against was filled or dropped meanwhile; one that opens
        // nothing has nothing to fill.
        if opened > 0 {
            self.backfills.push(BackfillJob {
                id: id.clone(),
                slot,
                queue: qi,
                open,
                asked: named.to_vec(),
                requested_at: now,
            });
        }
        id
    }
}

impl Loop {
    /// Opens again the empty slots of restored running matches whose last backfill request
    /// opened slots within their queue's backfill timeout (on the store's clock): a request
    /// acknowledged before a crash or a change of cluster owner is still open after it, with
    /// what is left of its timeout. Every leaver counts as asked for, so a server that sends
    /// the request again opens nothing more.
    pub(super) fn reopen_restored_requests(&mut self, restored: &[Arc<MatchSlot>]) {
        let now_unix = self.state.store().now_unix();
        let now = self.clock.now();
        for slot in restored {
            let Some(opened_unix) = slot.backfill_opened_unix() else {
                continue;
            };
            let Some(&qi) = self.queue_index.get(&slot.queue) else {
                continue;
            };
            let q = &self.queues[qi];
            let age = (now_unix - opened_unix).max(0.0);
            if q.team_size < 2 || age > q.backfill.timeout_seconds {
                continue;
            }
            let Some((assignment, seated)) = self.state.running_roster(slot) else {
                continue;
            };
            let capacity = q.team_size as usize;
            let open: Vec<u32> = seated
                .iter()
                .map(|team| capacity.saturating_sub(team.len()) as u32)
                .collect();
            if open.iter().all(|&n| n == 0) {
                continue;
            }
            self.backfills.push(BackfillJob {
                id: new_id("b"),
                slot: slot.clone(),
                queue: qi,
                open,
                asked: assignment.left.clone(),
                requested_at: now - age,
            });
        }
    }
}

/// What the loop's tests share: a request sent and its flush awaited, as the server runs it.
#[cfg(test)]
pub(super) async fn request(
    lp: &mut Loop,
    match_id: &MatchId,
    leavers: &[Vec<PlayerId>],
) -> BackfillAnswer {
    let (reply, mut answer) = oneshot::channel();
    lp.request_backfill(match_id.clone(), leavers.to_vec(), reply);
    let bound = std::time::Duration::from_secs(10);
    loop {
        if let Ok(answered) = answer.try_recv() {
            return answered;
        }
        // Bounded, so that a flush that never reports fails the test.
        let (id, flushed) = tokio::time::timeout(bound, lp.backfill_flushed.recv())
            .await
            .expect("the request's flush reports")
            .expect("the loop holds a sender");
        lp.backfill_request_flushed(&id, flushed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::super::test_util::enter_in;
    use super::super::{Clock, Loop};
    use super::{BackfillAnswer, request};
    use crate::ids::{MatchId, PlayerId};
    use crate::state::Assignment;
    use crate::store::{FlushFailure, MemoryStore};

    /// A loop on `memory` with a running 2v2 match on `gs-1:7777` (read from its stream).
    async fn a_running_2v2(memory: &Arc<MemoryStore>) -> (Loop, Arc<Assignment>) {
        let state = crate::state::test_util::state_on(memory.clone());
        let mut lp = Loop::new(state.clone(), Clock::start(), Vec::new());
        let (mut stream, _) = state.register_server("gs-1:7777".into(), String::new(), 1);
        for p in ["a", "b", "c", "d"] {
            enter_in(&mut lp, "2v2", p).await;
        }
        lp.tick();
        let formed = stream.recv().await.expect("a, b, c and d meet");
        (lp, formed)
    }

    /// Who left `match_id`, as the state and as the store hold it.
    fn left(lp: &Loop, match_id: &MatchId) -> [Vec<PlayerId>; 2] {
        let live = lp
            .state
            .match_slot(match_id)
            .unwrap()
            .assignment()
            .left
            .clone();
        let (stored, _) = lp.state.store().load_matches().unwrap();
        let stored = stored
            .into_iter()
            .find(|m| m.match_id == *match_id)
            .unwrap()
            .left;
        [live, stored]
    }

    /// The 2v2 queue's backfill requests counted, and the slots they opened.
    fn counted(lp: &Loop) -> (u64, u64) {
        let q = lp.queues.iter().find(|q| q.id.as_str() == "2v2").unwrap();
        (q.stats.backfill_requests, q.stats.backfill_slots_opened)
    }

    /// The match's open request's slots per team, if it has one.
    fn open(lp: &Loop, match_id: &MatchId) -> Option<Vec<u32>> {
        let job = lp.backfills.iter().find(|j| j.slot.id == *match_id);
        job.map(|j| j.open.clone())
    }

    /// Sends a request to the loop; the answer comes once its flush is handed back.
    fn send(
        lp: &mut Loop,
        m: &MatchId,
        leavers: &[Vec<PlayerId>],
    ) -> oneshot::Receiver<BackfillAnswer> {
        let (reply, answer) = oneshot::channel();
        lp.request_backfill(m.clone(), leavers.to_vec(), reply);
        answer
    }

    /// Waits (bounded) for the next flush outcome of a request and hands it to the loop.
    async fn flush_one(lp: &mut Loop) {
        let bound = std::time::Duration::from_secs(10);
        let (id, flushed) = tokio::time::timeout(bound, lp.backfill_flushed.recv())
            .await
            .expect("the request's flush reports")
            .unwrap();
        lp.backfill_request_flushed(&id, flushed);
    }

    #[tokio::test]
    async fn a_request_is_answered_once_flushed_and_one_whose_flush_fails_is_undone() {
        let memory = Arc::new(MemoryStore::default());
        let (mut lp, formed) = a_running_2v2(&memory).await;
        let m = &formed.match_id;
        let leaver = formed.teams[0][0].clone();
        let leavers = [vec![leaver.clone()], Vec::new()];

        memory.fail_flushes(Some(FlushFailure::Disk));
        let mut answer = send(&mut lp, m, &leavers);
        assert!(answer.try_recv().is_err(), "no answer before the flush");
        assert_eq!(open(&lp, m), None, "no slot open before the flush");
        flush_one(&mut lp).await;
        let failed = answer
            .try_recv()
            .expect("answered once the flush came back");
        assert!(
            matches!(failed, Err(crate::store::StoreError::Io { .. })),
            "{failed:?}"
        );
        // Undone: seated again, here and in the store's copy; nothing open or counted.
        assert_eq!(left(&lp, m), [Vec::new(), Vec::new()]);
        let slot = lp.state.match_slot(m).unwrap();
        assert_eq!(slot.backfill_opened_unix(), None, "no request opened slots");
        assert_eq!(open(&lp, m), None);
        assert_eq!(counted(&lp), (0, 0));

        memory.fail_flushes(None);
        let mut answer = send(&mut lp, m, &leavers);
        assert!(answer.try_recv().is_err(), "no answer before the flush");
        flush_one(&mut lp).await;
        let id = answer.try_recv().unwrap().unwrap().unwrap();
        assert!(!id.is_empty());
        assert_eq!(left(&lp, m), [vec![leaver.clone()], vec![leaver]]);
        assert_eq!(open(&lp, m), Some(vec![1, 0]));
        assert_eq!(counted(&lp), (1, 1));
    }

    /// A loop on `memory` as a restart makes it: the state loaded and recovered, with `toml`
    /// over the default config.
    fn restarted(memory: &Arc<MemoryStore>, toml: &str) -> Loop {
        let config = Arc::new(crate::config::Config::from_toml_str(toml).unwrap());
        let state = crate::state::State::load(config, memory.clone()).unwrap();
        let clock = Clock::start();
        let (_, restored, _) = state.recover(clock.now()).unwrap();
        Loop::new(state, clock, restored)
    }

    #[tokio::test]
    async fn an_acknowledged_request_is_open_again_after_a_restart_within_its_timeout() {
        let memory = Arc::new(MemoryStore::default());
        let (mut lp, formed) = a_running_2v2(&memory).await;
        let m = &formed.match_id;
        let leaver = formed.teams[0][0].clone();
        let leavers = [vec![leaver.clone()], Vec::new()];
        request(&mut lp, m, &leavers).await.unwrap().unwrap();
        drop(lp);

        let mut lp = restarted(&memory, "");
        assert_eq!(open(&lp, m), Some(vec![1, 0]), "open again");
        let job = lp.backfills.iter().find(|j| j.slot.id == *m).unwrap();
        assert_eq!(job.asked, std::slice::from_ref(&leaver));
        assert!(job.requested_at <= lp.clock.now(), "its timeout runs on");
        // Sent again, it opens nothing more.
        request(&mut lp, m, &leavers).await.unwrap().unwrap();
        assert_eq!(open(&lp, m), Some(vec![1, 0]));
        drop(lp);

        // Past its timeout it is not.
        let past = "[queues.2v2.backfill]\ntimeout_seconds = 0.000001\n";
        let lp = restarted(&memory, past);
        assert_eq!(open(&lp, m), None);
        assert_eq!(left(&lp, m)[0], [leaver], "the leaver is kept all the same");
    }

    #[tokio::test]
    async fn a_request_whose_write_fails_is_answered_at_once_and_changes_nothing() {
        let memory = Arc::new(MemoryStore::default());
        let (mut lp, formed) = a_running_2v2(&memory).await;
        let m = &formed.match_id;
        let leavers = [vec![formed.teams[0][0].clone()], Vec::new()];

        memory.fail_segment_writes(true);
        let mut answer = send(&mut lp, m, &leavers);
        let failed = answer.try_recv().expect("answered at once");
        assert!(
            matches!(failed, Err(crate::store::StoreError::Io { .. })),
            "{failed:?}"
        );
        assert!(lp.opening.is_empty(), "no flush awaited");
        assert_eq!(left(&lp, m), [Vec::new(), Vec::new()]);
        assert_eq!(open(&lp, m), None);
        assert_eq!(counted(&lp), (0, 0));

        memory.fail_segment_writes(false);
        let id = request(&mut lp, m, &leavers).await.unwrap().unwrap();
        assert!(!id.is_empty());
        assert_eq!(open(&lp, m), Some(vec![1, 0]));
    }

    #[tokio::test]
    async fn a_request_behind_one_being_flushed_is_checked_against_what_that_one_left() {
        let memory = Arc::new(MemoryStore::default());
        let (mut lp, formed) = a_running_2v2(&memory).await;
        let m = &formed.match_id;
        let leaver = formed.teams[0][0].clone();
        let leavers = [vec![leaver.clone()], Vec::new()];

        // The first's flush fails; the same request sent again meanwhile waits behind it, and
        // then marks the leaver itself (had it been checked against the first's marks, it
        // would have opened nothing and been answered OK with the leaver seated again).
        memory.fail_flushes(Some(FlushFailure::Disk));
        let mut first = send(&mut lp, m, &leavers);
        let mut again = send(&mut lp, m, &leavers);
        let bound = std::time::Duration::from_secs(10);
        let (id, flushed) = tokio::time::timeout(bound, lp.backfill_flushed.recv())
            .await
            .unwrap()
            .unwrap();
        memory.fail_flushes(None);
        lp.backfill_request_flushed(&id, flushed);
        assert!(first.try_recv().unwrap().is_err());
        assert!(again.try_recv().is_err(), "its own flush is under way");
        flush_one(&mut lp).await;
        let id = again.try_recv().unwrap().unwrap().unwrap();
        assert!(!id.is_empty());
        assert_eq!(left(&lp, m), [vec![leaver.clone()], vec![leaver]]);
        assert_eq!(open(&lp, m), Some(vec![1, 0]));
        assert_eq!(counted(&lp), (1, 1));

        // Sent a third time: it opens nothing and keeps the request's id.
        let same = request(&mut lp, m, &leavers).await.unwrap().unwrap();
        assert_eq!(same, id);
        assert_eq!(open(&lp, m), Some(vec![1, 0]));
    }
}
