//! Loading one connector file: every key checked against the key table, then each section of
//! the settings (the table, the registry and storage, reading, events, transactions and outages,
//! tasks) read by a function of its own, so a key's rules sit in one place.

use std::path::PathBuf;
use std::time::Duration;

use super::values::Validator;
use super::{
    checks, delta, iceberg, keys, parse_size, ConfigError, ConnectorConfig, ConnectorKind, DeltaOptions, EventsConfig,
    HistoryGap, IcebergOptions, KafkaConfig, Properties, ReadConfig, RegistryOptions, RuntimeConfig, StartCommit,
    TableLocation, TaskOwnership, TimeMode, TxnBoundary,
};

/// Parse and validate the properties of a connector of one table (a file's, or a discovered
/// table's: the template's, completed by `discovery`). `task_id` comes from the command line /
/// `TASK_ID`.
pub(super) fn load_props(props: Properties, task_id: u32) -> Result<ConnectorConfig, ConfigError> {
    known_keys(&props)?;
    let v = Validator { props: &props };
    let kind = connector_class(&v)?;
    let name = v.required("name", "the connector's unique name")?;
    if name.is_empty() || name.chars().any(|c| c.is_whitespace()) {
        return Err(v.invalid("name", "must be non-empty and contain no whitespace".into()));
    }
    let Table {
        iceberg,
        delta,
        path: table_path,
        id: table_id,
    } = table(&v, kind)?;
    let events = events(&v)?;
    let runtime = runtime(&v, task_id)?;
    let keyless = iceberg.as_ref().is_some_and(|o| o.keyless) || delta.as_ref().is_some_and(|o| o.keyless);
    undividable(&v, runtime.tasks as u64, events.txn_metadata, keyless)?;
    checks::converters(&v)?;
    Ok(ConnectorConfig {
        file: props.file.clone(),
        name,
        kind,
        table_path,
        table_id,
        iceberg,
        delta,
        registry: registry(&v)?,
        storage: storage(&v)?,
        read: read(&v, kind)?,
        events,
        kafka: kafka(&v, &props)?,
        runtime,
        raw: props
            .entries
            .iter()
            .map(|(k, (val, _))| (k.clone(), val.clone()))
            .collect(),
    })
}

/// The source's section: where reading starts and stops, what is skipped, merging, memory.
fn read(v: &Validator, kind: ConnectorKind) -> Result<ReadConfig, ConfigError> {
    let check_interval = match v.get("monitor-interval") {
        Some(_) => v.duration_or("monitor-interval", Duration::from_secs(60))?,
        None => v.duration_or("read.streaming.check-interval", Duration::from_secs(60))?,
    };
    Ok(ReadConfig {
        start: start_commit(v)?,
        end: end(v, kind)?,
        check_interval,
        commits_limit: v.limit("read.commits.limit")?,
        skip_compaction: v.bool_or("read.streaming.skip_compaction", true)?,
        skip_clustering: v.bool_or("read.streaming.skip_clustering", true)?,
        changelog: v.bool_or("changelog.enabled", false)?,
        skip_merge: v.one_of(
            "hoodie.datasource.merge.type",
            false,
            &[("payload_combine", false), ("skip_merge", true)],
        )?,
        cdc_from_log: auto_bool(v, "read.cdc.from-log")?,
        narrow_changes: v.one_of("read.change.detection", true, &[("narrow", true), ("full", false)])?,
        key_partition_path: auto_bool(v, "key.partition-path")?,
        memory_budget: memory_budget(v)?,
        spill_dir: v
            .get("read.spill.dir")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir),
    })
}

/// The changelog's section: what the events carry and how their schemas are typed.
fn events(v: &Validator) -> Result<EventsConfig, ConfigError> {
    Ok(EventsConfig {
        tombstones_on_delete: v.bool_or("tombstones.on.delete", true)?,
        txn_metadata: v.bool_or("provide.transaction.metadata", false)?,
        column_exclude: column_exclude(v)?,
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
    })
}

