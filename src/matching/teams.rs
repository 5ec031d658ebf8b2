//! Team and free-for-all queues: candidate groups from windows over tickets sorted by rating,
//! balanced into teams, chosen disjointly with the oldest tickets first.
//!
//! First version: forms no team matches yet (the 1v1 path is complete); the optimizer lands in
//! the next commit.

use super::config::MatchingConfig;
use super::pool::{Cand, Proposal};
use super::{Shape, Ticket, WinModel};

/// Chooses the team matches for one tick.
pub(crate) fn select(
    _cands: &[Cand],
    _shape: Shape,
    _config: &MatchingConfig,
    _model: &dyn WinModel,
    _slots: &[Option<Ticket>],
) -> Vec<Proposal> {
    Vec::new()
}
