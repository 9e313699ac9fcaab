//! Config parsing and validation: the sample configs are valid, and every bad case is refused
//! with a message naming the problem.

mod common;

use std::path::PathBuf;
use synod_runtime::NodeConfig;
use synod_wal::FsyncMode;

fn sample(i: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../config/node{i}.toml"))
}

fn sample_text() -> String {
    std::fs::read_to_string(sample(1)).unwrap()
}

fn error_of(toml: &str) -> String {
    NodeConfig::from_toml_str(toml).expect_err("config must be refused").to_string()
}

#[test]
fn sample_configs_validate() {
    let configs: Vec<NodeConfig> = (1..=3).map(|i| NodeConfig::load(&sample(i)).unwrap()).collect();
    for (i, c) in configs.iter().enumerate() {
        assert_eq!(c.id, i as u32 + 1);
        assert_eq!(c.me().id, c.id);
        assert_eq!(c.protocol, "multipaxos");
        assert_eq!(c.cluster, "synod");
        assert_eq!(c.fsync, FsyncMode::Batch);
        assert!(!c.in_memory);
        assert_eq!(c.members.len(), 3);
        assert_eq!(c.members, configs[0].members, "all three files list the same members");
        assert_eq!(c.params, configs[0].params);
        c.validate().unwrap();
    }
    assert_eq!(configs[1].me().client_addr.to_string(), "127.0.0.1:7202");
    assert_ne!(configs[0].data_dir, configs[1].data_dir);
}

#[test]
fn defaults_apply() {
    let c = NodeConfig::from_toml_str(
        r#"
        id = 1
        in_memory = true
        [[members]]
        id = 1
        peer_addr = "127.0.0.1:1"
        client_addr = "127.0.0.1:2"
        admin_addr = "127.0.0.1:3"
        "#,
    )
    .unwrap();
    assert_eq!(c.cluster, "synod");
    assert_eq!(c.protocol, "multipaxos");
    assert_eq!(c.fsync, FsyncMode::Batch);
    assert_eq!(c.params, synod_core::ProtocolParams::default());
    assert_eq!(c.limits, synod_core::Limits::default());
    assert_eq!(c.log_level, None);
}

#[test]
fn unknown_key_is_named() {
    let e = error_of(&format!("bogus_setting = 3\n{}", sample_text()));
    assert!(e.contains("bogus_setting"), "{e}");
    let e = error_of(&sample_text().replace("max_batch = 256", "max_batch = 256\nmax_bacth = 3"));
    assert!(e.contains("max_bacth"), "{e}");
}

#[test]
fn duplicate_member_id() {
    let e = error_of(&sample_text().replace("id = 3\npeer_addr", "id = 2\npeer_addr"));
    assert!(e.contains("duplicate member id 2"), "{e}");
}

#[test]
fn duplicate_address() {
    let e = error_of(&sample_text().replace("127.0.0.1:7303", "127.0.0.1:7101"));
    assert!(e.contains("duplicate address 127.0.0.1:7101"), "{e}");
}

#[test]
fn own_id_missing() {
    let e = error_of(&sample_text().replacen("id = 1\n", "id = 9\n", 1));
    assert!(e.contains("own id 9 is missing from members"), "{e}");
}

#[test]
fn unknown_protocol_lists_known_ones() {
    let e = error_of(&sample_text().replace("protocol = \"multipaxos\"", "protocol = \"zab\""));
    assert!(e.contains("unknown protocol \"zab\""), "{e}");
    assert!(e.contains("multipaxos"), "lists the known protocols: {e}");
}

#[test]
fn bad_params() {
    let e = error_of(&sample_text().replace("heartbeat_ms = 50", "heartbeat_ms = 400"));
    assert!(e.contains("heartbeat_ms"), "{e}");
    let e = error_of(&sample_text().replace("max_batch = 256", "max_batch = 0"));
    assert!(e.contains("max_batch"), "{e}");
}

