//! The streaming merge of one file slice (planned by [`SliceMerge::plan`]): log records merged
//! among themselves first, then the base file streamed batch by batch past them, then the winning
//! log records. Memory: the block layout of the slice's log files (a file of at most 4 MiB is
//! read whole, its contents held only until its records are first decoded), the merge columns of the log records (key, ordering fields,
//! soft-delete flag) and an index of them, one decoded batch of a log block (8,192 records) and
//! one base batch, whatever the file group's size. Full log rows are held only while they are
//! small (a fixed share of the budget); past that the winners are decoded a second time from
//! their blocks (which large log files leave in storage, see [`super::log`]), so nothing grows
//! with the log but its keys and nothing needs spilling; a block without winners is not decoded
//! again.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use hashbrown::hash_table::Entry;

use super::log::{self, BlockType};
use super::slice::{split_operations, BaseBatches, CachedLog, MergeMode, SliceReader, SliceState};
use crate::source::rows::{conform, RowKeys};
use crate::source::SourceError;

/// The merge of one file slice, planned by [`SliceMerge::plan`] and run by [`SliceMerge::run`]:
/// log records are merged first (held as merge columns only), then the base file streams through
/// batch by batch, then the winning log records follow in log order, decoded again from their
/// blocks. The output order is the same as merging everything at once in
/// source order: base rows, then log rows in commit order.
pub struct SliceMerge<'a> {
    pub(super) reader: &'a SliceReader<'a>,
    pub(super) partition: String,
    pub(super) base: Option<std::iter::Peekable<BaseBatches>>,
    /// (file, block) of the log blocks taking part, in commit order.
    pub(super) blocks: Vec<(usize, usize)>,
    pub(super) cached: Vec<(CachedLog, PathBuf)>,
    /// The schema of the newest data block's records (read from its first batch while planning).
    pub(super) last_schema: Option<SchemaRef>,
    pub(super) target: Option<SchemaRef>,
    /// The newest file that contributed (for `source.file`).
    pub file: Option<String>,
    pub bytes_read: u64,
}

/// Decoded log rows are kept (not decoded again) while they take at most `budget / KEEP_SHARE`
/// (8 MiB of the default budget per reader thread).
const KEEP_SHARE: usize = 16;

mod index;
mod plan;
use index::{KeyTexts, LogIndex, Pos, Slot, BASE_WON, DELETED_KEY, HARD_DELETED, RESET, SOFT};

