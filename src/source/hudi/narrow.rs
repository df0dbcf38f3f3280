//! Change units that cost what changed, not what the file groups hold: *which* record keys a
//! unit may have changed is decided from narrow columns, then both sides of the unit are merged
//! and diffed for those keys only ([`KeyFilter`] on the slice reader: base files read in two
//! passes, the key column and then every column of the selected rows only; log records dropped
//! unless their key is selected).
//!
//! The candidate keys of a unit ([`HudiSource::changed_keys`]), per file group it touched:
//! * **the base file did not change** (merge-on-read, log-only instant): the keys of the
//!   instant's own log blocks (data and delete blocks). A key outside them merges to the same row
//!   on both sides, whatever the merge mode.
//! * **a new base file** (copy-on-write, inserts into a new file group, compaction, clustering,
//!   overwrite): the new slice's live keys whose `_hoodie_commit_time` is the instant (carried-over
//!   rows keep theirs, so do compaction and clustering), plus the old slice's live keys missing
//!   from the new slice. Both slices are merged on their narrow columns only (key, commit time,
//!   ordering fields, soft-delete flag).
//!
//! The set is a superset of the keys whose events the unit has, and every row of a selected key
//! is read on both sides, in every file group of the unit (a key that moved or is duplicated
//! across file groups meets all its versions). So the diff of the restricted sides is the full
//! diff restricted to those keys: the same events, in the same order, whatever the path (and a
//! resumed unit may switch paths). Without a commit-time column (virtual keys) a rewritten file
//! group cannot say which rows are new: the unit then takes the full diff, logged and counted.

use std::collections::HashSet;
use std::path::Path;

use arrow::array::BooleanBufferBuilder;
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::file::metadata::PageIndexPolicy;

use super::files::{base_as_of, columns_mask, with_virtual_keys, BASE_BATCH_ROWS, LAYOUT_META_COLUMNS};
use super::reader::UnitRead;
use super::slice::{FileCache, InstantBlock};
use super::HudiSource;
use crate::metrics;
use crate::source::buckets::DECODED_PER_FILE_BYTE;
use crate::source::SourceError;
use crate::storage::Storage;

const RECORD_KEY: &str = "_hoodie_record_key";
const COMMIT_TIME: &str = "_hoodie_commit_time";

/// The record keys a unit reads (see the module doc): rows of other keys are not decoded past
/// their key column.
#[derive(Default)]
pub struct KeyFilter {
    keys: hashbrown::HashTable<Box<str>>,
    /// What the keys take in memory (text, box and slot).
    bytes: usize,
}

/// What a selected key costs besides its text: its box (16 bytes) and table slot (8).
const KEY_OVERHEAD: usize = 24;

/// The hash of a key's text: xxh3 (SipHash, std's, took a third of a change unit's key checks).
fn hash(k: &str) -> u64 {
    twox_hash::XxHash3_64::oneshot(k.as_bytes())
}

impl KeyFilter {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.keys.find(hash(key), |k| k.as_ref() == key).is_some()
    }

    fn insert(&mut self, key: &str) {
        if let hashbrown::hash_table::Entry::Vacant(v) = self.keys.entry(hash(key), |k| k.as_ref() == key, |k| hash(k))
        {
            v.insert(key.into());
            self.bytes += key.len() + KEY_OVERHEAD;
        }
    }

    /// Which rows of a record-key column are selected (a null key never is).
    pub fn mask(&self, keys: &StringArray) -> BooleanArray {
        (0..keys.len())
            .map(|i| Some(keys.is_valid(i) && self.contains(keys.value(i))))
            .collect()
    }

    /// The rows of `batch` whose `_hoodie_record_key` is selected (all of them without that
    /// column: a superset is always safe).
    pub fn restrict(&self, batch: RecordBatch) -> Result<RecordBatch, SourceError> {
        let Some(keys) = record_keys(&batch)? else {
            return Ok(batch);
        };
        let keep = self.mask(&keys);
        if keep.true_count() == batch.num_rows() {
            return Ok(batch);
        }
        arrow::compute::filter_record_batch(&batch, &keep).map_err(SourceError::arrow("selecting changed keys"))
    }
}

