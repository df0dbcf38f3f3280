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

use super::log::{self, BlockType};
use super::slice::{BaseBatches, CachedLog, SliceReader, SliceState};
use crate::source::rows::conform;
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
    /// The base file's schema (its rows may all be left out by a key selection).
    pub(super) base_schema: Option<SchemaRef>,
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

pub(super) mod deletes;
mod index;
mod partial;
mod plan;
use deletes::{log_deletes, ordered_deletes, without_before_images};
use index::{soft, LogColumns, LogIndex, LogRecords, MergeColumns, Pos, Step, BASE_WON, HARD_DELETED, SOFT};

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
    /// Returns the rows read (base and log records). Three phases: the log records among
    /// themselves ([`LogColumns::index`]), the base file streamed past them
    /// ([`Self::stream_base`]), then the log winners ([`Self::emit_winners`]).
    pub fn run(mut self, out: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>) -> Result<u64, SourceError> {
        let Some(target) = self.target.clone() else {
            return Ok(0);
        };
        let merge = MergeColumns::of(&target, self.reader, &self.partition)?;
        let log = self.log_records(&target, &merge)?;
        // contents of log files read whole are not kept through the merge: a slice of many small
        // log files would hold them all (a second decode reads its blocks back from storage)
        self.cached = self
            .cached
            .iter()
            .map(|(c, p)| {
                (
                    Arc::new((
                        c.0.iter().map(|b| b.unloaded(&self.reader.table.storage, p)).collect(),
                        c.1,
                    )),
                    p.clone(),
                )
            })
            .collect();
        let mut rows_read: u64 = log.proj.iter().map(|b| b.num_rows() as u64).sum();
        let cols = LogColumns::new(&log, &target, &merge)?;
        if let Some(rule) = self.reader.merge.partial.clone() {
            return Ok(rows_read + self.run_partial(&rule, &log, &cols, &target, &merge, out)?);
        }
        let mut index = cols.index(&log.steps)?;
        if let Some(base) = self.base.take() {
            rows_read += self.stream_base(base, &target, &merge, &cols, &mut index, out)?;
        }
        let mut picks: Vec<Pos> = index
            .table
            .iter()
            .filter(|st| st.flags & (BASE_WON | SOFT) == 0 && st.cur != HARD_DELETED)
            .map(|st| index.texts.pos(st.cur))
            .collect();
        picks.sort_unstable();
        // the index and the log's merge columns go before the winners are decoded again
        drop(index);
        drop(cols);
        self.emit_winners(log, &picks, &target, out)?;
        Ok(rows_read)
    }

    /// The log blocks in commit order, as merge columns (and, while they are small, the decoded
    /// rows too), which records are deletes marked; a delete block's entries as records where
    /// event-time ordering applies to them, else as a delete step (see [`deletes`]).
    fn log_records(&self, target: &SchemaRef, merge: &MergeColumns) -> Result<LogRecords, SourceError> {
        let mut log = LogRecords {
            proj: Vec::new(),
            deleted: Vec::new(),
            from_delete_block: Vec::new(),
            block_of: Vec::new(),
            steps: Vec::new(),
            full: Some(Vec::new()),
        };
        let proj_schema = merge.schema(target)?;
        // small logs keep their decoded rows (no second decode) up to a fixed share of the
        // budget; past it they are all dropped and the winners decoded again (a column-wise
        // merge keeps them up to the whole budget, see [`partial`])
        let keep_limit = match self.reader.merge.partial {
            Some(_) => self.reader.spill.budget,
            None => self.reader.spill.budget / KEEP_SHARE,
        };
        let mut full_bytes = 0;
        for k in 0..self.blocks.len() {
            let (b, path) = self.block(k);
            match b.block_type {
                BlockType::Delete => {
                    let keys = log::delete_block_keys(b, path)?;
                    let (ordered, by_commit) = ordered_deletes(keys, &proj_schema, self.reader.merge)?;
                    if let Some(p) = ordered {
                        let n = p.num_rows();
                        if let Some(f) = log.full.as_mut() {
                            f.push(RecordBatch::new_empty(target.clone()));
                        }
                        log.steps.push(Step::Data(log.proj.len()));
                        log.proj.push(p);
                        log.deleted.push(Some(BooleanArray::from(vec![true; n])));
                        log.from_delete_block.push(true);
                        log.block_of.push(k);
                    }
                    if !by_commit.is_empty() {
                        log.steps.push(Step::Delete(by_commit));
                    }
                }
                BlockType::Corrupt => {}
                _ => self.decode_each(k, &mut |x| {
                    // changelog-mode before-images take no part; deletes keep their ordering value
                    let (rows, deleted) = log_deletes(&conform(&self.reader.restrict(x)?, target)?, self.reader.merge)?;
                    let p = merge.project(&rows)?;
                    if let Some(f) = log.full.as_mut() {
                        full_bytes += rows.get_array_memory_size();
                        f.push(rows);
                        if full_bytes > keep_limit {
                            log.full = None;
                        }
                    }
                    log.steps.push(Step::Data(log.proj.len()));
                    log.proj.push(p);
                    log.deleted.push(deleted);
                    log.from_delete_block.push(false);
                    log.block_of.push(k);
                    Ok(true)
                })?,
            }
        }
        Ok(log)
    }

    /// The base file, streamed: a base row stays unless a log record outranks it (then the
    /// key's slot is marked [`BASE_WON`] where the base row won). Returns the base rows read.
    fn stream_base(
        &self,
        base: std::iter::Peekable<BaseBatches>,
        target: &SchemaRef,
        merge: &MergeColumns,
        log: &LogColumns,
        index: &mut LogIndex<'_>,
        out: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        let mut rows_read = 0;
        for b in base {
            let (b, p, bk, bd) = self.base_batch(b, target, merge)?;
            rows_read += b.num_rows() as u64;
            if index.is_empty() {
                // nothing logged to merge with (copy-on-write, a base file alone): a base row stays
                // unless its key is null or it is soft-deleted, and no mask is built where none is
                let keep = (bk.null_count() > 0 || bd.is_some())
                    .then(|| BooleanArray::from_iter((0..b.num_rows()).map(|r| Some(bk.is_valid(r) && !soft(&bd, r)))));
                if let Some(kept) = keep_rows(b, keep)? {
                    out(kept)?;
                }
                continue;
            }
            let bord = log.ord_conv.as_ref().map(|c| c.rows(&p)).transpose()?;
            let keep: BooleanArray = (0..b.num_rows())
                .map(|r| {
                    if !bk.is_valid(r) {
                        return Some(false);
                    }
                    let (Some(st), texts) = index.find_mut(bk.value(r)) else {
                        return Some(!soft(&bd, r));
                    };
                    let log_wins = match (&log.ord_rows, &bord) {
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
            if let Some(kept) = keep_rows(b, Some(keep))? {
                out(kept)?;
            }
        }
        Ok(rows_read)
    }

    /// A base batch conformed to the slice's schema (virtual keys derived), with its merge
    /// columns, record keys and soft-delete flags.
    #[allow(clippy::type_complexity)]
    fn base_batch(
        &self,
        b: Result<RecordBatch, SourceError>,
        target: &SchemaRef,
        merge: &MergeColumns,
    ) -> Result<(RecordBatch, RecordBatch, StringArray, Option<BooleanArray>), SourceError> {
        let b = conform(&self.with_keys(b?)?, target)?;
        let p = merge.project(&b)?;
        let (bk, bd) = (merge.key(&p)?, merge.deleted(&p));
        Ok((b, p, bk, bd))
    }

    /// The winning log records (`picks`, sorted), in log order: from the kept rows, or their
    /// blocks decoded again, batch by batch.
    fn emit_winners(
        &self,
        log: LogRecords,
        picks: &[Pos],
        target: &SchemaRef,
        out: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let gather = |rows: RecordBatch, picks: &[Pos]| -> Result<RecordBatch, SourceError> {
            if picks.len() == rows.num_rows() {
                return Ok(rows);
            }
            let idx = arrow_array::UInt32Array::from_iter_values(picks.iter().map(|p| p.1));
            arrow::compute::take_record_batch(&rows, &idx).map_err(SourceError::arrow("gathering merged rows"))
        };
        if let Some(full) = log.full {
            for chunk in picks.chunk_by(|a, b| a.0 == b.0) {
                out(gather(full[chunk[0].0 as usize].clone(), chunk)?)?;
            }
            return Ok(());
        }
        let block_of = log.block_of;
        let mut picks = picks;
        while let Some(&(first, _)) = picks.first() {
            let k = block_of[first as usize];
            let mut src = block_of.iter().position(|&x| x == k).expect("the pick's block") as u32;
            self.decode_each(k, &mut |x| {
                let n = picks.iter().take_while(|p| p.0 == src).count();
                if n > 0 {
                    let rows = without_before_images(&conform(&self.reader.restrict(x)?, target)?)?;
                    out(gather(rows, &picks[..n])?)?;
                    picks = &picks[n..];
                }
                src += 1;
                // stop once the block's picks are out
                Ok(picks.first().is_some_and(|p| block_of[p.0 as usize] == k))
            })?;
            if picks.first().is_some_and(|p| block_of[p.0 as usize] == k) {
                return Err(SourceError::Unreadable {
                    why: crate::source::Unreadable::Damaged,
                    message: format!(
                        "{}: a log block decoded differently the second time",
                        self.block(k).1.display()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The rows of `b` that `keep` keeps (`None`: all of them); `None` where none is kept.
fn keep_rows(b: RecordBatch, keep: Option<BooleanArray>) -> Result<Option<RecordBatch>, SourceError> {
    let kept = match keep {
        Some(k) if k.true_count() < b.num_rows() => {
            arrow::compute::filter_record_batch(&b, &k).map_err(SourceError::arrow("filtering base rows"))?
        }
        _ => b,
    };
    Ok((kept.num_rows() > 0).then_some(kept))
}

#[cfg(test)]
mod tests;
