//! A snapshot's net change read as a diff: the rows its removed files held against the rows its
//! added files hold (copy-on-write rewrites, and deletes read with both sides' delete files),
//! keyed and diffed in memory, or in key buckets on disk beyond `read.memory.budget`.

use arrow_schema::SchemaRef;

use super::manifest;
use super::monitor::{DiffPart, Plan, Task};
use super::reader::{and_not, keep, read_range, FileRange};
use super::{lineage, IcebergSource};
use crate::source::sides::{diff_split, DiffJob, Sides};
use crate::source::{SourceError, SplitChanges, SplitSpec};

impl IcebergSource {
    /// A rewritten data file: rows deleted by this snapshot (old side) and rows it brought back.
    pub(super) fn read_rewritten(
        &self,
        plan: &Plan,
        schema: &SchemaRef,
        range: &FileRange,
        before: &[manifest::Entry],
        after: &[manifest::Entry],
    ) -> Result<Sides, SourceError> {
        let b_refs: Vec<_> = before.iter().collect();
        let a_refs: Vec<_> = after.iter().collect();
        let was = plan.deletes.for_file(&range.file, &b_refs, &plan.schema)?;
        let now = plan.deletes.for_file(&range.file, &a_refs, &plan.schema)?;
        let rows = read_range(&self.storage, range, schema)?;
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
    pub(super) fn read_diff(
        &self,
        split: &SplitSpec,
        part: &DiffPart,
        plan: &Plan,
        (buckets, narrow): (u32, bool),
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let DiffPart {
            old, new, rewritten, ..
        } = part;
        let n = old.len() + new.len() + rewritten.len();
        // a keyless table whose files all have row lineage: keyed by row id (see `lineage`)
        let lineage = self.info.keyless() && part.has_lineage();
        let schema = match lineage {
            true => lineage::extended(&plan.schema),
            false => plan.schema.clone(),
        };
        // and its rewrites narrowed to the rows they changed (see `carried`)
        let positions = match lineage && self.narrow {
            true => self.changed_positions(plan, part)?,
            false => None,
        };
        let read = |i: usize| -> Result<Sides, SourceError> {
            let side = |tasks: &[Task], is_new: bool| -> Result<Sides, SourceError> {
                let (batches, labels, bytes) = match &positions {
                    Some(p) if tasks.len() == 1 && i < p.len() => self.read_positions(&schema, &tasks[0], &p[i])?,
                    _ => self.read_tasks(plan, &schema, tasks)?,
                };
                let rows: Vec<_> = batches.into_iter().zip(labels).collect();
                let mut sides = Sides {
                    bytes,
                    ..Default::default()
                };
                *(if is_new { &mut sides.new } else { &mut sides.old }) = rows;
                Ok(sides)
            };
            if i < old.len() {
                side(std::slice::from_ref(&old[i]), false)
            } else if i < old.len() + new.len() {
                side(std::slice::from_ref(&new[i - old.len()]), true)
            } else {
                let (r, b, a) = &rewritten[i - old.len() - new.len()];
                self.read_rewritten(plan, &schema, r, b, a)
            }
        };
        let (keys, keyless) = match lineage {
            true => (vec![schema.fields().len() - 2], false),
            false => (self.key_columns(plan)?, self.info.keyless()),
        };
        let job = DiffJob {
            schema: schema.clone(),
            keys,
            keyless,
            threads: self.threads,
            budget: self.budget.get(),
            narrow,
            spill_dir: &self.spill_dir,
            connector: &self.connector,
            unit: plan.snapshot.snapshot_id.to_string(),
        };
        match lineage {
            true => crate::source::lineage::diff_split(&job, split, buckets, n, &read, emit),
            false => diff_split(&job, split, buckets, n, &read, emit),
        }
    }

    /// The key's columns in the plan's schema; a keyless table's rows are keyed whole.
    pub(super) fn key_columns(&self, plan: &Plan) -> Result<Vec<usize>, SourceError> {
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
}
