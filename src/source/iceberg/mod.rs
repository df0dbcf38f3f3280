//! Apache Iceberg source: the monitor (new snapshots along the parent chain → units) and the
//! reader. Beyond Flink's append-only streaming read, every snapshot becomes its net change:
//! appends are `c`, rows removed by position deletes, deletion vectors, equality deletes or
//! copy-on-write rewrites are `d` with their old image, a key removed and added in one snapshot is
//! one `u`, and `replace` (compaction) emits nothing. Deletes apply by sequence number.

mod carried;
pub mod catalog;
mod commits;
pub mod deletes;
mod diff;
mod key;
mod lineage;
pub mod manifest;
pub mod metadata;
mod monitor;
mod plan;
pub mod reader;
pub mod rest;

use std::sync::Arc;

use parking_lot::Mutex;

use arrow_array::RecordBatch;

use self::manifest::ManifestCache;
use self::monitor::{First, Plan, Task};
use self::reader::{keep, read_range};
use super::plan::{read_unit, PlanCache, ReadEnv};
use super::{HistoryOrder, Position, Resume, Source, SourceError, SplitChanges, TableInfo, Unit};
use crate::config::{IcebergOptions, SourceSettings};
use crate::storage::Storage;

pub struct IcebergSource {
    opts: IcebergOptions,
    /// The table, and what reading it needs (threads, budget, spill directory).
    env: ReadEnv,
    manifests: ManifestCache,
    /// Which snapshot each metadata version made current (snapshots folded into one commit).
    currents: commits::CurrentCache,
    /// Plans of the units handed out.
    plans: PlanCache<Plan>,
    /// The snapshot to stop after (`end-snapshot-id`, see `ReadConfig::end`).
    end: Option<i64>,
    /// The connector's storage: every read of the table goes through it.
    storage: Storage,
    /// The metadata file read last, and what it holds (see `metadata`).
    current: Mutex<Option<(std::path::PathBuf, Arc<metadata::TableMetadata>)>>,
    /// The REST catalog's HTTP client and OAuth 2 token, kept between polls.
    rest: Arc<rest::RestSession>,
    /// Tasks divide the table by partition: splits never mix partitions, a diff is one split
    /// per partition.
    by_partition: bool,
}

impl IcebergSource {
    pub fn open(cfg: &SourceSettings, storage: Storage) -> Result<Self, SourceError> {
        let opts = cfg.iceberg.clone().ok_or_else(|| SourceError::Unsupported {
            message: "not an Iceberg connector".into(),
        })?;
        let rest = Arc::new(rest::RestSession::default());
        let file = metadata::current_metadata_file(&storage, &opts.location, &rest, None)?;
        let md = metadata::TableMetadata::load(&storage, &file)?;
        let schema = md.schema_of(None)?;
        let key_fields = key::key_fields(&opts, schema, &file)?;
        let name = match &opts.location {
            crate::config::TableLocation::Path(_) => {
                let loc = md.location.trim_end_matches('/');
                loc.rsplit('/').next().unwrap_or("table").to_string()
            }
            crate::config::TableLocation::Sql { table, .. }
            | crate::config::TableLocation::Rest { table, .. }
            | crate::config::TableLocation::Glue { table, .. } => table.clone(),
        };
        let key_ids: Vec<i32> = key_fields
            .iter()
            .filter_map(|k| schema.fields.iter().find(|f| f.name == *k).map(|f| f.id))
            .collect();
        let described = super::opening::Described {
            connector: "iceberg",
            name,
            db: match &opts.location {
                crate::config::TableLocation::Path(_) => String::new(),
                crate::config::TableLocation::Sql { namespace, .. }
                | crate::config::TableLocation::Rest { namespace, .. } => namespace.join("."),
                crate::config::TableLocation::Glue { database, .. } => database.clone(),
            },
            what: format!("table {}", file.display()),
            columns: Some(
                schema
                    .fields
                    .iter()
                    .map(|f| super::opening::Column {
                        name: f.name.clone(),
                        required: f.required,
                    })
                    .collect(),
            ),
            key_configured: !opts.key_fields.is_empty(),
            key_fields,
            partitioned: md.partitioned(),
            stays_in_partition: md.partition_follows(&key_ids),
        };
        let (info, ownership) = super::opening::opened(cfg, described)?;
        Ok(Self {
            env: ReadEnv::new(cfg, info),
            opts,
            manifests: ManifestCache::new(storage.clone()),
            currents: commits::CurrentCache::new(storage.clone()),
            storage,
            rest,
            current: Default::default(),
            plans: Default::default(),
            end: cfg.read.end.as_deref().and_then(|e| e.parse().ok()),
            by_partition: ownership == super::Ownership::Partition,
        })
    }

