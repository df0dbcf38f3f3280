//! Prometheus metrics (one process-wide registry of series labelled by connector and task);
//! served with each task's health by [`crate::health`].

use std::sync::LazyLock;

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

metric!(
    RECORDS_POLLED,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_records_polled_total",
        "Change events read from the table, by op",
        &["connector", "op"],
        REGISTRY
    )
);
metric!(
    RECORDS_WRITTEN,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_records_written_total",
        "Kafka records committed (events and tombstones), by op",
        &["connector", "op"],
        REGISTRY
    )
);
metric!(
    RECORD_BYTES,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_sink_record_bytes_total",
        "Key and value bytes of the Kafka records produced (before compression)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    ROWS_READ,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_rows_read_total",
        "Rows read from data files",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    STORAGE_REQUESTS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_storage_requests_total",
        "Requests to the table's storage (local files counted alike), by op: list, get, ranged_get, head",
        &["connector", "op"],
        REGISTRY
    )
);
metric!(
    BYTES_READ,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_bytes_read_total",
        "Bytes of data files read",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    UNITS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_units_total",
        "Instants processed, by outcome (emitted, skipped, snapshot)",
        &["connector", "outcome"],
        REGISTRY
    )
);
metric!(
    TXN_COMMITTED,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_sink_transactions_committed_total",
        "Kafka transactions committed",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    TXN_ABORTED,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_sink_transactions_aborted_total",
        "Kafka transactions aborted",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    TXN_RECORDS,
    HistogramVec,
    register_histogram_vec_with_registry!(
        "lakestream_sink_transaction_records",
        "Records per committed transaction",
        &["connector", "task"],
        vec![1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0, 1000000.0],
        REGISTRY
    )
);
metric!(
    TXN_SECONDS,
    HistogramVec,
    register_histogram_vec_with_registry!(
        "lakestream_sink_transaction_duration_seconds",
        "Time from begin to commit of a transaction",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    OFFSET_COMMIT_SECONDS,
    HistogramVec,
    register_histogram_vec_with_registry!(
        "lakestream_sink_offset_commit_duration_seconds",
        "Duration of commit_transaction (records + offsets)",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    POLL_SECONDS,
    HistogramVec,
    register_histogram_vec_with_registry!(
        "lakestream_source_poll_duration_seconds",
        "Duration of one timeline poll",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    UNIT_SECONDS,
    HistogramVec,
    register_histogram_vec_with_registry!(
        "lakestream_source_unit_duration_seconds",
        "Time from the start of a unit's reading (in this run) to its last event produced, by kind (change, snapshot)",
        &["connector", "task", "kind"],
        vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 7200.0],
        REGISTRY
    )
);
metric!(
    VERIFY_LAST_SUCCESS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_verify_last_success_timestamp_seconds",
        "When the last background verify (verify.interval) found the topic equal to the table (unix seconds)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    VERIFY_MISMATCHED,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_verify_mismatched_keys",
        "Keys missing, extra or differing in the last completed background verify (0: equal)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    VERIFY_RUNS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_verify_runs_total",
        "Background verifies by result: equal, different, error",
        &["connector", "result"],
        REGISTRY
    )
);
metric!(
    VERIFY_PROGRESS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_verify_progress_records",
        "Records read so far by the running verify, by side (topic, table)",
        &["connector", "side"],
        REGISTRY
    )
);
metric!(RESYNCS, IntCounterVec, register_int_counter_vec_with_registry!(
    "lakestream_resyncs_total", "Resyncs finished: the net change from the topic's state to the table's current commit, published where the commits after the position were gone (`history.gap=resync`)", &["connector", "task"], REGISTRY));
