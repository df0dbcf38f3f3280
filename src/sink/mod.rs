//! The exactly-once sink: a transactional producer (`transactional.id = <name>-<task>`) whose every
//! transaction carries change records plus the offsets record that accounts for them.
//! Blocking librdkafka transaction calls run on the blocking pool; errors are classed as
//! retriable (retry), abortable (abort, replay from the last committed offsets) or fatal
//! (fenced by a newer instance, or broken producer: exit non-zero). Each transaction's change
//! records are fingerprinted as they are sent (`sent`), so those of one that failed can be looked
//! for in the topic: none may ever become visible.

mod client;
mod cluster;
mod error;
mod fence;
mod log_throttle;
mod msk_iam;
mod oauth;
pub mod offsets;
mod polled;

pub use client::check_settings;
use client::{client_config, producer_config, txn_call_timeout};
pub use cluster::{Cluster, Kafka, Sink, TxnTrace};
pub use error::SinkError;
use error::{classify, expired_or, retriable};
pub use fence::{fence, write_offsets_records};
pub use offsets::{ReadTo, StoredRecord};
pub use sent::{fingerprint, SentRecords};

pub use log_throttle::QuietContext;
pub use stats::StatsContext;
use topics::ensure_topics;
mod reach;
pub mod scan;
mod sent;
mod stats;
mod topics;

pub use reach::{describe_topics, login, reach};
pub use topics::cleanup_policy;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use polled::Polled;

use crate::changelog::KafkaRecord;
use crate::config::SinkSettings;
use crate::error::Joined;
use crate::health::TaskHealthHandle;
use crate::metrics;

pub struct TxnSink {
    producer: Arc<Polled<StatsContext>>,
    topic: String,
    offsets_topic: String,
    offsets_key: String,
    in_txn: bool,
    txn_records: u64,
    txn_started: Option<Instant>,
    timeout: Duration,
    /// `transaction.timeout.ms`: a fence past it is the broker's timeout abort.
    txn_timeout: Duration,
    health: TaskHealthHandle,
    /// Where BEGIN/END records go (transaction metadata).
    txn_topic: String,
    /// The last transaction that did not commit: its commit failed (outcome unknown, or aborted)
    /// or it was aborted mid-way; kept for the next run to look for.
    unknown: Option<TxnTrace>,
    /// The open transaction's change records, to find them again (see [`SentRecords`]).
    sent: sent::SentLog,
    /// Metric labels.
    connector: String,
    task: String,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.joined()
}

/// A stopping task does not wait for its producer's polling thread: its transactions are
/// settled by then (committed or aborted).
impl Drop for TxnSink {
    fn drop(&mut self) {
        client::close_detached(self.producer.clone());
    }
}

impl TxnSink {
    /// Create topics if missing, build the producer and `init_transactions` (which fences any older
    /// producer of this task and aborts the transaction it left open). The sink reports readiness
    /// and commits to `health`.
    /// `by_partition`: the task's generation divides the table by partition (its ids say so).
    pub async fn start(cfg: &SinkSettings, by_partition: bool, health: TaskHealthHandle) -> Result<Self, SinkError> {
        // the topics are created while the producer initialises: neither needs the other (on
        // Kafka each takes 0.1-0.2 s of every start)
        let (_, producer) = tokio::try_join!(ensure_topics(cfg), Self::init_producer(cfg, by_partition))?;
        let sent = sent::SentLog::start(producer.clone(), &cfg.kafka.topic, txn_call_timeout(cfg));
        health.set_ready(true);
        health.progress();
        Ok(Self {
            producer,
            topic: cfg.kafka.topic.clone(),
            offsets_topic: cfg.kafka.offsets_topic.clone(),
            offsets_key: cfg.offsets_key(by_partition).to_string(),
            in_txn: false,
            txn_records: 0,
            txn_started: None,
            timeout: txn_call_timeout(cfg),
            txn_timeout: Duration::from_millis(cfg.kafka.transaction_timeout_ms),
            health,
            txn_topic: cfg.transaction_topic.clone(),
            unknown: None,
            sent,
            connector: cfg.name.clone(),
            task: cfg.task_id.to_string(),
        })
    }

