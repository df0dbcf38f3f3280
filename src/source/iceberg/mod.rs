//! Apache Iceberg source: the monitor (new snapshots along the parent chain → units) and the
//! reader. Beyond Flink's append-only streaming read, every snapshot becomes its net change:
//! appends are `c`, rows removed by position deletes, deletion vectors, equality deletes or
//! copy-on-write rewrites are `d` with their old image, a key removed and added in one snapshot is
//! one `u`, and `replace` (compaction) emits nothing. Deletes apply by sequence number.

pub mod catalog;
mod commits;
pub mod deletes;
pub mod manifest;
pub mod metadata;
mod monitor;
pub mod reader;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;

use self::manifest::ManifestCache;
use self::monitor::{DiffPart, First, Plan, PlanKind, Task};
use self::reader::{and_not, keep, read_range, FileRange};
use super::buckets::{buckets_for, restrict_indexes, BucketWriter, DECODED_PER_FILE_BYTE};
use super::rows::{diff, multiset_diff};
use super::{par, ChangeRow, Position, Resume, RowRef, Source, SourceError, SplitChanges, SplitSpec, TableInfo, Unit};
use crate::config::{ConnectorConfig, IcebergOptions};

pub struct IcebergSource {
    opts: IcebergOptions,
    info: TableInfo,
    manifests: ManifestCache,
    /// Which snapshot each metadata version made current (snapshots folded into one commit).
    currents: commits::CurrentCache,
    /// Plans of the units handed out, by (snapshot id, full scan).
    plans: Mutex<HashMap<(i64, bool), Arc<Plan>>>,
    threads: usize,
    /// `read.memory.budget` / `read.spill.dir`: a diff beyond the budget goes to key buckets.
    budget: usize,
    spill_dir: std::path::PathBuf,
    connector: String,
    /// Tasks divide the table by partition: splits never mix partitions, a diff is one split
    /// per partition.
    by_partition: bool,
}

/// (batches, (partition, file) of each batch, bytes read).
type LabelledBatches = (Vec<RecordBatch>, Vec<(String, String)>, u64);

