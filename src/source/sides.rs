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
use super::{parallel, SourceError, SplitChanges, SplitSpec};

mod narrow;

/// The two sides of a diff: (batch, (partition, file)) before and after, and the bytes read.
#[derive(Default)]
pub struct Sides {
    pub old: Vec<(RecordBatch, (String, String))>,
    pub new: Vec<(RecordBatch, (String, String))>,
    pub bytes: u64,
}

impl Sides {
    /// A batch's rows split into the old and the new side (either may be empty: it is left out).
    pub fn push_pair(&mut self, old: RecordBatch, new: RecordBatch, label: &(String, String)) {
        if old.num_rows() > 0 {
            self.old.push((old, label.clone()));
        }
        if new.num_rows() > 0 {
            self.new.push((new, label.clone()));
        }
    }

    fn rows(&self) -> u64 {
        self.old.iter().chain(&self.new).map(|(b, _)| b.num_rows() as u64).sum()
    }

    /// As the sides of one split (old side first), with each batch's label.
    fn flatten(self) -> (SplitSides, Vec<(String, String)>) {
        let (mut sides, mut labels) = (SplitSides::new(1), Vec::new());
        sides.bytes_read[0] = self.bytes;
        for (is_new, side) in [(false, self.old), (true, self.new)] {
            for (b, label) in side {
                sides.push(0, is_new, b);
                labels.push(label);
            }
        }
        (sides, labels)
    }
}

/// The old and new sides of a run of splits, their batches held once: which batches are each
/// split's old rows and which its new ones, and what reading them took. Every format's keyed
/// diff runs on it ([`SplitSides::diff`]): Hudi's file groups of a unit or partition, and the
/// one split of an Iceberg or Delta diff.
pub struct SplitSides {
    pub batches: Vec<RecordBatch>,
    pub old: Vec<Vec<u32>>,
    pub new: Vec<Vec<u32>>,
    /// The newest file each split read (for its events' `source.file`).
    pub file: Vec<String>,
    pub rows_read: Vec<u64>,
    pub bytes_read: Vec<u64>,
}

impl SplitSides {
    pub fn new(splits: usize) -> Self {
        Self {
            batches: Vec::new(),
            old: vec![Vec::new(); splits],
            new: vec![Vec::new(); splits],
            file: vec![String::new(); splits],
            rows_read: vec![0; splits],
            bytes_read: vec![0; splits],
        }
    }

    /// Add a batch to a side of split `s`.
    pub fn push(&mut self, s: usize, is_new: bool, batch: RecordBatch) {
        let idx = self.batches.len() as u32;
        self.batches.push(batch);
        if is_new { &mut self.new[s] } else { &mut self.old[s] }.push(idx);
    }

    /// Each split's change rows (see [`super::rows::diff`]); `order`: the column that orders two
    /// rows of one key on a side (Hudi's event time).
    pub fn diff(&self, keys: &[usize], order: Option<usize>) -> Result<Vec<Vec<super::ChangeRow>>, SourceError> {
        diff(&self.batches, &self.old, &self.new, keys, order)
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
    parallel::ordered(n, job.threads, read, &mut |s: Sides| {
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
    let (sides, labels) = all.flatten();
    let bytes_read = sides.bytes_read[0];
    let rows = if job.keyless {
        multiset_diff(&sides.batches, &sides.old[0], &sides.new[0])?
    } else {
        sides.diff(&job.keys, None)?.remove(0)
    };
    let (picked, rows) = restrict_indexes(sides.batches.len(), rows);
    let batches: Vec<RecordBatch> = picked.iter().map(|&i| sides.batches[i].clone()).collect();
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
    parallel::ordered(n, job.threads, read, &mut |s: Sides| {
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
