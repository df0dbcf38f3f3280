//! Connector configuration: Kafka Connect-style `.properties` files, parsed with a real
//! Java-properties parser, `${env:VAR}` / `${file:PATH}` placeholders resolved, every key checked
//! against the table of known keys below (unknown or malformed keys name the file, line and the
//! allowed values).

mod checks;
mod iceberg;
mod keys;
mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use iceberg::{IcebergOptions, StartingStrategy, TableLocation};
pub use keys::{is_secret_key, KEYS};
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

/// One connector, fully validated.
#[derive(Clone)]
pub struct ConnectorConfig {
    pub file: PathBuf,
    pub name: String,
    pub kind: ConnectorKind,
    /// Hudi: the table base path; Iceberg: the table path when it has one.
    pub table_path: PathBuf,
    /// The table's stable name in offsets keys (the path, or the catalog identifier).
    pub table_id: String,
    /// Iceberg table location and read options (`connector.class=iceberg`).
    pub iceberg: Option<IcebergOptions>,
    /// Schema Registry URL, credentials and TLS.
    pub registry: RegistryOptions,
    /// Object-store settings (`s3.*`) for `s3://`, `gs://`, `az://` tables.
    pub storage: crate::storage::StorageOptions,
    pub topic: String,
    pub bootstrap_servers: String,
    pub schema_registry_url: String,
    pub offsets_topic: String,
    pub start: StartCommit,
    pub end_commit: Option<String>,
    pub check_interval: Duration,
    pub commits_limit: Option<usize>,
    pub skip_compaction: bool,
    pub skip_clustering: bool,
    pub tombstones_on_delete: bool,
    /// `provide.transaction.metadata`: events carry their lake commit (`transaction`), and
    /// BEGIN/END records go to `<topic>.transaction` (Debezium's transaction metadata).
    pub txn_metadata: bool,
    pub changelog: bool,
    /// `hoodie.datasource.merge.type=skip_merge`.
    pub skip_merge: bool,
    /// `read.cdc.from-log`: Hudi CDC log files as the changes (`None`: auto).
    pub cdc_from_log: Option<bool>,
    /// `column.exclude.list`: value columns left out of the events.
    pub column_exclude: Option<regex::Regex>,
    /// `time.precision.mode`: how temporal columns are typed in the events.
    pub time_mode: TimeMode,
    /// `schema.nullability=table`: columns the table declares required are non-null in Avro.
    pub required_columns: bool,
    pub boundary: TxnBoundary,
    pub max_txn_records: usize,
    pub transaction_timeout_ms: u64,
    /// `errors.retry.timeout`: how long a broker outage is retried (`None`: forever).
    pub retry_timeout: Option<Duration>,
    /// `errors.retry.delay.max.ms`: the longest wait between two retries.
    pub retry_delay_max: Duration,
    /// `bootstrap.timeout.ms`: how long an unreachable `bootstrap.servers` is waited for at start.
    pub bootstrap_timeout: Duration,
    pub task_id: u32,
    /// `tasks.max`: tasks share the table's keys by hash; each has its own producer and offsets.
    pub tasks: u32,
    pub ownership: TaskOwnership,
    /// `key.partition-path`: the Hudi Kafka key carries the partition path (`None`: decided from
    /// the table's index).
    pub key_partition_path: Option<bool>,
    /// Tasks divide the table by partition: `tasks.ownership` resolved against the table by the
    /// source when it opens (false until then). Part of the task's offsets key and transactional
    /// id, so a change of scheme is a new generation.
    pub by_partition: bool,
    pub metrics_port: Option<u16>,
    pub memory_budget: usize,
    pub spill_dir: PathBuf,
    pub topic_partitions: i32,
    pub replication_factor: i32,
    /// librdkafka settings from `producer.override.*` (and `kafka.*`), passed through verbatim.
    pub producer_overrides: BTreeMap<String, String>,
    /// Every resolved key/value, for `validate` (secrets masked when printed).
    pub raw: BTreeMap<String, String>,
}