/// The sink's section: broker, topics, transactions, outages and librdkafka passthrough.
fn kafka(v: &Validator, props: &Properties) -> Result<KafkaConfig, ConfigError> {
    checks::producer_overrides(v)?;
    // `<prefix><librdkafka key>=value` passthrough settings, prefix removed
    let passthrough = |prefix: &str| {
        props
            .entries
            .iter()
            .filter_map(|(k, (val, _))| k.strip_prefix(prefix).map(|r| (r.to_string(), val.clone())))
            .collect()
    };
    let (producer_overrides, consumer_overrides) =
        (passthrough("producer.override."), passthrough("consumer.override."));
    Ok(KafkaConfig {
        consumer_overrides,
        topic: checks::topic_name(v, "topic", v.required("topic", "the Kafka topic for change events")?)?,
        bootstrap_servers: v.required("bootstrap.servers", "host:port[,host:port]")?,
        offsets_topic: checks::topic_name(
            v,
            "offsets.storage.topic",
            v.get("offsets.storage.topic")
                .unwrap_or_else(|| "lakestream-offsets".into()),
        )?,
        // the broker's transaction.max.timeout.ms defaults to 15 minutes
        transaction_timeout_ms: v.u64_in("transaction.timeout.ms", 60_000, 1_000..=900_000)?,
        retry_timeout: retry_timeout(v)?,
        retry_delay_max: Duration::from_millis(v.u64_in("errors.retry.delay.max.ms", 60_000, 1..=3_600_000)?),
        bootstrap_timeout: Duration::from_millis(v.u64_in("bootstrap.timeout.ms", 30_000, 1_000..=3_600_000)?),
        topic_partitions: v.u64_in("topic.creation.default.partitions", 1, 1..=10_000)? as i32,
        topic_cleanup_policy: cleanup_policy(v)?,
        replication_factor: v.u64_in("topic.creation.default.replication.factor", 1, 1..=16)? as i32,
        producer_overrides,
    })
}

/// The runtime's section: this task and how tasks divide the table, transaction boundaries,
/// the metrics endpoint.
fn runtime(v: &Validator, task_id: u32) -> Result<RuntimeConfig, ConfigError> {
    Ok(RuntimeConfig {
        task_id,
        tasks: v.u64_in("tasks.max", 1, 1..=256)? as u32,
        ownership: v.one_of(
            "tasks.ownership",
            TaskOwnership::Auto,
            &[
                ("auto", TaskOwnership::Auto),
                ("key", TaskOwnership::Key),
                ("partition", TaskOwnership::Partition),
            ],
        )?,
        boundary: boundary(v)?,
        max_txn_records: v.u64_in("transaction.max.records", 1_000_000, 1..=1 << 31)? as usize,
        metrics_port: v
            .get("metrics.port")
            .map(|_| v.u64_in("metrics.port", 0, 1..=65_535))
            .transpose()?
            .map(|p| p as u16),
        headroom_warn_commits: v.u64_or("history.headroom.warn.commits", 2)?,
        repair: false,
        history_gap: v.one_of(
            "history.gap",
            HistoryGap::Resync,
            &[("resync", HistoryGap::Resync), ("fail", HistoryGap::Fail)],
        )?,
        verify_interval: match v.get("verify.interval") {
            None => None,
            Some(_) => Some(v.duration_or("verify.interval", Duration::ZERO)?).filter(|d| !d.is_zero()),
        },
        idle_release: match v.get("idle.release") {
            None => None,
            Some(_) => Some(v.duration_or("idle.release", Duration::ZERO)?).filter(|d| !d.is_zero()),
        },
    })
}

pub(super) fn known_keys(props: &Properties) -> Result<(), ConfigError> {
    match props.entries.iter().find(|(key, _)| !keys::is_known(key)) {
        Some((key, (_, line))) => Err(ConfigError::UnknownKey {
            file: props.file.clone(),
            line: *line,
            key: key.clone(),
            hint: keys::hint(key),
        }),
        None => Ok(()),
    }
}

pub(super) fn connector_class(v: &Validator) -> Result<ConnectorKind, ConfigError> {
    match v
        .required("connector.class", "hudi, iceberg or delta")?
        .to_ascii_lowercase()
        .as_str()
    {
        "hudi" | "lakestream.hudi" | "io.lakestream.hudi" => Ok(ConnectorKind::Hudi),
        "iceberg" | "lakestream.iceberg" | "io.lakestream.iceberg" => Ok(ConnectorKind::Iceberg),
        "delta" | "lakestream.delta" | "io.lakestream.delta" => Ok(ConnectorKind::Delta),
        other => Err(v.invalid(
            "connector.class",
            format!("`{other}` is not one of: hudi, iceberg, delta"),
        )),
    }
}

/// The table section: the format's options, the table path and its stable id.
struct Table {
    iceberg: Option<IcebergOptions>,
    delta: Option<DeltaOptions>,
    path: PathBuf,
    id: String,
}

