//! The durable records shared by the result computation, the in-memory state and the store:
//! a player's standing in a rating pool, a party's, and the acknowledgement of a result. Plain
//! data, so every layer can name them without depending on another.

use serde::{Deserialize, Serialize};

use crate::ids::PlayerId;
use crate::ranking::{LadderState, RankPoints, RankingConfig, RankingKind};
use crate::rating::teams::PeriodResult;
use crate::rating::{Skill, SystemConfig};

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
}
