//! The `synod` command: a thin dispatcher, one module per subcommand.
//!
//! Exit codes: 0 success, 1 runtime failure (or a failed `ctl cas`), 2 bad usage or config.

mod ctl;
mod http;
mod local;
mod server;
mod signal;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "synod", version, about = "A protocol-generic, linearizable, replicated key-value store")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one replica from a config file.
    #[command(alias = "run")]
    Server(server::Args),
    /// Run a whole cluster of replicas on this machine (child processes), for trying synod out.
    Local(local::Args),
    /// Talk to a cluster: put, get, del, cas, scan, status.
    Ctl(ctl::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server::main(args),
        Command::Local(args) => local::main(args),
        Command::Ctl(args) => ctl::main(args),
    }
}
