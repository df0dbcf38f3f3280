//! The Kafka clients' settings: a transactional producer's (ours, defaults, the user's
//! `producer.override.*`), other clients' (bootstrap and security only), and how long a
//! transaction call may block.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

use crate::config::SinkSettings;

/// Every client connects to the brokers it learns of at once. With librdkafka's sparse
/// connections (its default) a fresh client connects lazily, paced by suppression timers:
/// measured on Kafka 4.1.2, a fresh transactional producer's `init_transactions` took 135 ms,
/// or 1,058 ms in 1 of 4 starts (the bootstrap broker was not picked for a connection until
/// the 1 s main timer fired); without them, 4-17 ms in 22 of 22. The cost: each client opens a
/// connection to every broker of the cluster, not only to the leaders it needs (more than a
/// producer's on a cluster of many brokers and few partitions);
/// `producer.override.enable.sparse.connections=true` restores lazy connections for every client.
const SPARSE: &str = "false";

/// Closes a client without waiting: dropping one of rust-rdkafka's threaded clients (producer,
/// admin) joins its polling thread, which polls in 100 ms steps, and closing a consumer takes
/// as long (measured on Kafka: ~100 ms of every start, after the topics were created and after
/// the offsets read). Its work is settled by then; nobody needs to wait.
pub(super) fn close_detached<T: Send + 'static>(client: T) {
    std::thread::spawn(move || drop(client));
}

/// A transactional producer's settings: ours, then `defaults`, then the user's
/// `producer.override.*` (which win).
pub(super) fn producer_config(cfg: &SinkSettings, transactional_id: &str, defaults: &[(&str, &str)]) -> ClientConfig {
    let mut pc = ClientConfig::new();
    pc.set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("socket.nagle.disable", "true")
        .set("enable.sparse.connections", SPARSE)
        .set("transactional.id", transactional_id)
        .set("enable.idempotence", "true")
        .set("transaction.timeout.ms", cfg.kafka.transaction_timeout_ms.to_string());
    for (k, v) in defaults {
        pc.set(*k, *v);
    }
    for (k, v) in &cfg.kafka.producer_overrides {
        if !super::oauth::served_here(&cfg.kafka.producer_overrides, k) {
            pc.set(k, v);
        }
    }
    if cfg.kafka.producer_overrides.iter().any(|(k, _)| k == "debug") {
        // rust-rdkafka caps librdkafka's log level by the `log` crate's, which is off here:
        // asked-for debug contexts reach `tracing` at debug level (see `quiet`).
        pc.set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    }
    pc
}

/// A client of the connector's cluster (admin, probe): `bootstrap.servers` and the security
/// settings of `producer.override.*`, which every client needs, and its sparse-connection choice
/// ([`SPARSE`]).
pub(super) fn client_config(cfg: &SinkSettings) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("socket.nagle.disable", "true")
        .set("enable.sparse.connections", SPARSE);
    for (k, v) in cfg
        .kafka
        .producer_overrides
        .iter()
        .filter(|(k, _)| is_client_security_key(k) || *k == "enable.sparse.connections")
        .filter(|(k, _)| !super::oauth::served_here(&cfg.kafka.producer_overrides, k))
    {
        cc.set(k, v);
    }
    cc
}

/// librdkafka keys that every client of the cluster needs (security), shared with the consumer
/// and admin clients.
fn is_client_security_key(k: &str) -> bool {
    k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.") || k == "client.dns.lookup"
}

/// Check the producer's settings as librdkafka will take them (`producer.override.*` typos,
/// values out of range), without creating a client: `validate` and `run` refuse them at start
/// instead of failing when the first producer is created.
pub fn check_settings(cfg: &SinkSettings) -> Result<(), String> {
    super::oauth::TokenSource::of_connector(cfg)?;
    producer_config(cfg, cfg.transactional_id(false), &[])
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            KafkaError::ClientConfig(_, desc, key, value) => format!("`producer.override.{key}={value}`: {desc}"),
            e => e.to_string(),
        })
}

/// How long a transaction call (init, commit, abort) may block.
pub(super) fn txn_call_timeout(cfg: &SinkSettings) -> Duration {
    Duration::from_millis(cfg.kafka.transaction_timeout_ms.max(10_000))
}
