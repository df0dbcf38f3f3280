//! A unit's net change read as a diff, shared by the formats that rewrite files (Iceberg
//! copy-on-write and deletes, Delta remove/add and change-data files): the rows a unit took away
//! (old side) against the rows it brought (new side), keyed and diffed in memory, or in key
//! buckets on disk beyond `read.memory.budget`. A key on both sides with the same image is a
//! carry-over and emits nothing.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::buckets::{restrict_indexes, BucketWriter};
use super::rows::{diff, multiset_diff};
use super::{par, SourceError, SplitChanges, SplitSpec};

mod narrow;

/// The two sides of a diff: (batch, (partition, file)) before and after, and the bytes read.
#[derive(Default)]
pub struct Sides {
    pub old: Vec<(RecordBatch, (String, String))>,
    pub new: Vec<(RecordBatch, (String, String))>,
    pub bytes: u64,
}

/// Batches (old side first), their labels, and the batch indexes of each side.
type Flat = (Vec<RecordBatch>, Vec<(String, String)>, Vec<u32>, Vec<u32>);

impl Sides {
    fn rows(&self) -> u64 {
        self.old.iter().chain(&self.new).map(|(b, _)| b.num_rows() as u64).sum()
    }

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

/// What a diff is run with.
pub struct DiffJob<'a> {
    /// The schema every side's batches are conformed to.
    pub schema: SchemaRef,
    /// Key columns in `schema` (every column for a keyless table).
    pub keys: Vec<usize>,
    /// Rows compared whole, as a multiset (no key pairs two rows).
    pub keyless: bool,
    pub threads: usize,
    pub budget: usize,
    /// Decide the changed keys first (see [`narrow`]), as [`plan_diff`] chose.
    pub narrow: bool,
    pub spill_dir: &'a Path,
    pub connector: &'a str,
    /// The unit, for logs.
    pub unit: String,
}

/// How a unit's diff is read: its key buckets (part of its row order: a resumed unit keeps the
/// count it was first read with, `pinned`) and whether it decides its changed keys first. That
/// is worth a second read only beyond the budget (`estimated` decoded bytes), and keeps the
/// in-memory row order: a fresh unit (falling back to buckets if the changed rows do not fit),
/// or one pinned to a single in-memory diff (falling back to it, beyond the budget if need be),
/// never one pinned to buckets.
pub fn plan_diff(pinned: Option<u32>, estimated: u64, budget: usize, narrow: bool) -> (u32, bool) {
    let fit = super::buckets::buckets_for(estimated, budget);
    match pinned {
        Some(b) if b > 1 => (b, false),
        Some(_) => (1, narrow && fit > 1),
        None => (fit, narrow && fit > 1),
    }
}

/// Diff the `n` pieces `read(i)` yields as the split `split`: in memory (`buckets == 1`), else
/// in key buckets on disk, one chunk per bucket.
pub fn diff_split(
    job: &DiffJob<'_>,
    split: &SplitSpec,
    buckets: u32,
    n: usize,
    read: &(dyn Fn(usize) -> Result<Sides, SourceError> + Sync),
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    if job.narrow && !job.keyless {
        if let Some((all, rows_read)) = narrow::restricted(job, n, read)? {
            return diff_in_memory(split, all, rows_read, job, emit);
        }
    }
    if buckets > 1 {
        return diff_bucketed(job, split, buckets, n, read, emit);
    }
    let mut all = Sides::default();
    par::ordered(n, job.threads, read, &mut |s: Sides| {
        all.old.extend(s.old);
        all.new.extend(s.new);
        all.bytes += s.bytes;
        Ok(())
    })?;
    let rows_read = all.rows();
    diff_in_memory(split, all, rows_read, job, emit)
}

/// One diff of sides held in memory (`rows_read`: what reading them took), as one chunk.
fn diff_in_memory(
    split: &SplitSpec,
    all: Sides,
    rows_read: u64,
    job: &DiffJob<'_>,
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    let bytes_read = all.bytes;
    let (batches, labels, old_idx, new_idx) = all.flatten();
    let rows = if job.keyless {
        multiset_diff(&batches, &old_idx, &new_idx)?
    } else {
        diff(&batches, &[old_idx], &[new_idx], &job.keys, None)?.remove(0)
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
        row_ids: None,
        rows_read,
        bytes_read,
    })
}

/// A diff larger than `read.memory.budget`, in key buckets on disk (see
/// [`crate::source::buckets`]): one chunk of the split per bucket.
fn diff_bucketed(
    job: &DiffJob<'_>,
    split: &SplitSpec,
    buckets: u32,
    n: usize,
    read: &(dyn Fn(usize) -> Result<Sides, SourceError> + Sync),
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    tracing::info!(unit = %job.unit, split = %split.id, buckets, budget = job.budget,
        "change unit larger than read.memory.budget: diffing in key buckets on disk");
    let mut writer = BucketWriter::new(job.spill_dir, job.schema.clone(), job.keys.clone(), buckets, job.budget)?;
    let mut labels: Vec<(String, String)> = Vec::new();
    let mut label_ids: HashMap<(String, String), u32> = HashMap::new();
    let (mut rows_read, mut bytes_read) = (0u64, 0u64);
    par::ordered(n, job.threads, read, &mut |s: Sides| {
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
        .with_label_values(&[job.connector])
        .inc_by(reader.bytes);
    let mut first_row = 0u64;
    for p in 0..reader.len() {
        let rows = reader.read(p, 1)?;
        let changes = if job.keyless {
            multiset_diff(&rows.batches, &rows.old[0], &rows.new[0])?
        } else {
            diff(&rows.batches, &rows.old, &rows.new, &job.keys, None)?.remove(0)
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
            row_ids: None,
            rows_read: if last { rows_read } else { 0 },
            bytes_read: if last { bytes_read } else { 0 },
        })?;
        first_row += count;
    }
    Ok(())
}