#[test]
fn data_dir_required_unless_in_memory() {
    let without = sample_text().replace("data_dir = \"data/node1\"\n", "");
    let e = error_of(&without);
    assert!(e.contains("data_dir is required"), "{e}");
    NodeConfig::from_toml_str(&format!("in_memory = true\n{without}")).unwrap();
}

#[test]
fn bad_fsync_mode() {
    let e = error_of(&sample_text().replace("fsync = \"batch\"", "fsync = \"sometimes\""));
    assert!(e.contains("sometimes"), "{e}");
}

#[test]
fn missing_file_is_named() {
    let e = NodeConfig::load(std::path::Path::new("/nonexistent/node.toml")).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/node.toml"), "{e}");
}

#[tokio::test]
async fn port_in_use_names_the_address_and_listener() {
    let mut c = common::cluster_configs(1, "multipaxos", None, FsyncMode::Never).remove(0);
    // Occupy the client port: the peer listener binds, the client listener fails.
    let taken = std::net::TcpListener::bind(c.me().client_addr).unwrap();
    let addr = taken.local_addr().unwrap();
    c.members[0].client_addr = addr;
    let e = synod_runtime::run(c, std::future::pending()).await.unwrap_err();
    let msg = format!("{e:#}");
    assert!(msg.contains("client listener"), "{msg}");
    assert!(msg.contains(&addr.to_string()), "{msg}");
}

#[test]
fn security_settings_are_checked() {
    // Top-level keys go before the first table of the sample.
    let with = |top: &str| format!("{top}\n{}", sample_text());
    let ok = NodeConfig::from_toml_str(&with("cluster_secret = \"0123456789abcdef0123\"")).unwrap();
    assert_eq!(ok.cluster_secret().unwrap().as_deref(), Some(&b"0123456789abcdef0123"[..]));
    assert_eq!(ok.max_connections, NodeConfig::DEFAULT_MAX_CONNECTIONS);
    assert!(ok.admin.faults, "fault injection defaults to on (development clusters)");
    assert_eq!(ok.admin_token().unwrap(), None);

    let e = error_of(&with("cluster_secret = \"short\""));
    assert!(e.contains("cluster_secret must be at least 16 characters"), "{e}");
    let e = error_of(&with("max_connections = 0"));
    assert!(e.contains("max_connections"), "{e}");
    let e = error_of(&format!("{}\n[admin]\ntoken = \"\"\n", sample_text()));
    assert!(e.contains("admin.token must not be empty"), "{e}");
    let e = error_of(&format!("{}\n[admin]\ntokn = \"x\"\n", sample_text()));
    assert!(e.contains("tokn"), "{e}");

    // Secrets from files: trimmed, refused when empty, named when missing, not both ways.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secret");
    std::fs::write(&file, "  from-a-file-0123456789  \n").unwrap();
    let c =
        NodeConfig::from_toml_str(&with(&format!("cluster_secret_file = {:?}", file.display().to_string()))).unwrap();
    assert_eq!(c.cluster_secret().unwrap().as_deref(), Some(&b"from-a-file-0123456789"[..]));
    std::fs::write(&file, "\n").unwrap();
    assert!(c.cluster_secret().unwrap_err().to_string().contains("is empty"));
    let missing = NodeConfig::from_toml_str(&with("cluster_secret_file = \"/nonexistent/secret\"")).unwrap();
    assert!(missing.cluster_secret().unwrap_err().to_string().contains("/nonexistent/secret"));
    let both = NodeConfig::from_toml_str(&with(&format!(
        "cluster_secret = \"0123456789abcdef0123\"\ncluster_secret_file = {:?}",
        file.display().to_string()
    )))
    .unwrap();
    assert!(both.cluster_secret().unwrap_err().to_string().contains("not both"));
    let t =
        NodeConfig::from_toml_str(&format!("{}\n[admin]\ntoken = \"tok\"\nfaults = false\n", sample_text())).unwrap();
    assert_eq!(t.admin_token().unwrap().as_deref(), Some("tok"));
    assert!(!t.admin.faults);
}
