//! The merged state of a file group as of a point on the timeline: its base file plus the log
//! blocks of completed instants (rolled-back blocks dropped), merged by record key with the
//! table's merge mode: commit-time ordering (later write wins) or event-time ordering (the
//! greater ordering value wins, ties to the later write; a late record with a lower value loses).
//! Hard deletes (delete blocks) always win; soft deletes (`_hoodie_is_deleted = true`) take part
//! in ordering and then remove the row.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::SchemaRef;

use super::files::{base_as_of, partition_dir, read_base, with_virtual_keys, BaseFile, LogFile, LAYOUT_META_COLUMNS};
use super::log::{self, BlockType, LogBlock, COMMAND_BLOCK_TYPE, TARGET_INSTANT_TIME};
use super::timeline::{TableConfig, Timeline};
use super::spill::{SpillConfig, Sources};
use crate::source::rows::{conform, nullable, RowKeys};
use crate::source::SourceError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMode {
    CommitTime,
    EventTime,
}

/// How a table merges records, from `hoodie.properties`.
#[derive(Debug, Clone)]
pub struct MergeConfig {
    pub mode: MergeMode,
    pub ordering: Vec<String>,
    pub virtual_keys: bool,
    pub key_fields: Vec<String>,
}

impl MergeConfig {
    pub fn from_table(t: &TableConfig) -> Self {
        let p = |k: &str| t.props.get(k).map(String::as_str);
        let payload = p("hoodie.compaction.payload.class").or(p("hoodie.table.payload.class")).unwrap_or("");
        let mode = match p("hoodie.record.merge.mode") {
            Some("EVENT_TIME_ORDERING") => MergeMode::EventTime,
            Some("COMMIT_TIME_ORDERING") => MergeMode::CommitTime,
            _ if payload.ends_with("DefaultHoodieRecordPayload")
                || payload.ends_with("EventTimeAvroPayload")
                || payload.ends_with("PartialUpdateAvroPayload") =>
            {
                MergeMode::EventTime
            }
            _ => MergeMode::CommitTime,
        };
        let ordering = p("hoodie.table.ordering.fields")
            .or(p("hoodie.table.precombine.field"))
            .map(|s| s.split(',').map(|f| f.trim().to_string()).filter(|f| !f.is_empty()).collect())
            .unwrap_or_default();
        Self {
            mode,
            ordering,
            virtual_keys: p("hoodie.populate.meta.fields") == Some("false"),
            key_fields: t.key_fields.clone(),
        }
    }
}

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
/// are read with just those columns (key pre-pass of a full scan).
#[derive(Default)]
pub struct FileCache {
    only: Option<Vec<String>>,
    base: Mutex<HashMap<PathBuf, Arc<(SchemaRef, Vec<RecordBatch>, u64)>>>,
    logs: Mutex<HashMap<PathBuf, Arc<(Vec<LogBlock>, u64)>>>,
}

impl FileCache {
    pub fn projected(only: Vec<String>) -> Self {
        Self { only: Some(only), ..Default::default() }
    }

    fn base(&self, path: &Path) -> Result<Arc<(SchemaRef, Vec<RecordBatch>, u64)>, SourceError> {
        if let Some(v) = self.base.lock().expect("cache lock").get(path) {
            return Ok(v.clone());
        }
        let v = Arc::new(read_base(path, self.only.as_deref())?);
        self.base.lock().expect("cache lock").insert(path.into(), v.clone());
        Ok(v)
    }

    fn log(&self, path: &Path, connector: &str) -> Result<Arc<(Vec<LogBlock>, u64)>, SourceError> {
        if let Some(v) = self.logs.lock().expect("cache lock").get(path) {
            return Ok(v.clone());
        }
        let size = crate::storage::size(path).unwrap_or(0);
        let v = Arc::new((log::read_blocks(path, connector)?, size));
        self.logs.lock().expect("cache lock").insert(path.into(), v.clone());
        Ok(v)
    }
}

