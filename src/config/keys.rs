//! The table of known connector keys: the single source for validation, hints and the README.

/// (key, default, meaning).
pub const KEYS: &[(&str, &str, &str)] = &[
    ("name", "(required)", "unique connector name; transactional.id is `<name>-<task>`"),
    ("connector.class", "(required)", "`hudi` (`iceberg` planned)"),
    ("table.path", "(required)", "table base path: a local path or `file://` URI"),
    ("topic", "(required)", "Kafka topic receiving the change events"),
    ("bootstrap.servers", "(required)", "Kafka bootstrap servers"),
    ("schema.registry.url", "(required)", "Confluent-compatible Schema Registry URL (alias: `value.converter.schema.registry.url`)"),
    ("offsets.storage.topic", "lakestream-offsets", "compacted topic holding connector positions"),
    ("read.start-commit", "latest", "`earliest` (full scan as `r`, then changes), `latest`, or an instant time (inclusive)"),
    ("read.end-commit", "(none)", "last instant to emit; the connector exits 0 once it is emitted"),
    ("read.streaming.check-interval", "60", "timeline poll interval: seconds, or with unit (`500ms`, `10s`)"),
    ("read.commits.limit", "(none)", "at most this many instants per poll"),
    ("read.streaming.skip_compaction", "true", "do not read compaction commits (they change no rows)"),
    ("read.streaming.skip_clustering", "true", "do not read clustering commits (they change no rows)"),
    ("read.memory.budget", "256MiB", "decoded log records kept in memory per file-slice merge; beyond it they spill to disk (bytes, or KiB/MiB/GiB)"),
    ("read.spill.dir", "(system temp dir)", "directory for spilled log records"),
    ("changelog.enabled", "false", "merge-on-read: emit every log record of an instant (op from `_hoodie_operation`, `-U`/`U` paired into one `u`) instead of its net change"),
    ("hoodie.datasource.merge.type", "payload_combine", "`skip_merge`: like changelog mode, but log records are emitted without event-time ordering (Flink's skip_merge)"),
    ("tombstones.on.delete", "true", "follow each `d` event with a null-value tombstone for compaction"),
    ("transaction.boundary", "instant", "`instant`: one transaction per instant; `interval`: every `transaction.interval.ms`"),
    ("transaction.interval.ms", "1000", "commit interval with `transaction.boundary=interval`"),
    ("transaction.max.records", "100000", "a transaction is committed at least every this many records"),
    ("transaction.timeout.ms", "60000", "producer `transaction.timeout.ms`"),
    ("metrics.port", "(none)", "serve `/metrics`, `/healthz`, `/ready` on this port (CLI `--metrics-port` wins)"),
    ("topic.creation.default.partitions", "1", "partitions of the change topic when lakestream creates it"),
    ("topic.creation.default.replication.factor", "1", "replication factor of the topics lakestream creates"),
    ("tasks.max", "1", "number of tasks (only 1 in this build)"),
    ("key.converter", "(ignored)", "accepted for Kafka Connect compatibility; keys are always Avro"),
    ("value.converter", "(ignored)", "accepted for Kafka Connect compatibility; values are always Avro"),
    ("key.converter.schemas.enable", "(ignored)", "accepted for Kafka Connect compatibility"),
    ("value.converter.schemas.enable", "(ignored)", "accepted for Kafka Connect compatibility"),
    ("key.converter.schema.registry.url", "(ignored)", "accepted; `schema.registry.url` is used"),
    ("value.converter.schema.registry.url", "(none)", "alias of `schema.registry.url`"),
    ("producer.override.<librdkafka key>", "", "passed verbatim to the librdkafka producer (e.g. `producer.override.compression.type=zstd`)"),
];

const PREFIXES: &[&str] = &["producer.override."];

pub fn is_known(key: &str) -> bool {
    KEYS.iter().any(|(k, _, _)| *k == key) || PREFIXES.iter().any(|p| key.starts_with(p) && key.len() > p.len())
}

/// Values of keys like these are never printed.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "jaas", "token", "credentials", "user.info", "key.pem", "keystore"]
        .iter()
        .any(|s| k.contains(s))
}

/// " (did you mean `x`?)" for near misses, and the list of known keys.
pub fn hint(key: &str) -> String {
    let best = KEYS
        .iter()
        .map(|(k, _, _)| (*k, edit_distance(key, k)))
        .min_by_key(|(_, d)| *d)
        .filter(|(_, d)| *d <= 3);
    let known: Vec<&str> = KEYS.iter().map(|(k, _, _)| *k).collect();
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
