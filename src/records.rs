//! The durable records shared by the result computation, the in-memory state and the store:
//! a player's standing in a rating pool, a party's, and the acknowledgement of a result; and
//! the records clients read back: ended matches (the match history) and party rosters. Plain
//! data, so every layer can name them without depending on another.

use serde::{Deserialize, Serialize};

use crate::ids::{MatchId, PartyId, PlayerId};
use crate::ranking::{LadderState, RankPoints, RankingConfig, RankingKind};
use crate::rating::teams::PeriodResult;
use crate::rating::{Skill, SystemConfig};
use crate::rejection::FieldError;

/// A player's standing in one rating pool. Persisted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub skill: Skill,
    pub rank_points: RankPoints,
    pub games: u32,
    pub wins: u32,
    /// Unix seconds of the last rated game, for inactivity decay (in a periodic Glicko pool:
    /// the end of the player's last closed rating period).
    pub last_played_unix: Option<i64>,
    /// Ladder: the highest hard floor reached this season.
    #[serde(default)]
    pub ladder_floor: RankPoints,
    /// Ladder: consecutive wins ending with the last match.
    #[serde(default)]
    pub win_streak: u32,
    /// Periodic Glicko: the results of the player's current rating period, applied to the
    /// skill when the period ends. Boxed: most records never have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Box<PendingPeriod>>,
}

impl PoolRecord {
    /// The record of a player never rated in a pool of `system` whose queues show `ranking`:
    /// the system's initial skill, and the ladder's starting rank points and floor on a ladder.
    #[must_use]
    pub fn initial(system: &SystemConfig, ranking: RankingKind, config: &RankingConfig) -> Self {
        let (rank_points, ladder_floor) = match ranking {
            RankingKind::None | RankingKind::Inversus => (0, 0),
            RankingKind::Ladder => {
                let ladder = LadderState::new(&config.ladder);
                (ladder.rp, ladder.floor_rp)
            }
        };
        Self {
            skill: system.initial(),
            rank_points,
            games: 0,
            wins: 0,
            last_played_unix: None,
            ladder_floor,
            win_streak: 0,
            period: None,
        }
    }
}

/// One player's results in one rating period of a periodic Glicko pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingPeriod {
    /// The period: ⌊unix seconds / period length⌋.
    pub index: u64,
    /// Every result of the period so far, in the order the matches were reported.
    pub results: Vec<PeriodResult>,
}

/// A pre-made party's own skill in one pool. Persisted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartyRecord {
    pub skill: Skill,
    pub games: u32,
    /// Unix seconds of its last rated match, for inactivity decay like a player's (absent in
    /// records written before it was kept: no decay).
    #[serde(default)]
    pub last_played_unix: Option<i64>,
}

/// The key of a party: its member ids sorted, joined by a control character that ids can't hold.
pub fn party_key(members: &[PlayerId]) -> String {
    let mut ids: Vec<&str> = members.iter().map(PlayerId::as_str).collect();
    ids.sort_unstable();
    ids.join("\u{1f}")
}

/// One player's change, as acknowledged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlayerChange {
    pub player_id: PlayerId,
    pub before: Skill,
    pub after: Skill,
    pub rank_points_before: RankPoints,
    pub rank_points_after: RankPoints,
}

/// The acknowledgement of a result; journaled and returned again to duplicate reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultAck {
    pub queue: String,
    pub changes: Vec<PlayerChange>,
    /// What the applied report said, so that a repeat can be told from a different report
    /// (`None` in acknowledgements written before it was kept: a repeat of those is answered
    /// unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportDigest>,
}

/// The outcome a result's report gave: a repeat of the report must give the same one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportDigest {
    /// Per team, 1 = first.
    pub placements: Vec<u32>,
    /// Per team, or empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub team_scores: Vec<f64>,
}

// --- Records: match history and party rosters ---

/// How a match in the history ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedPhase {
    Completed,
    Cancelled,
}

/// An ended match as the match history keeps it (per player, the newest
/// `[history] matches_per_player`). Written with the result's journal entry (completed) or when
/// a match a game server took is cancelled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatchRecord {
    pub match_id: MatchId,
    pub queue: String,
    pub phase: EndedPhase,
    /// Every player who played for each team: leavers and backfilled players included.
    pub teams: Vec<Vec<PlayerId>>,
    /// Completed: per team, 1 = first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placements: Vec<u32>,
    /// Completed: each player's change, as acknowledged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<PlayerChange>,
    /// Empty when no game server took the match.
    #[serde(default)]
    pub server_address: String,
    /// Per team, the predicted chance to win when the match formed (empty in records written
    /// before it was kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub win_probability: Vec<f64>,
    pub formed_unix: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix: Option<f64>,
    pub ended_unix: f64,
}

impl MatchRecord {
    /// Every player of the match once, in team order: whose history holds it.
    pub fn players(&self) -> Vec<PlayerId> {
        let mut seen = std::collections::HashSet::new();
        self.teams
            .iter()
            .flatten()
            .filter(|p| seen.insert(*p))
            .cloned()
            .collect()
    }
}

/// A `PartyService` party. Persisted whole on every change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartyRoster {
    pub party_id: PartyId,
    /// Upper case, from an alphabet without look-alikes (no 0/O, 1/I).
    pub invite_code: String,
    /// In the order they joined.
    pub members: Vec<PlayerId>,
    pub leader: PlayerId,
    pub created_unix: f64,
    /// Unix seconds, on the store's clock (Redis's in a cluster), of the last call naming the
    /// party or a member queued or playing: the party expires `[parties] idle_expiry_seconds`
    /// after it. A running server measures that on its monotonic clock; this stamp carries it
    /// across a restart or to a new owner of the queues.
    pub active_unix: f64,
}

