//! Reading a topic back, whole (for `verify`): every partition from its beginning, read_committed
//! (aborted transactions and control records are never seen), to the end it had when the read
//! began. One partition after another: a key's records are in one partition, in offset order
//! (and a broker that answers a fetch with all it holds, as noida-db does, then answers with one
//! partition's records, not the whole topic's).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::SinkError;
use crate::config::SinkSettings;

/// One committed record.
pub struct TopicRecord<'a> {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    /// `None`: a tombstone.
    pub value: Option<&'a [u8]>,
}

/// What was read: per partition, the records seen and the end offset the read stopped at.
#[derive(Debug, Default, Clone)]
pub struct TopicRead {
    pub partitions: HashMap<i32, (u64, i64)>,
}

impl TopicRead {
    pub fn records(&self) -> u64 {
        self.partitions.values().map(|(n, _)| n).sum()
    }
}

fn consumer(cfg: &SinkSettings) -> Result<BaseConsumer<super::QuietContext>, SinkError> {
    let mut cc = super::client_config(cfg);
    cc.set("group.id", format!("lakestream-verify-{}", cfg.name))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        // bounded fetches: a partition's share at most 8 MiB, a response at most 64 MiB
        .set("fetch.max.bytes", "67108864")
        .set("max.partition.fetch.bytes", "8388608")
        .set("receive.message.max.bytes", "134217728")
        // prefetch at most 16 MiB ahead of the reader
        .set("queued.max.messages.kbytes", "16384")
        // read to the end: a fetch there must not wait Kafka's default 500 ms for more
        .set("fetch.wait.max.ms", "10");
    // read_committed is what makes the audit exact
    create(cc, cfg, true, "read_committed", "verify reader")
}

/// The (low, high) watermarks of every partition of `topic` (an absent topic: none). The high
/// watermark, not the last stable offset: librdkafka asks ListOffsets with the client's isolation
/// level, so this asks through a read_uncommitted client; a read_committed one answers the last
/// stable offset, which on Kafka 4 can stand before a transaction whose commit already returned
/// (its markers come a moment later), and `verify` would miss the records of the position it read.
/// [`read_to_end`] then waits at the end until it is settled.
pub fn watermarks(cfg: &SinkSettings, topic: &str) -> Result<HashMap<i32, (i64, i64)>, SinkError> {
    watermarks_with(
        high_watermarks_client(cfg, true)?.client(),
        topic,
        Duration::from_secs(30),
    )
}

/// A client whose watermarks are the high ones (read_uncommitted: see [`watermarks`]); with the
/// user's `consumer.override.*` where it stands in for the verify reader.
pub(super) fn high_watermarks_client(
    cfg: &SinkSettings,
    verify: bool,
) -> Result<BaseConsumer<super::QuietContext>, SinkError> {
    let mut cc = super::client_config(cfg);
    cc.set("group.id", format!("lakestream-watermarks-{}", cfg.name));
    create(cc, cfg, verify, "read_uncommitted", "watermarks")
}

/// A consumer of `cc` at `isolation` (with the user's `consumer.override.*` where `overrides`),
/// its token seeded; `label` names it in logs and errors.
fn create(
    mut cc: rdkafka::ClientConfig,
    cfg: &SinkSettings,
    overrides: bool,
    isolation: &str,
    label: &'static str,
) -> Result<BaseConsumer<super::QuietContext>, SinkError> {
    if overrides {
        for (k, v) in &cfg.kafka.consumer_overrides {
            cc.set(k, v);
        }
    }
    let c: BaseConsumer<super::QuietContext> = cc
        .set("isolation.level", isolation)
        .create_with_context(super::QuietContext::new(cfg, label))
        .map_err(|e| SinkError::kafka(label, e))?;
    super::oauth::seeded(c.client(), cfg)?;
    Ok(c)
}

/// [`watermarks`] asked through a client of any kind (the sink asks through its producer's).
pub(super) fn watermarks_with<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<i32, (i64, i64)>, SinkError> {
    let md = client
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| SinkError::kafka(format!("metadata of topic {topic}"), e))?;
    let mut out = HashMap::new();
    for t in md.topics() {
        if t.error().is_some() {
            continue;
        }
        for p in t.partitions() {
            out.insert(p.id(), partition_watermarks(client, topic, p.id(), timeout)?);
        }
    }
    Ok(out)
}

