//! The merged state of a file group as of a point on the timeline: its base file plus the log
//! blocks of completed instants (rolled-back blocks dropped), merged by record key with the
//! table's merge rule ([`super::rule`]: commit-time or event-time ordering, deletes ordered as
//! Hudi orders them). The merge itself streams (see [`super::merge`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::files::{base_as_of, open_base, partition_dir, read_base, with_virtual_keys, BaseFile, LogFile};
use super::log::{self, BlockType, LogBlock, TARGET_INSTANT_TIME};
use super::timeline::{TableConfig, Timeline};
use crate::source::SourceError;
use crate::storage::Storage;

pub use super::rule::{MergeConfig, MergeMode};

/// One merged file slice: the winning rows in deterministic order (by source: base batches,
/// then log batches in commit order).
pub struct SliceState {
    pub batches: Vec<RecordBatch>,
    /// The newest file that contributed (for `source.file`).
    pub file: Option<String>,
    pub rows_read: u64,
    pub bytes_read: u64,
}

/// Files read once per unit even when both sides of a diff need them. With `only`, base files
/// are read with just those columns (key pre-pass of a full scan). A streaming cache keeps log
/// blocks only: base files are streamed batch by batch from storage on every use.
#[derive(Default)]
pub struct FileCache {
    only: Option<Vec<String>>,
    stream_base: bool,
    /// Log files are read for one merge only: nothing to keep once decoded.
    single_pass: bool,
    base: Mutex<HashMap<PathBuf, CachedBase>>,
    logs: Mutex<HashMap<PathBuf, CachedLog>>,
}

/// A base file read whole: schema, batches, size in bytes.
type CachedBase = Arc<(SchemaRef, Vec<RecordBatch>, u64)>;
/// A log file's blocks and size in bytes.
pub(super) type CachedLog = Arc<(Vec<LogBlock>, u64)>;

/// A base file's batches: from the cache, or streamed from storage.
pub(super) enum BaseBatches {
    Cached(CachedBase, usize),
    Stream(parquet::arrow::arrow_reader::ParquetRecordBatchReader, PathBuf),
    Selected(super::selection::SelectedRows, PathBuf),
}

impl Iterator for BaseBatches {
    type Item = Result<RecordBatch, SourceError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            BaseBatches::Cached(v, i) => {
                let b = v.1.get(*i).cloned();
                *i += 1;
                b.map(Ok)
            }
            BaseBatches::Stream(r, path) => r.next().map(|b| b.map_err(reading(path))),
            BaseBatches::Selected(r, path) => r.next().map(|b| b.map_err(reading(path))),
        }
    }
}

fn reading(path: &Path) -> impl Fn(arrow_schema::ArrowError) -> SourceError + '_ {
    move |e| SourceError::arrow(format!("reading {}", path.display()))(e)
}

impl FileCache {
    pub fn projected(only: Vec<String>) -> Self {
        Self {
            only: Some(only),
            ..Default::default()
        }
    }

    /// Log blocks cached, base files streamed: memory holds one base batch at a time.
    pub fn streaming(only: Option<Vec<String>>) -> Self {
        Self {
            only,
            stream_base: true,
            ..Default::default()
        }
    }

    /// For one merge per file group (a full scan): base files streamed, log files not kept
    /// once their records are decoded.
    pub fn single_pass(only: Option<Vec<String>>) -> Self {
        Self {
            only,
            stream_base: true,
            single_pass: true,
            ..Default::default()
        }
    }

    /// A base file's rows of the selected keys only (see [`super::selection`]): streamed, or read once
    /// and kept like [`Self::base`].
    pub(super) fn base_selected(
        &self,
        storage: &Storage,
        path: &Path,
        keys: &super::keys::KeyFilter,
        virtual_keys: Option<(&[String], &str)>,
    ) -> Result<(SchemaRef, BaseBatches, u64), SourceError> {
        if let Some(v) = self.base.lock().get(path) {
            return Ok((v.0.clone(), BaseBatches::Cached(v.clone(), 0), v.2));
        }
        let s = super::selection::open_base_selected(storage, path, keys, virtual_keys)?;
        if self.stream_base {
            return Ok((s.schema, BaseBatches::Selected(s.reader, path.into()), s.size));
        }
        let batches = s.reader.collect::<Result<Vec<_>, _>>().map_err(reading(path))?;
        let v = Arc::new((s.schema, batches, s.size));
        self.base.lock().insert(path.into(), v.clone());
        Ok((v.0.clone(), BaseBatches::Cached(v.clone(), 0), v.2))
    }

    pub(super) fn base(&self, storage: &Storage, path: &Path) -> Result<(SchemaRef, BaseBatches, u64), SourceError> {
        if let Some(v) = self.base.lock().get(path) {
            return Ok((v.0.clone(), BaseBatches::Cached(v.clone(), 0), v.2));
        }
        if self.stream_base {
            let (schema, reader, size) = open_base(storage, path, self.only.as_deref())?;
            return Ok((schema, BaseBatches::Stream(reader, path.into()), size));
        }
        let v = Arc::new(read_base(storage, path, self.only.as_deref())?);
        self.base.lock().insert(path.into(), v.clone());
        Ok((v.0.clone(), BaseBatches::Cached(v.clone(), 0), v.2))
    }

    /// A log file's blocks; `listed` is its size from the listing (0: unknown, asked of storage).
    pub(super) fn log(
        &self,
        storage: &Storage,
        path: &Path,
        listed: u64,
        connector: &str,
    ) -> Result<CachedLog, SourceError> {
        if let Some(v) = self.logs.lock().get(path) {
            return Ok(v.clone());
        }
        let size = match listed {
            0 => storage.size(path).map_err(SourceError::io(path))?,
            n => n,
        };
        let v = Arc::new((log::read_blocks_of(storage, path, size, connector)?, size));
        if !self.single_pass {
            self.logs.lock().insert(path.into(), v.clone());
        }
        Ok(v)
    }
}

