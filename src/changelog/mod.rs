//! Change events: Debezium-compatible envelopes `{before, after, source, op, ts_ms}` in Avro,
//! Confluent-framed (magic 0, 4-byte schema id), schemas registered per TopicNameStrategy.

pub mod avro;
pub mod decode;
pub mod registry;
pub mod resync;
pub mod temporal;
pub mod transaction;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{Field, SchemaRef};
use serde_json::{json, Value};

use self::avro::{avro_name, record, write_bytes, write_long, RowEncoder, Shape};
use self::registry::{RegistryClient, RegistryOptions};
use crate::source::{ChangeRow, Op, SplitChanges, TableInfo, Unit};

/// A failure to turn rows into events: what happened, with the column, subject or URL.
#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    /// A column (type or value) this encoder cannot write.
    #[error("cannot encode: {0}")]
    Unsupported(String),
    /// A value the events' schema cannot hold: a null in a column the table declares required.
    #[error("{0}")]
    Value(String),
    /// The `schema.registry.*` settings cannot be used (an unreadable CA or key file).
    #[error("schema registry settings: {0}")]
    Settings(String),
    /// The registry answered and refused (a schema its compatibility level forbids, bad auth).
    #[error("schema registry {url}: {message}")]
    Registry { url: String, message: String },
    /// The registry did not answer (unreachable, 5xx) through the client's own retries.
    #[error("schema registry unavailable: {url}: {message}")]
    RegistryUnavailable { url: String, message: String },
    /// A schema this build generated is not valid Avro (a bug).
    #[error("{0}")]
    Schema(String),
    /// A record read back from the topic that is not a change event of this connector.
    #[error("undecodable record: {0}")]
    Undecodable(String),
}

impl ChangelogError {
    pub fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind as K;
        match self {
            ChangelogError::Unsupported(_) => K::Unsupported,
            ChangelogError::Value(_) => K::Data,
            ChangelogError::Settings(_) => K::Config,
            ChangelogError::Registry { .. } => K::Rejected,
            ChangelogError::RegistryUnavailable { .. } => K::Unavailable,
            ChangelogError::Schema(_) => K::Internal,
            ChangelogError::Undecodable(_) => K::Data,
        }
    }
}

/// A record to produce: Confluent-framed Avro key (empty: a null key, for a keyless table), and
/// value (`None` = tombstone).
#[derive(Debug, Clone)]
pub struct KafkaRecord {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

struct Registered {
    key_id: u32,
    value_id: u32,
    key_cols: Vec<usize>,
}

pub struct ChangelogEncoder {
    connector: String,
    topic: String,
    namespace: String,
    table: TableInfo,
    tombstones: bool,
    registry: RegistryClient,
    registered: HashMap<SchemaRef, Arc<Registered>>,
    /// `provide.transaction.metadata`: the topic of BEGIN/END records (the envelope then has a
    /// `transaction` field), and their encoder once its schemas are registered.
    txn_topic: Option<String>,
    markers: Option<Arc<transaction::Markers>>,
    /// `column.exclude.list`: value columns left out of `before`/`after`.
    exclude: Option<regex::Regex>,
    /// `time.precision.mode` and the required columns (`schema.nullability=table`).
    shape: Shape,
}

const SOURCE_FIELDS: &[(&str, &str)] = &[
    ("version", "string"),
    ("connector", "string"),
    ("name", "string"),
    ("ts_ms", "long"),
    ("snapshot", "string"),
    ("db", "string"),
    ("table", "string"),
    ("instant", "string"),
    ("commit_time", "nullable"),
    ("partition", "string"),
    ("file", "string"),
    // the row's lineage id (Iceberg v3 `_row_id`, Delta row tracking) where the read had it
    ("row_id", "nullable long"),
];

impl ChangelogEncoder {
    pub fn new(
        connector: &str,
        topic: &str,
        table: TableInfo,
        tombstones: bool,
        registry: &RegistryOptions,
    ) -> Result<Self, ChangelogError> {
        Ok(Self {
            connector: connector.into(),
            topic: topic.into(),
            namespace: format!("lakestream.{}", avro_name(&table.name)),
            tombstones,
            registry: RegistryClient::new(registry, connector)?,
            registered: HashMap::new(),
            txn_topic: None,
            markers: None,
            exclude: None,
            shape: Shape {
                time: Default::default(),
                required: table.required.clone(),
            },
            table,
        })
    }

