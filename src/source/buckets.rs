//! Keyed diffs larger than memory (a Grace hash join on disk): while a change unit is read, every
//! row of both sides is hash-partitioned by its key into one of N buckets, each an Arrow IPC file
//! in `read.spill.dir`; each bucket is then diffed alone. All versions of a key meet in one bucket,
//! so a key that moved between file groups is still paired into one update, and a duplicate key is
//! still reduced to its newest row. Memory is one bucket (≈ the unit's data / N) plus a write
//! buffer per bucket, whatever the unit's size.
//!
//! The bucket of a key comes from a hash of its values rendered as text ([`key_hashes`]): stable
//! across processes, builds and column types that render alike, because the bucket count is part
//! of a unit's row order and a resumed unit must reproduce it exactly.
//!
//! Plain std + arrow IPC (already dependencies); no external-sort crate was needed for a
//! partition-then-diff pass.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::{ChangeRow, RowRef, SourceError};

/// FNV-1a, 64 bits: a fixed function (not `std`'s randomized or version-dependent hashers).
fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= *b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

/// A row's key columns rendered as text: the identity used to find a key's versions across
/// files (types that render alike, such as `int` and `long` after a promotion, match).
pub struct KeyText {
    texts: Vec<StringArray>,
}

impl KeyText {
    pub fn new(batch: &RecordBatch, key_cols: &[usize]) -> Result<Self, SourceError> {
        let texts = key_cols
            .iter()
            .map(|&c| {
                let col = batch.column(c);
                let s = if col.data_type() == &DataType::Utf8 {
                    col.clone()
                } else {
                    arrow::compute::cast(col, &DataType::Utf8)
                        .map_err(SourceError::arrow(format!("key column {c} as text")))?
                };
                Ok(s.as_any()
                    .downcast_ref::<StringArray>()
                    .expect("utf8 after cast")
                    .clone())
            })
            .collect::<Result<_, SourceError>>()?;
        Ok(Self { texts })
    }

    /// The key of row `r` as bytes (null and the separator are bytes that text never holds).
    pub fn bytes(&self, r: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        self.each(r, |b| out.extend_from_slice(b));
        out
    }

    /// A stable 64-bit hash of [`Self::bytes`].
    pub fn hash(&self, r: usize) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        self.each(r, |b| fnv(&mut h, b));
        h
    }

    fn each(&self, r: usize, mut f: impl FnMut(&[u8])) {
        for t in &self.texts {
            if t.is_valid(r) {
                f(t.value(r).as_bytes());
            } else {
                f(&[0xfe]);
            }
            f(&[0xff]);
        }
    }
}

/// [`KeyText::hash`] of every row.
pub fn key_hashes(batch: &RecordBatch, key_cols: &[usize]) -> Result<Vec<u64>, SourceError> {
    let k = KeyText::new(batch, key_cols)?;
    Ok((0..batch.num_rows()).map(|r| k.hash(r)).collect())
}

/// The bucket of a key hash (the high bits: FNV's low bits mix least).
pub fn bucket_of(hash: u64, buckets: u32) -> u32 {
    ((hash >> 32) % buckets as u64) as u32
}

const SPLIT_COL: &str = "__lakestream_split";
const NEW_COL: &str = "__lakestream_new";
const TAG_COL: &str = "__lakestream_tag";
/// Most buckets a unit is split into.
pub const MAX_BUCKETS: u32 = 1024;
/// The write buffer of one bucket flush (a flush holds at most 1 MiB of rows): arrow-ipc 60
/// writes a batch as many small writes (each buffer, its padding), which an 8 KiB buffer passed
/// on as ~5x the write calls of arrow 58 (1.7 s more system time on a 4M-row unit).
const FLUSH_BUFFER: usize = 1 << 20;

/// A bucket: rows buffered in memory, then appended to its file (created on first flush) as an
/// Arrow IPC stream per flush, so no file stays open between flushes.
struct Bucket {
    path: PathBuf,
    pending: Vec<RecordBatch>,
    pending_bytes: usize,
    rows: u64,
}

