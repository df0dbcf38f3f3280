//! The in-memory cluster the runtime tests run against: sinks keep committed transactions in
//! one log (a record's offset is its index), fencing by transactional id, faults injected by
//! commit number.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::changelog::KafkaRecord;
use crate::config::SinkSettings;
use crate::health::TaskHealthHandle;
use crate::sink::{fingerprint, Cluster, SentRecords, Sink, SinkError, StoredRecord, TxnTrace};

/// (topic, key, value) of a committed record.
pub(super) type Record = (String, Vec<u8>, Option<Vec<u8>>);

#[derive(Clone, Copy, Debug)]
pub(super) enum Fault {
    /// The commit fails and nothing of the transaction lands (the broker aborted it).
    Abort,
    /// The transaction lands but the answer is lost: the task sees an error.
    Ambiguous,
    /// A broker breaking a transaction in two: its change records land, its position record
    /// does not, and the answer is lost.
    Torn,
    /// The commit fails and is aborted, yet its change records land (unacknowledged).
    Leaky,
    /// The commit fails and is aborted, but the broker keeps its change records and lands them
    /// with the next transaction that commits (an aborted epoch's batch, as noida-db does).
    Kept,
}

#[derive(Default)]
pub(super) struct Broker {
    pub(super) log: Vec<Record>,
    /// Commit attempts so far; faults by attempt number (1-based).
    pub(super) attempts: usize,
    pub(super) faults: HashMap<usize, Fault>,
    /// Raise shutdown once this many change records have been sent.
    pub(super) stop_after_sends: Option<(u64, watch::Sender<bool>)>,
    pub(super) sent: u64,
    pub(super) epochs: HashMap<String, u64>,
    /// Change records a `Kept` fault holds for the next commit.
    pub(super) kept: Vec<Record>,
}

#[derive(Clone, Default)]
pub(super) struct FakeCluster(Arc<Mutex<Broker>>);

impl FakeCluster {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Broker> {
        self.0.lock().unwrap()
    }

    fn bump(&self, id: &str) -> u64 {
        let mut b = self.lock();
        let e = b.epochs.entry(id.to_string()).or_default();
        *e += 1;
        *e
    }

    pub(super) fn log(&self) -> Vec<Record> {
        self.lock().log.clone()
    }
}

struct FakeSink {
    cluster: FakeCluster,
    id: String,
    epoch: u64,
    topic: String,
    txn_topic: String,
    offsets: (String, String),
    open: Vec<Record>,
    records: u64,
    started: Option<Instant>,
    unknown: Option<TxnTrace>,
}

impl FakeSink {
    fn queue(&mut self, topic: &str, r: &KafkaRecord) {
        self.started.get_or_insert_with(Instant::now);
        self.open.push((topic.to_string(), r.key.clone(), r.value.clone()));
    }

    fn clear(&mut self) {
        self.open.clear();
        self.records = 0;
        self.started = None;
    }
}

impl Sink for FakeSink {
    fn txn_records(&self) -> u64 {
        self.records
    }

    fn txn_age(&self) -> Option<Duration> {
        self.started.map(|t| t.elapsed())
    }

    fn send_marker(&mut self, r: &KafkaRecord) -> Result<(), SinkError> {
        let t = self.txn_topic.clone();
        self.queue(&t, r);
        Ok(())
    }

    fn send(&mut self, rs: &[KafkaRecord]) -> Result<(), SinkError> {
        let t = self.topic.clone();
        for r in rs {
            self.queue(&t, r);
            self.records += 1;
        }
        let mut b = self.cluster.lock();
        b.sent += rs.len() as u64;
        if let Some((n, tx)) = &b.stop_after_sends {
            if b.sent >= *n {
                tx.send_replace(true);
            }
        }
        Ok(())
    }