    /// The task's transactional producer, initialised.
    async fn init_producer(cfg: &SinkSettings, by_partition: bool) -> Result<Arc<Polled<StatsContext>>, SinkError> {
        let id = cfg.transactional_id(by_partition).to_string();
        let pc = producer_config(
            cfg,
            &id,
            &[
                ("partitioner", "murmur2_random"),
                ("linger.ms", "5"),
                // librdkafka's queue is memory outside read.memory.budget, ~450 B a queued
                // 265 B record (payload + message struct), and it fills whenever reading outruns
                // the broker, so a long scan holds all of it. Measured on a 16M-row COW full scan:
                // 1,000,000 records → 247 MiB peak RSS, 100,000 → 128, 50,000 → 104 (as fast:
                // 5 requests' worth of batch.num.messages); bytes bound it for wide rows.
                // Overridable as producer.override.queue.buffering.*.
                ("queue.buffering.max.messages", "50000"),
                ("queue.buffering.max.kbytes", "16384"),
                ("statistics.interval.ms", "15000"),
            ],
        );
        let ctx = StatsContext {
            connector: cfg.name.clone(),
            task: cfg.task_id.to_string(),
            client: format!("task {}", cfg.task_id),
            last: Default::default(),
            quiet: Default::default(),
            offsets_topic: cfg.kafka.offsets_topic.clone(),
            topic: cfg.kafka.topic.clone(),
            trace: Default::default(),
            last_offsets: Default::default(),
            tokens: oauth::TokenSource::of_connector(cfg).unwrap_or(oauth::TokenSource::Unsecured),
        };
        let producer: BaseProducer<StatsContext> = pc
            .create_with_context(ctx)
            .map_err(|e| SinkError::kafka("creating producer", e))?;
        oauth::seeded(producer.client(), cfg)?;
        let producer = Arc::new(
            Polled::new(producer)
                .map_err(|e| SinkError::Fatal(format!("starting the producer's event thread: {e}")))?,
        );
        let timeout = txn_call_timeout(cfg);
        let p = producer.clone();
        let started = Instant::now();
        // the cluster's metadata first (brokers only; a topic named here would be created by a
        // broker that auto-creates topics): librdkafka asks for a producer id at once, and with
        // no broker known yet it retries only after a fixed 500 ms (measured on Kafka 4.1: init
        // took 8-150 ms, or 510-525 ms in a third of fresh starts). Init reports any error.
        let wait = timeout.min(Duration::from_secs(5));
        blocking(move || {
            let _ = p.client().fetch_cluster_id(wait);
            p.init_transactions(timeout)
        })
        .await
        .map_err(|e| classify("init_transactions", e))?;
        tracing::info!(transactional_id = %id, ms = started.elapsed().as_millis() as u64, "producer initialised (older instances fenced)");
        Ok(producer)
    }

