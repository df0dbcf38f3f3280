//! Planning one file slice's merge: which base file and log blocks take part (visible instants,
//! rollbacks applied, in commit order), the slice's schema and its newest file. Nothing is merged
//! here.

use std::collections::HashSet;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::super::files::{base_as_of, partition_dir, with_virtual_keys, BaseFile, LogFile, LAYOUT_META_COLUMNS};
use super::super::log::{BlockType, LogBlock, COMMAND_BLOCK_TYPE, TARGET_INSTANT_TIME};
use super::super::slice::{CachedLog, SliceReader};
use super::SliceMerge;
use crate::source::rows::nullable;
use crate::source::SourceError;

impl<'a> SliceMerge<'a> {
    /// Plan the merge of one file group as of `at`: which base file and log blocks take part, the
    /// slice's schema and newest file. Nothing is merged yet. `None`: no visible slice.
    pub fn plan(
        reader: &'a SliceReader<'a>,
        partition: &str,
        base_files: &[BaseFile],
        log_files: &[LogFile],
        at: &str,
        inclusive: bool,
    ) -> Result<Option<Self>, SourceError> {
        let (dir, storage) = (partition_dir(&reader.table.path, partition), &reader.table.storage);
        let base = base_as_of(base_files, reader.timeline, at, inclusive);
        let logs = reader.slice_logs(base, log_files);
        let mut file = None;
        let mut bytes_read = 0;
        let mut base_schema = None;
        let base_stream = match base {
            Some(b) => {
                let path = dir.join(&b.name);
                let (schema, batches, size) = match reader.keys {
                    Some(keys) => reader
                        .cache
                        .base_selected(storage, &path, keys, reader.virtual_keys(partition))?,
                    None => reader.cache.base(storage, &path)?,
                };
                bytes_read += size;
                file = Some(b.name.clone());
                base_schema = Some(schema);
                Some(batches)
            }
            None => None,
        };
        let mut cached = Vec::new();
        for l in &logs {
            let path = dir.join(&l.name);
            cached.push((
                reader.cache.log(storage, &path, l.size, reader.connector)?,
                path,
                l.name.clone(),
            ));
        }
        bytes_read += cached.iter().map(|(c, _, _)| c.1).sum::<u64>();
        let blocks = visible_blocks(reader, &cached, at, inclusive, &mut file);
        if base.is_none() && blocks.is_empty() {
            return Ok(None);
        }
        let mut merge = SliceMerge {
            reader,
            partition: partition.to_string(),
            base: base_stream.map(|b| b.peekable()),
            base_schema,
            blocks,
            cached: cached.into_iter().map(|(c, p, _)| (c, p)).collect(),
            last_schema: None,
            target: None,
            file,
            bytes_read,
        };
        merge.plan_schema()?;
        Ok(Some(merge))
    }
}

/// The blocks of `cached` logs (in slice order) of instants visible as of `at`, rollbacks
/// applied, in commit order, as (log, block) indexes; `file` becomes the newest log holding one.
fn visible_blocks(
    reader: &SliceReader<'_>,
    cached: &[(CachedLog, std::path::PathBuf, String)],
    at: &str,
    inclusive: bool,
    file: &mut Option<String>,
) -> Vec<(usize, usize)> {
    // (order, log, block)
    let mut blocks: Vec<(String, usize, usize)> = Vec::new();
    let mut rolled_back: HashSet<String> = HashSet::new();
    for (i, (c, _, name)) in cached.iter().enumerate() {
        for (j, b) in c.0.iter().enumerate() {
            let Some(instant) = b.instant() else { continue };
            if b.block_type == BlockType::Command {
                if b.header.get(&COMMAND_BLOCK_TYPE).map(String::as_str) == Some("0") {
                    if let Some(t) = b.header.get(&TARGET_INSTANT_TIME) {
                        rolled_back.insert(t.clone());
                    }
                }
                continue;
            }
            if !reader.visible(instant, at, inclusive) {
                continue;
            }
            let order = reader.timeline.completed_order(instant).unwrap_or_default();
            blocks.push((order, i, j));
            if file.as_deref() != Some(name.as_str()) && b.block_type != BlockType::Corrupt {
                *file = Some(name.clone());
            }
        }
    }
    blocks.retain(|&(_, i, j)| {
        cached[i].0 .0[j]
            .instant()
            .map(|x| !rolled_back.contains(x))
            .unwrap_or(true)
    });
    blocks.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    blocks.into_iter().map(|(_, i, j)| (i, j)).collect()
}

impl SliceMerge<'_> {
    /// The slice's schema (rows are conformed to it): the newest data block's, else the base
    /// file's, every column nullable, layout columns dropped. `None`: the slice has no rows.
    pub fn schema(&self) -> Option<&SchemaRef> {
        self.target.as_ref()
    }

    /// Merge only `columns` (those the schema has): enough to tell which keys are live and
    /// their commit times, without materialising the rest (see [`super::super::narrow`]).
    pub fn narrow(&mut self, columns: &[String]) {
        if let Some(t) = &self.target {
            let kept = t
                .fields()
                .iter()
                .filter(|f| columns.iter().any(|c| c == f.name()))
                .cloned();
            let schema = arrow_schema::Schema::new_with_metadata(kept.collect::<Vec<_>>(), t.metadata().clone());
            self.target = Some(std::sync::Arc::new(schema));
        }
    }

    pub(super) fn block(&self, k: usize) -> (&LogBlock, &Path) {
        let (i, j) = self.blocks[k];
        (&self.cached[i].0 .0[j], self.cached[i].1.as_path())
    }

    pub(super) fn decode_each(
        &self,
        k: usize,
        f: &mut dyn FnMut(RecordBatch) -> Result<bool, SourceError>,
    ) -> Result<(), SourceError> {
        let (b, path) = self.block(k);
        self.reader.decode_each(b, path, &self.partition, f)
    }

    pub(super) fn with_keys(&self, b: RecordBatch) -> Result<RecordBatch, SourceError> {
        let m = self.reader.merge;
        if m.virtual_keys {
            with_virtual_keys(&b, &m.key_fields, &self.partition)
        } else {
            Ok(b)
        }
    }

    pub(super) fn plan_schema(&mut self) -> Result<(), SourceError> {
        let is_data = |b: &LogBlock| !matches!(b.block_type, BlockType::Delete | BlockType::Corrupt);
        let last_data = (0..self.blocks.len()).rev().find(|&k| is_data(self.block(k).0));
        if let Some(k) = last_data {
            let mut first = None;
            self.decode_each(k, &mut |b| {
                first = Some(b.schema());
                Ok(false)
            })?;
            self.last_schema = first;
        }
        let newest = match self.last_schema.clone() {
            Some(s) => Some(s),
            None => {
                let peeked = self
                    .base
                    .as_mut()
                    .and_then(|b| b.peek())
                    .map(|r| r.as_ref().ok().cloned());
                match peeked {
                    Some(Some(b)) => Some(self.with_keys(b)?.schema()),
                    Some(None) => {
                        return Err(self
                            .base
                            .as_mut()
                            .and_then(Iterator::next)
                            .and_then(Result::err)
                            .expect("the peeked error"))
                    }
                    // a base file with no (selected) rows still has its schema
                    None => match self.base_schema.clone() {
                        Some(s) => Some(self.with_keys(RecordBatch::new_empty(s))?.schema()),
                        None => None,
                    },
                }
            }
        };
        self.target = newest.map(|s| nullable(&s, LAYOUT_META_COLUMNS));
        Ok(())
    }
}