/// The keys of the other formats, refused with the format they belong to (the key table says
/// which classes accept each key).
pub(super) fn foreign_keys(v: &Validator, kind: ConnectorKind) -> Result<(), ConfigError> {
    match keys::foreign_key(kind, |k| v.get(k).is_some()) {
        Some((k, why)) => Err(v.invalid(k, why)),
        None => Ok(()),
    }
}

fn table(v: &Validator, kind: ConnectorKind) -> Result<Table, ConfigError> {
    foreign_keys(v, kind)?;
    match kind {
        ConnectorKind::Iceberg => {
            let o = iceberg::load(v)?;
            let path = match &o.location {
                TableLocation::Path(p) => p.clone(),
                _ => PathBuf::new(),
            };
            Ok(Table {
                id: o.table_id(),
                iceberg: Some(o),
                delta: None,
                path,
            })
        }
        ConnectorKind::Hudi | ConnectorKind::Delta => {
            let delta = match kind {
                ConnectorKind::Delta => Some(delta::load(v)?),
                _ => None,
            };
            let raw_path = v.required(
                "table.path",
                "a local path, file:// URI or object-store URL of the table",
            )?;
            let p = parse_table_path(&raw_path).map_err(|m| v.invalid("table.path", m))?;
            Ok(Table {
                id: p.display().to_string(),
                iceberg: None,
                delta,
                path: p,
            })
        }
    }
}

fn registry(v: &Validator) -> Result<RegistryOptions, ConfigError> {
    let Some(url) = v
        .get("schema.registry.url")
        .or_else(|| v.get("value.converter.schema.registry.url"))
    else {
        return Err(ConfigError::Missing {
            file: v.props.file.clone(),
            key: "schema.registry.url".into(),
            help: "or value.converter.schema.registry.url: the Schema Registry base URL",
        });
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(v.invalid("schema.registry.url", format!("`{url}` is not an http(s) URL")));
    }
    Ok(RegistryOptions {
        url: url.trim_end_matches('/').to_string(),
        user_info: v.get("schema.registry.basic.auth.user.info"),
        bearer_token: v.get("schema.registry.bearer.auth.token"),
        ca_location: v.get("schema.registry.ssl.ca.location").map(PathBuf::from),
        certificate_location: v.get("schema.registry.ssl.certificate.location").map(PathBuf::from),
        key_location: v.get("schema.registry.ssl.key.location").map(PathBuf::from),
    })
}

pub(super) fn storage(v: &Validator) -> Result<crate::storage::StorageOptions, ConfigError> {
    Ok(crate::storage::StorageOptions {
        s3_endpoint: v.get("s3.endpoint"),
        s3_region: v.get("s3.region"),
        s3_access_key_id: v.get("s3.access-key-id"),
        s3_secret_access_key: v.get("s3.secret-access-key"),
        s3_session_token: v.get("s3.session-token"),
        s3_path_style: v.bool_or("s3.path-style-access", false)?,
        s3_allow_http: v.bool_or("s3.allow-http", false)?,
        s3_max_retries: v.u64_or("s3.max-retries", 10)? as usize,
    })
}

/// What cannot be divided among tasks.
fn undividable(v: &Validator, tasks: u64, txn_metadata: bool, keyless: bool) -> Result<(), ConfigError> {
    if tasks > 1 && txn_metadata {
        return Err(v.invalid(
            "provide.transaction.metadata",
            "needs tasks.max=1: one BEGIN/END per lake commit cannot be split among tasks".into(),
        ));
    }
    if tasks > 1 && keyless {
        return Err(v.invalid(
            "key.mode",
            "`none`: the rows of a keyless table cannot be divided among tasks by key; use tasks.max=1".into(),
        ));
    }
    Ok(())
}

fn start_commit(v: &Validator) -> Result<StartCommit, ConfigError> {
    match v.get("read.start-commit").as_deref() {
        None | Some("latest") => Ok(StartCommit::Latest),
        Some("earliest") => Ok(StartCommit::Earliest),
        Some(s) if s.len() >= 8 && s.chars().all(|c| c.is_ascii_digit()) => Ok(StartCommit::Instant(s.to_string())),
        Some(s) => Err(v.invalid(
            "read.start-commit",
            format!("`{s}` is not `earliest`, `latest` or an instant time (digits, e.g. 20240101120000000)"),
        )),
    }
}

