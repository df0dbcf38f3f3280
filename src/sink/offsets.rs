//! The connector's position in a compacted offsets topic (Kafka Connect's shape): key
//! `["<name>", {"table": ..., "task": ...}]`, value the runtime's position record (JSON, see
//! `runtime::state`). Written in the same transaction as the records it accounts for; read back
//! read_committed, so aborted progress is never seen. This module does the topic I/O only.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::SinkError;

/// One committed record of the offsets topic, as the latest value of its key.
#[derive(Debug, Clone)]
pub struct StoredRecord {
    pub value: Vec<u8>,
    pub partition: i32,
    pub offset: i64,
}

/// Where a read of the offsets topic ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadTo {
    /// The last stable offset: what is committed now (a transaction still open is not waited
    /// for; it may be a zombie's that only fencing ends).
    Stable,
    /// The high watermark taken before reading, once every transaction below it is settled: a
    /// task resuming after its own producer was initialised (and every other id it could race
    /// with fenced) must not start from a position older than one already published.
    Settled,
}

/// The latest committed value of every key `want` accepts in the connector's offsets topic
/// (read_committed, to the end; a tombstone forgets the key).
pub fn read_records_matching(
    connector: &crate::config::SinkSettings,
    want: &dyn Fn(&[u8]) -> bool,
    to: ReadTo,
) -> Result<Records, SinkError> {
    let topic = connector.kafka.offsets_topic.as_str();
    let consumer = offsets_consumer(connector)?;
    super::oauth::seeded(consumer.client(), connector)?;
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .map_err(|e| SinkError::kafka("offsets topic metadata", e))?;
    let parts: Vec<i32> = md
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if parts.is_empty() {
        return Ok(Records::new());
    }
    let ends = partition_ends(connector, &consumer, &parts, to)?;
    if ends.is_empty() {
        super::client::close_detached(consumer);
        return Ok(Records::new());
    }
    let mut tpl = TopicPartitionList::new();
    for p in ends.keys() {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(|e| SinkError::kafka("assign", e))?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| SinkError::kafka("assign offsets topic", e))?;
    let latest = read_to_ends(&consumer, topic, &ends, to, want);
    super::client::close_detached(consumer);
    latest
}

/// The latest record of each key an offsets read keeps.
type Records = std::collections::HashMap<Vec<u8>, StoredRecord>;

fn offsets_consumer(connector: &crate::config::SinkSettings) -> Result<BaseConsumer<super::QuietContext>, SinkError> {
    super::client_config(connector)
        .set("group.id", "lakestream-offsets-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        // the topic is small and read to its end: a fetch at the end must not wait the default
        // 500 ms for records that will not come (every start paid it on Kafka; noida answers at once)
        .set("fetch.wait.max.ms", "10")
        .create_with_context(super::QuietContext::new(connector, "offsets reader"))
        .map_err(|e| SinkError::kafka("offsets consumer", e))
}

/// The end to read each of `parts` to, leaving out partitions that hold nothing (a new
/// connector's topic: assigning one and fetching to its end cost every fresh start ~30 ms).
/// Settled: the end is the high watermark taken now, not the first end-of-partition: read_committed
/// stops at the last stable offset, below a transaction still open (a commit of our own whose
/// outcome the broker has not settled yet). Reading past it only once it is settled is what
/// keeps a restart from resuming at a position older than one already published. The high
/// watermark is asked through a read_uncommitted client: librdkafka asks ListOffsets with the
/// client's isolation level, and read_committed answers the last stable offset, which on Kafka 4
/// (KIP-890: markers written after the commit returned) can still stand before the last commit
/// (an `offsets show` right after `run --once` read no record at all, seen in CI).
fn partition_ends(
    connector: &crate::config::SinkSettings,
    consumer: &BaseConsumer<super::QuietContext>,
    parts: &[i32],
    to: ReadTo,
) -> Result<std::collections::BTreeMap<i32, i64>, SinkError> {
    let topic = connector.kafka.offsets_topic.as_str();
    let uncommitted = match to {
        ReadTo::Stable => None,
        ReadTo::Settled => Some(super::scan::high_watermarks_client(connector, false)?),
    };
    let mut ends = std::collections::BTreeMap::new();
    for p in parts {
        let client = uncommitted.as_ref().unwrap_or(consumer).client();
        let (low, high) = super::scan::partition_watermarks(client, topic, *p, Duration::from_secs(30))?;
        if high > low {
            ends.insert(*p, high);
        }
    }
    if let Some(c) = uncommitted {
        super::client::close_detached(c);
    }
    Ok(ends)
}

/// Reads the assigned partitions of `topic` to `ends` (with `ReadTo::Settled`, at or past the
/// end taken before; with `Stable`, to the first end of partition), keeping the latest value of
/// each key `want` accepts (a tombstone forgets its key).
fn read_to_ends(
    consumer: &BaseConsumer<super::QuietContext>,
    topic: &str,
    ends: &std::collections::BTreeMap<i32, i64>,
    to: ReadTo,
    want: &dyn Fn(&[u8]) -> bool,
) -> Result<Records, SinkError> {
    let mut latest = Records::new();
    let mut at_eof = std::collections::HashSet::new();
    let mut eof = std::collections::HashSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while eof.len() < ends.len() {
        for p in &at_eof {
            let settled = || -> Result<bool, SinkError> { Ok(super::scan::position(consumer, topic, *p)? >= ends[p]) };
            if !eof.contains(p) && (to == ReadTo::Stable || settled()?) {
                eof.insert(*p);
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(SinkError::Offsets(format!(
                "timed out reading offsets topic `{topic}` to its end (an open transaction of another producer?)"
            )));
        }
        // only settling left (every open partition at its end): look again soon
        let settling = ends.keys().all(|p| eof.contains(p) || at_eof.contains(p));
        match consumer.poll(Duration::from_millis(if settling { 10 } else { 500 })) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_eof.insert(p);
            }
            // the client reconnects by itself: a broker restart or a dropped connection is ridden
            // out until the deadline (a stopped connector must not fail on a blip)
            Some(Err(KafkaError::MessageConsumption(code)))
                if matches!(
                    code,
                    RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure
                ) =>
            {
                tracing::warn!(%code, "offsets reader: broker connection lost; retrying until the deadline");
            }
            Some(Err(e)) => return Err(SinkError::kafka("reading offsets topic", e)),
            Some(Ok(m)) => {
                let Some(key) = m.key().filter(|k| want(k)) else {
                    continue;
                };
                match m.payload() {
                    None => {
                        latest.remove(key);
                    }
                    Some(v) => {
                        let o = StoredRecord {
                            value: v.to_vec(),
                            partition: m.partition(),
                            offset: m.offset(),
                        };
                        latest.insert(key.to_vec(), o);
                    }
                }
            }
        }
    }
    Ok(latest)
}
