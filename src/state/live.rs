//! Transitions of a match between forming and its result: the ready-check and backfill of a
//! running match. The matchmaker loop drives them; the locking rules are the parent
//! module's (player slots in id order, never a player lock and the match lock at once).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    Assignment, MatchPhase, MatchSlot, PlayerStatus, ReadyView, Rejection, State, TicketSlot,
    TicketState, TicketView,
};
use crate::ids::PlayerId;
use crate::rejection::MatchRefusal;

/// What becomes of one ticket when its match is dissolved or cancelled.
#[derive(Clone, Debug, PartialEq)]
pub enum Release {
    /// Back to SEARCHING (the caller returns the ticket to its pool, wait kept).
    Requeue { reason: String, wait_seconds: f64 },
    /// Ended (CANCELLED or EXPIRED); its players are idle.
    End {
        state: TicketState,
        reason: String,
        wait_seconds: f64,
    },
}

/// Why a chosen backfill ticket could not join its match (nothing changed).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BackfillError {
    #[error("the match is no longer running")]
    NotRunning,
    #[error("the ticket is no longer waiting")]
    TicketGone,
}

fn running(phase: MatchPhase) -> bool {
    matches!(phase, MatchPhase::Allocated | MatchPhase::Started)
}

impl State {
    /// Shows each ticket of a ready-check match how many accepted and whether it did.
    pub fn publish_ready(&self, tickets: &[(Arc<TicketSlot>, bool)], seconds_left: f64) {
        let accepted = tickets.iter().filter(|(_, a)| *a).count() as u32;
        let required = tickets.len() as u32;
        for (t, by_ticket) in tickets {
            let mut view = t.view();
            if view.state != TicketState::Matched {
                continue;
            }
            view.ready = Some(ReadyView {
                seconds_left: seconds_left.max(0.0),
                accepted,
                required,
                accepted_by_ticket: *by_ticket,
            });
            t.publish(view);
        }
    }

    /// Everyone accepted: the match is FORMED, ready for a game server. False when it is no
    /// longer in its ready-check (an admin cancelled it meanwhile).
    pub fn pass_ready_check(&self, m: &MatchSlot) -> bool {
        let mut inner = m.lock();
        if inner.phase != MatchPhase::ReadyCheck {
            return false;
        }
        inner.phase = MatchPhase::Formed;
        true
    }

    /// Dissolves a match whose ready-check failed: each ticket back to SEARCHING or ended, as
    /// `decide` says. False (and nothing changed) when it is no longer in its ready-check.
    pub fn dissolve_ready_check(
        &self,
        m: &MatchSlot,
        decide: impl Fn(&TicketSlot) -> Release,
    ) -> bool {
        let assignment = {
            let mut inner = m.lock();
            if inner.phase != MatchPhase::ReadyCheck {
                return false;
            }
            inner.phase = MatchPhase::Cancelled;
            inner.assignment.clone()
        };
        // Emitted before the players are free (see `cancel_match`).
        self.emit([super::match_event(
            crate::store::EventKind::MatchCancelled,
            &assignment,
            super::unix_now(),
            "ready-check failed",
        )]);
        self.release_players(m, &assignment, decide);
        self.inner.matches.remove(&m.id);
        true
    }