    fn plan_of(&self, unit: &Unit) -> Result<Arc<Plan>, SourceError> {
        self.plans.get_or_plan(unit, || {
            let id = unit.position.snapshot_id()?;
            self.unit(&*self.metadata()?, id, unit.snapshot, false, None).map(drop)
        })
    }

    /// Live rows of tasks (a split) conformed to `schema` (the plan's, or with row lineage),
    /// handed to `sink` batch by batch with their partition and file. Returns the bytes read.
    fn read_tasks(
        &self,
        plan: &Plan,
        schema: &arrow_schema::SchemaRef,
        tasks: &[Task],
        sink: &mut dyn FnMut(RecordBatch, (String, String)) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        let mut bytes = 0;
        for (range, dels) in tasks {
            let refs: Vec<_> = dels.iter().collect();
            let set = plan.deletes.for_file(&range.file, &refs, &plan.schema)?;
            let rows = read_range(&self.storage, range, schema)?;
            bytes += rows.bytes;
            for (b, first) in rows.batches {
                let b = if set.is_empty() {
                    b
                } else {
                    keep(&b, &set.live(&b, first)?)?
                };
                if b.num_rows() > 0 {
                    sink(b, (range.file.partition.clone(), range.file.path.clone()))?;
                }
            }
        }
        Ok(bytes)
    }
}

/// A file a unit needs is gone: name it, say whether expiry removed it (its snapshot no longer
/// in the metadata: the way out is to skip or rescan) or something outside Iceberg did (the
/// snapshot still references it: restore the file; skipping would lose its rows silently).
fn gone_hint(e: SourceError, unit: &Unit, still_referenced: impl FnOnce() -> Option<bool>) -> SourceError {
    match e {
        SourceError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => match still_referenced() {
            Some(true) => SourceError::Unreadable { why: crate::source::Unreadable::Missing,
                message: format!(
                    "snapshot {}: file {} is missing, yet the snapshot is still in the table metadata: it was deleted \
                     outside Iceberg (orphan-file removal with too short an age, a lifecycle rule, a manual delete) or the \
                     store is inconsistent. Restore the file (bucket versioning, backup) and restart; skipping it would \
                     lose its rows",
                    unit.position.version,
                    path.display()
                ),
            },
            _ => SourceError::HistoryGone {
                message: format!(
                    "snapshot {}: file {} is gone (snapshot expired and its files deleted before they were read); the \
                     changelog cannot be continued exactly. Ways out: restart under a new connector name with \
                     starting-strategy=INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE (skip the gap) or TABLE_SCAN_THEN_INCREMENTAL \
                     (full rescan); keep snapshot expiry longer than the connector's lag",
                    unit.position.version,
                    path.display()
                ),
            },
        },
        other => other,
    }
}

impl Source for IcebergSource {
    fn info(&self) -> &TableInfo {
        &self.env.info
    }

    fn poll(&self, after: Option<&Position>) -> Result<Vec<Unit>, SourceError> {
        let md = self.metadata()?;
        let (ids, first) = self.pending(&md, after)?;
        ids.iter()
            .enumerate()
            .map(|(i, id)| {
                self.unit(
                    &md,
                    *id,
                    i == 0 && first == First::Scan,
                    i == 0 && first == First::Nothing,
                    after,
                )
            })
            .collect()
    }