pub struct SliceReader<'a> {
    pub spill: SpillConfig,
    pub table: &'a TableConfig,
    pub timeline: &'a Timeline,
    pub merge: &'a MergeConfig,
    pub cache: &'a FileCache,
    pub connector: &'a str,
}

/// A record source while merging: (batch index, row).
type Src = (usize, usize);

enum Winner {
    Row(Src),
    /// Soft delete: keeps its ordering value for later comparisons.
    SoftDeleted(Src),
    HardDeleted,
}

impl SliceReader<'_> {
    fn visible(&self, instant: &str, at: &str, inclusive: bool) -> bool {
        match self.timeline.completed_order(instant) {
            Some(o) => if inclusive { o.as_str() <= at } else { o.as_str() < at },
            None => false,
        }
    }

    /// The log files of the slice that starts at `base` (all of them for a log-only group).
    fn slice_logs<'l>(&self, base: Option<&BaseFile>, logs: &'l [LogFile]) -> Vec<&'l LogFile> {
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
        out.sort_by(|a, b| (&a.instant, log_version(&a.name), &a.name).cmp(&(&b.instant, log_version(&b.name), &b.name)));
        out
    }

    /// A data block's records as Arrow (virtual keys derived), `_hoodie_operation` kept.
    fn decode(&self, b: &LogBlock, path: &Path, partition: &str) -> Result<Vec<RecordBatch>, SourceError> {
        let batches = match b.block_type {
            BlockType::AvroData => log::avro_block_batches(b, path)?,
            BlockType::ParquetData => log::parquet_block_batches(b, path)?,
            other => {
                return Err(SourceError::Unsupported {
                    message: format!("{}: log block type {other:?} at offset {} is not read by this build", path.display(), b.offset),
                })
            }
        };
        if self.merge.virtual_keys {
            return batches.iter().map(|x| with_virtual_keys(x, &self.merge.key_fields, partition)).collect();
        }
        Ok(batches)
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
            let blocks = self.cache.log(&path, self.connector)?;
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

    /// The merged state of one file group as of `at` (inclusive or not). `None`: no visible slice.
    pub fn state(
        &self,
        partition: &str,
        base_files: &[BaseFile],
        log_files: &[LogFile],
        at: &str,
        inclusive: bool,
    ) -> Result<Option<SliceState>, SourceError> {
        let dir = partition_dir(&self.table.path, partition);
        let base = base_as_of(base_files, self.timeline, at, inclusive);
        let logs = self.slice_logs(base, log_files);
        let mut base_raw: Vec<RecordBatch> = Vec::new();
        let mut state = SliceState { batches: Vec::new(), file: None, rows_read: 0, bytes_read: 0 };
        if let Some(b) = base {
            let (_, batches, size) = &*self.cache.base(&dir.join(&b.name))?;
            base_raw.extend(batches.iter().cloned());
            state.bytes_read += size;
            state.file = Some(b.name.clone());
        }
        // blocks of visible instants, rollbacks applied, in commit order
        let mut blocks: Vec<(String, usize, &LogBlock, &Path)> = Vec::new();
        let mut rolled_back: HashSet<String> = HashSet::new();
        let mut cached = Vec::new();
        for l in &logs {
            let path = dir.join(&l.name);
            cached.push((self.cache.log(&path, self.connector)?, path, l.name.clone()));
        }
        for (i, (c, path, name)) in cached.iter().enumerate() {
            state.bytes_read += c.1;
            for b in &c.0 {
                let Some(instant) = b.instant() else { continue };
                if b.block_type == BlockType::Command {
                    if b.header.get(&COMMAND_BLOCK_TYPE).map(String::as_str) == Some("0") {
                        if let Some(t) = b.header.get(&TARGET_INSTANT_TIME) {
                            rolled_back.insert(t.clone());
                        }
                    }
                    continue;
                }
                if !self.visible(instant, at, inclusive) {
                    continue;
                }
                let order = self.timeline.completed_order(instant).unwrap_or_default();
                blocks.push((order, i, b, path.as_path()));
                if state.file.as_deref() != Some(name.as_str()) && b.block_type != BlockType::Corrupt {
                    state.file = Some(name.clone());
                }
            }
        }
        blocks.retain(|(_, _, b, _)| b.instant().map(|i| !rolled_back.contains(i)).unwrap_or(true));
        blocks.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        if base.is_none() && blocks.is_empty() {
            return Ok(None);
        }
        let decode = |b: &LogBlock, path: &Path| self.decode(b, path, partition);
        let is_data = |b: &LogBlock| !matches!(b.block_type, BlockType::Delete | BlockType::Corrupt);
        let last_data = blocks.iter().rposition(|(_, _, b, _)| is_data(b));
        let mut last_batches = match last_data {
            Some(i) => Some(decode(blocks[i].2, blocks[i].3)?),
            None => None,
        };
        let mut base_raw = base_raw;
        if self.merge.virtual_keys {
            base_raw = base_raw.iter().map(|x| with_virtual_keys(x, &self.merge.key_fields, partition)).collect::<Result<_, _>>()?;
        }
        let newest = last_batches.as_ref().and_then(|v| v.first()).or(base_raw.first());
        let Some(newest) = newest else { return Ok(Some(state)) };
        let target = nullable(&newest.schema(), LAYOUT_META_COLUMNS);
        let key_idx = target.index_of("_hoodie_record_key").map_err(|_| SourceError::Unreadable {
            message: format!("{}: file group in `{partition}` has no _hoodie_record_key column", self.table.path.display()),
        })?;
        let ord_idx: Vec<usize> = if self.merge.mode == MergeMode::EventTime {
            self.merge.ordering.iter().filter_map(|f| target.index_of(f).ok()).collect()
        } else {
            Vec::new()
        };
        let del_idx = target.index_of("_hoodie_is_deleted").ok();
        let mut merge_cols = vec![key_idx];
        merge_cols.extend(&ord_idx);
        merge_cols.extend(del_idx);
        let mut sources = Sources::new(self.spill.clone(), merge_cols);
        for b in &base_raw {
            sources.push(conform(b, &target)?, false)?;
        }
        let base_sources = sources.len();
        // log records in commit order; a delete block is a marker with its keys
        enum Step {
            Data(std::ops::Range<usize>),
            Delete(Vec<log::DeletedKey>),
        }
        let mut steps = Vec::new();
        for (i, (_, _, b, path)) in blocks.iter().enumerate() {
            match b.block_type {
                BlockType::Delete => steps.push(Step::Delete(log::delete_block_keys(b, path)?)),
                BlockType::Corrupt => {}
                _ => {
                    let batches = if Some(i) == last_data { last_batches.take().unwrap_or_default() } else { decode(b, path)? };
                    for x in batches {
                        // changelog-mode records: before-images take no part, `D` deletes
                        let (upserts, deletes) = split_operations(&x)?;
                        let start = sources.len();
                        sources.push(conform(&upserts, &target)?, true)?;
                        steps.push(Step::Data(start..sources.len()));
                        if !deletes.is_empty() {
                            steps.push(Step::Delete(deletes));
                        }
                    }
                }
            }
        }
        state.rows_read = sources.rows();
        let proj = sources.merge_batches();
        let ord_rows = if ord_idx.is_empty() {
            None
        } else {
            let conv = RowKeys::new(&proj[0].schema(), Some((1..=ord_idx.len()).collect()))?;
            Some(proj.iter().map(|b| conv.rows(b)).collect::<Result<Vec<_>, _>>()?)
        };
        let keys: Vec<&StringArray> = proj
            .iter()
            .map(|b| b.column(0).as_any().downcast_ref::<StringArray>())
            .collect::<Option<_>>()
            .ok_or_else(|| SourceError::Unreadable { message: "_hoodie_record_key is not a string column".into() })?;
        let deleted_col: Vec<Option<&BooleanArray>> = proj
            .iter()
            .map(|b| del_idx.and_then(|_| b.column(b.num_columns() - 1).as_any().downcast_ref::<BooleanArray>()))
            .collect();
        let mut m = Merger { keys, ord_rows, deleted_col, winners: HashMap::new() };
        for b in 0..base_sources {
            for r in 0..proj[b].num_rows() {
                m.offer((b, r));
            }
        }
        for step in &steps {
            match step {
                Step::Data(range) => {
                    for b in range.clone() {
                        for r in 0..proj[b].num_rows() {
                            m.offer((b, r));
                        }
                    }
                }
                Step::Delete(keys_deleted) => {
                    for d in keys_deleted {
                        m.hard_delete(&d.record_key);
                    }
                }
            }
        }
        let mut picks: Vec<Src> = m
            .winners
            .values()
            .filter_map(|w| match w {
                Winner::Row(src) => Some(*src),
                _ => None,
            })
            .collect();
        // output in source order: deterministic, and spilled batches are read back one at a time
        picks.sort_unstable();
        state.batches = sources.take(&picks)?;
        Ok(Some(state))
    }
}

