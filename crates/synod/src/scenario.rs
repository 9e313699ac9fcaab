//! `synod scenario`: parses the arguments and calls [`synod_harness::scenario`], where
//! scenario files, their runs and their outputs are described.

use std::path::PathBuf;
use std::process::ExitCode;
use synod_harness::scenario::{run_scenario, Scenario};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Run a scenario file: cluster + workload + fault schedule, results into a folder.
    Run(RunArgs),
    /// Parse and check a scenario file without running it.
    Check { file: PathBuf },
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The scenario TOML file.
    pub file: PathBuf,
    /// Output folder (default: the file's `out`, else scenario-out/<name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Multiply the duration, every fault time, ramp lengths and the calibration run by this
    /// (e.g. 0.1 for a quick run of a paper-scale scenario).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Run these variants instead of the file's: comma-separated, same syntax as the file's
    /// `protocols` (`holipaxos[trim=quorum,compact_every=5000],raft+`).
    #[arg(long)]
    pub protocols: Vec<String>,
    /// Run the replicas on fixed ports: peers B+i, clients B+100+i, admin B+200+i for
    /// replica i (default: ports the OS hands out). For machines shared by several users.
    #[arg(long)]
    pub base_port: Option<u16>,
}

pub fn main(args: Args) -> ExitCode {
    match args.command {
        Sub::Check { file } => match Scenario::load(&file, 1.0) {
            Ok(s) => {
                println!("{}", s.describe());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
        Sub::Run(run) => {
            let mut s = match Scenario::load(&run.file, run.scale) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(2);
                }
            };
            if !run.protocols.is_empty() {
                if let Err(e) = s.set_variants(&run.protocols) {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
            if let Some(o) = run.out {
                s.out = o;
            }
            s.base_port = run.base_port;
            match run_scenario(&s) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