impl IcebergSource {
    pub fn open(cfg: &ConnectorConfig) -> Result<Self, SourceError> {
        let opts = cfg.iceberg.clone().ok_or_else(|| SourceError::Unsupported {
            message: "not an Iceberg connector".into(),
        })?;
        let file = metadata::current_metadata_file(&opts.location)?;
        let md = metadata::TableMetadata::load(&file)?;
        let schema = md.schema_of(None)?;
        let declared: Vec<String> = schema
            .identifier_field_ids
            .iter()
            .filter_map(|id| schema.fields.iter().find(|f| f.id == *id).map(|f| f.name.clone()))
            .collect();
        if !opts.key_fields.is_empty()
            && !declared.is_empty()
            && opts.key_fields != declared
            && !opts.key_fields_override
        {
            return Err(SourceError::Config {
                message: format!(
                    "key.fields {:?} differs from the identifier fields {declared:?} that table {} declares: the events \
                     would be keyed by something other than the row's identity. Remove key.fields, or set \
                     key.fields.override=true if that is meant",
                    opts.key_fields,
                    file.display()
                ),
            });
        }
        let key_fields: Vec<String> = if !opts.key_fields.is_empty() {
            for k in &opts.key_fields {
                if !schema.fields.iter().any(|f| f.name == *k) {
                    return Err(SourceError::Config {
                        message: format!(
                            "key.fields: `{k}` is not a column of table {} (columns: {})",
                            file.display(),
                            schema
                                .fields
                                .iter()
                                .map(|f| f.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                }
            }
            opts.key_fields.clone()
        } else {
            declared
        };
        let key_fields = if opts.keyless { Vec::new() } else { key_fields };
        if key_fields.is_empty() && !opts.keyless {
            return Err(SourceError::Config {
                message: format!(
                    "table {} declares no identifier fields, so change events would have no key; set key.fields \
                     (comma-separated columns that identify a row), or key.mode=none for a table without a key (null \
                     Kafka keys, rows compared whole)",
                    file.display()
                ),
            });
        }
        let name = match &opts.location {
            crate::config::TableLocation::Path(_) => {
                let loc = md.location.trim_end_matches('/');
                loc.rsplit('/').next().unwrap_or("table").to_string()
            }
            crate::config::TableLocation::Sql { table, .. } | crate::config::TableLocation::Rest { table, .. } => {
                table.clone()
            }
        };
        let key_ids: Vec<i32> = key_fields
            .iter()
            .filter_map(|k| schema.fields.iter().find(|f| f.name == *k).map(|f| f.id))
            .collect();
        let ownership = super::Ownership::decide(cfg, &name, md.partitioned(), md.partition_follows(&key_ids));
        tracing::info!(table = %name, metadata = %file.display(), keys = %key_fields.join(","), "opened Iceberg table");
        Ok(Self {
            info: TableInfo {
                name,
                key_fields,
                connector: "iceberg",
                db: match &opts.location {
                    crate::config::TableLocation::Path(_) => String::new(),
                    crate::config::TableLocation::Sql { namespace, .. }
                    | crate::config::TableLocation::Rest { namespace, .. } => namespace.join("."),
                },
                required: if cfg.required_columns {
                    schema
                        .fields
                        .iter()
                        .filter(|f| f.required)
                        .map(|f| f.name.clone())
                        .collect()
                } else {
                    Vec::new()
                },
            },
            opts,
            manifests: ManifestCache::default(),
            currents: Default::default(),
            plans: Default::default(),
            threads: par::default_threads(),
            budget: cfg.memory_budget,
            spill_dir: cfg.spill_dir.clone(),
            connector: cfg.name.clone(),
            by_partition: ownership == super::Ownership::Partition,
        })
    }

    fn plan_of(&self, unit: &Unit) -> Result<Arc<Plan>, SourceError> {
        let id: i64 = unit.position.instant.parse().map_err(|_| SourceError::Unreadable {
            message: format!(
                "position `{}` is not an Iceberg snapshot id (an offsets record written for another table?); \
                 inspect it with `lakestream offsets show`",
                unit.position.instant
            ),
        })?;
        if let Some(p) = self.plans.lock().expect("plans lock").get(&(id, unit.snapshot)) {
            return Ok(p.clone());
        }
        let md = self.metadata()?;
        self.unit(&md, id, unit.snapshot, false, None)?;
        Ok(self
            .plans
            .lock()
            .expect("plans lock")
            .get(&(id, unit.snapshot))
            .cloned()
            .expect("planned above"))
    }

    /// Live rows of tasks (a split), labelled per batch with their partition and file.
    fn read_tasks(&self, plan: &Plan, tasks: &[Task]) -> Result<LabelledBatches, SourceError> {
        let (mut batches, mut labels, mut bytes) = (Vec::new(), Vec::new(), 0);
        for (range, dels) in tasks {
            let refs: Vec<_> = dels.iter().collect();
            let set = plan.deletes.for_file(&range.file, &refs, &plan.schema)?;
            let rows = read_range(range, &plan.schema)?;
            bytes += rows.bytes;
            for (b, first) in rows.batches {
                let b = if set.is_empty() {
                    b
                } else {
                    keep(&b, &set.live(&b, first)?)?
                };
                if b.num_rows() > 0 {
                    batches.push(b);
                    labels.push((range.file.partition.clone(), range.file.path.clone()));
                }
            }
        }
        Ok((batches, labels, bytes))
    }

    /// A rewritten data file: rows deleted by this snapshot (old side) and rows it brought back.
    fn read_rewritten(
        &self,
        plan: &Plan,
        range: &FileRange,
        before: &[manifest::Entry],
        after: &[manifest::Entry],
    ) -> Result<Sides, SourceError> {
        let b_refs: Vec<_> = before.iter().collect();
        let a_refs: Vec<_> = after.iter().collect();
        let was = plan.deletes.for_file(&range.file, &b_refs, &plan.schema)?;
        let now = plan.deletes.for_file(&range.file, &a_refs, &plan.schema)?;
        let rows = read_range(range, &plan.schema)?;
        let mut sides = Sides {
            bytes: rows.bytes,
            ..Default::default()
        };
        let label = (range.file.partition.clone(), range.file.path.clone());
        for (b, first) in rows.batches {
            let (live_was, live_now) = (was.live(&b, first)?, now.live(&b, first)?);
            let gone = keep(&b, &and_not(&live_was, &live_now))?;
            let back = keep(&b, &and_not(&live_now, &live_was))?;
            sides.old.extend((gone.num_rows() > 0).then(|| (gone, label.clone())));
            sides.new.extend((back.num_rows() > 0).then(|| (back, label.clone())));
        }
        Ok(sides)
    }

    /// One part of a diff (the whole diff, or one partition's) as the split `split`.
    fn read_diff(
        &self,
        split: &SplitSpec,
        part: &DiffPart,
        plan: &Plan,
        buckets: u32,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let DiffPart {
            old, new, rewritten, ..
        } = part;
        let n = old.len() + new.len() + rewritten.len();
        let read = |i: usize| -> Result<Sides, SourceError> {
            let side = |tasks: &[Task], is_new: bool| -> Result<Sides, SourceError> {
                let (batches, labels, bytes) = self.read_tasks(plan, tasks)?;
                let rows: Vec<_> = batches.into_iter().zip(labels).collect();
                Ok(if is_new {
                    Sides {
                        new: rows,
                        bytes,
                        ..Default::default()
                    }
                } else {
                    Sides {
                        old: rows,
                        bytes,
                        ..Default::default()
                    }
                })
            };
            if i < old.len() {
                side(std::slice::from_ref(&old[i]), false)
            } else if i < old.len() + new.len() {
                side(std::slice::from_ref(&new[i - old.len()]), true)
            } else {
                let (r, b, a) = &rewritten[i - old.len() - new.len()];
                self.read_rewritten(plan, r, b, a)
            }
        };
        if buckets > 1 {
            return self.read_diff_bucketed(split, plan, buckets, n, &read, emit);
        }
        let mut all = Sides::default();
        par::ordered(n, self.threads, &read, &mut |s: Sides| {
            all.old.extend(s.old);
            all.new.extend(s.new);
            all.bytes += s.bytes;
            Ok(())
        })?;
        let (mut batches, mut labels, mut old_idx, mut new_idx) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (is_new, side) in [(false, all.old), (true, all.new)] {
            for (b, label) in side {
                if is_new {
                    new_idx.push(batches.len() as u32)
                } else {
                    old_idx.push(batches.len() as u32)
                }
                batches.push(b);
                labels.push(label);
            }
        }
        let keys = self.key_columns(plan)?;
        let rows_read = batches.iter().map(|b| b.num_rows() as u64).sum();
        let rows = if self.info.keyless() {
            multiset_diff(&batches, &old_idx, &new_idx)?
        } else {
            diff(&batches, &[old_idx], &[new_idx], &keys, None)?.remove(0)
        };
        let (picked, rows) = restrict_indexes(batches.len(), rows);
        let batches: Vec<RecordBatch> = picked.iter().map(|&i| batches[i].clone()).collect();
        let labels: Vec<(String, String)> = picked.iter().map(|&i| labels[i].clone()).collect();
        emit(SplitChanges {
            split: split.clone(),
            first_row: 0,
            last: true,
            buckets: 1,
            file: String::new(),
            batches: Arc::new(batches),
            batch_files: labels,
            rows,
            rows_read,
            bytes_read: all.bytes,
        })
    }

    /// A diff larger than `read.memory.budget`, in key buckets on disk (see
    /// [`crate::source::buckets`]): one chunk of the unit's one split per bucket.
    fn read_diff_bucketed(
        &self,
        split: &SplitSpec,
        plan: &Plan,
        buckets: u32,
        n: usize,
        read: &(dyn Fn(usize) -> Result<Sides, SourceError> + Sync),
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let keys = self.key_columns(plan)?;
        tracing::info!(snapshot = plan.snapshot.snapshot_id, split = %split.id, buckets, budget = self.budget,
            "change unit larger than read.memory.budget: diffing in key buckets on disk");
        let mut writer = BucketWriter::new(&self.spill_dir, plan.schema.clone(), keys.clone(), buckets, self.budget)?;
        let mut labels: Vec<(String, String)> = Vec::new();
        let mut label_ids: HashMap<(String, String), u32> = HashMap::new();
        let (mut rows_read, mut bytes_read) = (0u64, 0u64);
        par::ordered(n, self.threads, read, &mut |s: Sides| {
            bytes_read += s.bytes;
            for (is_new, side) in [(false, s.old), (true, s.new)] {
                for (b, label) in side {
                    rows_read += b.num_rows() as u64;
                    let tag = *label_ids.entry(label.clone()).or_insert_with(|| {
                        labels.push(label);
                        labels.len() as u32 - 1
                    });
                    writer.push(0, is_new, tag, &b)?;
                }
            }
            Ok(())
        })?;
        let reader = writer.finish()?;
        crate::metrics::SPILLED_BYTES
            .with_label_values(&[&self.connector])
            .inc_by(reader.bytes);
        let mut first_row = 0u64;
        for p in 0..reader.len() {
            let rows = reader.read(p, 1)?;
            let changes = if self.info.keyless() {
                multiset_diff(&rows.batches, &rows.old[0], &rows.new[0])?
            } else {
                diff(&rows.batches, &rows.old, &rows.new, &keys, None)?.remove(0)
            };
            let last = p + 1 == reader.len();
            if changes.is_empty() && !last {
                continue;
            }
            let count = changes.len() as u64;
            let (picked, changes) = restrict_indexes(rows.batches.len(), changes);
            emit(SplitChanges {
                split: split.clone(),
                first_row,
                last,
                buckets: reader.len() as u32,
                file: String::new(),
                batches: Arc::new(picked.iter().map(|&i| rows.batches[i].clone()).collect()),
                batch_files: picked.iter().map(|&i| labels[rows.tags[i] as usize].clone()).collect(),
                rows: changes,
                rows_read: if last { rows_read } else { 0 },
                bytes_read: if last { bytes_read } else { 0 },
            })?;
            first_row += count;
        }
        Ok(())
    }

    /// The key's columns in the plan's schema; a keyless table's rows are keyed whole.
    fn key_columns(&self, plan: &Plan) -> Result<Vec<usize>, SourceError> {
        if self.info.keyless() {
            return Ok((0..plan.schema.fields().len()).collect());
        }
        self.info
            .key_fields
            .iter()
            .map(|k| {
                plan.schema.index_of(k).map_err(|_| SourceError::Unreadable {
                    message: format!(
                        "snapshot {}: key column `{k}` is not in the snapshot's schema",
                        plan.snapshot.snapshot_id
                    ),
                })
            })
            .collect()
    }

    fn read(
        &self,
        unit: &Unit,
        resume: &Resume,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let done = &resume.done;
        if unit.splits.is_empty() {
            return Ok(());
        }
        let plan = self.plan_of(unit)?;
        match &plan.kind {
            PlanKind::Nothing(_) => Ok(()),
            PlanKind::Diff(parts) => {
                // one bucket count for the whole diff, whichever parts this task reads: it is
                // part of every part's row order and stored once per unit
                let buckets = match resume.buckets {
                    Some(b) => b.max(1),
                    None => {
                        let bytes: i64 = parts.iter().map(DiffPart::bytes).sum();
                        buckets_for(bytes.max(0) as u64 * DECODED_PER_FILE_BYTE, self.budget)
                    }
                };
                for split in unit.splits.iter().filter(|s| !done.contains(&s.id)) {
                    let part = parts.iter().find(|p| split.partition == p.partition).ok_or_else(|| {
                        SourceError::Unreadable {
                            message: format!(
                                "snapshot {}: no diff part for split {}",
                                plan.snapshot.snapshot_id, split.id
                            ),
                        }
                    })?;
                    self.read_diff(split, part, &plan, buckets, emit)?;
                }
                Ok(())
            }
            PlanKind::Rows { op, splits } => {
                // the unit's splits (this task's share of the plan's) by their plan index
                let index: HashMap<String, usize> = (0..splits.len())
                    .map(|i| (monitor::split_spec(i, &splits[i]).id, i))
                    .collect();
                let todo: Vec<(usize, &SplitSpec)> = unit
                    .splits
                    .iter()
                    .filter(|s| !done.contains(&s.id))
                    .map(|s| {
                        index
                            .get(&s.id)
                            .map(|i| (*i, s))
                            .ok_or_else(|| SourceError::Unreadable {
                                message: format!(
                                    "snapshot {}: split {} is not in the snapshot's plan",
                                    plan.snapshot.snapshot_id, s.id
                                ),
                            })
                    })
                    .collect::<Result<_, _>>()?;
                let read = |k: usize| -> Result<SplitChanges, SourceError> {
                    let (i, split) = todo[k];
                    let (batches, labels, bytes) = self.read_tasks(&plan, &splits[i])?;
                    let rows: Vec<ChangeRow> = batches
                        .iter()
                        .enumerate()
                        .flat_map(|(b, batch)| {
                            (0..batch.num_rows()).map(move |r| ChangeRow {
                                op: *op,
                                before: None,
                                after: Some(RowRef {
                                    batch: b as u32,
                                    row: r as u32,
                                }),
                            })
                        })
                        .collect();
                    let first_file = splits[i].first().map(|t| t.0.file.path.clone()).unwrap_or_default();
                    Ok(SplitChanges {
                        split: split.clone(),
                        first_row: 0,
                        last: true,
                        buckets: 1,
                        file: first_file,
                        rows_read: rows.len() as u64,
                        rows,
                        batches: Arc::new(batches),
                        batch_files: labels,
                        bytes_read: bytes,
                    })
                };
                par::ordered(todo.len(), self.threads, &read, emit)
            }
        }
    }
}

#[derive(Default)]
struct Sides {
    old: Vec<(RecordBatch, (String, String))>,
    new: Vec<(RecordBatch, (String, String))>,
    bytes: u64,
}

/// A file a unit needs is gone: name it, say whether expiry removed it (its snapshot no longer
/// in the metadata: the way out is to skip or rescan) or something outside Iceberg did (the
/// snapshot still references it: restore the file; skipping would lose its rows silently).
fn gone_hint(e: SourceError, unit: &Unit, still_referenced: impl FnOnce() -> Option<bool>) -> SourceError {
    match e {
        SourceError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => SourceError::Unreadable {
            message: match still_referenced() {
                Some(true) => format!(
                    "snapshot {}: file {} is missing, yet the snapshot is still in the table metadata: it was deleted \
                     outside Iceberg (orphan-file removal with too short an age, a lifecycle rule, a manual delete) or the \
                     store is inconsistent. Restore the file (bucket versioning, backup) and restart; skipping it would \
                     lose its rows",
                    unit.position.instant,
                    path.display()
                ),
                _ => format!(
                    "snapshot {}: file {} is gone (snapshot expired and its files deleted before they were read); the \
                     changelog cannot be continued exactly. Ways out: restart under a new connector name with \
                     starting-strategy=INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE (skip the gap) or TABLE_SCAN_THEN_INCREMENTAL \
                     (full rescan); keep snapshot expiry longer than the connector's lag",
                    unit.position.instant,
                    path.display()
                ),
            },
        },
        other => other,
    }
}

impl Source for IcebergSource {
    fn info(&self) -> &TableInfo {
        &self.info
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
        let id = position.instant.parse().map_err(|_| SourceError::Unreadable {
            message: format!(
                "stored position `{}` is not an Iceberg snapshot id; use a new connector name",
                position.instant
            ),
        })?;
        self.unit(&md, id, snapshot, false, None)
    }

    fn read_unit(
        &self,
        unit: &Unit,
        resume: &Resume,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        self.read(unit, resume, emit).map_err(|e| {
            gone_hint(e, unit, || {
                let id = unit.position.instant.parse::<i64>().ok()?;
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

    fn order(&self, p: &Position) -> Result<String, SourceError> {
        let md = self.metadata()?;
        let snap = p
            .instant
            .parse::<i64>()
            .ok()
            .and_then(|id| md.snapshot(id))
            .ok_or_else(|| SourceError::Unreadable {
                message: format!("snapshot {} is no longer in the table metadata (expired)", p.instant),
            })?;
        Ok(format!("{:020}", snap.sequence_number))
    }

    fn position_of(&self, id: &str) -> Result<Position, SourceError> {
        let file = metadata::current_metadata_file(&self.opts.location)?;
        let md = metadata::TableMetadata::load(&file)?;
        match id.parse::<i64>().ok().and_then(|s| md.snapshot(s)) {
            Some(s) => Ok(Position {
                instant: s.snapshot_id.to_string(),
                completed: None,
            }),
            None => Err(SourceError::Config {
                message: format!("snapshot {id} is not a snapshot of the table ({})", file.display()),
            }),
        }
    }

    fn describe(&self) -> Result<String, SourceError> {
        let file = metadata::current_metadata_file(&self.opts.location)?;
        let md = metadata::TableMetadata::load(&file)?;
        Ok(format!(
            "Iceberg format v{} table at {}, {} snapshots, current {}, metadata {}",
            md.format_version,
            md.location,
            md.snapshots.len(),
            md.current_snapshot_id.map_or("none".to_string(), |s| s.to_string()),
            file.display()
        ))
    }

    fn reached_end(&self, issued: &Position) -> bool {
        self.opts
            .end_snapshot_id
            .is_some_and(|end| issued.instant == end.to_string())
    }
}
