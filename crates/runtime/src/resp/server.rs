//! Commands a connection answers itself, without the log: connection state (PING, ECHO,
//! HELLO, AUTH, SELECT, CLIENT, QUIT) and the introspection tools call when they connect
//! (COMMAND, INFO, CONFIG GET). Their replies follow Redis 7 closely enough for redis-cli,
//! redis-benchmark, redis-py and Jedis; INFO's replication section tells the synod side of
//! things (protocol, role, leader, commit and execute index).

use super::commands::{self, Spec, COMMANDS};
use super::conn::ConnState;
use super::reply::RespValue;
use super::RespShared;
use bytes::Bytes;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use synod_core::kv::glob_match;
use synod_core::Role;

/// The Redis version synod claims (the command set and replies follow Redis 7).
pub const REDIS_VERSION: &str = "7.2.0";

pub enum Outcome {
    Reply(RespValue),
    /// Answer +OK and close the connection.
    Quit,
}

use Outcome::Reply;

fn upper(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_ascii_uppercase()
}

fn unknown_subcommand(sub: &[u8], cmd: &str) -> Outcome {
    Reply(RespValue::err(format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        cmd.to_ascii_uppercase()
    )))
}

fn sub_arity(cmd: &str, sub: &str) -> Outcome {
    Reply(RespValue::err(format!("ERR wrong number of arguments for '{cmd}|{}' command", sub.to_ascii_lowercase())))
}

/// Answer a connection or server command (`spec.group.is_local()`).
pub fn local(spec: &Spec, args: &[Bytes], st: &mut ConnState, shared: &RespShared) -> Outcome {
    let a = &args[1..];
    match spec.name {
        "ping" => match a {
            [] => Reply(RespValue::Simple("PONG".into())),
            [msg] => Reply(RespValue::Bulk(msg.clone())),
            _ => Reply(commands::wrong_arity("ping")),
        },
        "echo" => Reply(RespValue::Bulk(a[0].clone())),
        "quit" => Outcome::Quit,
        "select" => Reply(match std::str::from_utf8(&a[0]).ok().and_then(|s| s.parse::<i64>().ok()) {
            Some(0) => RespValue::ok(),
            Some(_) => RespValue::err("ERR DB index is out of range"),
            None => commands::not_integer(),
        }),
        "auth" => Reply(match a {
            [pass] => auth(st, shared, b"default", pass),
            [user, pass] => auth(st, shared, user, pass),
            _ => commands::syntax_error(),
        }),
        "hello" => hello(a, st, shared),
        "client" => client(a, st),
        "command" => command(a),
        "info" => Reply(RespValue::text(info(a, shared))),
        "config" => config(a, shared),
        "time" => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            Reply(RespValue::Array(vec![
                RespValue::text(now.as_secs().to_string()),
                RespValue::text(now.subsec_micros().to_string()),
            ]))
        }
        other => Reply(RespValue::err(format!("ERR command '{other}' is not answered locally"))),
    }
}

/// Constant-time comparison, so the password cannot be guessed byte by byte from timings.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn auth(st: &mut ConnState, shared: &RespShared, user: &[u8], pass: &[u8]) -> RespValue {
    let Some(password) = &shared.password else {
        return RespValue::err(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        );
    };
    if user == b"default" && same(pass, password.as_bytes()) {
        st.authed = true;
        RespValue::ok()
    } else {
        RespValue::err("WRONGPASS invalid username-password pair or user is disabled.")
    }
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]]
fn hello(a: &[Bytes], st: &mut ConnState, shared: &RespShared) -> Outcome {
    let mut proto = st.proto;
    if let Some(v) = a.first() {
        proto = match std::str::from_utf8(v).ok().and_then(|s| s.parse::<i64>().ok()) {
            Some(p @ 2..=3) => p as u8,
            Some(_) => return Reply(RespValue::err("NOPROTO unsupported protocol version")),
            None => return Reply(RespValue::err("ERR Protocol version is not an integer or out of range")),
        };
    }
    let mut name = None;
    let mut i = 1;
    while i < a.len() {
        let opt = upper(&a[i]);
        match (opt.as_str(), a.len() - i - 1) {
            ("AUTH", n) if n >= 2 => {
                let r = auth(st, shared, &a[i + 1], &a[i + 2]);
                if r.is_error() {
                    return Reply(r);
                }
                i += 3;
            }
            ("SETNAME", n) if n >= 1 => {
                if let Err(e) = check_name(&a[i + 1]) {
                    return Reply(e);
                }
                name = Some(a[i + 1].clone());
                i += 2;
            }
            _ => return Reply(RespValue::err(format!("ERR Syntax error in HELLO option '{opt}'"))),
        }
    }
    if !st.authed {
        return Reply(RespValue::err(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> \
             AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol \
             version at the same time",
        ));
    }
    if name.is_some() {
        st.name = name;
    }
    st.proto = proto;
    let role = if shared.status.borrow().role == Role::Leader { "master" } else { "replica" };
    let t = RespValue::text;
    Reply(RespValue::Map(vec![
        (t("server"), t("redis")),
        (t("version"), t(REDIS_VERSION)),
        (t("proto"), RespValue::Int(proto as i64)),
        (t("id"), RespValue::Int(st.id as i64)),
        (t("mode"), t("standalone")),
        (t("role"), t(role)),
        (t("modules"), RespValue::Array(vec![])),
    ]))
}