    /// Waits (until `deadline`) for every record sent to be acknowledged. rust-rdkafka's flush,
    /// which `commit_transaction` starts with, polls for delivery reports in 100 ms steps while
    /// the producer's own polling thread takes them: every commit waited ~100 ms after its last
    /// delivery (measured on Kafka: 102-113 ms a commit, records or none). Looked at here every
    /// millisecond, its flush finds nothing left.
    async fn delivered(&self, deadline: Instant) {
        while self.producer.in_flight_count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub fn txn_records(&self) -> u64 {
        self.txn_records
    }

    pub fn txn_age(&self) -> Option<Duration> {
        self.txn_started.map(|t| t.elapsed())
    }

    /// The trace of the open transaction, with its change records.
    fn trace(&self) -> TxnTrace {
        let mut t = self.producer.context().trace.lock().clone();
        t.sent = Some(self.sent.records(self.txn_records));
        t
    }

    fn begin(&mut self) -> Result<(), SinkError> {
        if !self.in_txn {
            self.sent.ready()?;
            self.sent.clear();
            self.producer.context().last_offsets.lock().clear();
            self.producer
                .begin_transaction()
                .map_err(|e| classify("begin_transaction", e))?;
            self.in_txn = true;
            self.txn_records = 0;
            self.txn_started = Some(Instant::now());
            *self.producer.context().trace.lock() = TxnTrace::default();
        }
        Ok(())
    }

    fn send_to(&mut self, topic: &str, key: &[u8], value: Option<&[u8]>) -> Result<(), SinkError> {
        self.begin()?;
        let mut rec = BaseRecord::<[u8], [u8]>::to(topic);
        if !key.is_empty() {
            // (empty: a keyless table's null key)
            rec = rec.key(key);
        }
        if let Some(v) = value {
            rec = rec.payload(v);
        }
        loop {
            match self.producer.send(rec) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(self.classify_produce(e)),
            }
        }
    }

    /// A failed `send`: once the producer has raised a fatal error, a send fails with only
    /// `_FATAL`, so the producer's fatal error says what happened (see [`Self::with_fatal`]).
    fn classify_produce(&self, e: KafkaError) -> SinkError {
        self.with_fatal(classify("produce", e))
    }

    /// `err` as the producer's fatal error says it is, where it has raised one (also after the
    /// call that returned `err`: a newer instance's init can break a commit first and fence this
    /// producer only on librdkafka's retry, raised with the abort after it). A producer fenced by
    /// a newer instance must stop (`Fenced`), not be ridden out: a new producer would fence the
    /// newer instance in turn, and the two would take the transactional id from each other for
    /// ever.
    fn with_fatal(&self, err: SinkError) -> SinkError {
        let err = match (err, self.producer.client().fatal_error()) {
            (err @ SinkError::Fenced(_), _) | (err, None) => err,
            (err, Some((RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::Fenced, reason))) => {
                SinkError::Fenced(format!("{err} (fatal: {reason})"))
            }
            (err @ SinkError::Fatal(_), Some(_)) => err,
            (err, Some((code, reason))) => SinkError::Fatal(format!("{err} (fatal: {code:?}: {reason})")),
        };
        self.expired_or(err)
    }

    /// [`expired_or`] for the open transaction.
    fn expired_or(&self, err: SinkError) -> SinkError {
        expired_or(err, self.txn_started.map(|t| t.elapsed()), self.txn_timeout)
    }

    /// Queue a transaction-metadata record (BEGIN/END) in the open transaction.
    pub fn send_marker(&mut self, record: &KafkaRecord) -> Result<(), SinkError> {
        let topic = self.txn_topic.clone();
        self.send_to(&topic, &record.key, record.value.as_deref())
    }

    /// Queue change records in the open transaction (beginning one if needed).
    pub fn send(&mut self, records: &[KafkaRecord]) -> Result<(), SinkError> {
        let topic = self.topic.clone();
        for r in records {
            self.send_to(&topic, &r.key, r.value.as_deref())?;
            if let Some(v) = &r.value {
                self.sent.push(&r.key, v);
            }
            self.txn_records += 1;
        }
        Ok(())
    }