metric!(
    RESYNC_KEYS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_resync_keys_total",
        "Keys (keyless tables: rows) a resync published a change for, by op (c, u, d)",
        &["connector", "op"],
        REGISTRY
    )
);
metric!(
    RESYNC_PROGRESS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_resync_progress_ratio",
        "The running resync's buckets compared and published, as a fraction (0 when none runs)",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(HEADROOM_COMMITS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_history_headroom_commits", "Commits between the oldest one whose inputs the table still keeps (Hudi's earliest retained instant of its latest clean, Iceberg's oldest ancestor snapshot, Delta's oldest commit file) and the task's position: 0 means the next unit may already be unreadable; -1 nothing bounds it", &["connector", "task"], REGISTRY));
metric!(
    HEADROOM_SECONDS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_history_headroom_seconds",
        "The same span in seconds of commit time (-1: nothing bounds it, or the format names no time)",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(LAG_SECONDS, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_source_lag_seconds", "0 when every committed instant / snapshot is emitted, else now minus the commit time of the oldest one not yet emitted", &["connector", "task"], REGISTRY));
metric!(
    PENDING_UNITS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_source_pending_units",
        "Committed instants / snapshots not yet emitted (as of the last poll)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    SPLITS_IN_FLIGHT,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_source_splits_in_flight",
        "Splits of the unit being emitted not yet done",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    SKIPPED,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_skipped_units_total",
        "Units that emit nothing, by reason",
        &["connector", "reason"],
        REGISTRY
    )
);
metric!(
    TASK_RUNNING,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_task_running",
        "1 while a task runs, 0 once it stopped or failed",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    TASK_PARKED,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_task_parked",
        "1 while a task holds no Kafka producer (idle.release: idle, polling the table without it), 0 otherwise",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(TABLES, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_tables", "Tables of a discovering connector (a prefix or a catalog) by state: streaming (on this process), skipped (another format, a topic collision, a key or format it cannot read), dropped (gone since it streamed), failed", &["connector", "state"], REGISTRY));
metric!(
    DISCOVERIES,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_discovery_runs_total",
        "Searches of a discovering connector's prefix or catalog, by outcome (ok, error)",
        &["connector", "outcome"],
        REGISTRY
    )
);
metric!(TASK_STATE, GaugeVec, register_gauge_vec_with_registry!(
    "lakestream_task_state", "1 for the task's current state (running, recovering, failed, stopped; as /connectors/<name>/status), 0 for the others", &["connector", "task", "state"], REGISTRY));
metric!(
    PRODUCER_QUEUE,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_kafka_producer_queue_messages",
        "Messages in the producer queue (librdkafka msg_cnt)",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    BROKER_RTT,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_kafka_broker_rtt_avg_seconds",
        "Average broker round-trip time (librdkafka)",
        &["connector", "broker"],
        REGISTRY
    )
);
metric!(
    PRODUCER_TX_BYTES,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_kafka_producer_tx_bytes_total",
        "Message bytes sent to brokers by the producers (librdkafka txmsg_bytes, summed over producer restarts)",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    PRODUCER_TX_MESSAGES,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_kafka_producer_tx_messages_total",
        "Messages sent to brokers by the producers (librdkafka txmsgs, summed over producer restarts)",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    SNAPSHOT_PROGRESS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_source_snapshot_splits_remaining",
        "Splits of the running full scan not yet emitted",
        &["connector"],
        REGISTRY
    )
);
metric!(
    SNAPSHOT_EVENTS,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_source_snapshot_events",
        "Events emitted so far by the running full scan (this run)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    SNAPSHOT_ETA,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_source_snapshot_eta_seconds",
        "Estimated seconds left in the running full scan (-1 until its first split is done, 0 once done)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    CORRUPT_LOG_BLOCKS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_corrupt_log_blocks_total",
        "Damaged log blocks skipped (logged with file and offset)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    CHANGE_KEYS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_change_keys_total",
        "Candidate keys of change units decided from narrow columns (only their rows are read whole)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    FULL_DIFF_UNITS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_full_diff_units_total",
        "Change units read whole on both sides instead of by changed keys, by reason",
        &["connector", "reason"],
        REGISTRY
    )
);
metric!(
    LINEAGE_DIFFS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_lineage_diffs_total",
        "Diffs of a keyless table keyed by row lineage (`_row_id`: an update is one `u`), per split",
        &["connector"],
        REGISTRY
    )
);
metric!(
    LINEAGE_CARRIED_ROWS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_lineage_carried_rows_total",
        "Rows of rewritten and rewriting files a keyless diff left unread, carried over by row lineage",
        &["connector"],
        REGISTRY
    )
);
metric!(
    SPILLED_BYTES,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_source_spilled_bytes_total",
        "Bytes written to disk under read.memory.budget (key buckets, key-hash runs)",
        &["connector"],
        REGISTRY
    )
);
metric!(
    MEMORY_SHARE,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_memory_share_bytes",
        "The memory budget of the unit a task reads or read last: read.memory.budget, or its share of run --memory-budget",
        &["connector", "task"],
        REGISTRY
    )
);
metric!(
    ERRORS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_errors_total",
        "Errors by kind",
        &["connector", "kind"],
        REGISTRY
    )
);
metric!(
    RETRIES,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_outage_retries_total",
        "Task restarts from the committed position after a broker outage",
        &["connector"],
        REGISTRY
    )
);
metric!(
    REGISTRY_REQUESTS,
    IntCounterVec,
    register_int_counter_vec_with_registry!(
        "lakestream_schema_registry_requests_total",
        "Schema Registry requests by result (ok, rejected, error)",
        &["connector", "result"],
        REGISTRY
    )
);
metric!(
    BUILD_INFO,
    GaugeVec,
    register_gauge_vec_with_registry!(
        "lakestream_build_info",
        "1, labelled with the running build's version",
        &["version"],
        REGISTRY
    )
);

/// A closed set of label values: an enum whose `label()` is the value a series carries, and
/// whose `ALL` creates every series at 0 from a task's start (so `increase()` and `absent()`
/// alerts see the first event). No metric takes a label value as free text (tests/house.rs).
macro_rules! labels {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v),+ }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// The label value.
            pub fn label(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }
    };
}

