//! Reading in bounded memory, whatever the table's size:
//!
//! * **Full scans** stream each file slice in chunks of [`CHUNK_ROWS`] rows (the base file batch
//!   by batch, log records within `read.memory.budget`). A key held by several file groups (or
//!   twice in one) must still be emitted once, from its newest commit: the pre-pass in `keys`
//!   finds such keys.
//! * **Change units** whose two sides would not fit in the budget are diffed in key buckets on
//!   disk (see [`crate::source::buckets`]); smaller ones keep the one in-memory diff.

use std::collections::HashSet;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::reader::UnitRead;
use super::slice::FileCache;
use super::{join_path, HudiSource};
use crate::metrics;
use crate::source::buckets::{buckets_for, restrict, BucketWriter, DECODED_PER_FILE_BYTE};
use crate::source::parallel;
use crate::source::rows::diff;
use crate::source::{Op, SourceError, SplitChanges, SplitSpec};

/// Rows per chunk of a streamed split.
pub const CHUNK_ROWS: usize = 16_384;

mod keys;

type Emit<'e> = dyn FnMut(SplitChanges) -> Result<(), SourceError> + 'e;

/// Rows of one split collected into a chunk.
#[derive(Default)]
struct Chunk {
    batches: Vec<RecordBatch>,
    rows: usize,
    first_row: u64,
}

impl Chunk {
    fn take(&mut self, split: &SplitSpec, file: &str, last: bool) -> SplitChanges {
        let batches = std::mem::take(&mut self.batches);
        let rows = crate::source::rows_as(Op::Read, &batches);
        let mut sc = SplitChanges::whole(split.clone(), file.to_string(), batches, rows);
        sc.first_row = self.first_row;
        sc.last = last;
        self.first_row += self.rows as u64;
        self.rows = 0;
        sc
    }
}

impl HudiSource {
    /// A full scan, split by split, each streamed in chunks; splits are read on several threads
    /// and handed on in split order.
    pub(super) fn read_snapshot(
        &self,
        r: &UnitRead<'_>,
        done: &HashSet<String>,
        emit: &mut Emit<'_>,
    ) -> Result<(), SourceError> {
        let unit = r.unit;
        let dups = self.duplicates(r)?;
        let todo: Vec<usize> = (0..unit.splits.len())
            .filter(|&s| {
                let sp = &unit.splits[s];
                !done.contains(&sp.id) && !r.is_replaced(sp)
            })
            .collect();
        let read =
            |k: usize, send: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>| -> Result<(), SourceError> {
                let s = todo[k];
                let sp = &unit.splits[s];
                let cache = FileCache::single_pass(None);
                let reader = self.shared_slice_reader(r.tl, &cache);
                let Some(merge) = self.open_slice(r, &reader, sp, true)? else {
                    return Ok(());
                };
                let Some(schema) = merge.schema().cloned() else {
                    return Ok(());
                };
                let (keys, _) = self.key_columns(&schema)?;
                let file = merge
                    .file
                    .as_deref()
                    .map(|f| join_path(&sp.partition, f))
                    .unwrap_or_default();
                let bytes_read = merge.bytes_read;
                let mut chunk = Chunk::default();
                let mut seq = 0u64;
                let rows_read = merge.run(&mut |b| {
                    let n = b.num_rows();
                    let b = match dups.keep(s, seq, &b, &keys)? {
                        Some(keep) => arrow::compute::filter_record_batch(&b, &keep)
                            .map_err(SourceError::arrow("dropping duplicate keys"))?,
                        None => b,
                    };
                    seq += n as u64;
                    chunk.rows += b.num_rows();
                    chunk.batches.push(b);
                    if chunk.rows >= CHUNK_ROWS {
                        send(chunk.take(sp, &file, false))?;
                    }
                    Ok(())
                })?;
                let mut sc = chunk.take(sp, &file, true);
                sc.rows_read = rows_read;
                sc.bytes_read = bytes_read;
                send(sc)
            };
        parallel::ordered_streams(todo.len(), self.threads, 2, &read, emit)
    }

    /// Key buckets for a change unit: one (the in-memory diff) while its file slices, decoded,
    /// fit in `read.memory.budget`.
    pub(super) fn change_buckets(&self, r: &UnitRead<'_>) -> Result<u32, SourceError> {
        let mut bytes = 0u64;
        for sp in &r.unit.splits {
            bytes += self.split_file_bytes(r, sp)?;
        }
        Ok(buckets_for(bytes * DECODED_PER_FILE_BYTE, self.budget.get()))
    }