    /// Write `offsets` and commit the transaction with everything sent since it began.
    pub async fn commit(&mut self, value: Vec<u8>) -> Result<(), SinkError> {
        let (ot, ok) = (self.offsets_topic.clone(), self.offsets_key.clone());
        self.send_to(&ot, ok.as_bytes(), Some(&value))?;
        let started = Instant::now();
        self.delivered(started + self.timeout).await;
        let mut attempt = 0;
        loop {
            let p = self.producer.clone();
            let timeout = self.timeout;
            match blocking(move || p.commit_transaction(timeout)).await {
                Ok(()) => break,
                // resumed while the broker answers within about a transaction timeout; beyond it
                // the broker aborts the transaction anyway: the outage path takes over
                Err(e) if retriable(&e) && attempt < 5 && started.elapsed() < self.timeout => {
                    attempt += 1;
                    // still committing, but the broker is not answering in time
                    self.health.set_ready(false);
                    tracing::warn!(error = %e, attempt, "commit_transaction retriable error, retrying");
                }
                Err(e) => {
                    let err = self.expired_or(classify("commit_transaction", e));
                    // known to be aborted only when the abort succeeds; else the broker may
                    // have committed it (an EndTxn whose answer was lost)
                    // a failed transaction stays on record either way (the abort keeps it when it
                    // had change records): a broker that broke it may still show its records
                    // (see `SentRecords`)
                    let aborted = matches!(err, SinkError::Aborted(_)) && self.abort().await.is_ok();
                    // a fence raised meanwhile (with the abort) stops this instance
                    let err = self.with_fatal(err);
                    if self.unknown.is_none() {
                        self.unknown = Some(TxnTrace {
                            aborted,
                            ..self.trace()
                        });
                    }
                    metrics::TXN_ABORTED
                        .with_label_values(&[&self.connector, &self.task])
                        .inc();
                    return Err(err);
                }
            }
        }
        self.health.set_ready(true);
        self.health.progress();
        // the next transaction's records come after this one's
        self.sent.committed(&self.producer.context().last_offsets.lock());
        let secs = started.elapsed().as_secs_f64();
        tracing::debug!(
            ms = (secs * 1000.0) as u64,
            records = self.txn_records,
            "transaction committed"
        );
        let labels = [self.connector.as_str(), self.task.as_str()];
        metrics::OFFSET_COMMIT_SECONDS.with_label_values(&labels).observe(secs);
        metrics::TXN_RECORDS
            .with_label_values(&labels)
            .observe(self.txn_records as f64);
        metrics::TXN_COMMITTED.with_label_values(&labels).inc();
        if let Some(t) = self.txn_started {
            metrics::TXN_SECONDS
                .with_label_values(&labels)
                .observe(t.elapsed().as_secs_f64());
        }
        self.in_txn = false;
        self.txn_records = 0;
        self.txn_started = None;
        Ok(())
    }

    pub async fn abort(&mut self) -> Result<(), SinkError> {
        if !self.in_txn {
            return Ok(());
        }
        // an aborted transaction stays on record too (a failed commit's is kept already): a
        // broker that broke it may still show its records (see `SentRecords`)
        let trace = (self.unknown.is_none() && !self.sent.is_empty()).then(|| self.trace());
        let p = self.producer.clone();
        let timeout = self.timeout;
        let res = blocking(move || p.abort_transaction(timeout)).await;
        if let Some(t) = trace {
            self.unknown = Some(TxnTrace {
                aborted: res.is_ok(),
                ..t
            });
        }
        res.map_err(|e| classify("abort_transaction", e))?;
        self.in_txn = false;
        self.txn_records = 0;
        self.txn_started = None;
        Ok(())
    }
}

impl Sink for TxnSink {
    fn txn_records(&self) -> u64 {
        TxnSink::txn_records(self)
    }
    fn txn_age(&self) -> Option<Duration> {
        TxnSink::txn_age(self)
    }
    fn send_marker(&mut self, record: &KafkaRecord) -> Result<(), SinkError> {
        TxnSink::send_marker(self, record)
    }
    fn send(&mut self, records: &[KafkaRecord]) -> Result<(), SinkError> {
        TxnSink::send(self, records)
    }
    fn commit(&mut self, offsets: Vec<u8>) -> futures::future::BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(TxnSink::commit(self, offsets))
    }
    fn abort(&mut self) -> futures::future::BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(TxnSink::abort(self))
    }
    fn unknown_outcome(&self) -> Option<TxnTrace> {
        // (a run that fails mid-transaction aborts it first: `abort` keeps it on record)
        self.unknown.clone()
    }
}
#[cfg(test)]
mod tests;