/// A block one instant wrote (changelog mode): records with their `_hoodie_operation`, or keys.
pub enum InstantBlock {
    Data(Vec<RecordBatch>),
    Delete(Vec<log::DeletedKey>),
}

/// Split log records by `_hoodie_operation`: upserts (`I`, `U`, none) and the keys of `D` records;
/// `-U` before-images are dropped.
fn split_operations(batch: &RecordBatch) -> Result<(RecordBatch, Vec<log::DeletedKey>), SourceError> {
    let Some(ops) = batch.column_by_name("_hoodie_operation").and_then(|c| c.as_any().downcast_ref::<StringArray>()) else {
        return Ok((batch.clone(), Vec::new()));
    };
    let keys = batch.column_by_name("_hoodie_record_key").and_then(|c| c.as_any().downcast_ref::<StringArray>());
    let mut deletes = Vec::new();
    let keep: BooleanArray = (0..batch.num_rows())
        .map(|i| {
            let op = if ops.is_valid(i) { ops.value(i) } else { "" };
            if op == "D" {
                if let Some(k) = keys.filter(|k| k.is_valid(i)) {
                    deletes.push(log::DeletedKey { record_key: k.value(i).to_string(), partition_path: None });
                }
            }
            Some(op != "-U" && op != "D")
        })
        .collect();
    let kept = arrow::compute::filter_record_batch(batch, &keep).map_err(SourceError::arrow("filtering log records"))?;
    Ok((kept, deletes))
}