/// One partition's (low, high) watermarks. A topic created a moment ago (this start's own
/// topics) has no leader for some 100 ms on Kafka: asked again every 20 ms for up to 10 s before
/// it counts as an outage (a fresh connector's first run failed and retried a second later).
pub(super) fn partition_watermarks<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    p: i32,
    timeout: Duration,
) -> Result<(i64, i64), SinkError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.fetch_watermarks(topic, p, timeout) {
            Ok(w) => return Ok(w),
            Err(KafkaError::MetadataFetch(
                RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::UnknownTopicOrPartition,
            )) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(SinkError::kafka(format!("watermarks of {topic}/{p}"), e)),
        }
    }
}

/// The consumer's position on `topic`/`p` (read_committed: it stops at the last stable offset).
pub(super) fn position(c: &BaseConsumer<super::QuietContext>, topic: &str, p: i32) -> Result<i64, SinkError> {
    let tpl = c.position().map_err(|e| SinkError::kafka("consumer position", e))?;
    Ok(tpl
        .find_partition(topic, p)
        .and_then(|e| match e.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        })
        .unwrap_or(0))
}

/// Read `topic` from the beginning to `ends` ([`watermarks`] taken before), handing each record
/// to `f` (which may stop the read with an error of its own). `progress` is called about every
/// 10 s with the records read so far.
pub fn read_to_end<E: From<SinkError>>(
    cfg: &SinkSettings,
    topic: &str,
    ends: &HashMap<i32, (i64, i64)>,
    f: &mut dyn FnMut(TopicRecord<'_>) -> Result<(), E>,
    progress: &mut dyn FnMut(u64),
) -> Result<TopicRead, E> {
    read_from(cfg, topic, &HashMap::new(), ends, f, progress)
}

/// [`read_to_end`] from the offsets in `from` (a partition not in it: from its beginning).
pub fn read_from<E: From<SinkError>>(
    cfg: &SinkSettings,
    topic: &str,
    from: &HashMap<i32, i64>,
    ends: &HashMap<i32, (i64, i64)>,
    f: &mut dyn FnMut(TopicRecord<'_>) -> Result<(), E>,
    progress: &mut dyn FnMut(u64),
) -> Result<TopicRead, E> {
    let c = consumer(cfg)?;
    let mut read = TopicRead::default();
    let mut parts: Vec<i32> = ends.keys().copied().collect();
    parts.sort();
    for p in &parts {
        read.partitions.insert(*p, (0, ends[p].1));
    }
    let mut last_progress = Instant::now();
    for p in parts
        .into_iter()
        .filter(|p| ends[p].1 > ends[p].0.max(from.get(p).copied().unwrap_or(0)))
    {
        let mut tpl = TopicPartitionList::new();
        let start = from.get(&p).map_or(Offset::Beginning, |o| Offset::Offset(*o));
        tpl.add_partition_offset(topic, p, start)
            .map_err(|e| SinkError::kafka("assign", e))?;
        c.assign(&tpl).map_err(|e| SinkError::kafka("assign topic", e))?;
        let open = std::collections::HashSet::from([p]);
        read_partition(
            &c,
            topic,
            ends,
            open,
            &mut read,
            f,
            &mut || {
                if last_progress.elapsed() > Duration::from_secs(10) {
                    last_progress = Instant::now();
                    true
                } else {
                    false
                }
            },
            progress,
        )?;
    }
    Ok(read)
}

/// Read the assigned partitions (`open`) to their `ends`.
#[allow(clippy::too_many_arguments)]
fn read_partition<E: From<SinkError>>(
    c: &BaseConsumer<super::QuietContext>,
    topic: &str,
    ends: &HashMap<i32, (i64, i64)>,
    mut open: std::collections::HashSet<i32>,
    read: &mut TopicRead,
    f: &mut dyn FnMut(TopicRecord<'_>) -> Result<(), E>,
    due: &mut dyn FnMut() -> bool,
    progress: &mut dyn FnMut(u64),
) -> Result<(), E> {
    let mut idle_since = Instant::now();
    while !open.is_empty() {
        if due() {
            progress(read.records());
        }
        match c.poll(Duration::from_millis(500)) {
            None => {
                // read_committed stops at an open transaction: its records come when it ends
                if idle_since.elapsed() > Duration::from_secs(300) {
                    return Err(SinkError::Topic(format!(
                        "no record of {topic} for 5 minutes before its end (partitions {open:?} still open: an \
                         abandoned transaction?)"
                    ))
                    .into());
                }
            }
            // at the last stable offset: done once it is past the end the read began with (a
            // commit marker can take the last offsets; before it, an open transaction holds them)
            Some(Err(KafkaError::PartitionEOF(p))) => {
                if position(c, topic, p)? >= ends.get(&p).map_or(0, |w| w.1) {
                    open.remove(&p);
                }
            }
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
            ))) => tracing::warn!(topic, "verify reader: broker connection lost; retrying"),
            Some(Err(e)) => return Err(SinkError::kafka(format!("reading {topic}"), e).into()),
            Some(Ok(m)) => {
                idle_since = Instant::now();
                let p = m.partition();
                let end = ends.get(&p).map_or(0, |w| w.1);
                if m.offset() >= end {
                    open.remove(&p);
                    continue;
                }
                if let Some(e) = read.partitions.get_mut(&p) {
                    e.0 += 1;
                }
                f(TopicRecord {
                    partition: p,
                    offset: m.offset(),
                    key: m.key(),
                    value: m.payload(),
                })?;
                if m.offset() + 1 >= end {
                    open.remove(&p);
                }
            }
        }
    }
    Ok(())
}

