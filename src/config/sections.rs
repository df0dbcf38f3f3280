//! What each stage is handed of a connector's configuration instead of the whole
//! [`ConnectorConfig`]: the source its table and read settings ([`SourceSettings`]), the sink
//! its Kafka settings and the names a task writes under ([`SinkSettings`]). The runtime, which
//! holds the loaded configuration (never changed after `load`), builds them
//! ([`ConnectorConfig::source`], [`ConnectorConfig::sink`]).

use std::path::PathBuf;

use super::{ConnectorConfig, ConnectorKind, DeltaOptions, IcebergOptions, KafkaConfig, ReadConfig, TaskOwnership};

/// What the source needs to open a table and read it.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// The connector's name (metric labels, log fields, spill file names).
    pub name: String,
    pub kind: ConnectorKind,
    /// Hudi, Delta: the table base path; Iceberg: the table path when it has one.
    pub table_path: PathBuf,
    /// Object-store settings (`s3.*`).
    pub storage: crate::storage::StorageOptions,
    pub read: ReadConfig,
    /// `schema.nullability=table`: columns the table declares required are non-null in Avro.
    pub required_columns: bool,
    /// `tasks.ownership` and `tasks.max`: the source decides how tasks divide the table.
    pub ownership: TaskOwnership,
    pub tasks: u32,
    /// Iceberg catalog and read options (`connector.class=iceberg`).
    pub iceberg: Option<IcebergOptions>,
    /// Delta read options (`connector.class=delta`).
    pub delta: Option<DeltaOptions>,
}

/// What the sink needs to know of a connector task.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// The connector's name (client group ids, log fields, metric labels).
    pub name: String,
    /// This task's number (metric labels, client names).
    pub task_id: u32,
    /// `bootstrap.servers`, the topics, `producer.override.*`, `consumer.override.*`, timeouts.
    pub kafka: KafkaConfig,
    /// `provide.transaction.metadata`: BEGIN/END records go to `transaction_topic`.
    pub txn_metadata: bool,
    pub transaction_topic: String,
    /// This task's offsets key and transactional id, dividing the table by key hash `[0]` or by
    /// partition `[1]` (which one applies is resolved when the source opens).
    offsets_key: [String; 2],
    transactional_id: [String; 2],
}

impl SinkSettings {
    /// This task's offsets key (see [`ConnectorConfig::offsets_key`]).
    pub fn offsets_key(&self, by_partition: bool) -> &str {
        &self.offsets_key[by_partition as usize]
    }

    /// This task's transactional id (see [`ConnectorConfig::transactional_id`]).
    pub fn transactional_id(&self, by_partition: bool) -> &str {
        &self.transactional_id[by_partition as usize]
    }
}

impl ConnectorConfig {
    /// The source's section (see [`SourceSettings`]).
    pub fn source(&self) -> SourceSettings {
        SourceSettings {
            name: self.name.clone(),
            kind: self.kind,
            table_path: self.table_path.clone(),
            storage: self.storage.clone(),
            read: self.read.clone(),
            required_columns: self.events.required_columns,
            ownership: self.runtime.ownership,
            tasks: self.runtime.tasks,
            iceberg: self.iceberg.clone(),
            delta: self.delta.clone(),
        }
    }

    /// The sink's section (see [`SinkSettings`]).
    pub fn sink(&self) -> SinkSettings {
        SinkSettings {
            name: self.name.clone(),
            task_id: self.runtime.task_id,
            kafka: self.kafka.clone(),
            txn_metadata: self.events.txn_metadata,
            transaction_topic: self.transaction_topic(),
            offsets_key: [false, true].map(|p| self.offsets_key(p)),
            transactional_id: [false, true].map(|p| self.transactional_id(p)),
        }
    }
}
