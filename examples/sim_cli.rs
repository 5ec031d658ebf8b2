//! Stand-in for the `replay` / `simulate` subcommands until `main.rs` wires them:
//! `cargo run --release --example sim_cli -- replay FILE --system all --score-from 2010-01-01`.

use clap::{Parser, Subcommand};
use matchmaker::sim::cli::{ReplayArgs, SimulateArgs, replay_main, simulate_main};

#[derive(Parser)]
#[command(name = "sim_cli")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// See `matchmaker replay`.
    Replay(ReplayArgs),
    /// See `matchmaker simulate`.
    Simulate(SimulateArgs),
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Replay(a) => replay_main(a),
        Command::Simulate(a) => simulate_main(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
