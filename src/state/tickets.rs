//! Tickets: one player or party waiting in one queue, its latest view, and the watch channel
//! `WatchTicket` streams read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::{Assignment, PlayerStatus, QueueInfo, State};
use crate::ids::{PlayerId, QueueId, TicketId};
use crate::rating::Skill;
use crate::rejection::Rejection;
use crate::store::{StoreError, StoredTicket};

/// The lifecycle of a ticket as clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TicketState {
    Searching,
    Matched,
    Cancelled,
    Expired,
}

impl TicketState {
    /// The state's name as the proto spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Searching => "SEARCHING",
            Self::Matched => "MATCHED",
            Self::Cancelled => "CANCELLED",
            Self::Expired => "EXPIRED",
        }
    }
}

/// The latest state of a ticket, published to its watchers.
#[derive(Clone, Debug, PartialEq)]
pub struct TicketView {
    pub state: TicketState,
    pub wait_seconds: f64,
    pub window: Option<(f64, f64)>,
    pub assignment: Option<Arc<Assignment>>,
    pub reason: String,
    /// While the ticket's match waits for every ticket to accept.
    pub ready: Option<ReadyView>,
    /// MATCHED, and its match ended before any game server took it (its result was reported
    /// then): nothing more will come.
    pub ended: bool,
}

/// A ready-check's progress as one ticket sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadyView {
    pub seconds_left: f64,
    pub accepted: u32,
    pub required: u32,
    pub accepted_by_ticket: bool,
}

impl TicketView {
    /// A SEARCHING view with nothing else set.
    pub fn searching(wait_seconds: f64, reason: String) -> Self {
        Self {
            state: TicketState::Searching,
            wait_seconds,
            window: None,
            assignment: None,
            reason,
            ready: None,
            ended: false,
        }
    }
}

impl TicketView {
    /// A watcher's stream ends after this update: cancelled, expired, or matched onto a server.
    pub fn is_final(&self) -> bool {
        match self.state {
            TicketState::Searching => false,
            TicketState::Cancelled | TicketState::Expired => true,
            TicketState::Matched => {
                self.ended
                    || self
                        .assignment
                        .as_ref()
                        .is_some_and(|a| !a.server_address.is_empty())
            }
        }
    }
}

/// A ticket [`State::enter_ticket`] created, with the skills it is matched on.
#[derive(Debug)]
pub struct Entered {
    pub ticket: Arc<TicketSlot>,
    /// Each player's skill in the queue's pool, in the ticket's player order.
    pub skills: Vec<Skill>,
    /// A party's own skill in the pool (`None` for one player).
    pub party_skill: Option<Skill>,
}

/// A ticket, its latest view, and the channel its watchers subscribe to. The channel holds only
/// the latest view, so a slow watcher never grows memory.
#[derive(Debug)]
pub struct TicketSlot {
    pub id: TicketId,
    pub queue: QueueId,
    pub players: Vec<PlayerId>,
    /// Seconds on the matchmaker clock.
    pub entered_at: f64,
    /// Matchmaker-clock seconds (as `f64` bits) of the last call that named the ticket, for the
    /// heartbeat.
    pub(super) last_seen: AtomicU64,
    pub(super) view: Mutex<ViewCell>,
}

/// A ticket's latest view and, once someone has watched it, the channel that publishes it.
/// Most tickets are never watched, and a watch channel (its eight waker lists) cost ~310 bytes
/// of resident memory per ticket, live or retained after it finished (measured under
/// `loadgen --rate`); so the channel is made on first subscribe.
#[derive(Debug)]
pub(super) struct ViewCell {
    pub(super) current: TicketView,
    pub(super) watchers: Option<watch::Sender<TicketView>>,
}

impl TicketSlot {
    pub(super) fn cell(&self) -> MutexGuard<'_, ViewCell> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current view.
    pub fn view(&self) -> TicketView {
        self.cell().current.clone()
    }

