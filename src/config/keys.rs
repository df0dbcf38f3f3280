//! The table of known connector keys: the single source for validation, hints and the README.

use super::ConnectorKind;

/// Which connector classes accept a key; a key set for another class is refused naming the
/// class it belongs to (`load::foreign_keys`), so the lists cannot drift from this table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Formats(u8);

/// Every class, a fourth included: every bit is set, not only those of the classes there are.
pub const ANY: Formats = Formats(u8::MAX);
pub const HUDI: Formats = Formats::of(ConnectorKind::Hudi);
pub const ICEBERG: Formats = Formats::of(ConnectorKind::Iceberg);
pub const DELTA: Formats = Formats::of(ConnectorKind::Delta);
pub const ICEBERG_DELTA: Formats = Formats(ICEBERG.0 | DELTA.0);

impl Formats {
    const fn of(kind: ConnectorKind) -> Formats {
        Formats(1 << kind.index())
    }

    pub fn accepts(self, kind: ConnectorKind) -> bool {
        self.0 & Formats::of(kind).0 != 0
    }

    /// The classes, as the reference and messages name them (`Iceberg, Delta`; `all`).
    pub fn names(self) -> String {
        if self == ANY {
            return "all".into();
        }
        let names: Vec<&str> = ConnectorKind::ALL
            .iter()
            .filter(|k| self.accepts(**k))
            .map(|k| k.title())
            .collect();
        names.join(", ")
    }
}

