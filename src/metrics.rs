//! Prometheus metrics (one process-wide registry), each task's health (progress and
//! connectivity, a `Health` the process hands to its tasks) and the `/metrics`, `/healthz`,
//! `/ready` server.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use prometheus::{
    register_gauge_vec_with_registry, register_histogram_vec_with_registry, register_int_counter_vec_with_registry,
    Encoder, GaugeVec, HistogramVec, IntCounterVec, Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

macro_rules! metric {
    ($name:ident, $t:ty, $e:expr) => {
        pub static $name: LazyLock<$t> = LazyLock::new(|| $e.expect("metric registers once"));
    };
}

metric!(RECORDS_POLLED, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_records_polled_total", "Change events read from the table, by op", &["connector", "op"], REGISTRY));
metric!(RECORDS_WRITTEN, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_records_written_total", "Kafka records committed (events and tombstones), by op", &["connector", "op"], REGISTRY));
metric!(RECORD_BYTES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_sink_record_bytes_total", "Key and value bytes of the Kafka records produced (before compression)", &["connector"], REGISTRY));
metric!(ROWS_READ, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_rows_read_total", "Rows read from data files", &["connector", "task"], REGISTRY));
metric!(BYTES_READ, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_bytes_read_total", "Bytes of data files read", &["connector", "task"], REGISTRY));
metric!(UNITS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_units_total", "Instants processed, by outcome (emitted, skipped, snapshot)", &["connector", "outcome"], REGISTRY));
metric!(TXN_COMMITTED, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_sink_transactions_committed_total", "Kafka transactions committed", &["connector", "task"], REGISTRY));
metric!(TXN_ABORTED, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_sink_transactions_aborted_total", "Kafka transactions aborted", &["connector", "task"], REGISTRY));
metric!(TXN_RECORDS, HistogramVec, register_histogram_vec_with_registry!(
    "lakestream_sink_transaction_records", "Records per committed transaction", &["connector", "task"],
    vec![1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0, 1000000.0], REGISTRY));
metric!(TXN_SECONDS, HistogramVec, register_histogram_vec_with_registry!(
    "lakestream_sink_transaction_duration_seconds", "Time from begin to commit of a transaction", &["connector", "task"], REGISTRY));
metric!(OFFSET_COMMIT_SECONDS, HistogramVec, register_histogram_vec_with_registry!(
    "lakestream_sink_offset_commit_duration_seconds", "Duration of commit_transaction (records + offsets)", &["connector", "task"], REGISTRY));
metric!(POLL_SECONDS, HistogramVec, register_histogram_vec_with_registry!(
    "lakestream_source_poll_duration_seconds", "Duration of one timeline poll", &["connector", "task"], REGISTRY));
metric!(LAG_SECONDS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_lag_seconds", "0 when every committed instant / snapshot is emitted, else now minus the commit time of the oldest one not yet emitted", &["connector", "task"], REGISTRY));
metric!(PENDING_UNITS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_pending_units", "Committed instants / snapshots not yet emitted (as of the last poll)", &["connector"], REGISTRY));
metric!(SPLITS_IN_FLIGHT, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_splits_in_flight", "Splits of the unit being emitted not yet done", &["connector", "task"], REGISTRY));
metric!(SKIPPED, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_skipped_units_total", "Units that emit nothing, by reason", &["connector", "reason"], REGISTRY));
metric!(TASK_RUNNING, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_task_running", "1 while a task runs, 0 once it stopped or failed", &["connector", "task"], REGISTRY));
metric!(PRODUCER_QUEUE, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_kafka_producer_queue_messages", "Messages in the producer queue (librdkafka msg_cnt)", &["connector", "task"], REGISTRY));
metric!(BROKER_RTT, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_kafka_broker_rtt_avg_seconds", "Average broker round-trip time (librdkafka)", &["connector", "broker"], REGISTRY));
metric!(PRODUCER_TX_BYTES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_kafka_producer_tx_bytes_total", "Message bytes sent to brokers by the producers (librdkafka txmsg_bytes, summed over producer restarts)", &["connector", "task"], REGISTRY));
metric!(PRODUCER_TX_MESSAGES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_kafka_producer_tx_messages_total", "Messages sent to brokers by the producers (librdkafka txmsgs, summed over producer restarts)", &["connector", "task"], REGISTRY));
metric!(SNAPSHOT_PROGRESS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_snapshot_splits_remaining", "Splits of the running full scan not yet emitted", &["connector"], REGISTRY));
metric!(SNAPSHOT_EVENTS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_snapshot_events", "Events emitted so far by the running full scan (this run)", &["connector"], REGISTRY));
metric!(SNAPSHOT_ETA, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_snapshot_eta_seconds", "Estimated seconds left in the running full scan (-1 until its first split is done, 0 once done)", &["connector"], REGISTRY));
metric!(CORRUPT_LOG_BLOCKS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_corrupt_log_blocks_total", "Damaged log blocks skipped (logged with file and offset)", &["connector"], REGISTRY));
metric!(SPILLED_BYTES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_spilled_bytes_total", "Bytes written to disk under read.memory.budget (key buckets, key-hash runs)", &["connector"], REGISTRY));
metric!(ERRORS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_errors_total", "Errors by kind", &["connector", "kind"], REGISTRY));
metric!(RETRIES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_outage_retries_total", "Task restarts from the committed position after a broker outage", &["connector"], REGISTRY));
metric!(REGISTRY_REQUESTS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_schema_registry_requests_total", "Schema Registry requests by result (ok, rejected, error)", &["connector", "result"], REGISTRY));
metric!(BUILD_INFO, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_build_info", "1, labelled with the running build's version", &["version"], REGISTRY));

/// Label values known up front (counters exist at 0 from a task's start, so `increase()` and
/// `absent()` alerts see the first event).
pub const OPS: &[&str] = &["r", "c", "u", "d", "tombstone"];
pub const UNIT_OUTCOMES: &[&str] = &["emitted", "skipped", "snapshot"];
pub const SKIP_REASONS: &[&str] = &["no_data_change", "compaction", "clustering", "start_at_latest", "empty_table", "rewrite"];
pub const ERROR_KINDS: &[&str] = &["config", "source", "changelog", "sink", "position"];
pub const REGISTRY_RESULTS: &[&str] = &["ok", "rejected", "error"];

/// Every series of a connector's task, created at 0 (or its resting value); the process series
/// (`process_*`, `lakestream_build_info`) once.
pub fn init_task(connector: &str, task: &str) {
    static PROCESS: std::sync::Once = std::sync::Once::new();
    PROCESS.call_once(|| {
        BUILD_INFO.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1.0);
        #[cfg(target_os = "linux")]
        let _ = REGISTRY.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()));
    });
    let c = connector;
    for op in OPS {
        RECORDS_POLLED.with_label_values(&[c, op]);
        RECORDS_WRITTEN.with_label_values(&[c, op]);
    }
    for o in UNIT_OUTCOMES {
        UNITS.with_label_values(&[c, o]);
    }
    for r in SKIP_REASONS {
        SKIPPED.with_label_values(&[c, r]);
    }
    for k in ERROR_KINDS {
        ERRORS.with_label_values(&[c, k]);
    }
    for r in REGISTRY_RESULTS {
        REGISTRY_REQUESTS.with_label_values(&[c, r]);
    }
    for m in [&*RECORD_BYTES, &*CORRUPT_LOG_BLOCKS, &*SPILLED_BYTES, &*RETRIES] {
        m.with_label_values(&[c]);
    }
    for m in [&*ROWS_READ, &*BYTES_READ, &*TXN_COMMITTED, &*TXN_ABORTED, &*PRODUCER_TX_BYTES, &*PRODUCER_TX_MESSAGES] {
        m.with_label_values(&[c, task]);
    }
    for m in [&*TXN_RECORDS, &*TXN_SECONDS, &*OFFSET_COMMIT_SECONDS, &*POLL_SECONDS] {
        m.with_label_values(&[c, task]);
    }
    LAG_SECONDS.with_label_values(&[c, task]).set(0.0);
    PENDING_UNITS.with_label_values(&[c]).set(0.0);
}

pub fn render() -> String {
    let mut buf = Vec::new();
    TextEncoder::new().encode(&REGISTRY.gather(), &mut buf).expect("text encoding");
    String::from_utf8(buf).expect("utf-8 metrics")
}

/// The running tasks' health, shared by the tasks and the HTTP server. A task is *stalled* when it
/// made no progress (a poll, a split emitted, a commit) for longer than it allows itself
/// (`transaction.timeout.ms` plus the poll interval): a broker that stopped answering, a hung
/// read. It is *ready* while its producer is initialised and no outage is being ridden out.
#[derive(Default)]
pub struct Health {
    tasks: Mutex<BTreeMap<String, TaskHealth>>,
}

struct TaskHealth {
    ready: bool,
    last_progress: Instant,
    allowed: Duration,
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// Register a task (not ready, progress now) that may go `allowed` without progress; its
    /// handle reports for it.
    pub fn task(self: &Arc<Self>, name: &str, allowed: Duration) -> TaskHealthHandle {
        self.lock().insert(name.to_string(), TaskHealth { ready: false, last_progress: Instant::now(), allowed });
        TaskHealthHandle { health: self.clone(), name: name.to_string() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TaskHealth>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stalled tasks, each with how long it has not moved.
    pub fn stalled(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, t)| t.last_progress.elapsed() > t.allowed)
            .map(|(name, t)| format!("{name}: no progress for {} s (allowed {} s)", t.last_progress.elapsed().as_secs(), t.allowed.as_secs()))
            .collect()
    }

    /// Every running task is connected (and at least one runs).
    pub fn ready(&self) -> bool {
        let tasks = self.lock();
        !tasks.is_empty() && tasks.values().all(|t| t.ready)
    }
}

/// One task's reports to its process's `Health`.
#[derive(Clone)]
pub struct TaskHealthHandle {
    health: Arc<Health>,
    name: String,
}

impl TaskHealthHandle {
    fn with(&self, f: impl FnOnce(&mut TaskHealth)) {
        if let Some(t) = self.health.lock().get_mut(&self.name) {
            f(t);
        }
    }

    /// The task moved forward now (a poll answered, rows arrived, a transaction committed).
    pub fn progress(&self) {
        self.with(|t| t.last_progress = Instant::now());
    }

    /// The task is connected (its producer initialised, transactions committing) or not (a
    /// transaction call timing out, an outage being ridden out). Not progress by itself.
    pub fn set_ready(&self, ready: bool) {
        self.with(|t| t.ready = ready);
    }

    /// The task ended (done or failed): it no longer counts for health or readiness.
    pub fn stopped(&self) {
        self.health.lock().remove(&self.name);
    }
}

/// Serve `/metrics`, `/healthz` (503 naming the stalled tasks when one made no progress for
/// longer than it allows) and `/ready` (every task's producer initialised, no outage being
/// ridden out) until the process ends.
pub async fn serve(port: u16, health: Arc<Health>) -> std::io::Result<()> {
    use axum::{http::StatusCode, routing::get, Router};
    let live = health.clone();
    let app = Router::new()
        .route("/metrics", get(|| async { render() }))
        .route(
            "/healthz",
            get(move || async move {
                let stalled = live.stalled();
                if stalled.is_empty() {
                    (StatusCode::OK, "ok".to_string())
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {}", stalled.join("; ")))
                }
            }),
        )
        .route(
            "/ready",
            get(move || async move {
                if health.ready() { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
            }),
        );
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    tracing::info!(port, "metrics endpoint listening");
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_without_progress_for_longer_than_allowed_is_stalled() {
        let h = Health::new();
        assert!(!h.ready(), "no task: not ready");
        let (a, b) = (h.task("c/0", Duration::from_secs(60)), h.task("c/1", Duration::from_millis(20)));
        a.set_ready(true);
        assert!(h.stalled().is_empty());
        assert!(!h.ready(), "c/1 not connected yet");
        b.set_ready(true);
        assert!(h.ready());
        std::thread::sleep(Duration::from_millis(40));
        let stalled = h.stalled();
        assert_eq!(stalled.len(), 1, "{stalled:?}");
        assert!(stalled[0].starts_with("c/1: no progress"), "{stalled:?}");
        b.progress();
        assert!(h.stalled().is_empty());
        b.set_ready(false);
        assert!(!h.ready());
        b.stopped();
        assert!(h.ready(), "a stopped task no longer counts");
        a.stopped();
        assert!(!h.ready());
    }
}