    /// A change unit diffed in `buckets` key buckets on disk (see [`crate::source::buckets`]):
    /// both sides of every split spilled by key, then each bucket diffed and emitted.
    pub(super) fn read_bucketed(
        &self,
        r: &UnitRead<'_>,
        done: &HashSet<String>,
        buckets: u32,
        emit: &mut Emit<'_>,
    ) -> Result<(), SourceError> {
        let unit = r.unit;
        let Some(target) = self.unit_schema(r)? else {
            return Ok(());
        };
        let (keys, order) = self.key_columns(&target)?;
        tracing::info!(connector = %self.connector, instant = %unit.position.version, buckets, budget = self.budget.get(),
            "change unit larger than read.memory.budget: diffing in key buckets on disk");
        let mut writer = BucketWriter::new(
            &self.spill.dir,
            target.clone(),
            keys.clone(),
            buckets,
            self.budget.get(),
        )?;
        let reads = self.spill_sides(r, &target, &mut writer)?;
        let buckets = writer.finish()?;
        metrics::SPILLED_BYTES
            .with_label_values(&[&self.connector])
            .inc_by(buckets.bytes);
        let n = unit.splits.len();
        let mut first_row = vec![0u64; n];
        for p in 0..buckets.len() {
            let rows = buckets.read(p, n)?;
            let per_split = diff(&rows.batches, &rows.old, &rows.new, &keys, order)?;
            let last = p + 1 == buckets.len();
            for (s, changes) in per_split.into_iter().enumerate() {
                let sp = &unit.splits[s];
                if done.contains(&sp.id) || (changes.is_empty() && !last) {
                    continue;
                }
                let count = changes.len() as u64;
                let (batches, changes) = restrict(&rows.batches, changes);
                let mut sc = SplitChanges::whole(sp.clone(), reads.file[s].clone(), batches, changes);
                sc.first_row = first_row[s];
                sc.last = last;
                sc.buckets = buckets.len() as u32;
                if last {
                    sc.rows_read = reads.rows[s];
                    sc.bytes_read = reads.bytes[s];
                }
                first_row[s] += count;
                emit(sc)?;
            }
            if (p + 1) % 16 == 0 || last {
                tracing::info!(connector = %self.connector, instant = %unit.position.version, done = p + 1, total = buckets.len(), "change unit: buckets diffed");
            }
        }
        Ok(())
    }

    /// The sides a split of the unit reads: (new?, wanted) for the old then the new slice.
    fn sides(r: &UnitRead<'_>, sp: &SplitSpec) -> [(bool, bool); 2] {
        [(false, !r.unit.snapshot), (true, !r.is_replaced(sp))]
    }

    /// The unit's value schema: the newest slice's (last split with a new side, else old).
    pub(super) fn unit_schema(&self, r: &UnitRead<'_>) -> Result<Option<SchemaRef>, SourceError> {
        for want_new in [true, false] {
            for sp in r.unit.splits.iter().rev() {
                for (is_new, wanted) in Self::sides(r, sp) {
                    if is_new != want_new || !wanted {
                        continue;
                    }
                    // (planning needs no key selection: the schema is the same)
                    let cache = FileCache::single_pass(None);
                    let reader = self.slice_reader(r.tl, &cache);
                    if let Some(s) = self
                        .open_slice(r, &reader, sp, is_new)?
                        .and_then(|m| m.schema().cloned())
                    {
                        return Ok(Some(s));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Both sides of every split merged and written to the buckets; what each split read.
    /// Splits are read on several threads (each with its share of the budget) and their batches
    /// written in split order, as one thread would.
    fn spill_sides(
        &self,
        r: &UnitRead<'_>,
        target: &SchemaRef,
        writer: &mut BucketWriter,
    ) -> Result<SplitReads, SourceError> {
        let n = r.unit.splits.len();
        let mut reads = SplitReads {
            file: vec![String::new(); n],
            rows: vec![0; n],
            bytes: vec![0; n],
        };
        let read = |s: usize, send: &mut dyn FnMut(Spilled) -> Result<(), SourceError>| -> Result<(), SourceError> {
            let sp = &r.unit.splits[s];
            // log blocks decoded once for both sides; base files streamed
            let cache = FileCache::streaming(None);
            let mut reader = self.unit_reader(r, &cache);
            reader.spill.budget /= self.threads.max(1);
            for (is_new, wanted) in Self::sides(r, sp) {
                if !wanted {
                    continue;
                }
                let Some(merge) = self.open_slice(r, &reader, sp, is_new)? else {
                    continue;
                };
                let (file, bytes) = (merge.file.clone(), merge.bytes_read);
                let rows =
                    merge.run(&mut |b| send(Spilled::Rows(s, is_new, crate::source::rows::conform(&b, target)?)))?;
                send(Spilled::Read {
                    split: s,
                    is_new,
                    file,
                    rows,
                    bytes,
                })?;
            }
            Ok(())
        };
        parallel::ordered_streams(n, self.threads, 2, &read, &mut |part| match part {
            Spilled::Rows(s, is_new, b) => writer.push(s as u32, is_new, 0, &b),
            Spilled::Read {
                split: s,
                is_new,
                file,
                rows,
                bytes,
            } => {
                if let Some(f) = file {
                    if is_new || reads.file[s].is_empty() {
                        reads.file[s] = join_path(&r.unit.splits[s].partition, &f);
                    }
                }
                reads.rows[s] += rows;
                reads.bytes[s] += bytes;
                Ok(())
            }
        })?;
        Ok(reads)
    }
}

/// What a split's reading thread hands the bucket writer: merged rows of one side, then what
/// that side read.
enum Spilled {
    Rows(usize, bool, RecordBatch),
    Read {
        split: usize,
        is_new: bool,
        file: Option<String>,
        rows: u64,
        bytes: u64,
    },
}

/// What each split of a bucketed unit read: the newest file, rows and bytes.
struct SplitReads {
    file: Vec<String>,
    rows: Vec<u64>,
    bytes: Vec<u64>,
}