/// What an erased player's id becomes in the records other players still hold (their match
/// history, result acknowledgements): `erased:` and twelve hex digits of `salt`. The caller
/// draws `salt` at random for each erasure, so the marker is the same in every record one
/// erasure rewrites (the other players can still tell their opponent's matches apart) but
/// names nobody and cannot be turned back into the id.
#[must_use]
pub fn erased_marker(salt: u64) -> PlayerId {
    PlayerId::new(format!("{ERASED_PREFIX}{:012x}", salt >> 16))
}

/// How every erased player's marker starts.
pub const ERASED_PREFIX: &str = "erased:";

/// Puts `marker` in the place of every `player` in `changes`; whether there was one.
fn erase_changes(changes: &mut [PlayerChange], player: &PlayerId, marker: &PlayerId) -> bool {
    let mut found = false;
    for c in changes.iter_mut().filter(|c| &c.player_id == player) {
        c.player_id = marker.clone();
        found = true;
    }
    found
}

impl ResultAck {
    /// Puts `marker` in the place of `player`; whether the acknowledgement named them.
    pub fn erase(&mut self, player: &PlayerId, marker: &PlayerId) -> bool {
        erase_changes(&mut self.changes, player, marker)
    }
}

impl MatchRecord {
    /// Puts `marker` in the place of `player` in the teams and the changes; whether the record
    /// named them.
    pub fn erase(&mut self, player: &PlayerId, marker: &PlayerId) -> bool {
        let mut found = false;
        for p in self.teams.iter_mut().flatten().filter(|p| *p == player) {
            *p = marker.clone();
            found = true;
        }
        erase_changes(&mut self.changes, player, marker) || found
    }
}

/// `[history]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// Ended matches kept per player (`ListPlayerMatches`); older ones are dropped, and a
    /// match goes once no player's history keeps it.
    #[serde(default = "default_matches_per_player")]
    pub matches_per_player: u32,
}

fn default_matches_per_player() -> u32 {
    100
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            matches_per_player: default_matches_per_player(),
        }
    }
}

impl HistoryConfig {
    /// Every rule `[history]` must satisfy.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(1..=1000).contains(&self.matches_per_player) {
            return Err(FieldError::new(
                "history.matches_per_player",
                format!("must be in 1..=1000 (got {})", self.matches_per_player),
            ));
        }
        Ok(())
    }
}

/// `[parties]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartyConfig {
    /// A party with no call naming it and no member queued or in a match for this long ends.
    #[serde(default = "default_idle_expiry_seconds")]
    pub idle_expiry_seconds: f64,
    /// Most members of one party (a queue's `max_party_size` still bounds what it may enter).
    #[serde(default = "default_max_members")]
    pub max_members: u32,
}

fn default_idle_expiry_seconds() -> f64 {
    3600.0
}

fn default_max_members() -> u32 {
    5
}

impl Default for PartyConfig {
    fn default() -> Self {
        Self {
            idle_expiry_seconds: default_idle_expiry_seconds(),
            max_members: default_max_members(),
        }
    }
}

impl PartyConfig {
    /// Every rule `[parties]` must satisfy.
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.idle_expiry_seconds.is_finite() && self.idle_expiry_seconds > 0.0) {
            return Err(FieldError::new(
                "parties.idle_expiry_seconds",
                format!("must be finite and > 0 (got {})", self.idle_expiry_seconds),
            ));
        }
        if !(2..=100).contains(&self.max_members) {
            return Err(FieldError::new(
                "parties.max_members",
                format!("must be in 2..=100 (got {})", self.max_members),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::Skill;

    fn change(p: &str) -> PlayerChange {
        let skill = Skill {
            mean: 1500.0,
            deviation: 350.0,
            volatility: 0.06,
        };
        PlayerChange {
            player_id: PlayerId::new(p),
            before: skill,
            after: skill,
            rank_points_before: 0,
            rank_points_after: 10,
        }
    }

    #[test]
    fn erasing_puts_the_marker_in_every_place_of_the_player_and_only_there() {
        let marker = erased_marker(0xdead_beef_cafe_f00d);
        assert_eq!(marker.as_str(), "erased:deadbeefcafe");
        let mut record = MatchRecord {
            match_id: MatchId::new("m"),
            queue: "gone".into(),
            phase: EndedPhase::Completed,
            teams: vec![
                vec![PlayerId::new("gone"), PlayerId::new("a")],
                vec![PlayerId::new("b")],
            ],
            placements: vec![1, 2],
            changes: vec![change("gone"), change("a"), change("b")],
            server_address: "gone".into(),
            win_probability: vec![0.5, 0.5],
            formed_unix: 1.0,
            started_unix: None,
            ended_unix: 2.0,
        };
        assert!(record.erase(&PlayerId::new("gone"), &marker));
        assert_eq!(record.teams[0], vec![marker.clone(), PlayerId::new("a")]);
        assert_eq!(record.changes[0].player_id, marker);
        assert_eq!(record.players().len(), 3);
        // Fields that only happen to spell the id are not player ids.
        assert_eq!(
            (record.queue.as_str(), record.server_address.as_str()),
            ("gone", "gone")
        );
        assert!(!record.erase(&PlayerId::new("gone"), &marker));
        let mut ack = ResultAck {
            queue: "1v1".into(),
            changes: vec![change("a"), change("gone")],
            report: None,
        };
        assert!(ack.erase(&PlayerId::new("gone"), &marker));
        assert_eq!(ack.changes[1].player_id, marker);
        assert!(!ack.erase(&PlayerId::new("c"), &marker));
    }
}
