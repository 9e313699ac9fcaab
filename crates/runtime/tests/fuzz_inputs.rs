//! Fuzz harnesses for what reaches a replica from outside, run as ordinary tests (stable Rust,
//! no cargo-fuzz): the RESP request parser, RESP commands through translation, the state
//! machine and reply rendering, the native client protocol's frames, and node configs.
//! Inputs are well-formed ones (generated Redis commands, framed client messages, the sample
//! configs) and mutated copies of them (`synod_core::fuzz::mutate`). Nothing may panic; the
//! well-formed ones must round-trip exactly, whatever the chunking of the stream.
//! Budget: `SYNOD_FUZZ_ITERS` (CI default per test below); long runs in docs/testing.md.

use bytes::{Bytes, BytesMut};
use rand::Rng as _;
use synod_core::fuzz::{chunks, iterations, mutate};
use synod_core::session::StateMachine;
use synod_core::wire::{decode_payload, frame, take_frame, ClientMsg, ServerMsg};
use synod_core::{Command, RequestMeta, Rng, Time};
use synod_runtime::resp::commands::{render, translate, Cursors, Translated, COMMANDS};
use synod_runtime::resp::parse::RequestParser;
use synod_runtime::NodeConfig;

/// Arguments a Redis client could send: keys of a few names (so commands meet each other's
/// types), numbers on boundaries, the option words commands take, ranges, and noise.
const WORDS: &[&str] = &[
    "k0",
    "k1",
    "k2",
    "k3",
    "f0",
    "f1",
    "m0",
    "m1",
    "0",
    "1",
    "-1",
    "2",
    "3",
    "10",
    "-10",
    "100",
    "0.5",
    "-0.5",
    "1e308",
    "-1e308",
    "inf",
    "-inf",
    "+inf",
    "nan",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "NX",
    "XX",
    "GT",
    "LT",
    "CH",
    "INCR",
    "GET",
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "KEEPTTL",
    "PERSIST",
    "WITHSCORES",
    "LIMIT",
    "BYSCORE",
    "BYLEX",
    "REV",
    "COUNT",
    "MATCH",
    "TYPE",
    "LEFT",
    "RIGHT",
    "BEFORE",
    "AFTER",
    "(1",
    "(-1",
    "[a",
    "(a",
    "-",
    "+",
    "*",
    "k*",
    "[",
    "(",
    "",
    "string",
    "hash",
    "list",
    "set",
    "zset",
];

fn arg(rng: &mut Rng) -> Bytes {
    if rng.gen_bool(0.05) {
        let n = rng.gen_range(0..40);
        return Bytes::from((0..n).map(|_| rng.gen::<u8>()).collect::<Vec<u8>>());
    }
    if rng.gen_bool(0.02) {
        return Bytes::from(vec![b'x'; rng.gen_range(100..5000)]);
    }
    Bytes::from_static(WORDS[rng.gen_range(0..WORDS.len())].as_bytes())
}

/// A command of the table with a plausible number of arguments, or now and then an unknown
/// name or a wrong count.
fn command(rng: &mut Rng) -> Vec<Bytes> {
    let spec = &COMMANDS[rng.gen_range(0..COMMANDS.len())];
    let min = spec.arity.unsigned_abs() as usize - 1;
    let n = match rng.gen_range(0..10) {
        0 => rng.gen_range(0..6),
        1..=6 => min,
        _ if spec.arity < 0 => min + rng.gen_range(0..6),
        _ => min,
    };
    let name = if rng.gen_bool(0.02) { Bytes::from_static(b"nosuchcommand") } else { Bytes::from(spec.name) };
    std::iter::once(name).chain((0..n).map(|_| arg(rng))).collect()
}

