//! Stored live matches a restore drops because their players moved on. A match kept unrestored
//! (`unrestored.rs`) leaves its players free: while it is kept they may enter other queues and
//! be matched again. A player is in at most one live match, and holds no waiting ticket while
//! in one, so a restore (at start, or on the next owner of a cluster's queues) reads every
//! stored match and every stored waiting ticket first, and only then restores: a match with a
//! newer claim on any of its players is cancelled instead, whichever was read first.
//!
//! How current a claim is, from the most:
//! - a match live when written (no `kept_unix`). Of two such, the one formed later wins: only
//!   a match kept by a release that did not mark kept matches, or an end whose mark was lost,
//!   leaves two, and the later one formed when the player was free of the other;
//! - a waiting ticket: its players queued while the match was kept, so it beats every kept
//!   match. It loses to a live match, as before (the restore of the tickets drops it);
//! - a kept match, the one kept since later first: it was live after the other was kept.
//!
//! A ticket the match itself took (listed in its tickets) is no claim against it. A match
//! superseded counts as a claim against others all the same: its players moved on from the
//! older one before they moved on from it.
//!
//! A superseded match goes from the store with the rewrite of the restore (kept ones too, whose
//! queue this config lacks: they would be cancelled when restored) and is reported as other
//! cancellations are: a warning, a `MATCH_CANCELLED` event, `matchmaker_matches_cancelled_total`
//! with reason `superseded`, and a cancelled entry in its players' histories if a game server
//! had taken it. Its players stay as they are: in their newer match, on their ticket, or idle.
//!
//! What a restore cannot see: a player who moved on from a kept match whose newer match ended,
//! or whose ticket ended, before the restore left no claim in the store, and the kept match is
//! restored as before (until a result, its server's cancel or the match timeout ends it).

use std::collections::HashMap;
use std::sync::Arc;

use super::{MatchSlot, State};
use crate::ids::{PlayerId, QueueId};
use crate::store::{StoredMatch, StoredTicket};

/// The reason a superseded match's event and metric carry.
const REASON: &str = "superseded: its players were matched or queued again while it was kept \
                      unrestored";

/// How current a claim on a player is: compared as (tier, times, match id), a greater one
/// supersedes a lesser.
#[derive(Clone, Copy, Debug)]
struct Claim<'a> {
    /// 0: a kept match, 1: a waiting ticket, 2: a live match.
    tier: u8,
    /// Kept: since when it is kept; live: when it formed.
    first: f64,
    /// Kept: when it formed.
    second: f64,
    id: &'a str,
}

impl Claim<'_> {
    fn of(m: &StoredMatch) -> Claim<'_> {
        match m.kept_unix {
            Some(kept) => Claim {
                tier: 0,
                first: kept,
                second: m.formed_unix,
                id: m.match_id.as_str(),
            },
            None => Claim {
                tier: 2,
                first: m.formed_unix,
                second: 0.0,
                id: m.match_id.as_str(),
            },
        }
    }

    const TICKET: Claim<'static> = Claim {
        tier: 1,
        first: 0.0,
        second: 0.0,
        id: "",
    };

    fn newer_than(&self, other: &Claim<'_>) -> bool {
        self.tier
            .cmp(&other.tier)
            .then(self.first.total_cmp(&other.first))
            .then(self.second.total_cmp(&other.second))
            .then(self.id.cmp(other.id))
            .is_gt()
    }
}

/// A stored match a restore must not restore, and why.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Superseded {
    /// Its index in the matches given.
    pub index: usize,
    /// Each of its players with a newer claim, and what holds it (`match ID`, `ticket ID`).
    pub by: Vec<(PlayerId, String)>,
}

