//! Connector configuration: Kafka Connect-style `.properties` files, parsed with a real
//! Java-properties parser, `${env:VAR}` / `${file:PATH}` placeholders resolved, every key checked
//! against the table of known keys below (unknown or malformed keys name the file, line and the
//! allowed values).

mod checks;
mod delta;
mod discovery;
mod iceberg;
mod keys;
mod load;
mod sections;
mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use delta::{DeltaOptions, DeltaStart};
pub use discovery::{load_connector, load_file, Discovery, Found, Loaded, Search, TablesConfig, View};
pub use iceberg::{Catalog, GlueCatalog, IcebergOptions, RestCatalog, StartingStrategy, TableLocation};
pub use keys::{is_secret_key, Formats, KEYS};
pub use sections::{SinkSettings, SourceSettings};
use values::Validator;
pub use values::{parse_duration, parse_size, Properties};

/// A configuration problem. Always maps to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{file}:{line}: {message}")]
    Syntax {
        file: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{file}:{line}: unknown key `{key}`{hint}")]
    UnknownKey {
        file: PathBuf,
        line: usize,
        key: String,
        hint: String,
    },
    #[error("{file}:{line}: `{key}`: {message}")]
    Invalid {
        file: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
    #[error("{file}: missing required key `{key}` ({help})")]
    Missing {
        file: PathBuf,
        key: String,
        help: &'static str,
    },
}

impl ConfigError {
    /// Always [`crate::error::ErrorKind::Config`]: the operator fixes the file (exit 2).
    pub fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Config
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectorKind {
    Hudi,
    Iceberg,
    Delta,
}

impl ConnectorKind {
    /// Every class, in [`ConnectorKind::index`] order.
    pub const ALL: [ConnectorKind; 3] = [ConnectorKind::Hudi, ConnectorKind::Iceberg, ConnectorKind::Delta];

    /// Its place in [`ConnectorKind::ALL`] (a bit of `keys::Formats`; at most 7).
    pub const fn index(self) -> u32 {
        match self {
            ConnectorKind::Hudi => 0,
            ConnectorKind::Iceberg => 1,
            ConnectorKind::Delta => 2,
        }
    }

    /// Its `connector.class`.
    pub fn name(self) -> &'static str {
        match self {
            ConnectorKind::Hudi => "hudi",
            ConnectorKind::Iceberg => "iceberg",
            ConnectorKind::Delta => "delta",
        }
    }

    /// The format's own name.
    pub fn title(self) -> &'static str {
        match self {
            ConnectorKind::Hudi => "Hudi",
            ConnectorKind::Iceberg => "Iceberg",
            ConnectorKind::Delta => "Delta",
        }
    }
}

/// Where a connector with no stored offsets starts (Flink's `read.start-commit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartCommit {
    /// Full scan of the latest file slices (`r` events), then every later instant.
    Earliest,
    /// Only instants completed after start.
    Latest,
    /// Every instant from this one (inclusive), as changes.
    Instant(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnBoundary {
    /// One transaction per instant (split further when it exceeds `transaction.max.records`).
    Instant,
    /// Commit every `transaction.interval.ms`, whatever the instants.
    Interval(Duration),
}

/// `tasks.ownership`: how `tasks.max` tasks divide a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOwnership {
    /// By partition where the table proves a row's identity cannot leave its partition, else by key.
    Auto,
    /// Every task reads everything and keeps the keys that hash to it.
    Key,
    /// Each task reads only its partitions (the operator vouches that no key crosses partitions).
    Partition,
}

/// How to reach the registry: URL, credentials (Confluent's `schema.registry.basic.auth.user.info`
/// or a bearer token) and TLS (CA bundle; client certificate and key for mutual TLS), all PEM.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryOptions {
    pub url: String,
    pub user_info: Option<String>,
    pub bearer_token: Option<String>,
    pub ca_location: Option<std::path::PathBuf>,
    pub certificate_location: Option<std::path::PathBuf>,
    pub key_location: Option<std::path::PathBuf>,
}

/// `time.precision.mode`: how date, time and timestamp columns are typed in the events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimeMode {
    /// Avro's logical types at the column's precision (`timestamp-micros`, `date`, ...).
    #[default]
    Avro,
    /// Debezium's `io.debezium.time.*` semantic types at the column's precision; instants as
    /// `ZonedTimestamp` ISO-8601 strings.
    Adaptive,
    /// `Adaptive`, with every time of day in microseconds (`MicroTime`).
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's `Date`, `Time`, `Timestamp` (milliseconds), as JDBC sinks expect.
    Connect,
}

