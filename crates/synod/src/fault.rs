//! `synod fault`: the nemesis on the command line. Parses the arguments and calls
//! [`synod_harness::nemesis::execute`] on the cluster's `cluster.toml`; see that module for
//! what each action does.

use std::path::PathBuf;
use std::process::ExitCode;
use synod_harness::nemesis::{execute, Action, FaultError};

#[derive(clap::Args, Debug)]
#[command(after_help = "The cluster is the cluster.toml that `synod local` (or a scenario) prints, or its \
    directory.\nExit codes: 0 done, 1 the fault could not be applied, 2 bad usage.")]
pub struct Args {
    /// cluster.toml of the running cluster, or the directory holding it.
    #[arg(long, env = "SYNOD_CLUSTER")]
    pub cluster: PathBuf,
    #[command(subcommand)]
    pub action: Action,
}

pub fn main(args: Args) -> ExitCode {
    match execute(&args.cluster, &args.action) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(FaultError::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        Err(FaultError::Failed(m)) => {
            eprintln!("error: {m}");
            ExitCode::FAILURE
        }
    }
}