/// The stored `matches` (none with a result) that newer claims on their players supersede,
/// against each other and the stored waiting `tickets` (see the module docs), in index order.
#[must_use]
pub(super) fn superseded(matches: &[StoredMatch], tickets: &[StoredTicket]) -> Vec<Superseded> {
    enum Holder<'a> {
        Match(usize),
        Ticket(&'a StoredTicket),
    }
    let mut claims: HashMap<&PlayerId, Vec<Holder<'_>>> = HashMap::new();
    for (i, m) in matches.iter().enumerate() {
        for p in m.teams.iter().flatten() {
            claims.entry(p).or_default().push(Holder::Match(i));
        }
    }
    // Most players are named once: the tickets matter only for players a match names.
    for t in tickets {
        for p in &t.players {
            if let Some(held) = claims.get_mut(p) {
                held.push(Holder::Ticket(t));
            }
        }
    }
    let mut out = Vec::new();
    for (i, m) in matches.iter().enumerate() {
        let own = Claim::of(m);
        let mut by = Vec::new();
        for p in m.teams.iter().flatten() {
            for held in claims.get(p).into_iter().flatten() {
                let (claim, what) = match held {
                    Holder::Match(j) if *j == i => continue,
                    Holder::Match(j) => (
                        Claim::of(&matches[*j]),
                        format!("match {}", matches[*j].match_id),
                    ),
                    Holder::Ticket(t) if m.tickets.iter().any(|(id, _)| *id == t.ticket_id) => {
                        continue;
                    }
                    Holder::Ticket(t) => (Claim::TICKET, format!("ticket {}", t.ticket_id)),
                };
                if claim.newer_than(&own) {
                    by.push((p.clone(), what));
                }
            }
        }
        if !by.is_empty() {
            out.push(Superseded { index: i, by });
        }
    }
    out
}