labels!(
    /// The `op` of [`RECORDS_POLLED`] and [`RECORDS_WRITTEN`]: an event's op, or a tombstone.
    RecordOp { Read = "r", Create = "c", Update = "u", Delete = "d", Tombstone = "tombstone" }
);
labels!(
    /// The `outcome` of [`UNITS`].
    UnitOutcome { Emitted = "emitted", Skipped = "skipped", Snapshot = "snapshot" }
);
labels!(
    /// The `kind` of [`UNIT_SECONDS`]: a commit's change unit, a full scan.
    UnitKind { Change = "change", Snapshot = "snapshot" }
);
impl UnitKind {
    pub fn of(snapshot: bool) -> UnitKind {
        if snapshot {
            UnitKind::Snapshot
        } else {
            UnitKind::Change
        }
    }
}
labels!(
    /// Why a unit emits nothing (the `reason` of [`SKIPPED`]).
    SkipReason {
        /// The commit changed no row (an empty commit, a metadata-only change).
        NoDataChange = "no_data_change",
        /// A compaction: the same rows rewritten (Hudi compaction, Delta `OPTIMIZE`).
        Compaction = "compaction",
        /// A Hudi clustering (replacecommit rewriting file groups, rows unchanged).
        Clustering = "clustering",
        /// Started at the latest version (`read.start-commit=latest`, Iceberg's
        /// `INCREMENTAL_FROM_LATEST_SNAPSHOT*`, `starting-version=latest`): the position marker.
        StartAtLatest = "start_at_latest",
        /// A full scan of a table without rows.
        EmptyTable = "empty_table",
        /// An Iceberg rewrite (`replace`): files rewritten, rows unchanged.
        Rewrite = "rewrite",
    }
);
labels!(
    /// Why a Hudi change unit was diffed whole (the `reason` of [`FULL_DIFF_UNITS`]).
    FullDiffReason {
        /// A file group without `_hoodie_commit_time` to tell new rows from carried-over ones.
        NoCommitTime = "no_commit_time",
        /// The changed keys would take more than a quarter of `read.memory.budget`.
        TooManyKeys = "too_many_keys",
    }
);
labels!(
    /// The `result` of [`REGISTRY_REQUESTS`].
    RegistryResult { Ok = "ok", Rejected = "rejected", Error = "error" }
);
labels!(
    /// The `outcome` of [`DISCOVERIES`].
    SearchOutcome { Ok = "ok", Error = "error" }
);
labels!(
    /// The `state` of [`TABLES`].
    TableState { Streaming = "streaming", Skipped = "skipped", Dropped = "dropped", Failed = "failed" }
);
labels!(
    /// The `result` of [`VERIFY_RUNS`].
    VerifyResult { Equal = "equal", Different = "different", Error = "error" }
);
labels!(
    /// The `side` of [`VERIFY_PROGRESS`].
    VerifySide { Topic = "topic", Table = "table" }
);
labels!(
    /// The `state` of [`TASK_STATE`] (as `/connectors/<name>/status` says it).
    TaskStateLabel { Running = "running", Recovering = "recovering", Failed = "failed", Stopped = "stopped" }
);

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
    for op in RecordOp::ALL {
        RECORDS_POLLED.with_label_values(&[c, op.label()]);
        RECORDS_WRITTEN.with_label_values(&[c, op.label()]);
    }
    for o in UnitOutcome::ALL {
        UNITS.with_label_values(&[c, o.label()]);
    }
    for r in SkipReason::ALL {
        SKIPPED.with_label_values(&[c, r.label()]);
    }
    for k in crate::error::ErrorKind::ALL {
        ERRORS.with_label_values(&[c, k.as_str()]);
    }
    for r in RegistryResult::ALL {
        REGISTRY_REQUESTS.with_label_values(&[c, r.label()]);
    }
    for m in [&*RECORD_BYTES, &*CORRUPT_LOG_BLOCKS, &*SPILLED_BYTES, &*RETRIES] {
        m.with_label_values(&[c]);
    }
    for m in [
        &*ROWS_READ,
        &*BYTES_READ,
        &*TXN_COMMITTED,
        &*TXN_ABORTED,
        &*PRODUCER_TX_BYTES,
        &*PRODUCER_TX_MESSAGES,
    ] {
        m.with_label_values(&[c, task]);
    }
    for m in [&*TXN_RECORDS, &*TXN_SECONDS, &*OFFSET_COMMIT_SECONDS, &*POLL_SECONDS] {
        m.with_label_values(&[c, task]);
    }
    for kind in UnitKind::ALL {
        UNIT_SECONDS.with_label_values(&[c, task, kind.label()]);
    }
    LAG_SECONDS.with_label_values(&[c, task]).set(0.0);
    PENDING_UNITS.with_label_values(&[c]).set(0.0);
}

/// Task `task` of `connector` is now in `state`.
pub fn task_state(connector: &str, task: u32, state: TaskStateLabel) {
    let task = task.to_string();
    for s in TaskStateLabel::ALL {
        TASK_STATE
            .with_label_values(&[connector, &task, s.label()])
            .set(if *s == state { 1.0 } else { 0.0 });
    }
}

pub fn render() -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&REGISTRY.gather(), &mut buf)
        .expect("text encoding");
    String::from_utf8(buf).expect("utf-8 metrics")
}