/// (key, default, meaning, the connector classes that accept it).
pub const KEYS: &[(&str, &str, &str, Formats)] = &[
    ("name", "(required)", "unique connector name; transactional.id is `<name>-<task>`", ANY),
    ("connector.class", "(required)", "`hudi`, `iceberg` or `delta`", ANY),
    ("table.path", "(required)", "Hudi: table base path (local path or `file://` URI); Iceberg: table directory or one `*.metadata.json`; Delta: the table directory (the one holding `_delta_log/`)", ANY),
    ("topic", "(required)", "Kafka topic receiving the change events", ANY),
    ("table.path.prefix", "(none)", "table discovery: stream every table found under this directory or object-store prefix (a directory holding `.hoodie/`, `_delta_log/` or an Iceberg `metadata/`), each as its own stream `<name>/<namespace>.<table>` (namespace: the directories between, a trailing `.db` dropped; `default` directly under it) to its own topic; replaces `table.path` and `topic`; `connector.class` then optional (only that format). Instead of a prefix, `catalog.type` (`rest`, `sql`, `glue`) and its keys without `table.identifier` stream the tables of a catalog", ANY),
    ("table.include.list", "(every table)", "table discovery: comma-separated regular expressions over `namespace.table`, each matching the whole name; only tables one matches are streamed", ANY),
    ("table.exclude.list", "(none)", "table discovery: comma-separated regular expressions over `namespace.table`; tables one matches are not streamed (not with table.include.list)", ANY),
    ("topic.prefix", "(required for table discovery)", "table discovery (with table.path.prefix, or catalog.type without table.identifier): a table's topic is `<topic.prefix>.<namespace>.<table>`, each character outside `[A-Za-z0-9._-]` replaced by `_`; two tables whose topics differ only by `.` and `_` are refused", ANY),
    ("table.discovery.interval", "60s", "table discovery: how often the prefix or catalog is searched again; a new table streams from the next search on, a table gone stops its stream (its offsets kept)", ANY),
    ("table.discovery.depth", "3 (a prefix), 1 (a REST catalog)", "table discovery: how many directory levels under table.path.prefix, or namespace levels of a REST catalog, are searched (1–16)", ANY),
    ("bootstrap.servers", "(required)", "Kafka bootstrap servers", ANY),
    ("schema.registry.url", "(required)", "Confluent-compatible Schema Registry URL (alias: `value.converter.schema.registry.url`)", ANY),
    ("schema.registry.basic.auth.user.info", "(none)", "Schema Registry basic auth `user:password` (secret)", ANY),
    ("schema.registry.basic.auth.credentials.source", "USER_INFO", "accepted for Confluent compatibility (only USER_INFO)", ANY),
    ("schema.registry.bearer.auth.token", "(none)", "Schema Registry bearer token (secret)", ANY),
    ("schema.registry.ssl.ca.location", "(system roots)", "PEM CA bundle for an https Schema Registry", ANY),
    ("schema.registry.ssl.certificate.location", "(none)", "PEM client certificate (mutual TLS)", ANY),
    ("schema.registry.ssl.key.location", "(none)", "PEM client key (mutual TLS)", ANY),
    ("offsets.storage.topic", "lakestream-offsets", "compacted topic holding connector positions", ANY),
    ("read.start-commit", "latest", "`earliest`: full scan of the latest file slices as `r` events, then every later instant; `latest`: only instants completed after start; an instant time: every instant from it (inclusive) as changes", HUDI),
    ("read.end-commit", "(none)", "last instant to emit; the connector exits 0 once it is emitted", HUDI),
    ("read.streaming.check-interval", "60", "timeline poll interval: seconds, or with unit (`500ms`, `10s`)", ANY),
    ("read.commits.limit", "(none)", "at most this many instants per poll", HUDI),
    ("read.streaming.skip_compaction", "true", "do not read compaction commits (they change no rows)", HUDI),
    ("read.streaming.skip_clustering", "true", "do not read clustering commits (they change no rows)", HUDI),
    ("read.memory.budget", "256MiB", "memory for reading a unit: log records of a merge, full-scan key hashes, change units diffed in memory; beyond it they spill to disk (bytes, or KiB/MiB/GiB)", ANY),
    ("read.spill.dir", "(system temp dir)", "directory for spilled log records", ANY),
    ("changelog.enabled", "false", "merge-on-read: emit every log record of an instant (op from `_hoodie_operation`, `-U`/`U` paired into one `u`) instead of its net change", HUDI),
    ("read.change.detection", "narrow", "Hudi change units: `narrow` decides which keys an instant changed from the key and commit-time columns (or the instant's log blocks) and reads whole rows only for those; Iceberg and Delta diffs beyond `read.memory.budget`: `narrow` keeps key and row hashes first, then only the changed keys' rows; `full` reads and diffs both sides whole (key buckets on disk beyond the budget; the same events, for comparison)", ANY),
    ("read.cdc.from-log", "auto", "Hudi tables with `hoodie.table.cdc.enabled`: `auto` reads an instant's changes from its CDC log files where every updated file group has one (else diffs it), `true` requires them (an update without one fails naming the file group), `false` always diffs", HUDI),
    ("hoodie.datasource.merge.type", "payload_combine", "`skip_merge`: like changelog mode, but log records are emitted without event-time ordering (Flink's skip_merge)", HUDI),
    ("catalog.type", "hadoop", "Iceberg: `hadoop` (table.path), `sql` (sqlite SqlCatalog, as pyiceberg writes it), `rest` or `glue` (AWS Glue Data Catalog); with topic.prefix and no table.identifier, the catalog whose tables are discovered (Glue: its Iceberg, Hudi and Delta tables)", ICEBERG),
    ("catalog.uri", "(none)", "Iceberg catalog: `sqlite:///path/catalog.db` (sql), the REST base URL, or the Glue endpoint (default `https://glue.{region}.amazonaws.com`)", ICEBERG),
    ("catalog.region", "(s3.region, AWS_REGION)", "Iceberg Glue catalog: the AWS region its requests are signed for", ICEBERG),
    ("catalog.glue.catalog-id", "(the caller's account)", "Iceberg Glue catalog: the catalog (account id) holding the table", ICEBERG),
    ("catalog.warehouse", "(none)", "Iceberg REST catalog: `warehouse` sent to `/v1/config`", ICEBERG),
    ("catalog.name", "default", "Iceberg sql catalog: `catalog_name` in `iceberg_tables`", ICEBERG),
    ("catalog.token", "(none)", "Iceberg REST catalog: bearer token (secret)", ICEBERG),
    ("catalog.credential", "(none)", "Iceberg REST catalog: OAuth 2 client credentials `<client-id>:<secret>` (or `<secret>`), exchanged for tokens renewed before they expire (secret)", ICEBERG),
    ("catalog.oauth2-server-uri", "(catalog.uri)/v1/oauth/tokens", "Iceberg REST catalog: the OAuth 2 token endpoint for catalog.credential", ICEBERG),
    ("catalog.scope", "catalog", "Iceberg REST catalog: the OAuth 2 scope asked for with catalog.credential", ICEBERG),
    ("catalog.rest.sigv4-enabled", "false", "Iceberg REST catalog: sign every request with AWS SigV4 (the connector's AWS credential chain), as AWS Glue's and S3 Tables' Iceberg REST endpoints require", ICEBERG),
    ("catalog.rest.signing-region", "(catalog.region, s3.region, AWS_REGION)", "Iceberg REST catalog: the region SigV4 requests are signed for", ICEBERG),
    ("catalog.rest.signing-name", "execute-api", "Iceberg REST catalog: the service SigV4 requests are signed for (`glue` for Glue's endpoint, `s3tables` for S3 Tables)", ICEBERG),
    ("table.identifier", "(none)", "Iceberg catalog table: `namespace.table`", ICEBERG),
    ("starting-strategy", "TABLE_SCAN_THEN_INCREMENTAL", "Iceberg start without offsets: TABLE_SCAN_THEN_INCREMENTAL, INCREMENTAL_FROM_LATEST_SNAPSHOT[_EXCLUSIVE], INCREMENTAL_FROM_EARLIEST_SNAPSHOT, INCREMENTAL_FROM_SNAPSHOT_ID, INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP", ICEBERG),
    ("start-snapshot-id", "(none)", "Iceberg: first snapshot to emit (inclusive)", ICEBERG),
    ("start-snapshot-timestamp", "(none)", "Iceberg: emit from the first snapshot committed at or after this epoch-ms time", ICEBERG),
    ("end-snapshot-id", "(none)", "Iceberg: last snapshot to emit; the connector exits 0 once it is emitted", ICEBERG),
    ("max-planning-snapshot-count", "(none)", "Iceberg: at most this many snapshots per poll", ICEBERG),
    ("monitor-interval", "60", "Iceberg: snapshot poll interval (alias of read.streaming.check-interval)", ICEBERG_DELTA),
    ("split-size", "128MiB", "Iceberg: target split size (bytes, or KiB/MiB/GiB); large files split at row groups", ICEBERG),
    ("split-lookback", "10", "Iceberg: open bins when packing files into splits", ICEBERG),
    ("split-file-open-cost", "4MiB", "Iceberg: weight of a file when packing splits", ICEBERG),
    ("key.fields", "(identifier fields)", "Iceberg: Kafka key columns (comma-separated) when the schema declares no identifier fields; Delta (no declared key): required unless key.mode=none", ICEBERG_DELTA),
    ("key.fields.override", "false", "Iceberg: let `key.fields` replace the identifier fields the table declares (otherwise refused)", ICEBERG),
    ("key.mode", "fields", "Iceberg, Delta: `fields` (the key is key.fields or the identifier fields) or `none`: a keyless table, null Kafka keys, rows compared whole (removed rows `d`, added rows `c`, unchanged carry-over rows nothing)", ICEBERG_DELTA),
    ("starting-version", "earliest", "Delta start without offsets (Spark's `startingVersion`): `earliest` (the current version read whole as `r`, then every later version), `latest` (only versions committed after start), or a version N (every version from N inclusive, as changes; 0: the whole history)", DELTA),
    ("starting-timestamp", "(none)", "Delta (Spark's `startingTimestamp`): emit from the first version committed at or after this time (epoch ms, `2024-01-31` or `2024-01-31T12:00:00Z`)", DELTA),
    ("ending-version", "(none)", "Delta (Spark's `endingVersion`): last version to emit; the connector exits 0 once it is emitted", DELTA),
    ("key.partition-path", "auto", "Hudi: add `_hoodie_partition_path` to the Kafka key (`true`/`false`); `auto`: where the table is partitioned by a non-key field and declares no global index (`hoodie.index.type` GLOBAL_*/RECORD_INDEX/HBASE, or a metadata-table record index), since under a non-global index (partition path, record key) is the row's identity", HUDI),
    ("s3.endpoint", "(AWS)", "S3-compatible endpoint URL for `s3://` tables (MinIO, Ceph, ...); else `AWS_ENDPOINT_URL`", ANY),
    ("s3.region", "(AWS_REGION)", "S3 region", ANY),
    ("s3.access-key-id", "(credential chain)", "S3 access key; unset: environment, web identity (IRSA), instance profile", ANY),
    ("s3.secret-access-key", "(credential chain)", "S3 secret key (secret)", ANY),
    ("s3.session-token", "(none)", "S3 session token (secret)", ANY),
    ("s3.path-style-access", "false", "path-style requests (`endpoint/bucket/key`), as most S3-compatible stores need", ANY),
    ("s3.allow-http", "false", "allow a plain-http `s3.endpoint`", ANY),
    ("s3.max-retries", "10", "retries of one object-store request (with backoff, within 3 min) before the failure reaches the connector: unreachable, throttled (429/503) and 5xx failures are then retried from the committed position (`errors.retry.timeout`)", ANY),
    ("provide.transaction.metadata", "false", "Debezium transaction metadata: each event's `transaction {id, total_order, data_collection_order}` (id: the instant / snapshot), and BEGIN/END records (`event_count`) in `<topic>.transaction`, in the same Kafka transactions (tasks.max=1)", ANY),
    ("column.exclude.list", "(none)", "comma-separated regular expressions of value columns to leave out of `before`/`after` (matched whole against `<column>` and `<table>.<column>`, e.g. `_hoodie_.*`); key columns stay in the key", ANY),
    ("time.precision.mode", "avro", "how date/time/timestamp columns are typed: `avro` (Avro logical types at the column's precision: timestamp-micros, local-timestamp-micros, date, time-micros), `adaptive` (Debezium's io.debezium.time.* at the column's precision; timestamps with a zone as ZonedTimestamp ISO-8601 strings), `adaptive_time_microseconds` (adaptive, times of day in microseconds), `connect` (Kafka Connect's Date/Time/Timestamp in milliseconds, as JDBC sinks expect; also Connect's Decimal)", ANY),
    ("schema.nullability", "optional", "`optional`: every value column is a nullable Avro union; `table`: columns the table's schema declares required (Iceberg `required`, Hudi's writer schema) are plain non-null types, as sinks creating NOT NULL columns want (a null met in one stops the task naming it)", ANY),
    ("tombstones.on.delete", "true", "follow each `d` event with a null-value tombstone for compaction", ANY),
    ("transaction.boundary", "instant", "`instant`: one transaction per instant; `interval`: every `transaction.interval.ms`", ANY),
    ("transaction.interval.ms", "1000", "commit interval with `transaction.boundary=interval`", ANY),
    ("transaction.max.records", "1000000", "a transaction commits at least every this many records, or when a third of transaction.timeout.ms old (large instants span several, resumable mid-split; each commit costs a broker round trip and stalls producing, so bigger is faster)", ANY),
    ("errors.retry.timeout", "-1", "how long a broker outage (down, restarted, stalled) is retried before the task fails, in ms; -1: forever (Kafka Connect's key)", ANY),
    ("errors.retry.delay.max.ms", "60000", "the longest wait between two retries of an outage (backoff doubles from 1 s)", ANY),
    ("bootstrap.timeout.ms", "30000", "at start, how long `bootstrap.servers` may stay unreachable before the task fails naming the addresses and the cause (later outages are ridden out)", ANY),
    ("transaction.timeout.ms", "60000", "producer `transaction.timeout.ms` (1000 to 900000: the broker's default `transaction.max.timeout.ms`)", ANY),
    ("idle.release", "(off)", "release the Kafka producer after this long with nothing to publish (`60s`): a caught-up task then holds no librdkafka threads or connections; work takes it back as a restart would (fenced, the position re-read), never from a newer instance of the task", ANY),
    ("history.gap", "resync", "when the commits after the position can no longer be read (cleaned, expired, rolled back or restored, log entries gone): `resync` publishes the net change from the topic's own state to the table's current commit (`c`/`u`/`d`, `source.snapshot=resync`), then goes on commit by commit; `fail` stops (exit 1) with the ways out. A resync needs a change topic with `cleanup.policy=compact` whose partitions start at offset 0", ANY),
    ("history.headroom.warn.commits", "2", "warn (every 10 minutes at most) while fewer commits than this separate the task's position from the oldest one the table's retention keeps (`lakestream_history_headroom_commits`)", ANY),
    ("verify.interval", "(off)", "audit in the background of `lakestream run`: every this long (`24h`), compare the topic replayed by key with the table at the committed position (`lakestream verify`), exported as `lakestream_verify_*` metrics", ANY),
    ("metrics.port", "(none)", "serve `/metrics`, `/healthz`, `/ready` on this port (CLI `--metrics-port` wins)", ANY),
    ("topic.creation.default.partitions", "1", "partitions of the change topic when lakestream creates it", ANY),
    ("topic.creation.default.cleanup.policy", "compact", "`cleanup.policy` of the change topic when lakestream creates it: `compact` keeps every key's last event, which replaying by key, `verify` and a resync (`history.gap`) need; `delete` or `compact,delete` let retention drop events (a resync then refuses the topic). Keyless tables (`key.mode=none`): `delete` (null keys cannot be compacted; a resync needs every partition to start at offset 0, so keep `retention.ms=-1`)", ANY),
    ("topic.creation.default.replication.factor", "1", "replication factor of the topics lakestream creates", ANY),
    ("tasks.max", "1", "tasks sharing the table, each with its own producer and offsets (1..256)", ANY),
    ("tasks.ownership", "auto", "how tasks divide the table: `partition` (each task reads only its partitions), `key` (each reads all, keeps its keys), `auto` (partition where the table proves keys stay in their partition)", ANY),
    ("key.converter", "(Avro)", "accepted for Kafka Connect compatibility: only `io.confluent.connect.avro.AvroConverter`; keys are always Avro", ANY),
    ("value.converter", "(Avro)", "accepted for Kafka Connect compatibility: only `io.confluent.connect.avro.AvroConverter`; values are always Avro", ANY),
    ("key.converter.schemas.enable", "(ignored)", "accepted for Kafka Connect compatibility", ANY),
    ("value.converter.schemas.enable", "(ignored)", "accepted for Kafka Connect compatibility", ANY),
    ("key.converter.schema.registry.url", "(ignored)", "accepted; `schema.registry.url` is used", ANY),
    ("value.converter.schema.registry.url", "(none)", "alias of `schema.registry.url`", ANY),
    ("producer.override.<librdkafka key>", "", "passed verbatim to the librdkafka producer (e.g. `producer.override.compression.type=zstd`)", ANY),
    ("consumer.override.<librdkafka key>", "", "passed verbatim to the librdkafka consumer `verify` reads the topic with (after the security settings of producer.override.*)", ANY),
];