    fn commit(&mut self, offsets: Vec<u8>) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(async move {
            self.open.push((
                self.offsets.0.clone(),
                self.offsets.1.clone().into_bytes(),
                Some(offsets),
            ));
            let txn = std::mem::take(&mut self.open);
            self.clear();
            let mut b = self.cluster.lock();
            if b.epochs.get(&self.id) != Some(&self.epoch) {
                return Err(SinkError::Fenced(self.id.clone()));
            }
            b.attempts += 1;
            let fault = b.faults.get(&b.attempts).copied();
            // (a record's offset is its index in the one log)
            let base = b.log.len() as i64;
            let mut prints: Vec<u64> = txn
                .iter()
                .filter(|(t, ..)| *t == self.topic)
                .filter_map(|(_, k, v)| v.as_ref().map(|v| fingerprint(k, v)))
                .collect();
            prints.sort_unstable();
            let sent = SentRecords {
                topic: self.topic.clone(),
                floors: vec![(0, base)],
                prints: Arc::new(prints),
                records: txn.iter().filter(|(t, ..)| *t == self.topic).count() as u64,
            };
            let trace = TxnTrace {
                position: Some((0, base + txn.len() as i64 - 1)),
                change: (txn.len() > 1).then(|| (txn[0].0.clone(), 0, base)),
                sent: Some(sent),
                aborted: false,
            };
            let changes = || txn[..txn.len() - 1].iter().cloned();
            match fault {
                Some(Fault::Abort) => {}
                Some(Fault::Torn | Fault::Leaky) => b.log.extend(changes()),
                Some(Fault::Kept) => b.kept.extend(changes()),
                None | Some(Fault::Ambiguous) => {
                    let kept = std::mem::take(&mut b.kept);
                    b.log.extend(kept);
                    b.log.extend(txn.iter().cloned());
                }
            }
            match fault {
                None => Ok(()),
                Some(Fault::Abort) => Err(SinkError::Aborted("injected abort".into())),
                Some(Fault::Leaky | Fault::Kept) => {
                    // acknowledged nothing; the abort succeeded
                    self.unknown = Some(TxnTrace {
                        position: None,
                        change: None,
                        aborted: true,
                        ..trace
                    });
                    Err(SinkError::Aborted("injected abort".into()))
                }
                Some(Fault::Ambiguous | Fault::Torn) => {
                    self.unknown = Some(trace);
                    Err(SinkError::Fatal("injected: the commit's answer was lost".into()))
                }
            }
        })
    }

    fn abort(&mut self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.clear();
        Box::pin(async { Ok(()) })
    }

    fn unknown_outcome(&self) -> Option<TxnTrace> {
        self.unknown.clone()
    }
}

impl Cluster for FakeCluster {
    fn reach<'a>(&'a self, _: &'a SinkSettings) -> BoxFuture<'a, Result<Vec<String>, SinkError>> {
        let mut topics: Vec<String> = self.lock().log.iter().map(|r| r.0.clone()).collect();
        topics.sort();
        topics.dedup();
        Box::pin(async { Ok(topics) })
    }

    fn start<'a>(
        &'a self,
        cfg: &'a SinkSettings,
        by_partition: bool,
        health: TaskHealthHandle,
    ) -> BoxFuture<'a, Result<Box<dyn Sink>, SinkError>> {
        let id = cfg.transactional_id(by_partition).to_string();
        let epoch = self.bump(&id);
        health.set_ready(true);
        Box::pin(async move {
            Ok(Box::new(FakeSink {
                cluster: self.clone(),
                id,
                epoch,
                topic: cfg.kafka.topic.clone(),
                txn_topic: cfg.transaction_topic.clone(),
                offsets: (
                    cfg.kafka.offsets_topic.clone(),
                    cfg.offsets_key(by_partition).to_string(),
                ),
                open: Vec::new(),
                records: 0,
                started: None,
                unknown: None,
            }) as Box<dyn Sink>)
        })
    }

    fn read_offsets(
        &self,
        cfg: &SinkSettings,
        want: &dyn Fn(&[u8]) -> bool,
        _to: crate::sink::ReadTo,
    ) -> Result<HashMap<Vec<u8>, StoredRecord>, SinkError> {
        let mut latest = HashMap::new();
        for (i, (t, k, v)) in self.lock().log.iter().enumerate() {
            if *t != cfg.kafka.offsets_topic || !want(k) {
                continue;
            }
            match v {
                None => latest.remove(k),
                Some(v) => latest.insert(
                    k.clone(),
                    StoredRecord {
                        value: v.clone(),
                        partition: 0,
                        offset: i as i64,
                    },
                ),
            };
        }
        Ok(latest)
    }

    fn fence<'a>(&'a self, _: &'a SinkSettings, id: &'a str) -> BoxFuture<'a, Result<(), SinkError>> {
        self.bump(id);
        Box::pin(async { Ok(()) })
    }

    fn committed_at(&self, _: &SinkSettings, topic: &str, _: i32, offset: i64) -> Result<bool, SinkError> {
        Ok(self.lock().log.get(offset as usize).is_some_and(|(t, ..)| t == topic))
    }

    fn find_sent(&self, _: &SinkSettings, sent: &SentRecords) -> Result<Vec<(i32, i64)>, SinkError> {
        let b = self.lock();
        let from = (sent.floors.first().map_or(0, |f| f.1) as usize).min(b.log.len());
        Ok(b.log[from..]
            .iter()
            .enumerate()
            .filter(|(_, (t, k, v))| *t == sent.topic && v.as_ref().is_some_and(|v| sent.contains(fingerprint(k, v))))
            .map(|(i, _)| (0, (from + i) as i64))
            .collect())
    }
}