impl SliceMerge<'_> {
    /// Merge, keeping every winning row in memory (change units diffed in memory, changelog mode).
    pub fn collect(self) -> Result<SliceState, SourceError> {
        let (file, bytes_read) = (self.file.clone(), self.bytes_read);
        let mut batches = Vec::new();
        let rows_read = self.run(&mut |b| {
            batches.push(b);
            Ok(())
        })?;
        Ok(SliceState {
            batches,
            file,
            rows_read,
            bytes_read,
        })
    }

    /// Merge, handing the winning rows to `out` in batches (conformed to [`Self::schema`]).
    /// Returns the rows read (base and log records).
    pub fn run(mut self, out: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>) -> Result<u64, SourceError> {
        let Some(target) = self.target.clone() else {
            return Ok(0);
        };
        let reader = self.reader;
        let key_idx = target
            .index_of("_hoodie_record_key")
            .map_err(|_| SourceError::Unreadable {
                message: format!(
                    "{}: file group in `{}` has no _hoodie_record_key column",
                    reader.table.path.display(),
                    self.partition
                ),
            })?;
        let ord_idx: Vec<usize> = if reader.merge.mode == MergeMode::EventTime {
            reader
                .merge
                .ordering
                .iter()
                .filter_map(|f| target.index_of(f).ok())
                .collect()
        } else {
            Vec::new()
        };
        let del_idx = target.index_of("_hoodie_is_deleted").ok();
        let mut merge_cols = vec![key_idx];
        merge_cols.extend(&ord_idx);
        merge_cols.extend(del_idx);
        // log records in commit order; a delete block is a marker with its keys
        enum Step {
            /// One decoded batch of log records (an index into `proj`).
            Data(usize),
            Delete(Vec<log::DeletedKey>),
        }
        // only the merge columns of log records are kept (and decoded rows while they are small);
        // otherwise winning rows are decoded again from their blocks at the end
        let mut proj: Vec<RecordBatch> = Vec::new();
        let mut block_of: Vec<usize> = Vec::new();
        let mut steps = Vec::new();
        // small logs keep their decoded rows (no second decode) up to a fixed share of the
        // budget; past it they are all dropped and the winners decoded again
        let keep_limit = reader.spill.budget / KEEP_SHARE;
        let (mut full, mut full_bytes): (Option<Vec<RecordBatch>>, usize) = (Some(Vec::new()), 0);
        for k in 0..self.blocks.len() {
            let (b, path) = self.block(k);
            match b.block_type {
                BlockType::Delete => steps.push(Step::Delete(log::delete_block_keys(b, path)?)),
                BlockType::Corrupt => {}
                _ => self.decode_each(k, &mut |x| {
                    // changelog-mode records: before-images take no part, `D` deletes
                    let (upserts, deletes) = split_operations(&x)?;
                    let rows = conform(&upserts, &target)?;
                    let p = rows.project(&merge_cols).map_err(SourceError::arrow("merge columns"))?;
                    if let Some(f) = full.as_mut() {
                        full_bytes += rows.get_array_memory_size();
                        f.push(rows);
                        if full_bytes > keep_limit {
                            full = None;
                        }
                    }
                    steps.push(Step::Data(proj.len()));
                    proj.push(p);
                    block_of.push(k);
                    if !deletes.is_empty() {
                        steps.push(Step::Delete(deletes));
                    }
                    Ok(true)
                })?,
            }
        }
        // contents of log files read whole are not kept through the merge: a slice of many small
        // log files would hold them all (a second decode reads its blocks back from storage)
        self.cached = self
            .cached
            .iter()
            .map(|(c, p)| (Arc::new((c.0.iter().map(|b| b.unloaded(p)).collect(), c.1)), p.clone()))
            .collect();
        let mut rows_read: u64 = proj.iter().map(|b| b.num_rows() as u64).sum();
        let proj_schema = proj
            .first()
            .map(|b| b.schema())
            .unwrap_or_else(|| Arc::new(target.project(&merge_cols).expect("merge columns")));
        let ord_conv = if ord_idx.is_empty() {
            None
        } else {
            Some(RowKeys::new(&proj_schema, Some((1..=ord_idx.len()).collect()))?)
        };
        let ord_rows = match &ord_conv {
            Some(c) => Some(proj.iter().map(|b| c.rows(b)).collect::<Result<Vec<_>, _>>()?),
            None => None,
        };
        let key_of = |b: &RecordBatch| -> Result<StringArray, SourceError> {
            b.column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .cloned()
                .ok_or_else(|| SourceError::Unreadable {
                    message: "_hoodie_record_key is not a string column".into(),
                })
        };
        let deleted_of = |b: &RecordBatch| -> Option<BooleanArray> {
            del_idx.and_then(|_| {
                b.column(b.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .cloned()
            })
        };
        let keys: Vec<StringArray> = proj.iter().map(key_of).collect::<Result<_, _>>()?;
        let deleted: Vec<Option<BooleanArray>> = proj.iter().map(deleted_of).collect();
        let soft = |d: &Option<BooleanArray>, r: usize| d.as_ref().is_some_and(|c| c.is_valid(r) && c.value(r));
        // 1. the log records among themselves, from an unknown base
        let deleted_keys: Vec<&str> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Delete(d) => Some(d.iter().map(|k| k.record_key.as_str())),
                Step::Data(_) => None,
            })
            .flatten()
            .collect();
        let mut index = LogIndex::new(&keys, deleted_keys)?;
        let mut next_deleted = DELETED_KEY;
        let outranks = |new: Pos, old: u32, texts: &KeyTexts<'_>| match &ord_rows {
            Some(ord) => {
                let o = texts.pos(old);
                ord[new.0 as usize].row(new.1 as usize) >= ord[o.0 as usize].row(o.1 as usize)
            }
            None => true,
        };
        for step in &steps {
            match step {
                Step::Data(b) => {
                    let b = *b;
                    for r in 0..proj[b].num_rows() {
                        if !keys[b].is_valid(r) {
                            continue;
                        }
                        let at = (b as u32, r as u32);
                        let id = index.id(at);
                        let flags = if soft(&deleted[b], r) { SOFT } else { 0 };
                        match index.entry(keys[b].value(r)) {
                            (Entry::Vacant(v), _) => {
                                v.insert(Slot {
                                    key: id,
                                    cur: id,
                                    flags,
                                });
                            }
                            (Entry::Occupied(mut o), texts) => {
                                let st = o.get_mut();
                                if st.cur == HARD_DELETED || outranks(at, st.cur, texts) {
                                    st.cur = id;
                                    st.flags = (st.flags & RESET) | flags;
                                }
                            }
                        }
                    }
                }
                Step::Delete(keys_deleted) => {
                    for d in keys_deleted {
                        let key = next_deleted;
                        next_deleted += 1;
                        match index.entry(d.record_key.as_str()).0 {
                            Entry::Occupied(mut o) => {
                                let st = o.get_mut();
                                st.cur = HARD_DELETED;
                                st.flags = RESET;
                            }
                            // the key may be in the base file: it is deleted there too
                            Entry::Vacant(v) => {
                                v.insert(Slot {
                                    key,
                                    cur: HARD_DELETED,
                                    flags: RESET,
                                });
                            }
                        }
                    }
                }
            }
        }
        // 2. the base file, streamed: a base row stays unless a log record outranks it
        if let Some(base) = self.base.take() {
            for b in base {
                let b = conform(&self.with_keys(b?)?, &target)?;
                rows_read += b.num_rows() as u64;
                let p = b.project(&merge_cols).map_err(SourceError::arrow("merge columns"))?;
                let bk = key_of(&p)?;
                let bd = deleted_of(&p);
                let bord = match &ord_conv {
                    Some(c) => Some(c.rows(&p)?),
                    None => None,
                };
                let keep: BooleanArray = (0..b.num_rows())
                    .map(|r| {
                        if !bk.is_valid(r) {
                            return Some(false);
                        }
                        let (Some(st), texts) = index.find_mut(bk.value(r)) else {
                            return Some(!soft(&bd, r));
                        };
                        if st.flags & RESET != 0 {
                            return Some(false);
                        }
                        let log_wins = match (&ord_rows, &bord) {
                            (Some(ord), Some(bo)) if st.cur != HARD_DELETED => {
                                let o = texts.pos(st.cur);
                                ord[o.0 as usize].row(o.1 as usize) >= bo.row(r)
                            }
                            _ => true,
                        };
                        if log_wins {
                            return Some(false);
                        }
                        st.flags |= BASE_WON;
                        Some(!soft(&bd, r))
                    })
                    .collect();
                let kept = if keep.true_count() == b.num_rows() {
                    b
                } else {
                    arrow::compute::filter_record_batch(&b, &keep).map_err(SourceError::arrow("filtering base rows"))?
                };
                if kept.num_rows() > 0 {
                    out(kept)?;
                }
            }
        }
        // 3. the winning log records, in log order: their blocks decoded again, batch by batch
        let mut picks: Vec<Pos> = index
            .table
            .iter()
            .filter(|st| st.flags & (BASE_WON | SOFT) == 0 && st.cur != HARD_DELETED)
            .map(|st| index.texts.pos(st.cur))
            .collect();
        picks.sort_unstable();
        drop(index);
        drop(keys);
        drop(deleted);
        drop(ord_rows);
        let gather = |rows: RecordBatch, picks: &[Pos]| -> Result<RecordBatch, SourceError> {
            if picks.len() == rows.num_rows() {
                return Ok(rows);
            }
            let idx = arrow_array::UInt32Array::from_iter_values(picks.iter().map(|p| p.1));
            arrow::compute::take_record_batch(&rows, &idx).map_err(SourceError::arrow("gathering merged rows"))
        };
        if let Some(full) = full {
            for chunk in picks.chunk_by(|a, b| a.0 == b.0) {
                out(gather(full[chunk[0].0 as usize].clone(), chunk)?)?;
            }
            return Ok(rows_read);
        }
        let mut picks = picks.as_slice();
        while let Some(&(first, _)) = picks.first() {
            let k = block_of[first as usize];
            let mut src = block_of.iter().position(|&x| x == k).expect("the pick's block") as u32;
            self.decode_each(k, &mut |x| {
                let (upserts, _) = split_operations(&x)?;
                let n = picks.iter().take_while(|p| p.0 == src).count();
                if n > 0 {
                    out(gather(conform(&upserts, &target)?, &picks[..n])?)?;
                    picks = &picks[n..];
                }
                src += 1;
                // stop once the block's picks are out
                Ok(picks.first().is_some_and(|p| block_of[p.0 as usize] == k))
            })?;
            if picks.first().is_some_and(|p| block_of[p.0 as usize] == k) {
                return Err(SourceError::Unreadable {
                    message: format!(
                        "{}: a log block decoded differently the second time",
                        self.block(k).1.display()
                    ),
                });
            }
        }
        Ok(rows_read)
    }
}

#[cfg(test)]
mod tests;