    /// A receiver for `WatchTicket`, holding the current view; `None` when `most` watch it
    /// already.
    pub fn subscribe(&self, most: usize) -> Option<watch::Receiver<TicketView>> {
        let mut cell = self.cell();
        let ViewCell { current, watchers } = &mut *cell;
        let sender = watchers.get_or_insert_with(|| watch::Sender::new(current.clone()));
        (sender.receiver_count() < most).then(|| sender.subscribe())
    }

    /// Whether anyone is watching (SEARCHING updates are skipped when not).
    pub fn watched(&self) -> bool {
        self.cell()
            .watchers
            .as_ref()
            .is_some_and(|w| w.receiver_count() > 0)
    }

    /// Records a call naming this ticket at matchmaker time `now` (the heartbeat).
    pub fn touch(&self, now: f64) {
        self.last_seen
            .fetch_max(now.max(0.0).to_bits(), Ordering::AcqRel);
    }

    /// Seconds since anyone watched or named the ticket (0 while a watcher is connected).
    pub fn unattended_for(&self, now: f64) -> f64 {
        if self.watched() {
            return 0.0;
        }
        now - f64::from_bits(self.last_seen.load(Ordering::Acquire))
    }

    /// Replaces the view; a final view is never replaced by a non-final one.
    pub fn publish(&self, next: TicketView) {
        self.publish_over(next, |_| true);
    }

    /// [`TicketSlot::publish`], if the current view is one `replaces` accepts (checked under
    /// the same lock).
    pub fn publish_over(&self, next: TicketView, replaces: impl FnOnce(&TicketView) -> bool) {
        let mut cell = self.cell();
        if cell.current.is_final() || cell.current == next || !replaces(&cell.current) {
            return;
        }
        if let Some(watchers) = &cell.watchers {
            // Under the cell's lock, so a subscriber sees either the old view then this one,
            // or this one first; never a view older than `current`.
            watchers.send_replace(next.clone());
        }
        cell.current = next;
    }
}

impl State {
    /// Creates a SEARCHING ticket for `players` if every one of them is idle; otherwise nothing
    /// changes and the first busy player is named.
    ///
    /// Also returns each player's skill for matching in `queue` (in `players`' order), read
    /// under the same locks: one map lookup per player instead of two.
    pub fn create_ticket(
        &self,
        queue: &QueueInfo,
        players: Vec<PlayerId>,
        ticket_id: TicketId,
        entered_at: f64,
    ) -> Result<(Arc<TicketSlot>, Vec<Skill>), Rejection> {
        let Ok(made) = self.create_ticket_then(queue, players, ticket_id, entered_at, |_| {
            Ok::<_, std::convert::Infallible>(None)
        });
        made.map(|entered| (entered.ticket, entered.skills))
    }

    /// `EnterQueue`: [`State::create_ticket`], and for a party of several players its own
    /// skill in the queue's pool. A party's first entry in a pool makes its record from the
    /// members' skills and stores it, holding the members and only once every check passed:
    /// a refused entry stores nothing, and the record is made from the skills the ticket
    /// carries. A store failure leaves no ticket.
    pub fn enter_ticket(
        &self,
        queue: &QueueInfo,
        players: Vec<PlayerId>,
        ticket_id: TicketId,
        entered_at: f64,
    ) -> Result<Result<Entered, Rejection>, StoreError> {
        let party = (players.len() > 1).then(|| crate::records::party_key(&players));
        self.create_ticket_then(queue, players, ticket_id, entered_at, |skills| {
            party
                .as_deref()
                .map(|key| self.party_record(queue, key, skills))
                .transpose()
        })
    }