    /// How temporal columns are typed (`time.precision.mode`).
    pub fn with_time_mode(mut self, time: crate::config::TimeMode) -> Self {
        self.shape.time = time;
        self
    }

    /// Leave the value columns `exclude` matches (by `<column>` or `<table>.<column>`) out of
    /// the events' `before`/`after` (Debezium's `column.exclude.list`); keys keep theirs.
    pub fn with_column_exclude(mut self, exclude: Option<regex::Regex>) -> Self {
        self.exclude = exclude;
        self
    }

    /// The columns of `schema` the events' values carry.
    fn value_columns(&self, schema: &SchemaRef) -> Vec<usize> {
        let kept = |name: &str| {
            self.exclude
                .as_ref()
                .is_none_or(|re| !re.is_match(name) && !re.is_match(&format!("{}.{name}", self.table.name)))
        };
        (0..schema.fields().len())
            .filter(|i| kept(schema.field(*i).name()))
            .collect()
    }

    /// With a topic for BEGIN/END records, events carry their lake commit (`transaction`), and
    /// `markers` encodes those records.
    pub fn with_transaction_topic(mut self, topic: Option<String>) -> Self {
        self.txn_topic = topic;
        self
    }

    /// The BEGIN/END encoder, its schemas registered under `<transaction topic>-key/-value`.
    pub async fn markers(&mut self) -> Result<Arc<transaction::Markers>, ChangelogError> {
        if let Some(m) = &self.markers {
            return Ok(m.clone());
        }
        let subject = self
            .txn_topic
            .clone()
            .ok_or_else(|| ChangelogError::Schema("no transaction topic".into()))?;
        let (key, value) = (
            transaction::key_schema(&self.namespace),
            transaction::value_schema(&self.namespace),
        );
        let key_id = self
            .registry
            .register(&format!("{subject}-key"), &key.to_string())
            .await?;
        let value_id = self
            .registry
            .register(&format!("{subject}-value"), &value.to_string())
            .await?;
        let m = Arc::new(transaction::Markers {
            key_id,
            value_id,
            collection: self.table.qualified_name(),
        });
        self.markers = Some(m.clone());
        Ok(m)
    }