/// The `_hoodie_record_key` column as strings (`None`: the batch has none).
fn record_keys(batch: &RecordBatch) -> Result<Option<StringArray>, SourceError> {
    let Some(col) = batch.column_by_name(RECORD_KEY) else {
        return Ok(None);
    };
    let col = if col.data_type() == &DataType::Utf8 {
        col.clone()
    } else {
        arrow::compute::cast(col, &DataType::Utf8).map_err(SourceError::arrow("record key as text"))?
    };
    Ok(col.as_any().downcast_ref::<StringArray>().cloned())
}

/// A base file's selected rows: its schema (layout columns left out), a reader of the rows whose
/// record key is in `keys`, and its size.
pub(super) struct SelectedBase {
    pub schema: SchemaRef,
    pub reader: ParquetRecordBatchReader,
    pub size: u64,
}

/// Read a base file for `keys` only, in two passes: the key column (or a virtual-key table's key
/// fields, `virtual_keys` = (fields, partition)), then every column of the selected rows, row
/// groups without one skipped, and pages too where the file has a page index.
pub(super) fn open_base_selected(
    storage: &Storage,
    path: &Path,
    keys: &KeyFilter,
    virtual_keys: Option<(&[String], &str)>,
) -> Result<SelectedBase, SourceError> {
    let perr = |source| SourceError::Parquet {
        path: path.into(),
        source,
    };
    let input = storage.open(path).map_err(SourceError::io(path))?;
    let size = parquet::file::reader::Length::len(&input);
    let builder = ParquetRecordBatchReaderBuilder::try_new(input.clone()).map_err(perr)?;
    input.plan(builder.metadata());
    let key_columns: Vec<String> = match virtual_keys {
        Some((fields, _)) => fields.to_vec(),
        None => vec![RECORD_KEY.to_string()],
    };
    let groups: Vec<usize> = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows() as usize)
        .collect();
    let mask = columns_mask(&builder, |name| key_columns.iter().any(|k| k == name));
    let pass = builder
        .with_projection(mask)
        .with_batch_size(BASE_BATCH_ROWS)
        .build()
        .map_err(perr)?;
    let mut selected = BooleanBufferBuilder::new(groups.iter().sum());
    for b in pass {
        let b = b.map_err(|e| SourceError::Arrow {
            context: format!("reading the keys of {}", path.display()),
            source: e,
        })?;
        let b = match virtual_keys {
            Some((fields, partition)) => with_virtual_keys(&b, fields, partition)?,
            None => b,
        };
        let keys_col = record_keys(&b)?.ok_or_else(|| SourceError::Unreadable {
            message: format!("{}: no {RECORD_KEY} column to select changed rows by", path.display()),
        })?;
        selected.append_buffer(keys.mask(&keys_col).values());
    }
    let selected = selected.finish();
    // row groups with a selected row, and the selection over their rows only
    let (mut keep_groups, mut filters, mut start) = (Vec::new(), Vec::new(), 0);
    for (g, &n) in groups.iter().enumerate() {
        let part = selected.slice(start, n.min(selected.len().saturating_sub(start)));
        if part.count_set_bits() > 0 {
            keep_groups.push(g);
            filters.push(BooleanArray::new(part, None));
        }
        start += n;
    }
    // the offset index (where the file has one) lets the selection skip whole pages
    let options = ArrowReaderOptions::new().with_offset_index_policy(match keep_groups.is_empty() {
        true => PageIndexPolicy::Skip,
        false => PageIndexPolicy::Optional,
    });
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(input, options).map_err(perr)?;
    let mask = columns_mask(&builder, |name| !LAYOUT_META_COLUMNS.contains(&name));
    let reader = builder
        .with_projection(mask)
        .with_row_groups(keep_groups)
        .with_row_selection(RowSelection::from_filters(&filters))
        .with_batch_size(BASE_BATCH_ROWS)
        .build()
        .map_err(perr)?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    Ok(SelectedBase { schema, reader, size })
}

/// A set of keys whose text stays in the decoded key arrays: 8 bytes a key in the table, no
/// allocation per key (an old slice holds every key of a file group).
#[derive(Default)]
struct ArrayKeys {
    arrays: Vec<StringArray>,
    table: hashbrown::HashTable<(u32, u32)>,
}

