//! Helpers shared by the rating tests.

use super::{PlayerInput, Skill};

/// Asserts |got − want| <= tol with a message that shows both.
#[track_caller]
pub fn assert_close(got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol, "got {got}, want {want} (±{tol})");
}

/// A player with only a skill (no elapsed time, performance or wins).
#[must_use]
pub fn player(mean: f64, deviation: f64, volatility: f64) -> PlayerInput {
    PlayerInput::new(Skill {
        mean,
        deviation,
        volatility,
    })
}
