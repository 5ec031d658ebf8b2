//! The designer's workbench behind `matchmaker replay` and `matchmaker simulate`: how well the
//! rating systems predict real and simulated matches, and what players would experience.
//!
//! What this module owns: reading match histories ([`history`], the format of
//! `docs/match-history.md`), a seeded synthetic history with known true skills ([`synthetic`]),
//! the accuracy measures every report prints ([`measures`]), replaying a history through the
//! rating systems and tuning them ([`replay`]), a seeded population simulation on a simulated
//! clock that drives the real matcher and rating systems ([`simulate`]), and plots ([`plot`]).
//! The command-line layer (argument parsing, files, wall-clock timing, printing) is
//! `tools::sim`.
//!
//! What it must not do: read the wall clock or unseeded randomness (time is the history's dates
//! or the simulated clock; randomness is one seeded RNG), change the rating or matching cores,
//! print, or import the server's shell (tonic, tokio, sled, metrics, `store`). Its only file
//! I/O is [`history::History::read_file`] and [`plot`]'s output files.

pub mod bootstrap;
pub mod history;
pub mod measures;
pub mod plot;
pub mod replay;
pub mod simulate;
pub mod synthetic;
pub mod tune;