impl State {
    /// Reports a stored match a restore dropped as superseded (its copy went with the
    /// restore's rewrite of the live matches): a warning, its cancel event, the cancel metric
    /// and, if a game server had taken it, its players' histories. Touches no player.
    pub(super) fn report_superseded(&self, m: &StoredMatch, by: &[(PlayerId, String)]) {
        let queue = QueueId::new(m.queue.as_str());
        let assignment = super::persistence::assignment_of(m, queue);
        let slot: Arc<MatchSlot> =
            super::persistence::slot_of(m, assignment.clone(), Vec::new(), 0.0);
        self.record_cancelled(&slot, &assignment);
        self.emit([super::match_event(
            crate::store::EventKind::MatchCancelled,
            &assignment,
            super::unix_now(),
            REASON,
        )]);
        let newer: Vec<String> = by
            .iter()
            .map(|(p, what)| format!("{p} in {what}"))
            .collect();
        tracing::warn!(
            match_id = %m.match_id,
            queue = %m.queue,
            kept_unix = m.kept_unix,
            newer = %newer.join(", "),
            "a stored live match was not restored: its players were matched or queued again \
             while it was kept unrestored; cancelled"
        );
        metrics::counter!(crate::telemetry::MATCHES_CANCELLED, "queue" => m.queue.clone(), "reason" => "superseded")
            .increment(1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ids::{MatchId, TicketId};

    /// A 1v1 match between `a` and `b`, formed at `formed`, kept since `kept` (if any).
    fn m(id: &str, a: &str, b: &str, formed: f64, kept: Option<f64>) -> StoredMatch {
        StoredMatch {
            match_id: MatchId::new(id),
            queue: "1v1".into(),
            teams: vec![vec![PlayerId::new(a)], vec![PlayerId::new(b)]],
            win_probability: vec![0.5, 0.5],
            region: None,
            server_address: "gs:1".into(),
            formed_unix: formed,
            parties: Vec::new(),
            backfill: vec![Vec::new(), Vec::new()],
            left: Vec::new(),
            roles: BTreeMap::new(),
            attributes: Default::default(),
            started_unix: None,
            tickets: Vec::new(),
            kept_unix: kept,
            backfill_opened_unix: None,
        }
    }

    fn ticket(id: &str, player: &str) -> StoredTicket {
        StoredTicket {
            ticket_id: TicketId::new(id),
            queue: "2v2".into(),
            players: vec![PlayerId::new(player)],
            entered_unix: 0.0,
            party_skill: None,
            region_latency_ms: Vec::new(),
            roles: Vec::new(),
            attributes: Default::default(),
            avoid: Vec::new(),
        }
    }

    /// The ids of the superseded matches.
    fn dropped(matches: &[StoredMatch], tickets: &[StoredTicket]) -> Vec<String> {
        superseded(matches, tickets)
            .into_iter()
            .map(|s| matches[s.index].match_id.to_string())
            .collect()
    }

    #[test]
    fn matches_and_tickets_sharing_no_player_supersede_nothing() {
        let matches = [
            m("m-1", "a", "b", 10.0, Some(20.0)),
            m("m-2", "c", "d", 30.0, None),
        ];
        assert!(dropped(&matches, &[ticket("t-1", "e")]).is_empty());
    }

    #[test]
    fn a_kept_match_whose_player_is_in_a_live_match_goes_whichever_is_read_first() {
        let kept = m("m-kept", "a", "b", 10.0, Some(20.0));
        // Formed before the kept one was kept: the player joined it (a backfill) later.
        let live = m("m-live", "a", "c", 5.0, None);
        assert_eq!(dropped(&[kept.clone(), live.clone()], &[]), ["m-kept"]);
        assert_eq!(dropped(&[live, kept], &[]), ["m-kept"]);
        let by = &superseded(
            &[
                m("k", "a", "b", 1.0, Some(2.0)),
                m("l", "a", "c", 3.0, None),
            ],
            &[],
        )[0]
        .by;
        assert_eq!(by, &[(PlayerId::new("a"), "match l".to_string())]);
    }

    #[test]
    fn a_kept_match_whose_player_holds_a_waiting_ticket_goes_and_the_ticket_stays() {
        let kept = m("m-kept", "a", "b", 10.0, Some(20.0));
        assert_eq!(dropped(&[kept], &[ticket("t-1", "b")]), ["m-kept"]);
        // A live match keeps its players: the ticket is the one the restore drops.
        assert!(dropped(&[m("m-live", "a", "b", 10.0, None)], &[ticket("t-1", "b")]).is_empty());
    }

    #[test]
    fn a_ticket_the_match_itself_took_is_no_claim_against_it() {
        let mut kept = m("m-kept", "a", "b", 10.0, Some(20.0));
        kept.tickets = vec![(TicketId::new("t-1"), vec![PlayerId::new("a")])];
        assert!(dropped(&[kept], &[ticket("t-1", "a")]).is_empty());
    }

    #[test]
    fn of_two_kept_matches_the_one_kept_since_later_stays() {
        // a left m-1 (kept at 20), was matched in m-2 (formed 30), which was kept at 40.
        let matches = [
            m("m-2", "a", "c", 30.0, Some(40.0)),
            m("m-1", "a", "b", 10.0, Some(20.0)),
        ];
        assert_eq!(dropped(&matches, &[]), ["m-1"]);
    }

    #[test]
    fn of_two_live_matches_the_one_formed_later_stays() {
        // Copies an older release kept without marking them read as live.
        let matches = [
            m("m-new", "a", "c", 30.0, None),
            m("m-old", "a", "b", 10.0, None),
        ];
        assert_eq!(dropped(&matches, &[]), ["m-old"]);
    }

    #[test]
    fn a_match_superseded_still_supersedes_older_ones() {
        // a: m-1 (kept at 20) → m-2 (kept at 40); c: m-2 → m-3 (live).
        let matches = [
            m("m-1", "a", "b", 10.0, Some(20.0)),
            m("m-2", "a", "c", 30.0, Some(40.0)),
            m("m-3", "c", "d", 50.0, None),
        ];
        assert_eq!(dropped(&matches, &[]), ["m-1", "m-2"]);
    }

    #[test]
    fn a_backfilled_or_departed_player_counts_as_the_matchs() {
        let mut kept = m("m-kept", "a", "b", 10.0, Some(20.0));
        kept.teams[0].push(PlayerId::new("x"));
        kept.backfill[0].push(PlayerId::new("x"));
        assert_eq!(dropped(&[kept.clone()], &[ticket("t-x", "x")]), ["m-kept"]);
        kept.left.push(PlayerId::new("a"));
        assert_eq!(
            dropped(&[kept, m("m-live", "a", "c", 30.0, None)], &[]),
            ["m-kept"]
        );
    }
}