/// Where a unit's reading may put what exceeds `read.memory.budget` (key buckets of a change
/// unit, hash runs of a full scan's key pass), and how much it keeps in memory.
#[derive(Debug, Clone)]
pub struct SpillConfig {
    pub budget: usize,
    pub dir: PathBuf,
    pub connector: String,
}

pub struct SliceReader<'a> {
    /// Only these record keys are read (a change unit's candidate keys, see [`super::selection`]).
    pub keys: Option<&'a super::keys::KeyFilter>,
    pub spill: SpillConfig,
    pub table: &'a TableConfig,
    pub timeline: &'a Timeline,
    pub merge: &'a MergeConfig,
    pub cache: &'a FileCache,
    pub connector: &'a str,
}

impl SliceReader<'_> {
    pub(super) fn visible(&self, instant: &str, at: &str, inclusive: bool) -> bool {
        match self.timeline.completed_order(instant) {
            Some(o) => {
                if inclusive {
                    o.as_str() <= at
                } else {
                    o.as_str() < at
                }
            }
            None => false,
        }
    }

    /// The log files of the slice that starts at `base` (all of them for a log-only group).
    pub(super) fn slice_logs<'l>(&self, base: Option<&BaseFile>, logs: &'l [LogFile]) -> Vec<&'l LogFile> {
        let mut out: Vec<&LogFile> = logs
            .iter()
            .filter(|l| match base {
                None => true,
                // layout 1 names logs after their slice's base instant; layout 2 after the
                // delta commit that wrote them
                Some(b) if self.table.layout >= 2 => l.instant > b.instant,
                Some(b) => l.instant >= b.instant,
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.instant, log_version(&a.name), &a.name).cmp(&(&b.instant, log_version(&b.name), &b.name))
        });
        out
    }

    /// The rows of `batch` this reader reads: all, or those of the selected keys.
    pub(super) fn restrict(&self, batch: RecordBatch) -> Result<RecordBatch, SourceError> {
        match self.keys {
            Some(k) => k.restrict(batch),
            None => Ok(batch),
        }
    }

    /// A virtual-key table's key fields and the partition (record keys are derived from them).
    pub(super) fn virtual_keys<'p>(&'p self, partition: &'p str) -> Option<(&'p [String], &'p str)> {
        self.merge
            .virtual_keys
            .then_some((self.merge.key_fields.as_slice(), partition))
    }

    /// A data block's records as Arrow (virtual keys derived), `_hoodie_operation` kept.
    pub(super) fn decode(&self, b: &LogBlock, path: &Path, partition: &str) -> Result<Vec<RecordBatch>, SourceError> {
        let mut out = Vec::new();
        self.decode_each(b, path, partition, &mut |x| {
            out.push(x);
            Ok(true)
        })?;
        Ok(out)
    }

    /// [`Self::decode`], batch by batch until `f` returns false.
    pub(super) fn decode_each(
        &self,
        b: &LogBlock,
        path: &Path,
        partition: &str,
        f: &mut dyn FnMut(RecordBatch) -> Result<bool, SourceError>,
    ) -> Result<(), SourceError> {
        let mut each = |x: RecordBatch| -> Result<bool, SourceError> {
            if self.merge.virtual_keys {
                f(with_virtual_keys(&x, &self.merge.key_fields, partition)?)
            } else {
                f(x)
            }
        };
        match b.block_type {
            BlockType::AvroData => log::avro_block_batches(b, path, &mut each),
            BlockType::ParquetData => log::parquet_block_batches(b, path, &mut each),
            other => Err(SourceError::Unsupported {
                message: format!(
                    "{}: log block type {other:?} at offset {} is not read by this build",
                    path.display(),
                    b.offset
                ),
            }),
        }
    }

    /// The log blocks one instant wrote to a file group, in write order (changelog mode).
    pub fn instant_blocks(
        &self,
        partition: &str,
        base_files: &[BaseFile],
        log_files: &[LogFile],
        at: &str,
        instant: &str,
    ) -> Result<Vec<InstantBlock>, SourceError> {
        let dir = partition_dir(&self.table.path, partition);
        let base = base_as_of(base_files, self.timeline, at, true);
        let mut out = Vec::new();
        let mut rolled_back = HashSet::new();
        let mut files = Vec::new();
        for l in self.slice_logs(base, log_files) {
            let path = dir.join(&l.name);
            let blocks = self.cache.log(&self.table.storage, &path, l.size, self.connector)?;
            for b in &blocks.0 {
                if b.block_type == BlockType::Command {
                    rolled_back.extend(b.header.get(&TARGET_INSTANT_TIME).cloned());
                }
            }
            files.push((blocks, path));
        }
        if rolled_back.contains(instant) {
            return Ok(out);
        }
        for (blocks, path) in &files {
            for b in blocks.0.iter().filter(|b| b.instant() == Some(instant)) {
                match b.block_type {
                    BlockType::Delete => out.push(InstantBlock::Delete(log::delete_block_keys(b, path)?)),
                    BlockType::Corrupt | BlockType::Command => {}
                    _ => out.push(InstantBlock::Data(self.decode(b, path, partition)?)),
                }
            }
        }
        Ok(out)
    }
}

/// A block one instant wrote (changelog mode): records with their `_hoodie_operation`, or keys.
pub enum InstantBlock {
    Data(Vec<RecordBatch>),
    Delete(Vec<log::DeletedKey>),
}

fn log_version(name: &str) -> u64 {
    name.split(".log.")
        .nth(1)
        .and_then(|v| v.split('_').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