    fn unit_at(&self, position: &Position, snapshot: bool) -> Result<Unit, SourceError> {
        let md = self.metadata()?;
        let id = position.snapshot_id()?;
        self.unit(&md, id, snapshot, false, None)
    }

    fn schema_of(&self, unit: &Unit) -> Result<Option<arrow_schema::SchemaRef>, SourceError> {
        use super::plan::VersionPlan;
        Ok(Some(self.plan_of(unit)?.schema().clone()))
    }

    fn read_unit(
        &self,
        unit: &Unit,
        resume: &Resume,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        self.env.budget.for_unit(resume.budget);
        let plan = self.plan_of(unit)?;
        read_unit(self, plan.as_ref(), unit, resume, emit).map_err(|e| {
            gone_hint(e, unit, || {
                let id = unit.position.snapshot_id().ok()?;
                Some(self.metadata().ok()?.snapshot(id).is_some())
            })
        })
    }

    fn ownership(&self) -> super::Ownership {
        if self.by_partition {
            super::Ownership::Partition
        } else {
            super::Ownership::Key
        }
    }

    fn splits_follow_ownership(&self) -> bool {
        true
    }

    fn order(&self, p: &Position) -> Result<HistoryOrder, SourceError> {
        let md = self.metadata()?;
        let id = p.snapshot_id()?;
        let snap = md.snapshot(id).ok_or_else(|| SourceError::Unreadable {
            why: crate::source::Unreadable::Expired,
            message: format!("snapshot {} is no longer in the table metadata (expired)", p.version),
        })?;
        Ok(HistoryOrder::Sequence(snap.sequence_number))
    }

    fn unstable_columns(&self) -> Result<Vec<String>, SourceError> {
        Ok(self.metadata()?.unstable_columns())
    }

    /// The current snapshot's ancestors still in the metadata older than the position (expiry
    /// removes the oldest first; the position, or its child, must stay an ancestor to continue).
    fn history_headroom(&self, position: &Position) -> Result<Option<super::Headroom>, SourceError> {
        let md = self.metadata()?;
        let chain = md.ancestors();
        let (Some(oldest), Ok(pos)) = (chain.last(), position.snapshot_id()) else {
            return Ok(None);
        };
        let older = chain
            .iter()
            .position(|s| s.snapshot_id == pos)
            .map(|n| chain.len() - 1 - n);
        let at_ms = md.snapshot(pos).map(|s| s.timestamp_ms);
        Ok(Some(super::Headroom {
            commits: older.unwrap_or(0) as u64,
            seconds: Some(at_ms.map_or(0.0, |t| ((t - oldest.timestamp_ms) as f64 / 1000.0).max(0.0))),
            oldest: oldest.snapshot_id.to_string(),
        }))
    }

    fn position_of(&self, id: &str) -> Result<Position, SourceError> {
        let file = metadata::current_metadata_file(&self.storage, &self.opts.location, &self.rest, None)?;
        let md = metadata::TableMetadata::load(&self.storage, &file)?;
        match id.parse::<i64>().ok().and_then(|s| md.snapshot(s)) {
            Some(s) => Ok(Position {
                version: s.snapshot_id.to_string(),
                completed: None,
            }),
            None => Err(SourceError::Config {
                message: format!("snapshot {id} is not a snapshot of the table ({})", file.display()),
            }),
        }
    }

    fn describe(&self) -> Result<String, SourceError> {
        let file = metadata::current_metadata_file(&self.storage, &self.opts.location, &self.rest, None)?;
        let md = metadata::TableMetadata::load(&self.storage, &file)?;
        Ok(format!(
            "Iceberg format v{} table at {}, {} snapshots, current {}, metadata {}{}",
            md.format_version,
            md.location,
            md.snapshots.len(),
            md.current_snapshot_id.map_or("none".to_string(), |s| s.to_string()),
            file.display(),
            match self.storage.has_vended() {
                true => ", read with storage credentials the catalog vended",
                false => "",
            }
        ))
    }

    fn reached_end(&self, issued: &Position) -> bool {
        self.end.is_some_and(|end| issued.version == end.to_string())
    }
}