    /// Records that players left a running match (`leavers[k]` = who left team `k`), all or
    /// nothing. They stay bound to the match until its result (and are rated as abandons
    /// then), so they cannot queue meanwhile. Returns the new assignment and the slots opened
    /// per team.
    ///
    /// Naming a player who already left asks again for a slot an earlier request left empty
    /// (it timed out, or was lost with a restart): teams have `capacity` places, and
    /// `filling[k]` of team `k`'s empty ones are being filled by the match's open request,
    /// which asked for the slots of `asked`; naming one of those again (a request sent twice)
    /// opens nothing. A request that opens slots is dated (the store's clock), so a restore
    /// opens them again ([`MatchSlot::backfill_opened_unix`]).
    pub fn mark_left(
        &self,
        m: &MatchSlot,
        leavers: &[Vec<PlayerId>],
        capacity: usize,
        (filling, asked): (&[u32], &[PlayerId]),
    ) -> Result<(Arc<Assignment>, Vec<u32>), Rejection> {
        let mut inner = m.lock();
        if !running(inner.phase) {
            return Err(Rejection::for_match(
                &m.id,
                MatchRefusal::NotRunning(inner.phase.name()),
            ));
        }
        let a = &inner.assignment;
        if leavers.len() != a.teams.len() {
            return Err(Rejection::invalid(
                "open_slots",
                format!(
                    "needs one entry per team: match {} has {} teams (got {})",
                    m.id,
                    a.teams.len(),
                    leavers.len()
                ),
            ));
        }
        let mut seen: Vec<&PlayerId> = Vec::new();
        let mut new: Vec<&PlayerId> = Vec::new();
        let mut open = Vec::with_capacity(leavers.len());
        for (k, team) in leavers.iter().enumerate() {
            let field = format!("open_slots[{k}].player_ids");
            let mut again = 0usize;
            let mut newly = 0u32;
            for (j, p) in team.iter().enumerate() {
                if !a.teams[k].contains(p) {
                    return Err(Rejection::invalid(
                        format!("{field}[{j}]"),
                        format!("player {p} is not on team {k} of match {}", m.id),
                    ));
                }
                if seen.contains(&p) {
                    return Err(Rejection::invalid(
                        format!("{field}[{j}]"),
                        format!("player {p} is named twice"),
                    ));
                }
                seen.push(p);
                if asked.contains(p) {
                    continue;
                }
                if a.left.contains(p) {
                    again += 1;
                } else {
                    new.push(p);
                    newly += 1;
                }
            }
            let seated = a.teams[k].iter().filter(|p| !a.left.contains(p)).count();
            let empty = capacity.saturating_sub(seated);
            let being_filled = filling.get(k).map_or(0, |&n| n as usize);
            if again > empty.saturating_sub(being_filled) {
                return Err(Rejection::invalid(
                    field,
                    format!(
                        "names {again} players who already left match {} and whose slots are \
                         not open, but team {k} has {} empty slots to open: the others were \
                         filled",
                        m.id,
                        empty.saturating_sub(being_filled)
                    ),
                ));
            }
            open.push(newly + again as u32);
        }
        if seen.is_empty() {
            return Err(Rejection::invalid(
                "open_slots",
                "must name at least one player who left",
            ));
        }
        let mut next = (**a).clone();
        next.left.extend(new.into_iter().cloned());
        let next = Arc::new(next);
        inner.assignment = next.clone();
        if open.iter().any(|&n| n > 0) {
            inner.backfill_opened_unix = Some(self.inner.store.now_unix());
        }
        Ok((next, open))
    }

    /// Undoes [`State::mark_left`] of `players` (the request that marked them could not be
    /// stored): they are seated in the match again, and the last request to open slots is
    /// `opened_unix` again.
    pub fn unmark_left(&self, m: &MatchSlot, players: &[PlayerId], opened_unix: Option<f64>) {
        let mut inner = m.lock();
        inner.backfill_opened_unix = opened_unix;
        if players.iter().any(|p| inner.assignment.left.contains(p)) {
            let mut next = (*inner.assignment).clone();
            next.left.retain(|p| !players.contains(p));
            inner.assignment = Arc::new(next);
        }
    }

    /// Puts a waiting ticket's players on team `team` of a running match: they are in the match.
    /// Their ticket stays SEARCHING until the match's new roster is durable
    /// ([`State::publish_backfilled`]), or is put back ([`State::take_back_backfill`]) if it
    /// cannot be stored. Nothing changes on error.
    pub fn add_backfill(
        &self,
        m: &MatchSlot,
        team: usize,
        ticket: &TicketSlot,
        roles: &[Vec<String>],
    ) -> Result<Arc<Assignment>, BackfillError> {
        // Players first: they join only if still waiting on this ticket.
        let slots = self.sorted_slots(&ticket.players);
        {
            let mut guards = Self::lock_players(&slots);
            if guards
                .iter()
                .any(|g| g.status != PlayerStatus::Queued(ticket.id.clone()))
            {
                return Err(BackfillError::TicketGone);
            }
            for g in &mut guards {
                g.status = PlayerStatus::InMatch(m.id.clone());
            }
        }
        let joined = {
            let mut inner = m.lock();
            if running(inner.phase) && team < inner.assignment.teams.len() {
                let mut next = (*inner.assignment).clone();
                next.teams[team].extend(ticket.players.iter().cloned());
                next.backfill.resize(next.teams.len(), Vec::new());
                next.backfill[team].extend(ticket.players.iter().cloned());
                if ticket.players.len() > 1 {
                    next.parties.push(ticket.players.clone());
                }
                let next = Arc::new(next);
                inner.assignment = next.clone();
                inner.tickets.push(ticket.id.clone());
                for (p, r) in ticket.players.iter().zip(roles) {
                    inner.roles.insert(p.clone(), r.clone());
                }
                Some(next)
            } else {
                None
            }
        };
        let Some(assignment) = joined else {
            // The match ended between the choice and now: the players wait on their ticket again.
            let mut guards = Self::lock_players(&slots);
            for g in &mut guards {
                if g.status == PlayerStatus::InMatch(m.id.clone()) {
                    g.status = PlayerStatus::Queued(ticket.id.clone());
                }
            }
            return Err(BackfillError::NotRunning);
        };
        Ok(assignment)
    }

