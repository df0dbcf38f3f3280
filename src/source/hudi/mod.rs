//! Apache Hudi source: the monitor (timeline → units) and the reader (file slices → change rows).
//!
//! Beyond Flink's commit-time filter, a change unit diffs the new file slices of every file group
//! an instant touched against the previous committed slices of the same file groups, so deletes
//! and insert-overwrites on copy-on-write tables show up as `d`, updates carry `before`, and
//! compaction/clustering output (same rows, new files) emits nothing.

pub mod archive;
mod bounded;
mod carried;
mod cdc;
pub mod changelog;
mod diffed;
pub mod files;
mod keys;
pub mod log;
pub mod merge;
mod monitor;
mod narrow;
mod reader;
pub mod rule;
mod selection;
pub mod slice;
pub mod timeline;

use std::sync::Arc;

use self::slice::MergeConfig;
use self::timeline::{CommitMetadata, Instant, TableConfig};
use super::{HistoryOrder, Position, Resume, Source, SourceError, SplitChanges, SplitSpec, TableInfo, Unit};
use crate::config::{ReadConfig, SourceSettings};
use crate::storage::Storage;

/// The archived timeline as last read: (the oldest instant then on the active timeline, the
/// archived instants).
type ArchivedInstants = (Option<String>, Arc<Vec<Instant>>);

pub struct HudiSource {
    table: TableConfig,
    info: TableInfo,
    /// The connector's read settings (start and end, skipped instants, changelog mode,
    /// `skip_merge`, `read.cdc.from-log`).
    read: ReadConfig,
    merge: MergeConfig,
    /// Where and how readers spill; its `budget` is not read (each reader takes `budget`'s, the
    /// unit's: see `slice_reader`).
    spill: slice::SpillConfig,
    /// The unit being read's memory budget (`read.memory.budget`, or its share of the process's).
    budget: crate::source::budget::Budget,
    connector: String,
    /// Threads reading the splits of a full scan.
    threads: usize,
    ownership: super::Ownership,
    /// The partition scheme follows only from the `auto` key carrying the partition path.
    ownership_from_key: bool,
    /// Archived instants, by the active timeline's oldest instant when read.
    archived: parking_lot::Mutex<Option<ArchivedInstants>>,
    /// The latest clean read for the history headroom, and the oldest instant it retained.
    retained: parking_lot::Mutex<Option<(String, Option<String>)>>,
    /// The plans of the units handed out: what a read needs of the timeline and the commit.
    plans: crate::source::plan::PlanCache<HudiPlan>,
}

/// The CDC files of a unit, by (partition, file group): found by `cdc`, passed on by the reader.
pub type CdcFiles = std::collections::BTreeMap<(String, String), Vec<String>>;

/// What the monitor read of a unit's commit when it handed the unit out, kept for its read: the
/// read lists no timeline and reads no commit metadata again (a restarted task, or a unit whose
/// plan was let go, plans it again).
pub(crate) struct HudiPlan {
    /// The timeline the unit was planned from (active and archived).
    timeline: std::sync::Arc<timeline::Timeline>,
    /// The commit's metadata (`None`: a full scan, or a unit that reads nothing).
    commit: Option<std::sync::Arc<CommitMetadata>>,
    /// The file groups replaced: by the commit, or (a full scan) up to it.
    replaced: std::collections::BTreeSet<(String, String)>,
}

