//! The connector's position in a compacted offsets topic (Kafka Connect's shape): key
//! `["<name>", {"table": ..., "task": ...}]`, value [`Offsets`]. Written in the same transaction as
//! the records it accounts for; read back read_committed, so aborted progress is never seen.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::SinkError;
use crate::source::Position;

/// Progress inside a unit that is not fully emitted yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitProgress {
    /// Change rows of the split already committed.
    pub consumed: u64,
    pub done: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub unit: Position,
    pub snapshot: bool,
    pub splits: BTreeMap<String, SplitProgress>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    /// The last unit fully emitted.
    pub issued: Option<Position>,
    /// The unit being emitted, with per-split progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
    /// Records produced by this task so far (informational).
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub updated_ms: i64,
}

/// Reaching the end of a partition is how the reader knows it is done, not an error to log.
struct EofIsFine;

impl ClientContext for EofIsFine {
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
        if !eof {
            tracing::error!(%error, reason, "offsets reader: kafka client error");
        }
    }
}

impl ConsumerContext for EofIsFine {}

/// Read the latest committed offsets of `key` from `topic` (read_committed, to the end).
/// Must run after the task's producer has fenced/aborted any transaction it left open.
pub fn read_offsets(
    bootstrap: &str,
    topic: &str,
    key: &str,
    extra: &BTreeMap<String, String>,
) -> Result<Option<Offsets>, SinkError> {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("group.id", "lakestream-offsets-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    for (k, v) in extra {
        if is_client_security_key(k) {
            cfg.set(k, v);
        }
    }
    let consumer: BaseConsumer<EofIsFine> =
        cfg.create_with_context(EofIsFine).map_err(|e| SinkError::kafka("offsets consumer", e))?;
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .map_err(|e| SinkError::kafka("offsets topic metadata", e))?;
    let parts: Vec<i32> = md.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
    if parts.is_empty() {
        return Ok(None);
    }
    let mut tpl = TopicPartitionList::new();
    for p in &parts {
        tpl.add_partition_offset(topic, *p, Offset::Beginning).map_err(|e| SinkError::kafka("assign", e))?;
    }
    consumer.assign(&tpl).map_err(|e| SinkError::kafka("assign offsets topic", e))?;
    let mut eof = std::collections::HashSet::new();
    let mut latest: Option<Offsets> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while eof.len() < parts.len() {
        if std::time::Instant::now() > deadline {
            return Err(SinkError::Offsets(format!(
                "timed out reading offsets topic `{topic}` to its end (an open transaction of another producer?)"
            )));
        }
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(e)) => return Err(SinkError::kafka("reading offsets topic", e)),
            Some(Ok(m)) => {
                if m.key() != Some(key.as_bytes()) {
                    continue;
                }
                latest = match m.payload() {
                    None => None,
                    Some(v) => Some(serde_json::from_slice(v).map_err(|e| {
                        SinkError::Offsets(format!("offsets record at {}:{} is not valid: {e}", m.partition(), m.offset()))
                    })?),
                };
            }
        }
    }
    Ok(latest)
}

/// librdkafka keys that every client of the cluster needs (security), shared with the consumer
/// and admin clients.
pub fn is_client_security_key(k: &str) -> bool {
    k.starts_with("security.") || k.starts_with("sasl.") || k.starts_with("ssl.") || k == "client.dns.lookup"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_json_round_trip() {
        let mut splits = BTreeMap::new();
        splits.insert("p/fg".to_string(), SplitProgress { consumed: 3, done: false });
        let o = Offsets {
            issued: Some(Position { instant: "1".into(), completed: Some("2".into()) }),
            in_flight: Some(InFlight { unit: Position { instant: "3".into(), completed: None }, snapshot: false, splits }),
            records: 9,
            updated_ms: 1,
        };
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Offsets>(&s).unwrap(), o);
    }
}