impl ArrayKeys {
    fn text(&self, (a, i): (u32, u32)) -> &str {
        self.arrays[a as usize].value(i as usize)
    }

    fn push(&mut self, keys: StringArray) {
        let a = self.arrays.len() as u32;
        self.arrays.push(keys);
        let arrays = &self.arrays;
        let text = |(a, i): (u32, u32)| arrays[a as usize].value(i as usize);
        let keys = &arrays[a as usize];
        for i in (0..keys.len()).filter(|&i| keys.is_valid(i)) {
            let k = keys.value(i);
            if let hashbrown::hash_table::Entry::Vacant(v) =
                self.table.entry(hash(k), |&s| text(s) == k, |&s| hash(text(s)))
            {
                v.insert((a, i as u32));
            }
        }
    }

    fn remove(&mut self, k: &str) {
        let arrays = &self.arrays;
        if let Ok(e) = self
            .table
            .find_entry(hash(k), |&(a, i)| arrays[a as usize].value(i as usize) == k)
        {
            e.remove();
        }
    }

    fn each(&self, mut f: impl FnMut(&str)) {
        self.table.iter().for_each(|&s| f(self.text(s)));
    }
}

/// What the candidate-key pass found in one file group.
enum SplitCandidates {
    /// A log-only change: the instant's keys, and the rows and decoded bytes of its records.
    Logged {
        keys: HashSet<Box<str>>,
        rows: u64,
        bytes: u64,
    },
    /// A rewritten base file: its candidate keys, the rows scanned and the files' bytes.
    Rewritten {
        keys: HashSet<Box<str>>,
        rows: u64,
        bytes: u64,
    },
    /// A rewritten file group without `_hoodie_commit_time`.
    NoCommitTime(String),
}

/// What the candidate-key pass of a unit found.
pub(super) struct Candidates {
    pub keys: KeyFilter,
    /// Decoded bytes a selected row is estimated to take (for the in-memory or bucketed choice).
    pub row_bytes: u64,
}

impl HudiSource {
    /// The candidate keys of a change unit (see the module doc); `None` where the unit must take
    /// the full diff (`read.change.detection=full`, or a rewritten file group without commit
    /// times).
    pub(super) fn changed_keys(&self, r: &UnitRead<'_>) -> Result<Option<Candidates>, SourceError> {
        if !self.read.narrow_changes || r.unit.snapshot {
            return Ok(None);
        }
        let instant = r.unit.position.instant.as_str();
        let mut keys = KeyFilter::default();
        let (mut rows, mut bytes, mut sample) = (0u64, 0u64, (0u64, 0u64));
        let (mut no_commit_time, mut too_many) = (None, false);
        // the keys may take a quarter of the budget; beyond it the unit takes the full diff,
        // which spills to key buckets (bounded whatever the change)
        let limit = self.spill.budget / 4;
        // file groups on several threads; their keys merged in split order
        let per_split = |s: usize| self.split_candidates(r, &r.unit.splits[s]);
        crate::source::par::ordered(r.unit.splits.len(), self.threads, &per_split, &mut |found| {
            let k = match found {
                SplitCandidates::Logged {
                    keys: k,
                    rows: n,
                    bytes: b,
                } => {
                    sample = (sample.0 + n, sample.1 + b);
                    k
                }
                SplitCandidates::Rewritten {
                    keys: k,
                    rows: n,
                    bytes: b,
                } => {
                    rows += n;
                    bytes += b;
                    k
                }
                SplitCandidates::NoCommitTime(id) => {
                    no_commit_time.get_or_insert(id);
                    return Ok(());
                }
            };
            too_many |= keys.bytes + k.iter().map(|k| k.len() + KEY_OVERHEAD).sum::<usize>() > limit;
            if !too_many && no_commit_time.is_none() {
                k.iter().for_each(|k| keys.insert(k));
            }
            Ok(())
        })?;
        let fallback = match (no_commit_time, too_many) {
            (Some(id), _) => Some((
                "no_commit_time",
                format!("file group {id} has no _hoodie_commit_time to tell new rows from carried-over ones"),
            )),
            (None, true) => Some((
                "too_many_keys",
                format!("its changed keys would take more than a quarter of read.memory.budget ({limit} bytes)"),
            )),
            (None, false) => None,
        };
        if let Some((reason, why)) = fallback {
            tracing::info!(connector = %self.connector, instant, reason, "change unit: {why}; diffing whole file groups");
            metrics::FULL_DIFF_UNITS
                .with_label_values(&[&self.connector, reason])
                .inc();
            return Ok(None);
        }
        let row_bytes = match sample {
            (n, b) if n > 0 => b / n,
            _ => (bytes * DECODED_PER_FILE_BYTE).checked_div(rows).unwrap_or(1024),
        };
        tracing::debug!(connector = %self.connector, instant, keys = keys.len(), key_rows = rows, "change unit: candidate keys");
        Ok(Some(Candidates {
            keys,
            row_bytes: row_bytes.max(64),
        }))
    }