impl HudiSource {
    pub fn open(cfg: &SourceSettings, storage: Storage) -> Result<Self, SourceError> {
        let table = TableConfig::load(storage, &cfg.table_path)?;
        let mut key_fields = table.key_fields.clone();
        if key_fields.is_empty() {
            key_fields.push("_hoodie_record_key".into());
        }
        let partition_fields = table.partition_fields();
        let movable = partition_fields.iter().find(|f| !key_fields.contains(f));
        let by_path = with_partition_path(
            cfg.read.key_partition_path,
            &table,
            !partition_fields.is_empty(),
            movable,
        );
        if by_path {
            key_fields.push(PARTITION_PATH.into());
        }
        // a Kafka key that carries the partition path proves an identity stays in its partition
        // (explicit or `auto`); a connector already running by key hash keeps that scheme (the
        // runtime asks `partition_ownership_from_key`)
        let proof = match movable {
            _ if by_path => Ok(()),
            None => Ok(()),
            Some(f) => Err(format!(
                "partition field `{f}` is not a record-key field, so a key can change partition"
            )),
        };
        // (the writer schema is read only where its required columns are asked for; the record
        // key is checked against the data files when they are read)
        let described = super::opening::Described {
            connector: "hudi",
            name: table.name.clone(),
            db: table.props.get("hoodie.database.name").cloned().unwrap_or_default(),
            what: format!("Hudi table {}", table.path.display()),
            columns: cfg.required_columns.then(|| timeline::columns(&table)).transpose()?,
            key_fields,
            key_configured: false,
            partitioned: !partition_fields.is_empty(),
            stays_in_partition: proof,
        };
        let (info, ownership) = super::opening::opened(cfg, described)?;
        let ownership_from_key = movable.is_some()
            && by_path
            && cfg.read.key_partition_path.is_none()
            && cfg.ownership == crate::config::TaskOwnership::Auto;
        let merge = MergeConfig::from_table(&table)?;
        if merge.partial.is_some() && (cfg.read.changelog || cfg.read.skip_merge) && table.is_mor() {
            return Err(SourceError::Config {
                message: format!(
                    "Hudi table {}: its records merge column by column (a partial-update mode or payload), and \
                     changelog.enabled / skip_merge emit log records one by one, which such records are not; \
                     unset them to read its net changes",
                    table.path.display()
                ),
            });
        }
        Ok(Self {
            ownership,
            ownership_from_key,
            info,
            read: cfg.read.clone(),
            merge,
            spill: slice::SpillConfig {
                budget: cfg.read.memory_budget,
                dir: cfg.read.spill_dir.clone(),
                connector: cfg.name.clone(),
            },
            budget: crate::source::budget::Budget::new(cfg.read.memory_budget),
            connector: cfg.name.clone(),
            threads: super::parallel::default_threads(),
            archived: Default::default(),
            retained: Default::default(),
            plans: Default::default(),
            table,
        })
    }
}

/// A string column of `b` by name (`None`: absent or not a string column).
pub(crate) fn string_column(b: &arrow_array::RecordBatch, name: &str) -> Option<arrow_array::StringArray> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>())
        .cloned()
}

/// The meta column naming a row's partition: part of the Kafka key where the index is per partition.
pub const PARTITION_PATH: &str = "_hoodie_partition_path";

/// Whether the Kafka key carries the partition path: as `key.partition-path` says, or (auto)
/// where a key can change partition (`movable`: a partition field outside the record key) and
/// the table declares no global index — under Hudi's default per-partition indexes a key written
/// with a new partition value leaves its old row live, so (partition path, record key) is the
/// row's identity and a record-key-only Kafka key would merge two live rows into one.
fn with_partition_path(choice: Option<bool>, table: &TableConfig, partitioned: bool, movable: Option<&String>) -> bool {
    let decided = match (choice, movable, table.global_index()) {
        (Some(c), ..) => c && partitioned,
        (None, None, _) => false,
        (None, Some(_), Some(global)) => {
            tracing::info!(table = %table.name, index = %global, "Kafka key: the record key (a global index keeps it unique across partitions; a partition move is one update)");
            false
        }
        (None, Some(f), None) => {
            tracing::info!(table = %table.name, partition_field = %f, "Kafka key: the record key and _hoodie_partition_path \
                (no global index declared: a key written with a new partition value is a second row); \
                key.partition-path=false for a table whose writers use a global index");
            true
        }
    };
    if choice == Some(true) && !partitioned {
        tracing::warn!(table = %table.name, "key.partition-path=true on an unpartitioned table: the key is the record key");
    }
    decided
}

