//! `synod bench` without the synod binary: `cargo run -p synod-bench --release --example bench -- --target redis=127.0.0.1:6379`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "bench", about = "synod's benchmark harness (same arguments as `synod bench`)")]
struct Cli {
    #[command(flatten)]
    bench: synod_bench::cli::BenchArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    synod_bench::cli::run_bench(Cli::parse().bench).await
}