    /// One file group's candidate keys (see the module doc).
    fn split_candidates(
        &self,
        r: &UnitRead<'_>,
        sp: &crate::source::SplitSpec,
    ) -> Result<SplitCandidates, SourceError> {
        let (instant, at) = (r.unit.position.instant.as_str(), r.unit.position.order_key());
        let files = r.listings.partition(&sp.partition)?;
        let (base, logs) = files.group(&sp.file_group);
        let replaced = r.is_replaced(sp);
        let old_base = base_as_of(base, r.tl, at, false).map(|b| &b.name);
        if replaced || old_base != base_as_of(base, r.tl, at, true).map(|b| &b.name) {
            let mut keys = KeyFilter::default();
            return Ok(match self.rewritten_keys(r, sp, replaced, instant, &mut keys)? {
                Some((rows, bytes)) => SplitCandidates::Rewritten {
                    keys: keys.keys.into_iter().collect(),
                    rows,
                    bytes,
                },
                None => SplitCandidates::NoCommitTime(sp.id.clone()),
            });
        }
        // log-only: the keys of this instant's blocks
        let cache = FileCache::default();
        let reader = self.slice_reader(r.tl, &cache);
        let (mut keys, mut rows, mut bytes) = (HashSet::new(), 0, 0);
        for block in reader.instant_blocks(&sp.partition, base, logs, at, instant)? {
            match block {
                InstantBlock::Data(batches) => {
                    for b in &batches {
                        rows += b.num_rows() as u64;
                        bytes += b.get_array_memory_size() as u64;
                        for k in record_keys(b)?.iter().flatten().flatten() {
                            keys.insert(k.into());
                        }
                    }
                }
                InstantBlock::Delete(deleted) => keys.extend(deleted.into_iter().map(|d| d.record_key.into())),
            }
        }
        Ok(SplitCandidates::Logged { keys, rows, bytes })
    }

    /// The candidate keys of a file group whose base file the unit rewrote (or replaced): the new
    /// slice's keys written by `instant`, and the old slice's keys gone from the new one. Returns
    /// (rows scanned, bytes of the files), or `None` without a commit-time column.
    fn rewritten_keys(
        &self,
        r: &UnitRead<'_>,
        sp: &crate::source::SplitSpec,
        replaced: bool,
        instant: &str,
        out: &mut KeyFilter,
    ) -> Result<Option<(u64, u64)>, SourceError> {
        let columns = self.narrow_columns();
        let cache = FileCache::streaming(Some(columns.clone()));
        let reader = self.slice_reader(r.tl, &cache);
        let mut old = ArrayKeys::default();
        let (mut rows, mut bytes) = (0u64, 0u64);
        if let Some(mut m) = self.open_slice(r, &reader, sp, false)? {
            m.narrow(&columns);
            bytes += m.bytes_read;
            rows += m.run(&mut |b| {
                if let Some(k) = record_keys(&b)? {
                    old.push(k);
                }
                Ok(())
            })?;
        }
        if !replaced {
            if let Some(mut m) = self.open_slice(r, &reader, sp, true)? {
                m.narrow(&columns);
                if m.schema().is_some_and(|s| s.index_of(COMMIT_TIME).is_err()) {
                    return Ok(None);
                }
                bytes += m.bytes_read;
                let mut missing_time = false;
                rows += m.run(&mut |b| {
                    let (Some(k), Some(t)) = (record_keys(&b)?, super::string_column(&b, COMMIT_TIME)) else {
                        missing_time = true;
                        return Ok(());
                    };
                    for i in (0..b.num_rows()).filter(|&i| k.is_valid(i)) {
                        let key = k.value(i);
                        old.remove(key);
                        if !t.is_valid(i) || t.value(i) == instant {
                            out.insert(key);
                        }
                    }
                    Ok(())
                })?;
                if missing_time {
                    return Ok(None);
                }
            }
        }
        old.each(|k| out.insert(k));
        Ok(Some((rows, bytes)))
    }