fn split_spec(partition: &str, fg: &str) -> SplitSpec {
    SplitSpec {
        id: join_path(partition, fg),
        partition: partition.into(),
        reads: fg.into(),
    }
}

fn join_path(partition: &str, name: &str) -> String {
    if partition.is_empty() {
        name.into()
    } else {
        format!("{partition}/{name}")
    }
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
        self.budget.for_unit(resume.budget);
        self.read(unit, resume, emit).map_err(|e| self.explain_gone(e, unit))
    }

    fn ownership(&self) -> super::Ownership {
        self.ownership
    }

    fn partition_ownership_from_key(&self) -> bool {
        self.ownership_from_key && self.ownership == super::Ownership::Partition
    }

    fn order(&self, p: &Position) -> Result<HistoryOrder, SourceError> {
        Ok(HistoryOrder::Timeline(p.order_key().to_string()))
    }

    /// From the latest completed clean: the instants from its earliest retained one up to the
    /// position (a clean's metadata is read once).
    fn history_headroom(&self, position: &Position) -> Result<Option<super::Headroom>, SourceError> {
        let tl = timeline::Timeline::load(&self.table)?;
        let Some(clean) = tl.completed.iter().rev().find(|i| i.action == timeline::Action::Clean) else {
            return Ok(None);
        };
        let mut cache = self.retained.lock();
        if cache.as_ref().map(|(c, _)| c) != Some(&clean.requested) {
            *cache = Some((clean.requested.clone(), timeline::retained_from(&self.table, clean)?));
        }
        let Some(Some(oldest)) = cache.as_ref().map(|(_, o)| o.clone()) else {
            return Ok(None);
        };
        let at = position.version.as_str();
        let commits = tl
            .completed
            .iter()
            .filter(|i| i.is_write() && i.requested.as_str() >= oldest.as_str() && i.requested.as_str() < at)
            .count() as u64;
        let ms = |t: &str| timeline::instant_millis(t).unwrap_or(0);
        Ok(Some(super::Headroom {
            commits,
            seconds: Some(((ms(at) - ms(&oldest)) as f64 / 1000.0).max(0.0)),
            oldest,
        }))
    }

    /// From the commit metadata of the instants in between (a cleaner removes files, not it).
    fn changed_partitions(
        &self,
        after: &Position,
        target: &Position,
    ) -> Result<Option<std::collections::BTreeSet<String>>, SourceError> {
        if !self.info.key_fields.iter().any(|k| k == PARTITION_PATH) {
            return Ok(None);
        }
        let tl = timeline::Timeline::load(&self.table)?;
        timeline::partitions_written(&self.table.storage, &tl, after, target)
    }

    fn position_of(&self, id: &str) -> Result<Position, SourceError> {
        let tl = self.timeline()?;
        match tl.get(id).filter(|i| i.is_write()) {
            Some(i) => Ok(Position {
                version: i.requested.clone(),
                completed: i.completed.clone(),
            }),
            None => Err(SourceError::Config {
                message: format!(
                    "instant {id} is not a completed write instant of table {} (commit, deltacommit, replacecommit)",
                    self.table.path.display()
                ),
            }),
        }
    }

    fn describe(&self) -> Result<String, SourceError> {
        let tl = self.timeline()?;
        let writes: Vec<&timeline::Instant> = tl.completed.iter().filter(|i| i.is_write()).collect();
        Ok(format!(
            "Hudi {} table version {} (timeline layout {}), partitioned by [{}], {} completed write instants on the \
             active timeline (latest {}), {} pending",
            self.table.table_type.name(),
            self.table.version,
            self.table.layout,
            self.table.partition_fields().join(","),
            writes.len(),
            writes.last().map_or("none", |i| i.requested.as_str()),
            tl.pending.len()
        ))
    }

    fn reached_end(&self, issued: &Position) -> bool {
        self.read
            .end
            .as_ref()
            .is_some_and(|end| issued.version.as_str() >= end.as_str())
    }
}

#[cfg(test)]
mod tests;