    /// Checks and creates the ticket as [`State::create_ticket`] says. `party_skill` gives the
    /// ticket's party skill from the players' skills: it runs once the checks passed, holding
    /// every player, before the ticket is made; if it fails, no ticket is made.
    fn create_ticket_then<E>(
        &self,
        queue: &QueueInfo,
        players: Vec<PlayerId>,
        ticket_id: TicketId,
        entered_at: f64,
        party_skill: impl FnOnce(&[Skill]) -> Result<Option<Skill>, E>,
    ) -> Result<Result<Entered, Rejection>, E> {
        let slots = self.sorted_slots(&players);
        let mut guards = Self::lock_players(&slots);
        // Checked again holding the players: a ban stored after the caller's check either
        // sees this ticket (and cancels it, under the same records) or is seen here.
        if let Err(banned) = self.check_bans(&players, super::unix_now()) {
            return Ok(Err(banned));
        }
        for (slot, guard) in slots.iter().zip(&guards) {
            match &guard.status {
                PlayerStatus::Idle => {}
                PlayerStatus::Queued(t) => {
                    return Ok(Err(Rejection::AlreadyQueued {
                        player: slot.id.clone(),
                        ticket: t.clone(),
                    }));
                }
                PlayerStatus::InMatch(m) => {
                    return Ok(Err(Rejection::InMatch {
                        player: slot.id.clone(),
                        match_id: m.clone(),
                    }));
                }
            }
        }
        let skills: Vec<Skill> = players
            .iter()
            .map(|p| {
                let at = slots
                    .binary_search_by(|s| s.id.cmp(p))
                    .expect("every player has a slot");
                guards[at]
                    .pools
                    .get(&queue.pool)
                    .map_or_else(|| queue.config.rating.initial(), |r| r.skill)
            })
            .collect();
        let party_skill = party_skill(&skills)?;
        let view = Mutex::new(ViewCell {
            current: TicketView::searching(0.0, String::new()),
            watchers: None,
        });
        let ticket = Arc::new(TicketSlot {
            id: ticket_id.clone(),
            queue: queue.id.clone(),
            players,
            entered_at,
            last_seen: AtomicU64::new(entered_at.max(0.0).to_bits()),
            view,
        });
        self.inner.tickets.insert(ticket_id.clone(), ticket.clone());
        for guard in &mut guards {
            guard.status = PlayerStatus::Queued(ticket_id.clone());
        }
        Ok(Ok(Entered {
            ticket,
            skills,
            party_skill,
        }))
    }

    /// A ticket by id.
    pub fn ticket(&self, id: &TicketId) -> Result<Arc<TicketSlot>, Rejection> {
        self.inner
            .tickets
            .get(id)
            .map(|r| r.value().clone())
            .ok_or_else(|| Rejection::NotFound {
                what: "ticket",
                id: id.to_string(),
            })
    }

    /// Ends a waiting ticket (cancelled or expired): its players become idle, watchers get the
    /// final update. Called only by the matchmaker loop, after removing the ticket from its pool.
    pub fn end_ticket(&self, ticket: &TicketSlot, state: TicketState, now: f64, reason: String) {
        let slots: Vec<_> = {
            let mut s: Vec<_> = ticket
                .players
                .iter()
                .filter_map(|p| self.slot_if_known(p))
                .collect();
            s.sort_by(|a, b| a.id.cmp(&b.id));
            s
        };
        let mut guards = Self::lock_players(&slots);
        for guard in &mut guards {
            if guard.status == PlayerStatus::Queued(ticket.id.clone()) {
                guard.status = PlayerStatus::Idle;
            }
        }
        ticket.publish(TicketView {
            state,
            reason,
            ..TicketView::searching(now - ticket.entered_at, String::new())
        });
        self.forget_stored_tickets(std::slice::from_ref(&ticket.id));
        drop(guards);
        self.note_idle(&ticket.players);
    }

