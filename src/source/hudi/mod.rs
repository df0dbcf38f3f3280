//! Apache Hudi source: the monitor (timeline → units) and the reader (file slices → change rows).
//!
//! Beyond Flink's commit-time filter, a change unit diffs the new file slices of every file group
//! an instant touched against the previous committed slices of the same file groups, so deletes
//! and insert-overwrites on copy-on-write tables show up as `d`, updates carry `before`, and
//! compaction/clustering output (same rows, new files) emits nothing.

pub mod archive;
mod bounded;
pub mod changelog;
pub mod files;
pub mod log;
pub mod merge;
mod monitor;
mod reader;
pub mod slice;
pub mod timeline;

use std::sync::Arc;

use self::slice::MergeConfig;
use self::timeline::{Instant, TableConfig};
use super::{Position, Resume, Source, SourceError, SplitChanges, SplitSpec, TableInfo, Unit};
use crate::config::{ConnectorConfig, StartCommit};

pub struct HudiSource {
    table: TableConfig,
    info: TableInfo,
    start: StartCommit,
    end_commit: Option<String>,
    commits_limit: Option<usize>,
    skip_compaction: bool,
    skip_clustering: bool,
    merge: MergeConfig,
    /// `changelog.enabled`: every log record of an instant, not its net change.
    changelog: bool,
    /// `skip_merge`: log records emitted as written, without event-time ordering.
    skip_merge: bool,
    spill: slice::SpillConfig,
    connector: String,
    /// Threads reading the splits of a full scan.
    threads: usize,
    ownership: super::Ownership,
    /// Archived instants by history version.
    archived: std::sync::Mutex<Option<(Option<String>, Arc<Vec<Instant>>)>>,
}

impl HudiSource {
    pub fn open(cfg: &ConnectorConfig) -> Result<Self, SourceError> {
        let table = TableConfig::load(&cfg.table_path)?;
        let mut key_fields = table.key_fields.clone();
        if key_fields.is_empty() {
            key_fields.push("_hoodie_record_key".into());
        }
        let partition_fields = table.partition_fields();
        let proof = match partition_fields.iter().find(|f| !key_fields.contains(f)) {
            None => Ok(()),
            Some(f) => Err(format!("partition field `{f}` is not a record-key field, so a key can change partition")),
        };
        let ownership = super::Ownership::decide(cfg, &table.name, !partition_fields.is_empty(), proof);
        Ok(Self {
            ownership,
            info: TableInfo { name: table.name.clone(), key_fields, connector: "hudi" },
            start: cfg.start.clone(),
            end_commit: cfg.end_commit.clone(),
            commits_limit: cfg.commits_limit,
            skip_compaction: cfg.skip_compaction,
            skip_clustering: cfg.skip_clustering,
            merge: MergeConfig::from_table(&table),
            changelog: cfg.changelog,
            skip_merge: cfg.skip_merge,
            spill: slice::SpillConfig { budget: cfg.memory_budget, dir: cfg.spill_dir.clone(), connector: cfg.name.clone() },
            connector: cfg.name.clone(),
            threads: super::par::default_threads(),
            archived: Default::default(),
            table,
        })
    }
}

fn split_spec(partition: &str, fg: &str) -> SplitSpec {
    SplitSpec { id: join_path(partition, fg), partition: partition.into(), file_group: fg.into() }
}

fn join_path(partition: &str, name: &str) -> String {
    if partition.is_empty() { name.into() } else { format!("{partition}/{name}") }
}

impl Source for HudiSource {
    fn info(&self) -> &TableInfo {
        &self.info
    }

    fn poll(&self, after: Option<&Position>) -> Result<Vec<Unit>, SourceError> {
        self.plan(after)
    }

    fn unit_at(&self, position: &Position, snapshot: bool) -> Result<Unit, SourceError> {
        self.plan_at(position, snapshot)
    }

    fn read_unit(
        &self,
        unit: &Unit,
        resume: &Resume,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        self.read(unit, resume, emit).map_err(|e| self.explain_gone(e, unit))
    }

    fn ownership(&self) -> super::Ownership {
        self.ownership
    }

    fn order(&self, p: &Position) -> Result<String, SourceError> {
        Ok(p.order_key().to_string())
    }

    fn reached_end(&self, issued: &Position) -> bool {
        self.end_commit.as_ref().is_some_and(|end| issued.instant.as_str() >= end.as_str())
    }
}
