//! Prometheus metrics (one process-wide registry) and the `/metrics`, `/healthz`, `/ready` server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use prometheus::{
    register_counter_vec_with_registry, register_counter_with_registry, register_gauge_vec_with_registry,
    register_histogram_with_registry, register_int_counter_vec_with_registry, Counter, CounterVec, Encoder,
    GaugeVec, Histogram, IntCounterVec, Registry, TextEncoder,
};

pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);
static READY: AtomicBool = AtomicBool::new(false);

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
metric!(TXN_COMMITTED, Counter, register_counter_with_registry!(
    "lakestream_sink_transactions_committed_total", "Kafka transactions committed", REGISTRY));
metric!(TXN_ABORTED, Counter, register_counter_with_registry!(
    "lakestream_sink_transactions_aborted_total", "Kafka transactions aborted", REGISTRY));
metric!(TXN_RECORDS, Histogram, register_histogram_with_registry!(
    "lakestream_sink_transaction_records", "Records per committed transaction", 
    vec![1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0, 1000000.0], REGISTRY));
metric!(TXN_SECONDS, Histogram, register_histogram_with_registry!(
    "lakestream_sink_transaction_duration_seconds", "Time from begin to commit of a transaction", REGISTRY));
metric!(OFFSET_COMMIT_SECONDS, Histogram, register_histogram_with_registry!(
    "lakestream_sink_offset_commit_duration_seconds", "Duration of commit_transaction (records + offsets)", REGISTRY));
metric!(POLL_SECONDS, Histogram, register_histogram_with_registry!(
    "lakestream_source_poll_duration_seconds", "Duration of one timeline poll", REGISTRY));
metric!(LAG_SECONDS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_lag_seconds", "Now minus commit time of the last emitted instant", &["connector"], REGISTRY));
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
metric!(PRODUCER_TX_BYTES, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_kafka_producer_tx_bytes", "Bytes sent to brokers by the producer (librdkafka txmsg_bytes)", &["connector", "task"], REGISTRY));
metric!(SNAPSHOT_PROGRESS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_snapshot_splits_remaining", "Splits of the running full scan not yet emitted", &["connector"], REGISTRY));
metric!(CORRUPT_LOG_BLOCKS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_corrupt_log_blocks_total", "Damaged log blocks skipped (logged with file and offset)", &["connector"], REGISTRY));
metric!(SPILLED_BYTES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_source_spilled_bytes_total", "Bytes written to disk under read.memory.budget (key buckets, key-hash runs)", &["connector"], REGISTRY));
metric!(ERRORS, CounterVec, register_counter_vec_with_registry!(
    "lakestream_errors_total", "Errors by kind", &["connector", "kind"], REGISTRY));
metric!(RETRIES, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_outage_retries_total", "Task restarts from the committed position after a broker outage", &["connector"], REGISTRY));
metric!(REGISTRY_REQUESTS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_schema_registry_requests_total", "Schema Registry requests by result", &["result"], REGISTRY));

pub fn set_ready(ready: bool) {
    READY.store(ready, Ordering::SeqCst);
}

pub fn render() -> String {
    let mut buf = Vec::new();
    TextEncoder::new().encode(&REGISTRY.gather(), &mut buf).expect("text encoding");
    String::from_utf8(buf).expect("utf-8 metrics")
}

/// Serve `/metrics`, `/healthz` (process alive) and `/ready` (producers initialised, offsets
/// loaded) until the process ends.
pub async fn serve(port: u16) -> std::io::Result<()> {
    use axum::{http::StatusCode, routing::get, Router};
    let app = Router::new()
        .route("/metrics", get(|| async { render() }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/ready",
            get(|| async {
                if READY.load(Ordering::SeqCst) { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "starting") }
            }),
        );
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    tracing::info!(port, "metrics endpoint listening");
    axum::serve(listener, app).await
}