fn multibulk(args: &[Bytes], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Feed `stream` in `parts` to a fresh parser; the requests it produced, and whether it
/// stopped with a protocol error (the connection would be closed there).
fn parse_stream(parts: &[&[u8]], max_request: usize) -> (Vec<Vec<Bytes>>, bool) {
    let mut parser = RequestParser::new(max_request);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for p in parts {
        buf.extend_from_slice(p);
        loop {
            match parser.next(&mut buf) {
                Ok(Some(req)) => out.push(req),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

#[test]
fn resp_requests_parse_whatever_the_chunking_and_mutations_never_panic() {
    let mut rng = synod_core::rng_from_seed(0xfeed);
    let iters = iterations(3_000);
    let (mut exact, mut refused) = (0u64, 0u64);
    for _ in 0..iters {
        let reqs: Vec<Vec<Bytes>> = (0..rng.gen_range(1..6)).map(|_| command(&mut rng)).collect();
        let mut stream = Vec::new();
        for r in &reqs {
            multibulk(r, &mut stream);
        }
        // Well-formed: the same requests, in order, however the bytes arrive.
        let (got, err) = parse_stream(&chunks(&mut rng, &stream), 1 << 20);
        assert!(!err, "a well-formed pipeline was refused: {:?}", String::from_utf8_lossy(&stream));
        assert_eq!(got, reqs);
        exact += 1;
        // Mutated: anything but a panic; a small limit exercises the size check.
        let bad = mutate(&mut rng, &stream, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$-1\r\nPING inline\r\n");
        let limit = if rng.gen_bool(0.5) { 1 << 20 } else { rng.gen_range(0..64) };
        let (_, err) = parse_stream(&chunks(&mut rng, &bad), limit);
        refused += err as u64;
    }
    eprintln!("resp parser: {exact} pipelines round-tripped, {iters} mutated ({refused} refused), no panic");
}

#[test]
fn resp_commands_through_the_state_machine_never_panic_and_snapshots_restore_them() {
    let mut rng = synod_core::rng_from_seed(0xc0de);
    let iters = iterations(20_000);
    let cursors = Cursors::new(64);
    let mut sm = StateMachine::new();
    let (mut data, mut refused) = (0u64, 0u64);
    let mut now = 1_700_000_000_000u64;
    for i in 1..=iters as u64 {
        let args = command(&mut rng);
        match translate(&args, &cursors) {
            Translated::Data { op, shape } => {
                now += rng.gen_range(0..2_000);
                let cmd = Command { client: 1 + i % 3, seq: i, acked_below: i, now_ms: now, op };
                let _ = cmd.op.footprint();
                // The command crosses the native wire and a peer's log as postcard bytes.
                let f = frame(&ClientMsg::Request { cmd: cmd.clone(), meta: RequestMeta::default() });
                let mut buf = BytesMut::from(&f[..]);
                let payload = take_frame(&mut buf, 1 << 26).unwrap().unwrap();
                let back: ClientMsg = decode_payload(&payload).unwrap();
                assert_eq!(back, ClientMsg::Request { cmd: cmd.clone(), meta: RequestMeta::default() });
                let result = sm.apply(&cmd).result();
                let mut out = BytesMut::new();
                render(shape, result, &cursors).encode(if i % 2 == 0 { 2 } else { 3 }, &mut out);
                assert!(!out.is_empty());
                data += 1;
            }
            Translated::Reply(r) => {
                assert!(r.is_error(), "{args:?} refused without an error: {r:?}");
                refused += 1;
            }
            Translated::Local(_) => {}
        }
        if i % 500 == 0 {
            let snap = sm.snapshot();
            let restored = StateMachine::restore(&snap).expect("own snapshot restores");
            assert_eq!(restored.digest(), sm.digest(), "snapshot changed the state after {i} commands");
            sm = restored;
            // A damaged snapshot is refused or restores to something; never a panic.
            let bad = mutate(&mut rng, &snap, &[]);
            let _ = StateMachine::is_valid_snapshot(&bad);
            let _ = StateMachine::restore(&bad);
        }
    }
    assert!(data > iters as u64 / 4, "only {data} of {iters} generated commands were data commands");
    eprintln!("resp commands: {data} applied, {refused} refused with an error, no panic");
}

fn client_messages(rng: &mut Rng, cursors: &Cursors) -> Vec<Bytes> {
    let mut frames = Vec::new();
    while frames.len() < 4 {
        if let Translated::Data { op, .. } = translate(&command(rng), cursors) {
            let cmd = Command { client: rng.gen(), seq: rng.gen(), acked_below: 0, now_ms: rng.gen(), op };
            let meta = RequestMeta { sent_at: Time::from_millis(rng.gen_range(0..1 << 40)), ext: arg(rng) };
            frames.push(frame(&ClientMsg::Request { cmd, meta }));
        }
    }
    frames.push(frame(&ClientMsg::Status));
    frames
}

#[test]
fn native_client_frames_round_trip_and_mutated_streams_never_panic() {
    let mut rng = synod_core::rng_from_seed(0xf4a3e);
    let iters = iterations(5_000);
    let cursors = Cursors::new(4);
    let mut refused = 0u64;
    for _ in 0..iters {
        let frames = client_messages(&mut rng, &cursors);
        let stream: Vec<u8> = frames.concat();
        // Well-formed, any chunking: every message back, in order.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for part in chunks(&mut rng, &stream) {
            buf.extend_from_slice(part);
            while let Some(p) = take_frame(&mut buf, 1 << 20).unwrap() {
                got.push(decode_payload::<ClientMsg>(&p).unwrap());
            }
        }
        let want: Vec<ClientMsg> =
            frames.iter().map(|f| decode_payload::<ClientMsg>(&f[4..]).expect("own frame decodes")).collect();
        assert_eq!(got, want);
        // Mutated: a frame error or a decode error closes the connection; nothing panics.
        let bad = mutate(&mut rng, &stream, &frame(&ServerMsg::Refused { reason: "x".into() }));
        let mut buf = BytesMut::new();
        'conn: for part in chunks(&mut rng, &bad) {
            buf.extend_from_slice(part);
            loop {
                match take_frame(&mut buf, rng.gen_range(1..1 << 16)) {
                    Ok(Some(p)) => {
                        if decode_payload::<ClientMsg>(&p).is_err() {
                            refused += 1;
                            break 'conn;
                        }
                        let _ = decode_payload::<ServerMsg>(&p);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        refused += 1;
                        break 'conn;
                    }
                }
            }
        }
    }
    eprintln!("native frames: {iters} streams round-tripped, {iters} mutated ({refused} refused), no panic");
}

#[test]
fn node_configs_refuse_mutations_with_an_error_never_a_panic() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config");
    let samples: Vec<String> =
        (1..=3).map(|i| std::fs::read_to_string(format!("{dir}/node{i}.toml")).expect("sample config")).collect();
    for s in &samples {
        NodeConfig::from_toml_str(s).expect("the sample configs are valid");
    }
    let mut rng = synod_core::rng_from_seed(0xc0f);
    let iters = iterations(3_000);
    let mut refused = 0u64;
    for i in 0..iters {
        let s = &samples[i % samples.len()];
        let other = &samples[(i + 1) % samples.len()];
        let bad = mutate(&mut rng, s.as_bytes(), other.as_bytes());
        match NodeConfig::from_toml_str(&String::from_utf8_lossy(&bad)) {
            Ok(_) => {}
            Err(e) => {
                assert!(!e.to_string().is_empty());
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "no mutated config was refused");
    eprintln!("node configs: {iters} mutated ({refused} refused with an error), no panic");
}