/// Rows of a unit's old and new sides, partitioned into key buckets on disk.
pub struct BucketWriter {
    dir: tempfile::TempDir,
    target: SchemaRef,
    spilled: SchemaRef,
    key_cols: Vec<usize>,
    buckets: Vec<Bucket>,
    flush_bytes: usize,
    /// Bytes written to the bucket files (the spill metric).
    pub bytes: u64,
}

impl BucketWriter {
    /// `buckets` buffers of together about `budget / 32` bytes (64 KiB to 1 MiB each). At
    /// `budget / 4` a 102-bucket unit held 64 MiB of buffers where a 7-bucket one held 7, which
    /// made memory follow the unit's size; the buffers only batch appends to the bucket files.
    pub fn new(
        dir: &std::path::Path,
        target: SchemaRef,
        key_cols: Vec<usize>,
        buckets: u32,
        budget: usize,
    ) -> Result<Self, SourceError> {
        std::fs::create_dir_all(dir).map_err(SourceError::io(dir))?;
        let tmp = tempfile::Builder::new()
            .prefix("lakestream-buckets-")
            .tempdir_in(dir)
            .map_err(SourceError::io(dir))?;
        let mut fields: Vec<Field> = target.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(SPLIT_COL, DataType::UInt32, false));
        fields.push(Field::new(NEW_COL, DataType::Boolean, false));
        fields.push(Field::new(TAG_COL, DataType::UInt32, false));
        let spilled = Arc::new(Schema::new(fields));
        let n = buckets.clamp(1, MAX_BUCKETS);
        let buckets = (0..n)
            .map(|i| Bucket {
                path: tmp.path().join(format!("{i}.arrows")),
                pending: Vec::new(),
                pending_bytes: 0,
                rows: 0,
            })
            .collect();
        let flush_bytes = (budget / 32 / n as usize).clamp(64 << 10, 1 << 20);
        Ok(Self {
            dir: tmp,
            target,
            spilled,
            key_cols,
            buckets,
            flush_bytes,
            bytes: 0,
        })
    }

    /// Add rows of `split`'s old or new side (conformed to the unit's schema), in read order;
    /// `tag` comes back with them (a label of the file they came from).
    pub fn push(&mut self, split: u32, is_new: bool, tag: u32, batch: &RecordBatch) -> Result<(), SourceError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let n = self.buckets.len() as u32;
        let hashes = key_hashes(batch, &self.key_cols)?;
        let mut idx: Vec<Vec<u32>> = vec![Vec::new(); n as usize];
        for (r, h) in hashes.iter().enumerate() {
            idx[bucket_of(*h, n) as usize].push(r as u32);
        }
        let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
        cols.push(Arc::new(UInt32Array::from(vec![split; batch.num_rows()])));
        cols.push(Arc::new(BooleanArray::from(vec![is_new; batch.num_rows()])));
        cols.push(Arc::new(UInt32Array::from(vec![tag; batch.num_rows()])));
        let tagged =
            RecordBatch::try_new(self.spilled.clone(), cols).map_err(SourceError::arrow("tagging bucketed rows"))?;
        for (p, rows) in idx.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let part = if rows.len() == tagged.num_rows() {
                tagged.clone()
            } else {
                arrow::compute::take_record_batch(&tagged, &UInt32Array::from(rows))
                    .map_err(SourceError::arrow("bucketing rows"))?
            };
            let b = &mut self.buckets[p];
            b.rows += part.num_rows() as u64;
            b.pending_bytes += part.get_array_memory_size();
            b.pending.push(part);
            if b.pending_bytes >= self.flush_bytes {
                self.bytes += flush(&self.spilled, b)?;
            }
        }
        Ok(())
    }

    /// Finish writing; the buckets are then read back one at a time.
    pub fn finish(mut self) -> Result<BucketReader, SourceError> {
        for b in &mut self.buckets {
            self.bytes += flush(&self.spilled, b)?;
        }
        Ok(BucketReader {
            _dir: self.dir,
            target: self.target,
            buckets: self.buckets,
            bytes: self.bytes,
        })
    }
}

