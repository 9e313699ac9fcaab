//! `cargo run -p synod-sim --release --example check -- --protocol multipaxos --seeds 100`:
//! the same check as `synod check`, without building the whole binary.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    check: synod_sim::CheckArgs,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(synod_sim::run_check(&cli.check));
}