    /// A backfilled ticket's players are in its match's stored roster: the ticket reads
    /// MATCHED to the match's server, with `a`, unless it ended meanwhile (the match was
    /// cancelled).
    pub fn publish_backfilled(&self, ticket: &TicketSlot, a: &Arc<Assignment>, wait_seconds: f64) {
        ticket.publish_over(
            TicketView {
                state: TicketState::Matched,
                assignment: Some(a.clone()),
                ..TicketView::searching(wait_seconds, "backfill of a running match".into())
            },
            |now| now.state == TicketState::Searching,
        );
    }

    /// Undoes [`State::add_backfill`] of `ticket` to team `team` (its new roster could not be
    /// stored, so its game server never got it): its players leave the match and wait on their
    /// ticket again. Returns the assignment without them, or `None` (nothing changed) when the
    /// match is no longer running or does not hold the ticket.
    pub fn take_back_backfill(
        &self,
        m: &MatchSlot,
        team: usize,
        ticket: &TicketSlot,
    ) -> Option<Arc<Assignment>> {
        let back = {
            let mut inner = m.lock();
            let held = inner.tickets.iter().position(|t| *t == ticket.id);
            let (true, Some(at)) = (running(inner.phase), held) else {
                return None;
            };
            let mut next = (*inner.assignment).clone();
            let players = &ticket.players;
            if let Some(t) = next.teams.get_mut(team) {
                t.retain(|p| !players.contains(p));
            }
            if let Some(b) = next.backfill.get_mut(team) {
                b.retain(|p| !players.contains(p));
            }
            next.parties.retain(|party| party != players);
            let next = Arc::new(next);
            inner.assignment = next.clone();
            inner.tickets.remove(at);
            for p in players {
                inner.roles.remove(p);
            }
            next
        };
        let slots = self.sorted_slots(&ticket.players);
        let mut guards = Self::lock_players(&slots);
        for g in &mut guards {
            if g.status == PlayerStatus::InMatch(m.id.clone()) {
                g.status = PlayerStatus::Queued(ticket.id.clone());
            }
        }
        Some(back)
    }

    /// The players of a running match per team (those who left excluded), with their declared
    /// roles, or `None` when the match is not running.
    pub fn running_roster(&self, m: &MatchSlot) -> Option<(Arc<Assignment>, Vec<Vec<PlayerId>>)> {
        let inner = m.lock();
        if !running(inner.phase) {
            return None;
        }
        let a = inner.assignment.clone();
        let teams = a
            .teams
            .iter()
            .map(|t| t.iter().filter(|p| !a.left.contains(p)).cloned().collect())
            .collect();
        Some((a, teams))
    }

    /// Roles of the given players in a match (empty lists = any role or unknown).
    pub fn roles_in(&self, m: &MatchSlot, players: &[PlayerId]) -> Vec<Vec<String>> {
        let inner = m.lock();
        players
            .iter()
            .map(|p| inner.roles.get(p).cloned().unwrap_or_default())
            .collect()
    }

    /// The stream of the game server at `address`, to deliver backfill additions.
    pub fn server_stream(
        &self,
        address: &str,
    ) -> Option<tokio::sync::mpsc::Sender<Arc<Assignment>>> {
        self.inner
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sender(address)
    }
}

/// A player → roles map for [`State::form_match`] (empty when nobody declared a role).
pub fn roles_map(players: &[PlayerId], roles: &[Vec<String>]) -> BTreeMap<PlayerId, Vec<String>> {
    players
        .iter()
        .zip(roles)
        .filter(|(_, r)| !r.is_empty())
        .map(|(p, r)| (p.clone(), r.clone()))
        .collect()
}