fn bucket_err(what: &str, e: impl std::fmt::Display, path: &std::path::Path) -> SourceError {
    SourceError::format(path, format!("key bucket file ({what}): {e}"))
}

fn flush(schema: &SchemaRef, b: &mut Bucket) -> Result<u64, SourceError> {
    if b.pending.is_empty() {
        return Ok(0);
    }
    let batch = arrow::compute::concat_batches(schema, &b.pending).map_err(SourceError::arrow("bucket buffer"))?;
    b.pending.clear();
    let bytes = std::mem::take(&mut b.pending_bytes) as u64;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&b.path)
        .map_err(SourceError::io(&b.path))?;
    let mut w = StreamWriter::try_new(std::io::BufWriter::with_capacity(FLUSH_BUFFER, file), schema)
        .map_err(|e| bucket_err("open", e, &b.path))?;
    w.write(&batch).map_err(|e| bucket_err("write", e, &b.path))?;
    w.finish().map_err(|e| bucket_err("finish", e, &b.path))?;
    Ok(bytes)
}

/// One bucket read back: batches per (side, split) present (one per run of equal tags), and per
/// split the indexes of its old and new batches (the shape [`super::rows::diff`] takes).
pub struct BucketRows {
    pub batches: Vec<RecordBatch>,
    /// The tag of each batch.
    pub tags: Vec<u32>,
    pub old: Vec<Vec<u32>>,
    pub new: Vec<Vec<u32>>,
}

pub struct BucketReader {
    _dir: tempfile::TempDir,
    target: SchemaRef,
    buckets: Vec<Bucket>,
    pub bytes: u64,
}

impl BucketReader {
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Rows of bucket `p` for a unit of `splits` splits, each group in its original read order.
    pub fn read(&self, p: usize, splits: usize) -> Result<BucketRows, SourceError> {
        let b = &self.buckets[p];
        let mut out = BucketRows {
            batches: Vec::new(),
            tags: Vec::new(),
            old: vec![Vec::new(); splits],
            new: vec![Vec::new(); splits],
        };
        if b.rows == 0 {
            return Ok(out);
        }
        let Some(all) = read_streams(&b.path)? else {
            return Ok(out);
        };
        let n = all.num_columns();
        let split_col: UInt32Array = tag_column(&all, n - 3, &b.path)?;
        let new_col: BooleanArray = tag_column(&all, n - 2, &b.path)?;
        let tag_col: UInt32Array = tag_column(&all, n - 1, &b.path)?;
        let data = all
            .project(&(0..n - 3).collect::<Vec<_>>())
            .map_err(SourceError::arrow("bucket columns"))?;
        let data = RecordBatch::try_new(self.target.clone(), data.columns().to_vec())
            .map_err(SourceError::arrow("bucket schema"))?;
        drop(all);
        // (split, side) groups, in order of first appearance: rows keep their read order
        let mut groups: std::collections::BTreeMap<(u32, bool), Vec<u32>> = Default::default();
        for r in 0..data.num_rows() {
            groups
                .entry((split_col.value(r), new_col.value(r)))
                .or_default()
                .push(r as u32);
        }
        for ((split, is_new), rows) in groups {
            let s = split as usize;
            if s >= splits {
                return Err(bucket_err("read", format!("split {s} out of range"), &b.path));
            }
            let tags: Vec<u32> = rows.iter().map(|&r| tag_col.value(r as usize)).collect();
            let batch = if rows.len() == data.num_rows() {
                data.clone()
            } else {
                arrow::compute::take_record_batch(&data, &UInt32Array::from(rows))
                    .map_err(SourceError::arrow("bucket group"))?
            };
            for run in tags.chunk_by(|a, b| a == b).scan(0usize, |start, run| {
                let r = (*start, run.len(), run[0]);
                *start += run.len();
                Some(r)
            }) {
                let (start, len, tag) = run;
                let i = out.batches.len() as u32;
                out.batches.push(if len == batch.num_rows() {
                    batch.clone()
                } else {
                    batch.slice(start, len)
                });
                out.tags.push(tag);
                if is_new {
                    out.new[s].push(i)
                } else {
                    out.old[s].push(i)
                }
            }
        }
        Ok(out)
    }
}