    /// (key schema, envelope schema) for a value schema.
    pub fn schemas(&self, value: &SchemaRef) -> Result<(Value, Value, Vec<usize>), ChangelogError> {
        let key_cols = self
            .table
            .key_fields
            .iter()
            .map(|k| {
                value
                    .index_of(k)
                    .map_err(|_| ChangelogError::Schema(format!("key field `{k}` is not a column")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let key_fields: Vec<Field> = key_cols.iter().map(|i| self.shape.field(value.field(*i))).collect();
        let mut key = record("Key", &key_fields, "Key", self.shape.time)?;
        key["namespace"] = json!(self.namespace);
        let kept: Vec<Field> = self
            .value_columns(value)
            .into_iter()
            .map(|i| self.shape.field(value.field(i)))
            .collect();
        let value_rec = record("Value", &kept, "Value", self.shape.time)?;
        let source = json!({
            "type": "record", "name": "Source",
            "fields": SOURCE_FIELDS.iter().map(|(n, t)| match *t {
                "nullable" => json!({"name": n, "type": ["null", "string"]}),
                "nullable long" => json!({"name": n, "type": ["null", "long"], "default": null}),
                // added after the first release: a default keeps the schema backward compatible
                _ if *n == "db" => json!({"name": n, "type": t, "default": ""}),
                _ => json!({"name": n, "type": t}),
            }).collect::<Vec<_>>()
        });
        let mut envelope = json!({
            "type": "record", "name": "Envelope", "namespace": self.namespace,
            "fields": [
                {"name": "before", "type": ["null", value_rec], "default": null},
                {"name": "after", "type": ["null", "Value"], "default": null},
                {"name": "source", "type": source},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": null},
            ]
        });
        if self.txn_topic.is_some() {
            envelope["fields"]
                .as_array_mut()
                .expect("fields")
                .push(transaction::block_field(&self.namespace));
        }
        Ok((key, envelope, key_cols))
    }

    async fn register(&mut self, schema: &SchemaRef) -> Result<Arc<Registered>, ChangelogError> {
        if let Some(r) = self.registered.get(schema) {
            return Ok(r.clone());
        }
        let (key, envelope, key_cols) = self.schemas(schema)?;
        // every generated schema must parse as Avro before it reaches the registry
        for s in [&key, &envelope] {
            apache_avro::Schema::parse(s)
                .map_err(|e| ChangelogError::Schema(format!("generated schema invalid: {e}: {s}")))?;
        }
        // a keyless table's records have null keys: no key schema
        // (the two subjects registered at once: each is a round trip, on the first unit's path)
        let key_subject = (!self.keyless()).then(|| (format!("{}-key", self.topic), key.to_string()));
        let (value_subject, envelope) = (format!("{}-value", self.topic), envelope.to_string());
        let (key_id, value_id) = tokio::try_join!(
            async {
                match &key_subject {
                    Some((subject, key)) => self.registry.register(subject, key).await,
                    None => Ok(0),
                }
            },
            self.registry.register(&value_subject, &envelope)
        )?;
        tracing::info!(topic = %self.topic, key_id, value_id, "schemas registered");
        let r = Arc::new(Registered {
            key_id,
            value_id,
            key_cols,
        });
        self.registered.insert(schema.clone(), r.clone());
        Ok(r)
    }

    fn keyless(&self) -> bool {
        self.table.keyless()
    }

    /// An event's `source` record up to its `partition` field: the unit's commit, `snapshot` as
    /// given (`true`, `false`, `resync`).
    fn source_prefix(&self, unit: &Unit, snapshot: &str) -> Vec<u8> {
        let mut source = Vec::with_capacity(128);
        write_bytes(&mut source, env!("CARGO_PKG_VERSION").as_bytes());
        write_bytes(&mut source, self.table.connector.as_bytes());
        write_bytes(&mut source, self.connector.as_bytes());
        write_long(&mut source, unit.ts_ms);
        write_bytes(&mut source, snapshot.as_bytes());
        write_bytes(&mut source, self.table.db.as_bytes());
        write_bytes(&mut source, self.table.name.as_bytes());
        write_bytes(&mut source, unit.position.version.as_bytes());
        match &unit.position.completed {
            Some(c) => {
                source.push(2);
                write_bytes(&mut source, c.as_bytes());
            }
            None => source.push(0),
        }
        source
    }

    /// Prepare the encoder of one split (registers its schemas on first sight).
    pub async fn split(&mut self, unit: &Unit, split: &SplitChanges) -> Result<SplitEncoder, ChangelogError> {
        let Some(first) = split.batches.first() else {
            return Ok(SplitEncoder {
                inner: None,
                tombstones: self.tombstones && !self.keyless(),
                txn_field: self.txn_topic.is_some(),
            });
        };
        let schema = first.schema();
        let reg = self.register(&schema).await?;
        let all = self.value_columns(&schema);
        let mut values = Vec::with_capacity(split.batches.len());
        let mut keys = Vec::with_capacity(split.batches.len());
        for b in split.batches.iter() {
            values.push(RowEncoder::new(b, &all, &self.shape)?);
            keys.push(RowEncoder::new(b, &reg.key_cols, &self.shape)?);
        }
        let source = self.source_prefix(unit, if unit.snapshot { "true" } else { "false" });
        // (partition, file) per batch when the split read several files
        let suffix = |partition: &str, file: &str| {
            let mut s = Vec::with_capacity(partition.len() + file.len() + 8);
            write_bytes(&mut s, partition.as_bytes());
            write_bytes(&mut s, file.as_bytes());
            s
        };
        let sources: Vec<Vec<u8>> = if split.batch_files.is_empty() {
            vec![[source.as_slice(), &suffix(&split.split.partition, &split.file)].concat()]
        } else {
            split
                .batch_files
                .iter()
                .map(|(p, f)| [source.as_slice(), &suffix(p, f)].concat())
                .collect()
        };
        Ok(SplitEncoder {
            inner: Some(Inner {
                key_id: reg.key_id,
                value_id: reg.value_id,
                values,
                keys,
                sources,
                row_ids: split.row_ids.clone(),
                keyless: self.keyless(),
            }),
            // a tombstone needs a key to delete
            tombstones: self.tombstones && !self.keyless(),
            txn_field: self.txn_topic.is_some(),
        })
    }
}

struct Inner {
    key_id: u32,
    value_id: u32,
    values: Vec<RowEncoder>,
    keys: Vec<RowEncoder>,
    /// The encoded `source` record: one for the split, or one per batch.
    sources: Vec<Vec<u8>>,
    /// Each batch's row ids (`source.row_id`), where the read had row lineage.
    row_ids: Option<std::sync::Arc<Vec<arrow_array::Int64Array>>>,
    /// Null keys (`key.mode=none`).
    keyless: bool,
}

pub struct SplitEncoder {
    inner: Option<Inner>,
    tombstones: bool,
    /// The envelope ends with the `transaction` field.
    txn_field: bool,
}

fn framed(id: u32, cap: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(cap);
    v.push(0);
    v.extend_from_slice(&id.to_be_bytes());
    v
}

impl SplitEncoder {
    /// A stable hash of a row's Avro-encoded key (which task owns the key).
    pub fn key_hash(&self, row: &ChangeRow, buf: &mut Vec<u8>) -> u32 {
        let Some(e) = &self.inner else { return 0 };
        let r = row.key_row();
        buf.clear();
        e.keys[r.batch as usize].write(r.row as usize, buf);
        crc32fast::hash(buf)
    }

    /// The `after` image of a change row as a datum of the events' `Value` schema (a resync keeps
    /// the table's rows so).
    pub fn write_after(&self, row: &ChangeRow, out: &mut Vec<u8>) {
        if let (Some(e), Some(r)) = (&self.inner, row.after()) {
            e.values[r.batch as usize].write(r.row as usize, out);
        }
    }

    /// The Kafka records of one change row: the event, and a tombstone after a delete. `txn`:
    /// the lake commit's id and the event's order in it (transaction metadata).
    pub fn encode(&self, row: &ChangeRow, ts_ms: i64, txn: Option<(&str, u64)>, out: &mut Vec<KafkaRecord>) {
        let Some(e) = &self.inner else { return };
        let key_row = row.key_row();
        let key = if e.keyless {
            Vec::new()
        } else {
            let mut key = framed(e.key_id, 32);
            e.keys[key_row.batch as usize].write(key_row.row as usize, &mut key);
            key
        };
        let mut value = framed(e.value_id, 256);
        for side in [row.before(), row.after()] {
            match side {
                Some(r) => {
                    value.push(2);
                    e.values[r.batch as usize].write(r.row as usize, &mut value);
                }
                None => value.push(0),
            }
        }
        let source = e.sources.get(key_row.batch as usize).unwrap_or(&e.sources[0]);
        value.extend_from_slice(source);
        let row_id = e.row_ids.as_ref().and_then(|ids| {
            let a = ids.get(key_row.batch as usize)?;
            arrow_array::Array::is_valid(a, key_row.row as usize).then(|| a.value(key_row.row as usize))
        });
        match row_id {
            Some(id) => {
                value.push(2);
                write_long(&mut value, id);
            }
            None => value.push(0),
        }
        write_bytes(&mut value, row.op.code().as_bytes());
        value.push(2);
        write_long(&mut value, ts_ms);
        if self.txn_field {
            match txn {
                Some((id, order)) => transaction::write_block(&mut value, id, order),
                None => value.push(0),
            }
        }
        let tombstone = self.tombstones && row.op == Op::Delete;
        if tombstone {
            out.push(KafkaRecord {
                key: key.clone(),
                value: Some(value),
            });
            out.push(KafkaRecord { key, value: None });
        } else {
            out.push(KafkaRecord {
                key,
                value: Some(value),
            });
        }
    }
}

#[cfg(test)]
mod tests;