/// Where a read_committed look at `offset` starts: one offset before it. noida-db 0.2.3 hides a
/// producer's committed records from a fetch that starts right after that producer's abort
/// marker (a fetch starting at the marker or before it sees them; Kafka shows them either way,
/// `tests/late_produce.py`), and a failed transaction's successor starts exactly there.
fn early(offset: i64) -> i64 {
    (offset - 1).max(0)
}

/// Whether the record at `topic`/`partition`/`offset` is committed: read_committed from it, the
/// first record seen is it (committed) or a later one (it was aborted: the reader skips it). An
/// end of partition below it means its transaction is not settled yet: asked again for up to a
/// minute.
pub fn committed_at(cfg: &SinkSettings, topic: &str, partition: i32, offset: i64) -> Result<bool, SinkError> {
    let c = consumer(cfg)?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(early(offset)))
        .map_err(|e| SinkError::kafka("assign", e))?;
    c.assign(&tpl).map_err(|e| SinkError::kafka("assign topic", e))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) if m.offset() < offset => {}
            Some(Ok(m)) => return Ok(m.offset() == offset),
            // at the end, past it: it was aborted (below it: not settled yet, ask again)
            Some(Err(KafkaError::PartitionEOF(_))) if position(&c, topic, partition)? > offset => return Ok(false),
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
            ))) => {}
            Some(Err(e)) => return Err(SinkError::kafka(format!("reading {topic}/{partition} at {offset}"), e)),
        }
    }
    Err(SinkError::Offsets(format!(
        "{topic}/{partition}: the transaction holding offset {offset} was not settled within a minute"
    )))
}

/// Where records of `sent` are visible: its topic read_committed from its floors to the end each
/// partition has now (settled: an open transaction below that end is waited for, as in
/// [`read_to_end`]), every non-tombstone record fingerprinted.
pub fn find_sent(cfg: &SinkSettings, sent: &super::SentRecords) -> Result<Vec<(i32, i64)>, SinkError> {
    let ends = watermarks(cfg, &sent.topic)?;
    let from: HashMap<i32, i64> = sent.floors.iter().map(|(p, o)| (*p, early(*o))).collect();
    let mut found = Vec::new();
    let mut f = |r: TopicRecord<'_>| -> Result<(), SinkError> {
        if let Some(v) = r.value {
            if sent.contains(super::fingerprint(r.key.unwrap_or_default(), v)) {
                found.push((r.partition, r.offset));
            }
        }
        Ok(())
    };
    let read = read_from(cfg, &sent.topic, &from, &ends, &mut f, &mut |_| {})?;
    tracing::debug!(topic = %sent.topic, from = ?sent.floors, ends = ?ends, read = read.records(), prints = sent.prints.len(),
        found = found.len(), "looked for a failed transaction's records");
    Ok(found)
}