fn check_name(name: &[u8]) -> Result<(), RespValue> {
    if name.iter().all(|&c| (b'!'..=b'~').contains(&c)) {
        Ok(())
    } else {
        Err(RespValue::err("ERR Client names cannot contain spaces, newlines or special characters."))
    }
}

fn client_line(st: &ConnState) -> String {
    let s = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
    format!(
        "id={} addr={} name={} db=0 resp={} lib-name={} lib-ver={}\n",
        st.id,
        st.peer,
        s(&st.name),
        st.proto,
        s(&st.lib_name),
        s(&st.lib_ver)
    )
}

fn client(a: &[Bytes], st: &mut ConnState) -> Outcome {
    let sub = upper(&a[0]);
    let n = a.len() - 1;
    match (sub.as_str(), n) {
        ("ID", 0) => Reply(RespValue::Int(st.id as i64)),
        ("GETNAME", 0) => Reply(RespValue::opt(st.name.clone())),
        ("SETNAME", 1) => Reply(match check_name(&a[1]) {
            Ok(()) => {
                st.name = if a[1].is_empty() { None } else { Some(a[1].clone()) };
                RespValue::ok()
            }
            Err(e) => e,
        }),
        ("SETINFO", 2) => {
            let value = Some(a[2].clone());
            match upper(&a[1]).as_str() {
                "LIB-NAME" => st.lib_name = value,
                "LIB-VER" => st.lib_ver = value,
                other => return Reply(RespValue::err(format!("ERR Unrecognized option '{other}'"))),
            }
            Reply(RespValue::ok())
        }
        // Only this connection: the listener does not keep a registry of the others.
        ("INFO" | "LIST", 0) => Reply(RespValue::text(client_line(st))),
        ("NO-EVICT" | "NO-TOUCH", 1) => Reply(RespValue::ok()),
        ("ID" | "GETNAME" | "SETNAME" | "SETINFO" | "INFO" | "LIST" | "NO-EVICT" | "NO-TOUCH", _) => {
            sub_arity("client", &sub)
        }
        _ => unknown_subcommand(&a[0], "client"),
    }
}

fn command(a: &[Bytes]) -> Outcome {
    let Some(sub) = a.first() else {
        return Reply(RespValue::Array(COMMANDS.iter().map(Spec::info).collect()));
    };
    let sub = upper(sub);
    let names = &a[1..];
    let pick = |f: fn(&Spec) -> RespValue| -> Vec<(String, RespValue)> {
        if names.is_empty() {
            COMMANDS.iter().map(|s| (s.name.to_string(), f(s))).collect()
        } else {
            names.iter().filter_map(|n| commands::lookup(n).map(|s| (s.name.to_string(), f(s)))).collect()
        }
    };
    match sub.as_str() {
        "COUNT" if names.is_empty() => Reply(RespValue::Int(COMMANDS.len() as i64)),
        "LIST" => Reply(RespValue::Array(COMMANDS.iter().map(|s| RespValue::text(s.name)).collect())),
        "DOCS" => Reply(RespValue::Map(pick(Spec::docs).into_iter().map(|(n, d)| (RespValue::text(n), d)).collect())),
        "INFO" => Reply(RespValue::Array(if names.is_empty() {
            COMMANDS.iter().map(Spec::info).collect()
        } else {
            names.iter().map(|n| commands::lookup(n).map_or(RespValue::Null, Spec::info)).collect()
        })),
        "COUNT" => sub_arity("command", &sub),
        _ => unknown_subcommand(&a[0], "command"),
    }
}