/// One connector, fully validated. The table and the clients it names sit at the top; the
/// rest is in sections, one per stage that reads it: [`ReadConfig`] for the source,
/// [`EventsConfig`] for the changelog, [`KafkaConfig`] for the sink and [`RuntimeConfig`] for the
/// task loop. Each stage reads its own section and the names above; a key's stage is plain from
/// where it sits.
#[derive(Clone)]
pub struct ConnectorConfig {
    pub file: PathBuf,
    pub name: String,
    pub kind: ConnectorKind,
    /// Hudi, Delta: the table base path; Iceberg: the table path when it has one.
    pub table_path: PathBuf,
    /// The table's stable name in offsets keys (the path, or the catalog identifier).
    pub table_id: String,
    /// Iceberg table location and read options (`connector.class=iceberg`).
    pub iceberg: Option<IcebergOptions>,
    /// Delta read options (`connector.class=delta`).
    pub delta: Option<DeltaOptions>,
    /// Schema Registry URL, credentials and TLS.
    pub registry: RegistryOptions,
    /// Object-store settings (`s3.*`) for `s3://`, `gs://`, `az://` tables.
    pub storage: crate::storage::StorageOptions,
    pub read: ReadConfig,
    pub events: EventsConfig,
    pub kafka: KafkaConfig,
    pub runtime: RuntimeConfig,
    /// Every resolved key/value, for `validate` (secrets masked when printed).
    pub raw: BTreeMap<String, String>,
}

/// What the source reads and how: where it starts and stops, which instants it skips, how it
/// merges, and the memory it may hold.
#[derive(Debug, Clone)]
pub struct ReadConfig {
    pub start: StartCommit,
    /// The version to stop after, its id as text: Hudi's `read.end-commit` (an instant time),
    /// Iceberg's `end-snapshot-id`, Delta's `ending-version`; one field whatever the format.
    pub end: Option<String>,
    pub check_interval: Duration,
    pub commits_limit: Option<usize>,
    pub skip_compaction: bool,
    pub skip_clustering: bool,
    /// `changelog.enabled`: every intermediate change of a key, not only the last per instant.
    pub changelog: bool,
    /// `hoodie.datasource.merge.type=skip_merge`.
    pub skip_merge: bool,
    /// `read.change.detection=narrow` (default): a Hudi change unit decides which keys changed
    /// from narrow columns and reads only their rows, an Iceberg/Delta diff beyond the budget
    /// from key and row hashes; `full` diffs whole file groups / files.
    pub narrow_changes: bool,
    /// `read.cdc.from-log`: Hudi CDC log files as the changes (`None`: auto).
    pub cdc_from_log: Option<bool>,
    /// `key.partition-path`: the Hudi Kafka key carries the partition path (`None`: decided from
    /// the table's index).
    pub key_partition_path: Option<bool>,
    pub memory_budget: usize,
    pub spill_dir: PathBuf,
}

/// What the change events carry and how their schemas are typed.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    pub tombstones_on_delete: bool,
    /// `provide.transaction.metadata`: events carry their lake commit (`transaction`), and
    /// BEGIN/END records go to `<topic>.transaction` (Debezium's transaction metadata).
    pub txn_metadata: bool,
    /// `column.exclude.list`: value columns left out of the events.
    pub column_exclude: Option<regex::Regex>,
    /// `time.precision.mode`: how temporal columns are typed in the events.
    pub time_mode: TimeMode,
    /// `schema.nullability=table`: columns the table declares required are non-null in Avro.
    pub required_columns: bool,
}

/// Where the events go: the broker, the topics (and how they are created), the producer's
/// transactions and how long an outage is ridden out.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    pub topic: String,
    pub bootstrap_servers: String,
    pub offsets_topic: String,
    pub transaction_timeout_ms: u64,
    /// `errors.retry.timeout`: how long a broker outage is retried (`None`: forever).
    pub retry_timeout: Option<Duration>,
    /// `errors.retry.delay.max.ms`: the longest wait between two retries.
    pub retry_delay_max: Duration,
    /// `bootstrap.timeout.ms`: how long an unreachable `bootstrap.servers` is waited for at start.
    pub bootstrap_timeout: Duration,
    pub topic_partitions: i32,
    /// `topic.creation.default.cleanup.policy` of the change topic lakestream creates.
    pub topic_cleanup_policy: String,
    pub replication_factor: i32,
    /// librdkafka settings from `producer.override.*` (and `kafka.*`), passed through verbatim.
    pub producer_overrides: BTreeMap<String, String>,
    /// `consumer.override.*`: librdkafka settings of the consumer `verify` reads the topic with.
    pub consumer_overrides: BTreeMap<String, String>,
}