struct Merger<'k> {
    keys: Vec<&'k StringArray>,
    ord_rows: Option<Vec<arrow::row::Rows>>,
    deleted_col: Vec<Option<&'k BooleanArray>>,
    winners: HashMap<&'k str, Winner>,
}

impl<'k> Merger<'k> {
    fn offer(&mut self, src: Src) {
        let (b, r) = src;
        if !self.keys[b].is_valid(r) {
            return;
        }
        let k = self.keys[b].value(r);
        let wins = match (self.winners.get(k), &self.ord_rows) {
            (Some(Winner::Row(old) | Winner::SoftDeleted(old)), Some(ord)) => ord[b].row(r) >= ord[old.0].row(old.1),
            _ => true,
        };
        if wins {
            let soft = self.deleted_col[b].map(|c| c.is_valid(r) && c.value(r)).unwrap_or(false);
            self.winners.insert(k, if soft { Winner::SoftDeleted(src) } else { Winner::Row(src) });
        }
    }

    fn hard_delete(&mut self, key: &str) {
        if let Some(k) = self.winners.get_key_value(key).map(|(k, _)| *k) {
            self.winners.insert(k, Winner::HardDeleted);
        }
    }
}

fn log_version(name: &str) -> u64 {
    name.split(".log.").nth(1).and_then(|v| v.split('_').next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