    /// Drops tickets that stopped waiting from a store that keeps tickets (durable with the
    /// store's next flush).
    pub fn forget_stored_tickets(&self, ids: &[TicketId]) {
        let store = &self.inner.store;
        if ids.is_empty() || !store.keeps_tickets() {
            return;
        }
        if let Err(e) = store.remove_tickets(ids) {
            tracing::warn!(error = %e, "could not drop finished tickets from the store");
        }
        self.inner
            .tickets_dropped
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Flushes the store, on `runtime`, if a stored ticket was dropped since the last call: the
    /// matchmaker loop calls it after each tick and each batch of commands, so that a ticket
    /// that expired or ended in a ready-check leaves the store soon even when nothing else
    /// writes, and a new owner does not put it back in its queue.
    ///
    /// One such flush at a time: tickets dropped while one is on its way go with the next
    /// call's after it ended, so a store that is slow or failing gets one flush and at most
    /// one warning line per interval, not one per batch of the loop.
    pub fn flush_dropped_tickets(&self, runtime: &tokio::runtime::Handle) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        let flushing = self.inner.dropped_flushing.clone();
        if flushing
            .compare_exchange(false, true, AcqRel, Acquire)
            .is_err()
        {
            return;
        }
        if !self.inner.tickets_dropped.swap(false, AcqRel) {
            flushing.store(false, Release);
            return;
        }
        let store = self.inner.store.clone();
        runtime.spawn(async move {
            let flushed = store.flush_async().await;
            flushing.store(false, Release);
            static FAILED: crate::telemetry::LogLimit =
                crate::telemetry::LogLimit::new(std::time::Duration::from_secs(10));
            if let Err(e) = flushed
                && let Some(flushes) = FAILED.note(1, std::time::Instant::now())
            {
                tracing::warn!(error = %e, flushes, "could not flush dropped tickets");
            }
        });
    }

    /// Makes a new ticket durable in a store that keeps tickets, before `EnterQueue` answers;
    /// on failure the ticket is ended (its players idle again) and the error returned.
    pub async fn persist_ticket(
        &self,
        ticket: &TicketSlot,
        entry: &crate::matching::Ticket,
        now: f64,
    ) -> Result<(), StoreError> {
        let store = &self.inner.store;
        if !store.keeps_tickets() {
            return Ok(());
        }
        let written = match store.put_ticket(&stored_ticket(store.as_ref(), ticket, entry, now)) {
            Ok(()) => store.flush_async().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            self.end_ticket(
                ticket,
                TicketState::Cancelled,
                now,
                format!("not stored: {e}"),
            );
            self.forget_ticket(&ticket.id);
            return Err(e);
        }
        Ok(())
    }

    /// Puts the stored waiting tickets back (a new owner of the queues): each becomes SEARCHING
    /// again with its wait kept, if its queue exists and all its players are idle; the rest are
    /// dropped from the store, but for those of a queue this config does not have, which stay
    /// stored for a config that has it (see `unrestored.rs`). Returns the tickets and pool entries to hand to the
    /// matchmaker loop, oldest first.
    ///
    /// A wait is the store's clock now less the ticket's stamp on the same clock (Redis's in a
    /// cluster, whatever this node's own clock says), and `now` on the matchmaker clock.
    pub fn restore_tickets(
        &self,
        now: f64,
    ) -> Result<Vec<(Arc<TicketSlot>, crate::matching::Ticket)>, StoreError> {
        let store = self.inner.store.clone();
        let mut restored = Vec::new();
        let mut dropped = Vec::new();
        let unix = store.now_unix();
        // Tickets restored past their queue's TTL (their first tick expires them), and the
        // one that waited longest: one line for all, however many.
        let mut overdue = 0usize;
        let mut longest: Option<(TicketId, QueueId, f64, f64)> = None;
        for t in self.tickets_to_restore(store.load_tickets()?, unix, &mut dropped) {
            let Some(queue) = self.queue_of(&QueueId::new(t.queue.as_str())) else {
                dropped.push(t.ticket_id);
                continue;
            };
            // Never below zero: a stamp ahead of the clock (Redis's clock stepped back).
            let wait = (unix - t.entered_unix).max(0.0);
            let ttl = queue.config.matching.ticket_ttl_seconds;
            if wait > ttl {
                overdue += 1;
                if longest.as_ref().is_none_or(|(.., most, _)| wait > *most) {
                    longest = Some((t.ticket_id.clone(), queue.id.clone(), wait, ttl));
                }
            }
            let entered_at = now - wait;
            let Ok((slot, skills)) =
                self.create_ticket(&queue, t.players.clone(), t.ticket_id.clone(), entered_at)
            else {
                // A player is in a match (its match was stored after the ticket) or queued.
                dropped.push(t.ticket_id);
                continue;
            };
            slot.touch(now);
            let entry = crate::matching::Ticket {
                id: t.ticket_id,
                players: t.players,
                skills: skills.iter().map(|s| (s.mean, s.deviation)).collect(),
                party_skill: t.party_skill,
                entered_at,
                region_latency_ms: t.region_latency_ms,
                roles: t.roles,
                attributes: t.attributes,
                avoid: t.avoid,
            };
            restored.push((slot, entry));
        }
        if let Some((ticket, queue, wait, ttl)) = longest {
            // Worth a look if they are many, or far over.
            tracing::warn!(
                tickets = overdue,
                longest_ticket = %ticket,
                queue = %queue,
                wait_seconds = wait,
                ttl_seconds = ttl,
                "restored tickets have waited longer than their queue's ticket TTL"
            );
        }
        if !dropped.is_empty() {
            store.remove_tickets(&dropped)?;
        }
        if !restored.is_empty() {
            tracing::info!(tickets = restored.len(), "waiting tickets restored");
        }
        Ok(restored)
    }

