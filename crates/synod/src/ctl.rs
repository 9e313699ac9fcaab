//! `synod ctl`: one-shot client commands against a cluster.
//!
//! Output follows redis-cli: `OK`, the value, `(nil)` for a missing key (exit 0),
//! `(integer) N`. Exit codes: 0 done, 1 error (or a CAS that did not swap), 2 bad usage.

use bytes::Bytes;
use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use std::time::Duration;
use synod_client::{Client, ClientError, ClientOptions};
use synod_core::Status;

/// The client endpoints of `synod local` with its default base port.
const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203";

#[derive(Parser, Debug)]
pub struct Args {
    /// Client endpoints of the replicas (host:port, comma separated).
    #[arg(long, short, env = "SYNOD_ENDPOINTS", value_delimiter = ',', default_value = DEFAULT_ENDPOINTS)]
    pub endpoints: Vec<String>,
    /// How long one attempt may take before trying another replica (e.g. 500ms, 2s).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// How long to keep retrying before giving up (outcome then unknown).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub retry_time: Duration,
    /// Connect with TLS, checking the replicas' certificates against this CA file
    /// (`synod local --tls` writes `<dir>/tls/ca.pem`).
    #[arg(long, env = "SYNOD_TLS_CA", value_name = "CA.pem")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// The replicas' password (their config's `password`).
    #[arg(long, env = "SYNOD_PASSWORD")]
    pub password: Option<String>,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// Set KEY to VALUE.
    Put { key: String, value: String },
    /// Print the value of KEY, or `(nil)` if it is absent.
    Get { key: String },
    /// Delete KEY; prints `(integer) 1` if it existed, `(integer) 0` if not.
    Del { key: String },
    /// Compare-and-swap: set KEY to NEW if its value is OLD.
    #[command(after_help = "Forms:\n  \
        cas KEY OLD NEW                   expect OLD, set NEW\n  \
        cas --absent KEY NEW              expect KEY absent, set NEW (create if absent)\n  \
        cas --delete KEY OLD              expect OLD, delete KEY\n  \
        cas --absent --delete KEY         expect absent, leave absent\n\
        Prints OK if it swapped; otherwise `FAILED, current value: <v>` (or `(nil)`) and exits 1.")]
    Cas {
        /// Expect KEY to be absent (OLD is then omitted).
        #[arg(long)]
        absent: bool,
        /// Delete KEY on success (NEW is then omitted).
        #[arg(long)]
        delete: bool,
        key: String,
        /// OLD and NEW, minus the ones replaced by --absent / --delete.
        #[arg(num_args = 0..=2)]
        values: Vec<String>,
    },
    /// Print `key<TAB>value` lines for keys in [FROM, TO); TO "" = no upper bound.
    Scan {
        from: String,
        to: String,
        /// At most this many pairs (0 = all).
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Show every replica: id, address, role, ballot, commit and execute index, leader.
    Status {
        #[arg(long, short, value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Membership changes (MultiPaxos / HoliPaxos), one node at a time, through the leader's
    /// admin API (docs/design.md, "Membership").
    Member {
        /// The cluster.toml (or its directory) of the cluster, for the admin addresses.
        #[arg(long, env = "SYNOD_CLUSTER")]
        cluster: std::path::PathBuf,
        #[command(subcommand)]
        op: MemberOp,
    },
}

#[derive(Subcommand, Debug)]
pub enum MemberOp {
    /// Add replica ID, already started with `synod server --join`, reachable by peers at
    /// PEER_ADDR (host:port). `synod fault add-node` starts one and adds it in one step.
    Add { id: synod_core::NodeId, peer_addr: std::net::SocketAddr },
    /// Remove replica ID from the configuration (its process keeps running).
    Remove { id: synod_core::NodeId },
    /// Print the configuration the leader follows (GET /members).
    List,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

pub fn main(args: Args) -> ExitCode {
    if let CtlCommand::Member { cluster, op } = &args.command {
        return member(cluster, op);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let endpoints: Vec<String> =
        args.endpoints.iter().map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect();
    if endpoints.is_empty() {
        eprintln!("error: no endpoints given (--endpoints or SYNOD_ENDPOINTS)");
        return ExitCode::from(2);
    }
    let tls = match &args.tls_ca {
        Some(ca) => match synod_client::ClientTls::from_ca_file(ca) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("error: --tls-ca: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let opts = ClientOptions {
        request_timeout: args.timeout,
        max_retry_time: args.retry_time,
        resolve_policy: Some(synod_protocols::registry::client_for),
        tls,
        password: args.password.clone(),
        ..Default::default()
    };
    if let CtlCommand::Status { output } = args.command {
        return status(&endpoints, &opts, output).await;
    }
    // Usage errors before any network wait.
    if let CtlCommand::Cas { absent, delete, values, .. } = &args.command {
        let wanted = 2 - usize::from(*absent) - usize::from(*delete);
        if values.len() != wanted {
            eprintln!(
                "error: cas{}{} takes KEY and {wanted} value(s), got {}; see `synod ctl cas --help`",
                if *absent { " --absent" } else { "" },
                if *delete { " --delete" } else { "" },
                values.len()
            );
            return ExitCode::from(2);
        }
    }
    let mut client = match Client::with_options(&endpoints, opts).await {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let b = |s: String| Bytes::from(s.into_bytes());
    match args.command {
        CtlCommand::Put { key, value } => match client.put(b(key), b(value)).await {
            Ok(()) => println!("OK"),
            Err(e) => return fail(e),
        },
        CtlCommand::Get { key } => match client.get(b(key)).await {
            Ok(v) => println!("{}", show(v.as_ref())),
            Err(e) => return fail(e),
        },
        CtlCommand::Del { key } => match client.delete(b(key)).await {
            Ok(existed) => println!("(integer) {}", u8::from(existed)),
            Err(e) => return fail(e),
        },
        CtlCommand::Cas { absent, delete, key, values } => {
            let mut values = values.into_iter().map(b);
            let expect = if absent { None } else { values.next() };
            let new = if delete { None } else { values.next() };
            match client.cas(b(key), expect, new).await {
                Ok((true, _)) => println!("OK"),
                Ok((false, current)) => {
                    println!("FAILED, current value: {}", show(current.as_ref()));
                    return ExitCode::FAILURE;
                }
                Err(e) => return fail(e),
            }
        }
        CtlCommand::Scan { from, to, limit } => match client.scan(b(from), b(to), limit).await {
            Ok(pairs) if pairs.is_empty() => println!("(empty)"),
            Ok(pairs) => {
                for (k, v) in pairs {
                    println!("{}\t{}", String::from_utf8_lossy(&k), String::from_utf8_lossy(&v));
                }
            }
            Err(e) => return fail(e),
        },
        CtlCommand::Status { .. } | CtlCommand::Member { .. } => unreachable!("handled above"),
    }
    ExitCode::SUCCESS
}

fn member(cluster: &std::path::Path, op: &MemberOp) -> ExitCode {
    let c = match synod_harness::cluster::ClusterFile::load(cluster) {
        Ok((_, c)) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match op {
        MemberOp::Add { id, peer_addr } => synod_harness::nemesis::change_membership(
            &c,
            &serde_json::json!({ "id": id, "peer_addr": peer_addr.to_string() }),
            "add",
        ),
        MemberOp::Remove { id } => {
            synod_harness::nemesis::change_membership(&c, &serde_json::json!({ "id": id }), "remove")
        }
        MemberOp::List => synod_harness::nemesis::find_leader(&c)
            .and_then(|l| c.node(l).cloned())
            .and_then(|n| n.admin().get("/members", Duration::from_secs(2)).map_err(|e| format!("node {}: {e}", n.id)))
            .map(|(_, body)| body),
    };
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn show(v: Option<&Bytes>) -> String {
    match v {
        Some(v) => String::from_utf8_lossy(v).into_owned(),
        None => "(nil)".into(),
    }
}

fn fail(e: ClientError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::FAILURE
}

/// Print every endpoint's status; unreachable ones as `down`. Fails only if all are down.
async fn status(endpoints: &[String], opts: &ClientOptions, format: Format) -> ExitCode {
    let all = synod_client::status_all_with(endpoints, opts.request_timeout, opts).await;
    let any_up = all.iter().any(|(_, r)| r.is_ok());
    match format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = all
                .iter()
                .map(|(endpoint, r)| match r {
                    Ok(s) => serde_json::json!({ "endpoint": endpoint, "up": true, "status": s }),
                    Err(e) => serde_json::json!({ "endpoint": endpoint, "up": false, "error": e.to_string() }),
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows).expect("JSON values serialize"));
        }
        Format::Table => print!("{}", status_table(&all)),
    }
    if any_up {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn status_table(all: &[(String, Result<Status, ClientError>)]) -> String {
    let mut out = format!(
        "{:<5} {:<22} {:<10} {:<14} {:>10} {:>10} {:<6}\n",
        "NODE", "ADDRESS", "ROLE", "BALLOT", "COMMIT", "EXECUTE", "LEADER"
    );
    for (endpoint, r) in all {
        let line = match r {
            Ok(s) => format!(
                "{:<5} {:<22} {:<10} {:<14} {:>10} {:>10} {:<6}",
                s.id,
                endpoint,
                s.role.to_string(),
                s.ballot,
                s.commit_index,
                s.execute_index,
                s.leader.map_or("-".to_string(), |l| l.to_string())
            ),
            Err(_) => {
                format!("{:<5} {:<22} {:<10} {:<14} {:>10} {:>10} {:<6}", "-", endpoint, "down", "-", "-", "-", "-")
            }
        };
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `500ms`, `2s`, `1m`, or a bare number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("invalid duration {s:?} (examples: 500ms, 2s, 1m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("invalid duration unit in {s:?} (use ms, s or m)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("invalid duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn endpoints_default_and_split() {
        let w = Wrap::try_parse_from(["ctl", "get", "k"]).unwrap();
        assert_eq!(w.args.endpoints, DEFAULT_ENDPOINTS.split(',').collect::<Vec<_>>());
        let w = Wrap::try_parse_from(["ctl", "--endpoints", "a:1,b:2", "status", "-o", "json"]).unwrap();
        assert_eq!(w.args.endpoints, ["a:1", "b:2"]);
        assert!(matches!(w.args.command, CtlCommand::Status { output: Format::Json }));
    }

    #[test]
    fn cas_forms_parse() {
        let w = Wrap::try_parse_from(["ctl", "cas", "--absent", "k", "new"]).unwrap();
        assert!(
            matches!(w.args.command, CtlCommand::Cas { absent: true, delete: false, ref values, .. } if values == &["new"])
        );
        let w = Wrap::try_parse_from(["ctl", "cas", "k", "old", "new"]).unwrap();
        assert!(matches!(w.args.command, CtlCommand::Cas { absent: false, ref values, .. } if values.len() == 2));
        assert!(Wrap::try_parse_from(["ctl", "cas", "k", "a", "b", "c"]).is_err());
    }

    #[test]
    fn status_table_shows_down_nodes() {
        let up = Status {
            id: 2,
            protocol: "multipaxos".into(),
            role: synod_core::Role::Leader,
            ballot: "3.2".into(),
            leader: Some(2),
            commit_index: 10,
            execute_index: 9,
            extra: Default::default(),
        };
        let down = Err(ClientError::Unreachable { endpoint: "h:2".into(), reason: "refused".into() });
        let t = status_table(&[("h:1".into(), Ok(up)), ("h:2".into(), down)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("2 ") && lines[1].contains("leader") && lines[1].contains("3.2"), "{t}");
        assert!(lines[2].contains("h:2") && lines[2].contains("down"), "{t}");
    }
}