/// `history.gap`: converge from the topic's state, or stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryGap {
    Resync,
    Fail,
}

/// How the task loop runs: which task this is and how tasks divide the table, where
/// transactions end, and the metrics endpoint.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub task_id: u32,
    /// `tasks.max`: tasks share the table's keys by hash; each has its own producer and offsets.
    pub tasks: u32,
    pub ownership: TaskOwnership,
    pub boundary: TxnBoundary,
    pub max_txn_records: usize,
    pub metrics_port: Option<u16>,
    /// `verify.interval`: audit the topic against the table in the background (off: `None`).
    pub verify_interval: Option<std::time::Duration>,
    /// `history.headroom.warn.commits`.
    pub headroom_warn_commits: u64,
    /// `history.gap`: what the task does where the commits after its position are gone.
    pub history_gap: HistoryGap,
    /// `verify --repair` runs the task this way: a resync to its own position, then it stops
    /// (not a property).
    pub repair: bool,
    /// `idle.release`: drop the producer after this long with nothing to publish (off: `None`).
    pub idle_release: Option<std::time::Duration>,
}

impl fmt::Debug for ConnectorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectorConfig")
            .field("name", &self.name)
            .field("file", &self.file)
            .field("table_path", &self.table_path)
            .field("topic", &self.kafka.topic)
            .finish_non_exhaustive()
    }
}

impl ConnectorConfig {
    /// The offsets-record key: `["<name>", {"table": ..., "task": ...}]` (Kafka Connect's shape).
    /// This task's offsets key, its generation dividing the table by partition or not (resolved
    /// when the source opens: not a setting, so the loaded config is never changed for it).
    pub fn offsets_key(&self, by_partition: bool) -> String {
        self.offsets_key_for(self.runtime.tasks, self.runtime.task_id, by_partition)
    }

    /// The offsets key of task `task` of a generation of `tasks` tasks (one task: Kafka
    /// Connect's shape without the generation, as single-task connectors always wrote it).
    pub fn offsets_key_for(&self, tasks: u32, task: u32, by_partition: bool) -> String {
        match (tasks, by_partition) {
            (0 | 1, _) => serde_json::json!([self.name, {"table": self.table_id, "task": task}]).to_string(),
            (_, false) => serde_json::json!([self.name, {"table": self.table_id, "task": task, "tasks": tasks}]).to_string(),
            (_, true) => serde_json::json!([self.name, {"table": self.table_id, "task": task, "tasks": tasks, "by": "partition"}])
                .to_string(),
        }
    }

    /// This task's transactional id (see [`Self::offsets_key`]).
    pub fn transactional_id(&self, by_partition: bool) -> String {
        self.transactional_id_for(self.runtime.tasks, self.runtime.task_id, by_partition)
    }

    /// Transactional ids differ per generation, so fencing an old generation never fences a
    /// task of the new one.
    pub fn transactional_id_for(&self, tasks: u32, task: u32, by_partition: bool) -> String {
        match (tasks, by_partition) {
            (0 | 1, _) => format!("{}-{task}", self.name),
            (_, false) => format!("{}-{tasks}-{task}", self.name),
            (_, true) => format!("{}-{tasks}p-{task}", self.name),
        }
    }

    /// How long the task may go without progress (a poll, a chunk, a commit) before `/healthz`
    /// calls it stalled: a transaction may take `transaction.timeout.ms`, a quiet table is polled
    /// every check interval.
    pub fn stall_limit(&self) -> Duration {
        Duration::from_millis(self.kafka.transaction_timeout_ms) + self.read.check_interval
    }

    /// Where BEGIN/END records of lake commits go (`provide.transaction.metadata`).
    pub fn transaction_topic(&self) -> String {
        format!("{}.transaction", self.kafka.topic)
    }

    /// This connector as task `task`.
    pub fn for_task(&self, task: u32) -> Self {
        let mut cfg = self.clone();
        cfg.runtime.task_id = task;
        cfg
    }

    /// `key = value` lines with secret values masked, in key order.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.raw {
            let shown = if is_secret_key(k) { "********" } else { v.as_str() };
            out.push_str(&format!("{k} = {shown}\n"));
        }
        out
    }
}

use load::local_path;

#[cfg(test)]
mod tests;