/// Where a refused key has a counterpart in the connector's class: (key, class, what to use).
const INSTEAD: &[(&str, ConnectorKind, &str)] = &[
    (
        "read.start-commit",
        ConnectorKind::Iceberg,
        "starting-strategy / start-snapshot-id",
    ),
    ("read.end-commit", ConnectorKind::Iceberg, "end-snapshot-id"),
    (
        "read.commits.limit",
        ConnectorKind::Iceberg,
        "max-planning-snapshot-count",
    ),
    (
        "read.streaming.skip_compaction",
        ConnectorKind::Iceberg,
        "(replace snapshots never emit)",
    ),
    (
        "read.streaming.skip_clustering",
        ConnectorKind::Iceberg,
        "(replace snapshots never emit)",
    ),
    (
        "changelog.enabled",
        ConnectorKind::Iceberg,
        "(Iceberg changes are always net per snapshot)",
    ),
    (
        "read.start-commit",
        ConnectorKind::Delta,
        "starting-version / starting-timestamp / ending-version",
    ),
    (
        "read.end-commit",
        ConnectorKind::Delta,
        "starting-version / starting-timestamp / ending-version",
    ),
    (
        "changelog.enabled",
        ConnectorKind::Delta,
        "starting-version / starting-timestamp / ending-version",
    ),
    (
        "read.cdc.from-log",
        ConnectorKind::Delta,
        "starting-version / starting-timestamp / ending-version",
    ),
];