impl fmt::Debug for ConnectorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectorConfig")
            .field("name", &self.name)
            .field("file", &self.file)
            .field("table_path", &self.table_path)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl ConnectorConfig {
    /// The offsets-record key: `["<name>", {"table": ..., "task": ...}]` (Kafka Connect's shape).
    pub fn offsets_key(&self) -> String {
        self.offsets_key_for(self.tasks, self.task_id, self.by_partition)
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

    pub fn transactional_id(&self) -> String {
        self.transactional_id_for(self.tasks, self.task_id, self.by_partition)
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
        Duration::from_millis(self.transaction_timeout_ms) + self.check_interval
    }

    /// Where BEGIN/END records of lake commits go (`provide.transaction.metadata`).
    pub fn transaction_topic(&self) -> String {
        format!("{}.transaction", self.topic)
    }

    /// This connector as task `task`.
    pub fn for_task(&self, task: u32) -> Self {
        Self {
            task_id: task,
            ..self.clone()
        }
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

/// Parse and validate one connector file. `task_id` comes from the command line / `TASK_ID`.
pub fn load_connector(file: &Path, task_id: u32) -> Result<ConnectorConfig, ConfigError> {
    let props = Properties::load(file)?;
    let v = Validator { props: &props };
    for (key, (_, line)) in &props.entries {
        if !keys::is_known(key) {
            return Err(ConfigError::UnknownKey {
                file: props.file.clone(),
                line: *line,
                key: key.clone(),
                hint: keys::hint(key),
            });
        }
    }
    let kind = match v
        .required("connector.class", "hudi or iceberg")?
        .to_ascii_lowercase()
        .as_str()
    {
        "hudi" | "lakestream.hudi" | "io.lakestream.hudi" => ConnectorKind::Hudi,
        "iceberg" | "lakestream.iceberg" | "io.lakestream.iceberg" => ConnectorKind::Iceberg,
        other => return Err(v.invalid("connector.class", format!("`{other}` is not one of: hudi, iceberg"))),
    };
    let name = v.required("name", "the connector's unique name")?;
    if name.is_empty() || name.chars().any(|c| c.is_whitespace()) {
        return Err(v.invalid("name", "must be non-empty and contain no whitespace".into()));
    }
    let iceberg = match kind {
        ConnectorKind::Iceberg => Some(iceberg::load(&v)?),
        ConnectorKind::Hudi => {
            if let Some(k) = iceberg::ICEBERG_KEYS.iter().find(|k| v.get(k).is_some()) {
                return Err(v.invalid(
                    k,
                    "is an Iceberg option; this connector is `connector.class=hudi`".into(),
                ));
            }
            None
        }
    };
    let (table_path, table_id) = match &iceberg {
        Some(o) => match &o.location {
            TableLocation::Path(p) => (p.clone(), o.table_id()),
            _ => (PathBuf::new(), o.table_id()),
        },
        None => {
            let raw_path = v.required("table.path", "a local path or file:// URI of the table")?;
            let p = parse_table_path(&raw_path).map_err(|m| v.invalid("table.path", m))?;
            let id = p.display().to_string();
            (p, id)
        }
    };
    let registry = match v
        .get("schema.registry.url")
        .or_else(|| v.get("value.converter.schema.registry.url"))
    {
        Some(u) => u,
        None => {
            return Err(ConfigError::Missing {
                file: props.file.clone(),
                key: "schema.registry.url".into(),
                help: "or value.converter.schema.registry.url: the Schema Registry base URL",
            })
        }
    };
    if !(registry.starts_with("http://") || registry.starts_with("https://")) {
        return Err(v.invalid("schema.registry.url", format!("`{registry}` is not an http(s) URL")));
    }
    let start = match v.get("read.start-commit").as_deref() {
        None | Some("latest") => StartCommit::Latest,
        Some("earliest") => StartCommit::Earliest,
        Some(s) if s.len() >= 8 && s.chars().all(|c| c.is_ascii_digit()) => StartCommit::Instant(s.to_string()),
        Some(s) => {
            return Err(v.invalid(
                "read.start-commit",
                format!("`{s}` is not `earliest`, `latest` or an instant time (digits, e.g. 20240101120000000)"),
            ))
        }
    };
    let end_commit = match v.get("read.end-commit") {
        Some(s) if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() => Some(s),
        Some(s) => return Err(v.invalid("read.end-commit", format!("`{s}` is not an instant time (digits)"))),
        None => None,
    };
    let boundary = match v.get("transaction.boundary").as_deref() {
        None | Some("instant") => TxnBoundary::Instant,
        Some("interval") => TxnBoundary::Interval(Duration::from_millis(v.u64_in(
            "transaction.interval.ms",
            1000,
            1..=3_600_000,
        )?)),
        Some(s) => {
            return Err(v.invalid(
                "transaction.boundary",
                format!("`{s}` is not one of: instant, interval"),
            ))
        }
    };
    let tasks = v.u64_in("tasks.max", 1, 1..=256)?;
    // what cannot be divided among tasks
    let txn_metadata = v.bool_or("provide.transaction.metadata", false)?;
    if tasks > 1 && txn_metadata {
        return Err(v.invalid(
            "provide.transaction.metadata",
            "needs tasks.max=1: one BEGIN/END per lake commit cannot be split among tasks".into(),
        ));
    }
    if tasks > 1 && iceberg.as_ref().is_some_and(|o| o.keyless) {
        return Err(v.invalid(
            "key.mode",
            "`none`: the rows of a keyless table cannot be divided among tasks by key; use tasks.max=1".into(),
        ));
    }
    checks::converters(&v)?;
    checks::producer_overrides(&v)?;
    let mut producer_overrides = BTreeMap::new();
    for (k, (val, _)) in &props.entries {
        if let Some(rest) = k.strip_prefix("producer.override.") {
            producer_overrides.insert(rest.to_string(), val.clone());
        }
    }
    let cfg = ConnectorConfig {
        file: props.file.clone(),
        name,
        kind,
        table_path,
        table_id,
        iceberg,
        registry: RegistryOptions {
            url: registry.trim_end_matches('/').to_string(),
            user_info: v.get("schema.registry.basic.auth.user.info"),
            bearer_token: v.get("schema.registry.bearer.auth.token"),
            ca_location: v.get("schema.registry.ssl.ca.location").map(PathBuf::from),
            certificate_location: v.get("schema.registry.ssl.certificate.location").map(PathBuf::from),
            key_location: v.get("schema.registry.ssl.key.location").map(PathBuf::from),
        },
        storage: crate::storage::StorageOptions {
            s3_endpoint: v.get("s3.endpoint"),
            s3_region: v.get("s3.region"),
            s3_access_key_id: v.get("s3.access-key-id"),
            s3_secret_access_key: v.get("s3.secret-access-key"),
            s3_session_token: v.get("s3.session-token"),
            s3_path_style: v.bool_or("s3.path-style-access", false)?,
            s3_allow_http: v.bool_or("s3.allow-http", false)?,
        },
        topic: checks::topic_name(&v, "topic", v.required("topic", "the Kafka topic for change events")?)?,
        bootstrap_servers: v.required("bootstrap.servers", "host:port[,host:port]")?,
        schema_registry_url: registry.trim_end_matches('/').to_string(),
        offsets_topic: checks::topic_name(
            &v,
            "offsets.storage.topic",
            v.get("offsets.storage.topic")
                .unwrap_or_else(|| "lakestream-offsets".into()),
        )?,
        start,
        end_commit,
        check_interval: if v.get("monitor-interval").is_some() {
            v.duration_or("monitor-interval", Duration::from_secs(60))?
        } else {
            v.duration_or("read.streaming.check-interval", Duration::from_secs(60))?
        },
        commits_limit: v.limit("read.commits.limit")?,
        skip_compaction: v.bool_or("read.streaming.skip_compaction", true)?,
        skip_clustering: v.bool_or("read.streaming.skip_clustering", true)?,
        tombstones_on_delete: v.bool_or("tombstones.on.delete", true)?,
        txn_metadata,
        changelog: v.bool_or("changelog.enabled", false)?,
        skip_merge: match v.get("hoodie.datasource.merge.type").as_deref() {
            None | Some("payload_combine") => false,
            Some("skip_merge") => true,
            Some(s) => {
                return Err(v.invalid(
                    "hoodie.datasource.merge.type",
                    format!("`{s}` is not one of: payload_combine, skip_merge"),
                ))
            }
        },
        column_exclude: match v.get("column.exclude.list") {
            None => None,
            Some(list) => {
                let parts: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("(?:{p})"))
                    .collect();
                Some(
                    regex::Regex::new(&format!("^(?:{})$", parts.join("|"))).map_err(|e| {
                        v.invalid("column.exclude.list", format!("not a list of regular expressions: {e}"))
                    })?,
                )
            }
        },
        time_mode: v.one_of(
            "time.precision.mode",
            TimeMode::Avro,
            &[
                ("avro", TimeMode::Avro),
                ("adaptive", TimeMode::Adaptive),
                ("adaptive_time_microseconds", TimeMode::AdaptiveTimeMicroseconds),
                ("connect", TimeMode::Connect),
            ],
        )?,
        required_columns: v.one_of("schema.nullability", false, &[("optional", false), ("table", true)])?,
        cdc_from_log: match v.get("read.cdc.from-log").as_deref() {
            None | Some("auto") => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(s) => return Err(v.invalid("read.cdc.from-log", format!("`{s}` is not one of: auto, true, false"))),
        },
        boundary,
        max_txn_records: v.u64_in("transaction.max.records", 1_000_000, 1..=1 << 31)? as usize,
        // the broker's transaction.max.timeout.ms defaults to 15 minutes
        transaction_timeout_ms: v.u64_in("transaction.timeout.ms", 60_000, 1_000..=900_000)?,
        retry_timeout: match v.get("errors.retry.timeout").as_deref() {
            None | Some("-1") => None,
            Some(_) => Some(Duration::from_millis(v.u64_in(
                "errors.retry.timeout",
                0,
                0..=u32::MAX as u64,
            )?)),
        },
        retry_delay_max: Duration::from_millis(v.u64_in("errors.retry.delay.max.ms", 60_000, 1..=3_600_000)?),
        bootstrap_timeout: Duration::from_millis(v.u64_in("bootstrap.timeout.ms", 30_000, 1_000..=3_600_000)?),
        task_id,
        tasks: tasks as u32,
        ownership: match v.get("tasks.ownership").as_deref() {
            None | Some("auto") => TaskOwnership::Auto,
            Some("key") => TaskOwnership::Key,
            Some("partition") => TaskOwnership::Partition,
            Some(s) => return Err(v.invalid("tasks.ownership", format!("`{s}` is not one of: auto, key, partition"))),
        },
        key_partition_path: match v.get("key.partition-path").as_deref() {
            None | Some("auto") => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(s) => return Err(v.invalid("key.partition-path", format!("`{s}` is not one of: auto, true, false"))),
        },
        by_partition: false,
        metrics_port: v
            .get("metrics.port")
            .map(|_| v.u64_in("metrics.port", 0, 1..=65_535))
            .transpose()?
            .map(|p| p as u16),
        memory_budget: match v.get("read.memory.budget") {
            None => 256 << 20,
            Some(s) => parse_size(&s).ok_or_else(|| {
                v.invalid(
                    "read.memory.budget",
                    format!("`{s}` is not a size (bytes, or a number with KiB/MiB/GiB)"),
                )
            })?,
        },
        spill_dir: v
            .get("read.spill.dir")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
        topic_partitions: v.u64_in("topic.creation.default.partitions", 1, 1..=10_000)? as i32,
        replication_factor: v.u64_in("topic.creation.default.replication.factor", 1, 1..=16)? as i32,
        producer_overrides,
        raw: props
            .entries
            .iter()
            .map(|(k, (val, _))| (k.clone(), val.clone()))
            .collect(),
    };
    Ok(cfg)
}

fn parse_table_path(raw: &str) -> Result<PathBuf, String> {
    let p = local_path(raw)?;
    if !crate::storage::is_remote(&p) && !p.is_dir() {
        return Err(format!("`{}` is not a directory", p.display()));
    }
    Ok(p)
}

/// A storage path from `/path`, `file:/path`, `file:///path` or an object-store URL
/// (`s3://bucket/key`, `s3a://`, `gs://`, `az://`, `abfs[s]://`).
fn local_path(raw: &str) -> Result<PathBuf, String> {
    crate::storage::parse_location(raw.trim_end_matches('/'))
}

#[cfg(test)]
mod tests;