    /// The columns that decide whether a row changed: record key (a virtual-key table's key
    /// fields), commit time, ordering fields and soft-delete flag (the merge needs both).
    fn narrow_columns(&self) -> Vec<String> {
        let mut c: Vec<String> = vec![RECORD_KEY.into(), COMMIT_TIME.into(), "_hoodie_is_deleted".into()];
        c.extend(self.merge.ordering.iter().cloned());
        if self.merge.virtual_keys {
            c.extend(self.merge.key_fields.iter().cloned());
        }
        c
    }
}

/// A unit's restricted sides, held in memory, are about `2 × keys × row_bytes`.
pub(super) fn restricted_bytes(c: &Candidates) -> u64 {
    2 * c.keys.len() as u64 * c.row_bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{Field, Schema};
    use std::sync::Arc;

    /// A base file of `n` rows (`k0`, `k1`, …, value = row number) in row groups of 100 rows
    /// and pages of 10.
    fn base_file(dir: &Path, n: usize) -> std::path::PathBuf {
        let schema = Arc::new(Schema::new(vec![
            Field::new(RECORD_KEY, DataType::Utf8, false),
            Field::new("_hoodie_file_name", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("k{i}")))),
                Arc::new(StringArray::from_iter_values((0..n).map(|_| "f.parquet"))),
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
            ],
        )
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .set_data_page_row_count_limit(10)
            .set_write_batch_size(10)
            .build();
        let path = dir.join("f.parquet");
        let mut w =
            parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        path
    }

    #[test]
    fn a_selected_base_read_returns_exactly_the_selected_keys_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = base_file(dir.path(), 1000);
        let mut keys = KeyFilter::default();
        // rows in the first, a middle and the last row group, one group's edges, and a key the
        // file does not hold
        for i in [3, 99, 100, 101, 550, 999, 5000] {
            keys.insert(&format!("k{i}"));
        }
        let storage = Storage::new(Default::default());
        let s = open_base_selected(&storage, &path, &keys, None).unwrap();
        assert!(
            s.schema.field_with_name("_hoodie_file_name").is_err(),
            "layout columns left out"
        );
        let batches: Vec<RecordBatch> = s.reader.collect::<Result<_, _>>().unwrap();
        let values: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let v = b
                    .column_by_name("v")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap();
                v.values().to_vec()
            })
            .collect();
        assert_eq!(values, vec![3, 99, 100, 101, 550, 999]);
        // nothing selected: no rows, the schema still there
        let none = open_base_selected(&storage, &path, &KeyFilter::default(), None).unwrap();
        assert!(none.schema.field_with_name("v").is_ok());
        assert_eq!(none.reader.map(|b| b.unwrap().num_rows()).sum::<usize>(), 0);
    }

    #[test]
    fn array_keys_are_exact_sets() {
        let mut old = ArrayKeys::default();
        old.push(StringArray::from(vec![Some("a"), Some("b"), None, Some("a")]));
        old.push(StringArray::from(vec!["c", "d"]));
        old.remove("b");
        old.remove("zz");
        let mut left = Vec::new();
        old.each(|k| left.push(k.to_string()));
        left.sort();
        assert_eq!(left, ["a", "c", "d"]);
        let mut f = KeyFilter::default();
        f.insert("x");
        f.insert("x");
        assert_eq!(f.len(), 1);
        let m = f.mask(&StringArray::from(vec![Some("x"), None, Some("y")]));
        assert_eq!(m, BooleanArray::from(vec![true, false, false]));
    }
}