/// The first key of `set` another class's (refused), with why: "is a Hudi option; …".
pub fn foreign_key<'a>(kind: ConnectorKind, set: impl Fn(&str) -> bool) -> Option<(&'a str, String)> {
    let (key, formats) = KEYS
        .iter()
        .find(|(k, _, _, f)| !f.accepts(kind) && set(k))
        .map(|(k, _, _, f)| (*k, *f))?;
    let article = if formats.names().starts_with('I') { "an" } else { "a" };
    let tail = match INSTEAD.iter().find(|(k, c, _)| *k == key && *c == kind) {
        Some((_, _, instead)) => format!("for {} use {instead}", kind.title()),
        None => format!("this connector is `connector.class={}`", kind.name()),
    };
    Some((
        key,
        format!("is {article} {} option; {tail}", formats.names().replace(", ", " and ")),
    ))
}

const PREFIXES: &[&str] = &["producer.override.", "consumer.override."];

pub fn is_known(key: &str) -> bool {
    KEYS.iter().any(|(k, ..)| *k == key) || PREFIXES.iter().any(|p| key.starts_with(p) && key.len() > p.len())
}

/// Values of keys like these are never printed.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "jaas",
        "token",
        "credential",
        "user.info",
        "key.pem",
        "keystore",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// " (did you mean `x`?)" for near misses, and the list of known keys.
