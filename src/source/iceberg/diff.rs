//! A snapshot's net change read as a diff: the rows its removed files held against the rows its
//! added files hold (copy-on-write rewrites, and deletes read with both sides' delete files),
//! keyed and diffed in memory, or in key buckets on disk beyond `read.memory.budget`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;

use super::manifest;
use super::monitor::{DiffPart, Plan, Task};
use super::reader::{and_not, keep, read_range, FileRange};
use super::IcebergSource;
use crate::source::buckets::{restrict_indexes, BucketWriter};
use crate::source::rows::{diff, multiset_diff};
use crate::source::{par, SourceError, SplitChanges, SplitSpec};

/// The two sides of a diff: (batch, (partition, file)) before and after, and the bytes read.
#[derive(Default)]
pub(super) struct Sides {
    pub(super) old: Vec<(RecordBatch, (String, String))>,
    pub(super) new: Vec<(RecordBatch, (String, String))>,
    pub(super) bytes: u64,
}

/// Batches (old side first), their labels, and the batch indexes of each side.
type Flat = (Vec<RecordBatch>, Vec<(String, String)>, Vec<u32>, Vec<u32>);

impl Sides {
    fn flatten(self) -> Flat {
        let (mut batches, mut labels, mut old_idx, mut new_idx) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (is_new, side) in [(false, self.old), (true, self.new)] {
            for (b, label) in side {
                if is_new { &mut new_idx } else { &mut old_idx }.push(batches.len() as u32);
                batches.push(b);
                labels.push(label);
            }
        }
        (batches, labels, old_idx, new_idx)
    }
}

impl IcebergSource {
    /// A rewritten data file: rows deleted by this snapshot (old side) and rows it brought back.
    pub(super) fn read_rewritten(
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
        let rows = read_range(&self.storage, range, &plan.schema)?;
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
        let bytes_read = all.bytes;
        let (batches, labels, old_idx, new_idx) = all.flatten();
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
            bytes_read,
        })
    }

    /// A diff larger than `read.memory.budget`, in key buckets on disk (see
    /// [`crate::source::buckets`]): one chunk of the unit's one split per bucket.
    pub(super) fn read_diff_bucketed(
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