/// INFO [section ...]: Redis's `key:value` text, CRLF line ends, `# Section` headers.
pub fn info(a: &[Bytes], shared: &RespShared) -> String {
    let wanted: Vec<String> = a.iter().map(|s| String::from_utf8_lossy(s).to_ascii_lowercase()).collect();
    let all = wanted.is_empty() || wanted.iter().any(|w| matches!(w.as_str(), "all" | "everything" | "default"));
    let want = |s: &str| all || wanted.iter().any(|w| w == s);
    let status = shared.status.borrow().clone();
    let stats = &shared.stats;
    let mut out = String::new();
    let mut section = |title: &str, lines: Vec<(&str, String)>| {
        if !want(&title.to_ascii_lowercase()) {
            return;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let _ = write!(out, "# {title}\r\n");
        for (k, v) in lines {
            let _ = write!(out, "{k}:{v}\r\n");
        }
    };
    section(
        "Server",
        vec![
            ("redis_version", REDIS_VERSION.into()),
            ("redis_mode", "standalone".into()),
            ("synod_version", env!("CARGO_PKG_VERSION").into()),
            ("os", std::env::consts::OS.into()),
            ("arch_bits", (usize::BITS).to_string()),
            ("process_id", std::process::id().to_string()),
            ("tcp_port", shared.resp_addr.port().to_string()),
            ("uptime_in_seconds", shared.started.elapsed().as_secs().to_string()),
        ],
    );
    section(
        "Clients",
        vec![
            ("connected_clients", stats.connected.load(Ordering::Relaxed).to_string()),
            ("requirepass", if shared.password.is_some() { "yes" } else { "no" }.into()),
        ],
    );
    section(
        "Stats",
        vec![
            ("total_connections_received", stats.total_connections.load(Ordering::Relaxed).to_string()),
            ("total_commands_processed", stats.total_commands.load(Ordering::Relaxed).to_string()),
            ("synod_forwarded_commands", stats.forwarded.load(Ordering::Relaxed).to_string()),
        ],
    );
    let leader = status.leader.or((status.role == Role::Leader).then_some(status.id));
    let leader_resp = leader.and_then(|l| shared.resp_addrs.get(&l));
    let mut repl = vec![(
        "role",
        match status.role {
            Role::Leader | Role::Replica => "master",
            _ => "slave",
        }
        .to_string(),
    )];
    if status.role != Role::Leader && status.role != Role::Replica {
        repl.push(("master_host", leader_resp.map(|a| a.ip().to_string()).unwrap_or_default()));
        repl.push(("master_port", leader_resp.map(|a| a.port().to_string()).unwrap_or_default()));
        repl.push(("master_link_status", if leader.is_some() { "up" } else { "down" }.into()));
    }
    repl.extend([
        ("synod_protocol", status.protocol.clone()),
        ("synod_node_id", status.id.to_string()),
        ("synod_role", status.role.to_string()),
        ("synod_leader_id", leader.map(|l| l.to_string()).unwrap_or_default()),
        ("synod_leader_resp_addr", leader_resp.map(|a| a.to_string()).unwrap_or_default()),
        ("synod_ballot", status.ballot.clone()),
        ("synod_commit_index", status.commit_index.to_string()),
        ("synod_execute_index", status.execute_index.to_string()),
    ]);
    section("Replication", repl);
    out
}

/// The settings CONFIG GET knows (redis-benchmark asks for `save` and `appendonly`).
fn config_values(shared: &RespShared) -> Vec<(&'static str, String)> {
    let appendfsync = match shared.fsync.as_str() {
        "always" => "always",
        "never" => "no",
        _ => "everysec",
    };
    vec![
        ("save", String::new()),
        ("appendonly", if shared.in_memory { "no" } else { "yes" }.into()),
        ("appendfsync", appendfsync.into()),
        ("databases", "1".into()),
        ("maxmemory", "0".into()),
        ("timeout", "0".into()),
        ("port", shared.resp_addr.port().to_string()),
        ("bind", shared.resp_addr.ip().to_string()),
        ("requirepass", String::new()),
        ("proto-max-bulk-len", shared.limits.max_value_bytes.to_string()),
        ("cluster-enabled", "no".into()),
    ]
}

fn config(a: &[Bytes], shared: &RespShared) -> Outcome {
    let sub = upper(&a[0]);
    match sub.as_str() {
        "GET" if a.len() >= 2 => {
            let values = config_values(shared);
            let pairs = values
                .into_iter()
                .filter(|(k, _)| a[1..].iter().any(|p| glob_match(&p.to_ascii_lowercase(), k.as_bytes())))
                .map(|(k, v)| (RespValue::text(k), RespValue::text(v)))
                .collect();
            Reply(RespValue::Map(pairs))
        }
        "SET" if a.len() >= 3 => Reply(RespValue::err(
            "ERR CONFIG SET is not supported by synod: settings come from the replica's TOML config",
        )),
        "RESETSTAT" if a.len() == 1 => Reply(RespValue::ok()),
        "GET" | "SET" | "RESETSTAT" => sub_arity("config", &sub),
        _ => unknown_subcommand(&a[0], "config"),
    }
}
