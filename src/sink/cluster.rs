//! What the runtime needs of Kafka, as two traits: a [`Cluster`] (reach it, start a task's
//! transactional sink, read the offsets topic, fence a transactional id) and the [`Sink`] a task
//! writes through. [`Kafka`] and [`super::TxnSink`] are the real ones; the runtime's tests put an
//! in-memory cluster behind the same traits to check resume, abort-and-replay, shutdown and
//! handoff without a broker. The futures are boxed so both traits can be used as `dyn`.

use std::time::Duration;

use futures::future::BoxFuture;

use super::offsets::{ReadTo, StoredRecord};
use super::sent::SentRecords;
use super::SinkError;
use crate::changelog::KafkaRecord;
use crate::config::SinkSettings;
use crate::health::TaskHealthHandle;

/// A task's transactional sink: records are queued into the open transaction (one begins with
/// the first record) and become visible together with the position record at `commit`.
pub trait Sink: Send {
    /// Change records queued in the open transaction (0 when none is open).
    fn txn_records(&self) -> u64;
    /// How long the open transaction has been open.
    fn txn_age(&self) -> Option<Duration>;
    /// Queue a transaction-metadata record (BEGIN/END).
    fn send_marker(&mut self, record: &KafkaRecord) -> Result<(), SinkError>;
    /// Queue change records.
    fn send(&mut self, records: &[KafkaRecord]) -> Result<(), SinkError>;
    /// Write the position record `offsets` and commit it with everything queued since the
    /// transaction began. An error leaves the outcome unknown: the caller re-reads the position.
    fn commit(&mut self, offsets: Vec<u8>) -> BoxFuture<'_, Result<(), SinkError>>;
    /// Abort the open transaction, if any.
    fn abort(&mut self) -> BoxFuture<'_, Result<(), SinkError>>;
    /// The last transaction that did not commit: one whose commit failed (its outcome unknown,
    /// or aborted) or one left open; `None` when the last commit succeeded.
    fn unknown_outcome(&self) -> Option<TxnTrace>;
}

/// Where one transaction's records landed, from the broker's acknowledgements: the position
/// record and the first change record. Whether they are visible to a read_committed reader
/// tells what became of the transaction, whatever its commit call said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnTrace {
    /// (partition, offset) of the position record in the offsets topic.
    pub position: Option<(i32, i64)>,
    /// (topic, partition, offset) of the first change (or transaction-metadata) record.
    pub change: Option<(String, i32, i64)>,
    /// Every change record it sent, acknowledged or not, to look for later.
    pub sent: Option<SentRecords>,
    /// Known aborted (the abort call succeeded, or it was left open for the next producer's
    /// init to abort): its records must not be visible, whatever a broker acknowledged.
    pub aborted: bool,
}

/// The cluster a connector writes to.
pub trait Cluster: Send + Sync {
    /// Wait until the cluster answers (or fail after `bootstrap.timeout.ms`, naming why): the
    /// names of the topics it has.
    fn reach<'a>(&'a self, cfg: &'a SinkSettings) -> BoxFuture<'a, Result<Vec<String>, SinkError>>;
    /// Create the topics if missing and start the task's sink, fencing any older instance of it
    /// and aborting what it left open.
    fn start<'a>(
        &'a self,
        cfg: &'a SinkSettings,
        by_partition: bool,
        health: TaskHealthHandle,
    ) -> BoxFuture<'a, Result<Box<dyn Sink>, SinkError>>;
    /// The latest committed value of every key `want` accepts in the offsets topic
    /// (read_committed, to its end; a tombstone forgets its key). Blocking.
    fn read_offsets(
        &self,
        cfg: &SinkSettings,
        want: &dyn Fn(&[u8]) -> bool,
        to: ReadTo,
    ) -> Result<std::collections::HashMap<Vec<u8>, StoredRecord>, SinkError>;
    /// Fence `transactional_id` so a zombie holding it can no longer commit.
    fn fence<'a>(&'a self, cfg: &'a SinkSettings, transactional_id: &'a str) -> BoxFuture<'a, Result<(), SinkError>>;
    /// Whether the record at `offset` is committed: read_committed, once the transactions below
    /// it are settled (fails when they are not within a minute). Blocking.
    fn committed_at(&self, cfg: &SinkSettings, topic: &str, partition: i32, offset: i64) -> Result<bool, SinkError>;
    /// Where records of `sent` are visible (read_committed, from its floors to the end the
    /// topic has now, once settled): (partition, offset) of each. Blocking.
    fn find_sent(&self, cfg: &SinkSettings, sent: &SentRecords) -> Result<Vec<(i32, i64)>, SinkError>;
}

/// The Kafka cluster named by the connector's `bootstrap.servers`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Kafka;

impl Cluster for Kafka {
    fn reach<'a>(&'a self, cfg: &'a SinkSettings) -> BoxFuture<'a, Result<Vec<String>, SinkError>> {
        Box::pin(super::reach(cfg))
    }

    fn start<'a>(
        &'a self,
        cfg: &'a SinkSettings,
        by_partition: bool,
        health: TaskHealthHandle,
    ) -> BoxFuture<'a, Result<Box<dyn Sink>, SinkError>> {
        Box::pin(async move { Ok(Box::new(super::TxnSink::start(cfg, by_partition, health).await?) as Box<dyn Sink>) })
    }

    fn read_offsets(
        &self,
        cfg: &SinkSettings,
        want: &dyn Fn(&[u8]) -> bool,
        to: ReadTo,
    ) -> Result<std::collections::HashMap<Vec<u8>, StoredRecord>, SinkError> {
        super::offsets::read_records_matching(cfg, want, to)
    }

    fn fence<'a>(&'a self, cfg: &'a SinkSettings, transactional_id: &'a str) -> BoxFuture<'a, Result<(), SinkError>> {
        Box::pin(super::fence(cfg, transactional_id))
    }

    fn committed_at(&self, cfg: &SinkSettings, topic: &str, partition: i32, offset: i64) -> Result<bool, SinkError> {
        super::scan::committed_at(cfg, topic, partition, offset)
    }

    fn find_sent(&self, cfg: &SinkSettings, sent: &SentRecords) -> Result<Vec<(i32, i64)>, SinkError> {
        super::scan::find_sent(cfg, sent)
    }
}