pub fn hint(key: &str) -> String {
    let best = KEYS
        .iter()
        .map(|(k, ..)| (*k, edit_distance(key, k)))
        .min_by_key(|(_, d)| *d)
        .filter(|(_, d)| *d <= 3);
    let known: Vec<&str> = KEYS.iter().map(|(k, ..)| *k).collect();
    match best {
        Some((k, _)) => format!(" (did you mean `{k}`?); known keys: {}", known.join(", ")),
        None => format!("; known keys: {}", known.join(", ")),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(kind: ConnectorKind, key: &str) -> Option<String> {
        foreign_key(kind, |k| k == key).map(|(_, why)| why)
    }

    #[test]
    fn each_class_refuses_the_keys_of_the_others_and_only_those() {
        for (key, _, _, formats) in KEYS {
            for kind in [ConnectorKind::Hudi, ConnectorKind::Iceberg, ConnectorKind::Delta] {
                assert_eq!(
                    refused(kind, key).is_some(),
                    !formats.accepts(kind),
                    "{key} for {kind:?}"
                );
            }
        }
        assert_eq!(
            refused(ConnectorKind::Delta, "read.start-commit").as_deref(),
            Some("is a Hudi option; for Delta use starting-version / starting-timestamp / ending-version")
        );
        assert_eq!(
            refused(ConnectorKind::Hudi, "key.fields").as_deref(),
            Some("is an Iceberg and Delta option; this connector is `connector.class=hudi`")
        );
        assert_eq!(
            refused(ConnectorKind::Hudi, "starting-version").as_deref(),
            Some("is a Delta option; this connector is `connector.class=hudi`")
        );
        assert_eq!(refused(ConnectorKind::Delta, "key.mode"), None);
    }
}