    /// Forgets a finished ticket (called by the loop after the retention time).
    pub fn forget_ticket(&self, id: &TicketId) {
        self.inner.tickets.remove(id);
    }
}

/// A waiting ticket as the store keeps it. Its entry time is on the store's clock: the store's
/// now less the wait on the matchmaker clock, the same for a new ticket (no wait) and a
/// requeued one.
pub(super) fn stored_ticket(
    store: &dyn crate::store::Storage,
    slot: &TicketSlot,
    entry: &crate::matching::Ticket,
    now: f64,
) -> StoredTicket {
    StoredTicket {
        ticket_id: slot.id.clone(),
        queue: slot.queue.to_string(),
        players: slot.players.clone(),
        entered_unix: store.now_unix() - (now - entry.entered_at).max(0.0),
        party_skill: entry.party_skill,
        region_latency_ms: entry.region_latency_ms.clone(),
        roles: entry.roles.clone(),
        attributes: entry.attributes.clone(),
        avoid: entry.avoid.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> TicketSlot {
        TicketSlot {
            id: TicketId::new("t1"),
            queue: QueueId::new("1v1"),
            players: vec![PlayerId::new("p1")],
            entered_at: 0.0,
            last_seen: AtomicU64::new(0),
            view: Mutex::new(ViewCell {
                current: TicketView::searching(0.0, String::new()),
                watchers: None,
            }),
        }
    }

    #[test]
    fn a_ticket_makes_its_watch_channel_on_first_subscribe_and_watchers_see_every_later_view() {
        let t = slot();
        assert!(!t.watched());
        // Published before anyone watched: kept, and the first watcher starts from it.
        t.publish(TicketView::searching(3.0, "widened".into()));
        assert!(
            t.cell().watchers.is_none(),
            "no channel until someone watches"
        );
        let mut rx = t.subscribe(2).unwrap();
        assert!(t.watched());
        assert_eq!(rx.borrow_and_update().wait_seconds, 3.0);
        // Published while watched: the watcher is told.
        t.publish(TicketView::searching(4.0, String::new()));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().wait_seconds, 4.0);
        // A second watcher shares the channel and starts from the latest view; a third is one
        // past the most.
        let rx2 = t.subscribe(2).unwrap();
        assert_eq!(rx2.borrow().wait_seconds, 4.0);
        assert!(t.subscribe(2).is_none());
        drop((rx, rx2));
        assert!(!t.watched(), "a channel with no receivers is not watched");
        // A final view is never replaced, watched or not.
        t.publish(TicketView {
            state: TicketState::Cancelled,
            ..TicketView::searching(5.0, "cancelled".into())
        });
        t.publish(TicketView::searching(6.0, String::new()));
        assert_eq!(t.view().state, TicketState::Cancelled);
        assert_eq!(
            t.subscribe(2).unwrap().borrow().state,
            TicketState::Cancelled
        );
    }

    #[test]
    fn tickets_dropped_while_their_flush_is_on_its_way_wait_for_the_next_flush() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let alive = || runtime.metrics().num_alive_tasks();
        let state = crate::state::test_util::state();
        state.forget_stored_tickets(&[TicketId::new("t1")]);
        // The flush is spawned; it runs when the runtime next does.
        state.flush_dropped_tickets(runtime.handle());
        assert_eq!(alive(), 1);
        state.forget_stored_tickets(&[TicketId::new("t2")]);
        state.flush_dropped_tickets(runtime.handle());
        state.flush_dropped_tickets(runtime.handle());
        assert_eq!(alive(), 1, "no second flush while the first is on its way");
        runtime.block_on(async {
            while alive() > 0 {
                tokio::task::yield_now().await;
            }
        });
        // The drop it did not take goes with the next call's.
        state.flush_dropped_tickets(runtime.handle());
        assert_eq!(alive(), 1);
        runtime.block_on(async {
            while alive() > 0 {
                tokio::task::yield_now().await;
            }
        });
        state.flush_dropped_tickets(runtime.handle());
        assert_eq!(alive(), 0, "nothing dropped since");
    }

    /// Log lines written on this thread while `run` runs.
    fn logged(run: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn restored_tickets_past_their_ttl_are_logged_in_one_line() {
        let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
        let memory = Arc::new(crate::store::MemoryStore::default());
        let store: &dyn crate::store::Storage = memory.as_ref();
        let now = store.now_unix();
        for (i, waited) in [1e5, 3e5, 2e5].iter().enumerate() {
            store
                .put_ticket(&StoredTicket {
                    ticket_id: TicketId::new(format!("t{i}")),
                    queue: "1v1".into(),
                    players: vec![PlayerId::new(format!("p{i}"))],
                    entered_unix: now - waited,
                    party_skill: None,
                    region_latency_ms: Vec::new(),
                    roles: Vec::new(),
                    attributes: Default::default(),
                    avoid: Vec::new(),
                })
                .unwrap();
        }
        let state = State::load(config, memory.clone()).unwrap();
        let mut restored = Vec::new();
        let log = logged(|| restored = state.restore_tickets(0.0).unwrap());
        assert_eq!(restored.len(), 3, "restored all the same");
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("waited longer than"))
            .collect();
        assert_eq!(lines.len(), 1, "{log}");
        assert!(lines[0].contains("tickets=3"), "{}", lines[0]);
        assert!(lines[0].contains("longest_ticket=t1"), "{}", lines[0]);
    }

    /// A party entry refused because a member waits alone stores no party record; the entry
    /// that creates the party's ticket makes and stores it, and a solo entry has none.
    #[test]
    fn a_party_record_is_made_only_by_an_entry_that_creates_its_ticket() {
        let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
        let memory = Arc::new(crate::store::MemoryStore::default());
        let state = State::load(config, memory.clone()).unwrap();
        let stored = || crate::store::Storage::load_parties(memory.as_ref()).unwrap();
        let queue = state.queue("queue", "2v2").unwrap();
        let party = vec![PlayerId::new("l"), PlayerId::new("m")];
        let enter = |players: &[PlayerId], id: &str| {
            state
                .enter_ticket(&queue, players.to_vec(), TicketId::new(id), 0.0)
                .unwrap()
        };
        let solo = enter(&party[1..], "t-m").unwrap();
        assert_eq!(solo.party_skill, None);
        match enter(&party, "t-lm") {
            Err(Rejection::AlreadyQueued { player, .. }) => assert_eq!(player, party[1]),
            other => panic!("{other:?}"),
        }
        assert!(state.party(&queue.pool, &party).is_none());
        assert!(stored().is_empty());
        assert!(
            state.waiting_ticket_of(&party[0]).is_none(),
            "the leader stays idle"
        );

        state.end_ticket(&solo.ticket, TicketState::Cancelled, 1.0, String::new());
        let initial = queue.config.rating.initial();
        let made = crate::rating::party_initial(&queue.config.rating, &[initial, initial]);
        let entered = enter(&party, "t-lm").unwrap();
        assert_eq!(entered.party_skill, Some(made));
        assert_eq!(state.party(&queue.pool, &party).unwrap().skill, made);
        assert_eq!(stored().len(), 1);
        assert_eq!(stored()[0].1[&queue.pool].skill, made);
    }
}