/// The version to stop after, by the format's own key (see `ReadConfig::end`).
fn end(v: &Validator, kind: ConnectorKind) -> Result<Option<String>, ConfigError> {
    let (key, what) = match kind {
        ConnectorKind::Hudi => ("read.end-commit", "an instant time (digits)"),
        ConnectorKind::Iceberg => ("end-snapshot-id", "a snapshot id (an integer)"),
        ConnectorKind::Delta => ("ending-version", "a table version (0, 1, 2, ...)"),
    };
    let valid = |s: &str| match kind {
        ConnectorKind::Hudi => !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()),
        ConnectorKind::Iceberg => s.parse::<i64>().is_ok(),
        ConnectorKind::Delta => s.parse::<u64>().is_ok(),
    };
    match v.get(key) {
        Some(s) if valid(&s) => Ok(Some(s)),
        Some(s) => Err(v.invalid(key, format!("`{s}` is not {what}"))),
        None => Ok(None),
    }
}

fn boundary(v: &Validator) -> Result<TxnBoundary, ConfigError> {
    let interval = v.one_of("transaction.boundary", false, &[("instant", false), ("interval", true)])?;
    Ok(match interval {
        false => TxnBoundary::Instant,
        true => TxnBoundary::Interval(Duration::from_millis(v.u64_in(
            "transaction.interval.ms",
            1000,
            1..=3_600_000,
        )?)),
    })
}

/// `auto` (or absent): `None`; `true`/`false`.
fn auto_bool(v: &Validator, key: &str) -> Result<Option<bool>, ConfigError> {
    v.one_of(
        key,
        None,
        &[("auto", None), ("true", Some(true)), ("false", Some(false))],
    )
}

/// `column.exclude.list`: Debezium's comma-separated regular expressions, each matching whole
/// column names.
fn column_exclude(v: &Validator) -> Result<Option<regex::Regex>, ConfigError> {
    regex_list(v, "column.exclude.list")
}

/// A key holding Debezium's comma-separated regular expressions, as one expression matching a
/// whole name that one of them matches (`None`: the key is not set).
pub(super) fn regex_list(v: &Validator, key: &str) -> Result<Option<regex::Regex>, ConfigError> {
    let Some(list) = v.get(key) else {
        return Ok(None);
    };
    let parts: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| format!("(?:{p})"))
        .collect();
    regex::Regex::new(&format!("^(?:{})$", parts.join("|")))
        .map(Some)
        .map_err(|e| v.invalid(key, format!("not a list of regular expressions: {e}")))
}

fn retry_timeout(v: &Validator) -> Result<Option<Duration>, ConfigError> {
    match v.get("errors.retry.timeout").as_deref() {
        None | Some("-1") => Ok(None),
        Some(_) => Ok(Some(Duration::from_millis(v.u64_in(
            "errors.retry.timeout",
            0,
            0..=u32::MAX as u64,
        )?))),
    }
}

fn memory_budget(v: &Validator) -> Result<usize, ConfigError> {
    match v.get("read.memory.budget") {
        None => Ok(256 << 20),
        Some(s) => parse_size(&s).ok_or_else(|| {
            v.invalid(
                "read.memory.budget",
                format!("`{s}` is not a size (bytes, or a number with KiB/MiB/GiB)"),
            )
        }),
    }
}

pub(super) fn parse_table_path(raw: &str) -> Result<PathBuf, String> {
    let p = local_path(raw)?;
    if !crate::storage::is_remote(&p) && !p.is_dir() {
        return Err(format!("`{}` is not a directory", p.display()));
    }
    Ok(p)
}

/// A storage path from `/path`, `file:/path`, `file:///path` or an object-store URL
/// (`s3://bucket/key`, `s3a://`, `gs://`, `az://`, `abfs[s]://`).
pub(super) fn local_path(raw: &str) -> Result<PathBuf, String> {
    crate::storage::parse_location(raw.trim_end_matches('/'))
}

/// `topic.creation.default.cleanup.policy`: `compact` unless the table is keyless (`key.mode=none`:
/// null keys, which a compacted topic refuses).
fn cleanup_policy(v: &Validator) -> Result<String, ConfigError> {
    let key = "topic.creation.default.cleanup.policy";
    let keyless = v.get("key.mode").as_deref() == Some("none");
    let default = if keyless { "delete" } else { "compact" };
    let choices = [
        ("compact", "compact"),
        ("delete", "delete"),
        ("compact,delete", "compact,delete"),
    ];
    let policy = v.one_of(key, default, &choices)?;
    if keyless && policy.contains("compact") {
        return Err(v.invalid(
            key,
            format!("`{policy}`: a keyless table (key.mode=none) publishes null keys, which a compacted topic refuses"),
        ));
    }
    Ok(policy.to_string())
}