/// A bucket file's rows as one batch (the file is one IPC stream per flush, back to back);
/// `None` when it holds no stream.
fn read_streams(path: &std::path::Path) -> Result<Option<RecordBatch>, SourceError> {
    let mut input = std::io::BufReader::new(File::open(path).map_err(SourceError::io(path))?);
    let mut parts = Vec::new();
    let mut schema = None;
    while !std::io::BufRead::fill_buf(&mut input)
        .map_err(SourceError::io(path))?
        .is_empty()
    {
        let reader = StreamReader::try_new(&mut input, None).map_err(|e| bucket_err("read", e, path))?;
        schema.get_or_insert(reader.schema());
        for part in reader {
            parts.push(part.map_err(|e| bucket_err("read", e, path))?);
        }
    }
    let Some(schema) = schema else { return Ok(None) };
    arrow::compute::concat_batches(&schema, &parts)
        .map(Some)
        .map_err(SourceError::arrow("bucket rows"))
}

/// Column `i` of a bucket's rows (one of the split, side and tag columns written with them).
fn tag_column<T: Array + Clone + 'static>(
    all: &RecordBatch,
    i: usize,
    path: &std::path::Path,
) -> Result<T, SourceError> {
    all.column(i)
        .as_any()
        .downcast_ref::<T>()
        .cloned()
        .ok_or_else(|| bucket_err("read", format!("column {i} is not the type written"), path))
}

/// The batches `rows` refer to, and the rows re-pointed at that subset (a chunk of one split
/// carries only what it encodes).
pub fn restrict(batches: &[RecordBatch], rows: Vec<ChangeRow>) -> (Vec<RecordBatch>, Vec<ChangeRow>) {
    let (picked, rows) = restrict_indexes(batches.len(), rows);
    (picked.iter().map(|&i| batches[i].clone()).collect(), rows)
}

/// [`restrict`] as indexes: which of `n` batches the rows refer to, in order of first use.
pub fn restrict_indexes(n: usize, rows: Vec<ChangeRow>) -> (Vec<usize>, Vec<ChangeRow>) {
    let mut map: Vec<Option<u32>> = vec![None; n];
    let mut picked: Vec<usize> = Vec::new();
    let mut remap = |r: RowRef| {
        let slot = map[r.batch as usize].get_or_insert_with(|| {
            picked.push(r.batch as usize);
            picked.len() as u32 - 1
        });
        RowRef {
            batch: *slot,
            row: r.row,
        }
    };
    let rows = rows.into_iter().map(|c| c.moved(&mut remap)).collect();
    (picked, rows)
}

/// Estimated bytes in memory per byte of Parquet / log file read (decoded Arrow, conformed).
pub const DECODED_PER_FILE_BYTE: u64 = 4;

/// Key buckets for a unit whose two sides decode to about `bytes`: enough that one bucket, with
/// the diff's indexes over it (heaptrack: 3.2 times its rows' size at peak), takes about half of
/// `budget`. Half, not all: the estimate is coarse and a bucket count rounds up, so buckets of a
/// few-bucket unit come out smaller than those of a many-bucket unit. Measured on the generated
/// COW upsert, 1M vs 16M rows, peak RSS: 227 vs 311 MiB at `budget / 3`, 126–131 vs 167–172 at
/// `budget / 6` (and no slower at 16M). Smaller still costs time at tiny budgets: a bucket has
/// a fixed cost, and `perf_mor_v8` changes at a 4 MiB budget took 35 s at `/ 6`, 21 s at `/ 3`.
pub fn buckets_for(bytes: u64, budget: usize) -> u32 {
    let per_bucket = (budget as u64 / 6).max(1);
    bytes.div_ceil(per_bucket).clamp(1, MAX_BUCKETS as u64) as u32
}

#[cfg(test)]
mod tests;
