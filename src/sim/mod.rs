//! The designer's workbench (SPEC §9, issue #7): `matchmaker replay` and `matchmaker simulate`.
//!
//! What this module owns: reading real match histories ([`history`]), the accuracy measures
//! every report prints ([`measures`]), replaying a history through the rating systems and tuning
//! them ([`replay`]), a seeded population simulation on a simulated clock that drives the real
//! matcher and rating systems ([`simulate`]), plots ([`plot`]) and the two command entry points
//! ([`cli`]).
//!
//! What it must not do: read the wall clock or unseeded randomness inside `replay` or
//! `simulate` (time is the history's dates or the simulated clock; randomness is one seeded RNG),
//! change the rating or matching cores, or print from the pure parts. Only [`cli`] and [`plot`]
//! do I/O; the wall clock is read in [`cli`] alone, to report `seconds`.

pub mod cli;
pub mod history;
pub mod measures;
pub mod plot;
pub mod replay;
pub mod simulate;
