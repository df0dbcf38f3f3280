//! The records a transaction sent, kept so they can be found again in the topic whether or not
//! the broker acknowledged them ([`SentRecords`]): after a transaction fails, none of them may ever
//! become visible, and the runtime looks (`runtime::resume`). Memory: 8 bytes a change record of
//! the open transaction (`transaction.max.records` bounds it: 8 MB at the default 1M).

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::producer::Producer;

use super::polled::Polled;

use super::{SinkError, StatsContext};

/// The change records one transaction sent, to find them again in the topic whether or not the
/// broker acknowledged them: a fingerprint of each, and per partition of the change topic an
/// offset below which none of them can be (the partition's end before the transaction began).
/// A record whose transaction failed must never become visible; one that does is a broker that
/// broke the transaction (or its fencing), and republishing would publish it twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SentRecords {
    pub topic: String,
    /// (partition, first offset to look at); a partition not named is read from its start.
    pub floors: Vec<(i32, i64)>,
    /// Fingerprints ([`fingerprint`]), sorted.
    pub prints: std::sync::Arc<Vec<u64>>,
    /// Change records sent (tombstones too).
    pub records: u64,
}

impl SentRecords {
    pub fn contains(&self, print: u64) -> bool {
        self.prints.binary_search(&print).is_ok()
    }
}

/// The fingerprint of a change record: its key and value bytes. The value holds the time the
/// event was made (`ts_ms`), so a republished copy of an event has another fingerprint than the
/// aborted original: finding the original is finding the broker's fault. Tombstones (a key
/// alone, alike for every delete of a key) are not fingerprinted.
pub fn fingerprint(key: &[u8], value: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = twox_hash::XxHash3_64::default();
    h.write(&(key.len() as u64).to_le_bytes());
    h.write(key);
    h.write(value);
    h.finish()
}

/// The open transaction's fingerprints and the change topic's floors, kept by the sink.
pub(super) struct SentLog {
    topic: String,
    prints: Vec<u64>,
    /// Per partition of the change topic, the offset the next transaction's records come at or
    /// after: the end when the sink started, then past each committed transaction's records.
    floors: HashMap<i32, i64>,
    /// The change topic's ends, asked for at start (taken before the first transaction).
    pending: Option<JoinHandle<Result<HashMap<i32, i64>, SinkError>>>,
}

impl SentLog {
    /// Ask for the change topic's partition ends on a thread of its own (one request a
    /// partition; the first transaction waits for them).
    pub(super) fn start(producer: Arc<Polled<StatsContext>>, topic: &str, timeout: Duration) -> Self {
        let t = topic.to_string();
        let pending = std::thread::spawn(move || {
            let ends = super::scan::watermarks_with(producer.client(), &t, timeout)?;
            Ok(ends.into_iter().map(|(p, (_, high))| (p, high)).collect())
        });
        SentLog {
            topic: topic.to_string(),
            prints: Vec::new(),
            floors: HashMap::new(),
            pending: Some(pending),
        }
    }

    /// The floors known: before a transaction's first record.
    pub(super) fn ready(&mut self) -> Result<(), SinkError> {
        if let Some(pending) = self.pending.take() {
            self.floors = pending
                .join()
                .map_err(|_| SinkError::Topic("asking for the change topic's ends panicked".into()))??;
        }
        Ok(())
    }

    /// A transaction begins.
    pub(super) fn clear(&mut self) {
        self.prints.clear();
    }

    pub(super) fn is_empty(&self) -> bool {
        self.prints.is_empty()
    }

    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.prints.push(fingerprint(key, value));
    }

    /// The transaction committed, its last record in each partition at `last`.
    pub(super) fn committed(&mut self, last: &HashMap<i32, i64>) {
        for (p, o) in last {
            let floor = self.floors.entry(*p).or_insert(0);
            *floor = (*floor).max(o + 1);
        }
    }

    /// The open transaction's records (`records` of them, tombstones too).
    pub(super) fn records(&self, records: u64) -> SentRecords {
        let mut prints = self.prints.clone();
        prints.sort_unstable();
        let mut floors: Vec<(i32, i64)> = self.floors.iter().map(|(p, o)| (*p, *o)).collect();
        floors.sort_unstable();
        SentRecords {
            topic: self.topic.clone(),
            floors,
            prints: Arc::new(prints),
            records,
        }
    }
}
