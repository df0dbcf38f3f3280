//! The Kafka clients' settings: a transactional producer's (ours, defaults, the user's
//! `producer.override.*`), other clients' (bootstrap and security only), and how long a
//! transaction call may block.

use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;

use super::offsets::is_client_security_key;
use crate::config::ConnectorConfig;

/// A transactional producer's settings: ours, then `defaults`, then the user's
/// `producer.override.*` (which win).
pub(super) fn producer_config(
    cfg: &ConnectorConfig,
    transactional_id: &str,
    defaults: &[(&str, &str)],
) -> ClientConfig {
    let mut pc = ClientConfig::new();
    pc.set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("socket.nagle.disable", "true")
        .set("transactional.id", transactional_id)
        .set("enable.idempotence", "true")
        .set("transaction.timeout.ms", cfg.kafka.transaction_timeout_ms.to_string());
    for (k, v) in defaults {
        pc.set(*k, *v);
    }
    for (k, v) in &cfg.kafka.producer_overrides {
        pc.set(k, v);
    }
    pc
}

/// A client of the connector's cluster (admin, probe): `bootstrap.servers` and the security
/// settings of `producer.override.*`, which every client needs.
pub(super) fn client_config(cfg: &ConnectorConfig) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &cfg.kafka.bootstrap_servers)
        .set("socket.nagle.disable", "true");
    for (k, v) in cfg
        .kafka
        .producer_overrides
        .iter()
        .filter(|(k, _)| is_client_security_key(k))
    {
        cc.set(k, v);
    }
    cc
}

/// Check the producer's settings as librdkafka will take them (`producer.override.*` typos,
/// values out of range), without creating a client: `validate` and `run` refuse them at start
/// instead of failing when the first producer is created.
pub fn check_settings(cfg: &ConnectorConfig) -> Result<(), String> {
    producer_config(cfg, &cfg.transactional_id(), &[])
        .create_native_config()
        .map(drop)
        .map_err(|e| match e {
            KafkaError::ClientConfig(_, desc, key, value) => format!("`producer.override.{key}={value}`: {desc}"),
            e => e.to_string(),
        })
}

/// How long a transaction call (init, commit, abort) may block.
pub(super) fn txn_call_timeout(cfg: &ConnectorConfig) -> Duration {
    Duration::from_millis(cfg.kafka.transaction_timeout_ms.max(10_000))
}
