//! The matchmaker library: everything but command-line parsing lives here.
#![forbid(unsafe_code)]

pub mod ids;
pub mod matching;
pub mod proto;
