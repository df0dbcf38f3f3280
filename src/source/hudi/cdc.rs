//! Hudi CDC log files as a change unit's events (`read.cdc.from-log`, tables with
//! `hoodie.table.cdc.enabled=true`). A CDC file (`<log file>.cdc`, `-cdc` before 0.14) holds CDC
//! data blocks (block type 6: Avro records) in the table's supplemental logging mode, recognised
//! here from the block's schema, as Hudi's `HoodieCDCExtractor` reads them (case AS_IS):
//! * `{op, record_key}` (OP_KEY_ONLY): the before image from the previous slice, the after image
//!   from the new one;
//! * `{op, record_key, before}` (DATA_BEFORE): the after image from the new slice;
//! * `{op, ts_ms, before, after}` (DATA_BEFORE_AFTER): both images as written, so the previous
//!   slice is not needed.
//!
//! With before images logged, a file group's previous slice is not read: the unit continues
//! where a clean removed it.
//!
//! `op` is `i`/`u`/`d`. Hudi writes images without the `_hoodie_*` meta fields: an image from a
//! CDC file gets `_hoodie_record_key` and `_hoodie_partition_path` derived as the key generator
//! does, an after image `_hoodie_commit_time` = the instant; its other meta columns are null.
//! File groups of the unit without a CDC file (new file groups: all inserts; replaced ones: all
//! deletes) are diffed as without CDC, and keys moving between file groups pair into one update.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::files::with_virtual_keys;
use super::log::{self, BlockType};
use super::merge::SliceMerge;
use super::reader::{PairedSplits, UnitRead};
use super::slice::{FileCache, SliceReader};
use super::timeline::CommitMetadata;
use super::{join_path, string_column, HudiSource};
use crate::source::{ChangeRow, Op, RowRef, SourceError, SplitChanges, SplitSpec};

use super::CdcFiles;

/// The images `hoodie.table.cdc.supplemental.logging.mode` says the CDC files carry: (before,
/// after). With before images a group's previous slice is not needed; with both, no slice.
/// Hudi 0.13 spells the modes `cdc_op_key`, `cdc_data_before[_after]`, 0.14+ `OP_KEY_ONLY`,
/// `DATA_BEFORE[_AFTER]`.
pub fn logged_images(props: &HashMap<String, String>) -> (bool, bool) {
    let mode = props
        .get("hoodie.table.cdc.supplemental.logging.mode")
        .map(|m| m.trim().to_ascii_lowercase());
    match mode.as_deref().map(|m| m.trim_start_matches("cdc_")) {
        Some("data_before") => (true, false),
        Some("data_before_after") => (true, true),
        _ => (false, false),
    }
}

/// What a CDC block's records carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    OpKey,
    Before,
    BeforeAfter,
}

impl Shape {
    /// The shape of a CDC block's schema (`None`: neither `record_key` nor images).
    fn of(schema: &Schema) -> Option<Shape> {
        let has = |n: &str| schema.index_of(n).is_ok();
        match (has("before"), has("after")) {
            (true, true) => Some(Shape::BeforeAfter),
            (true, false) => Some(Shape::Before),
            _ if has("record_key") => Some(Shape::OpKey),
            _ => None,
        }
    }
}

/// A file group's CDC records being read: their shape, the images they point into (`out`:
/// logged images and slice rows) and the slices' rows by key where images are not logged.
struct Images {
    shape: Shape,
    /// The CDC file, for errors.
    path: String,
    old: HashMap<String, RowRef>,
    new: HashMap<String, RowRef>,
    out: Vec<RecordBatch>,
    /// The schema of a slice read for images.
    schema: Option<SchemaRef>,
}

impl Images {
    fn bad(&self, message: impl Into<String>) -> SourceError {
        SourceError::format(&self.path, message.into())
    }
}

impl HudiSource {
    /// File groups whose previous slice a unit does not need: those with CDC files, where the
    /// table logs before images.
    pub(super) fn cdc_previous_optional(&self, cdc: Option<&CdcFiles>) -> BTreeSet<(String, String)> {
        match cdc {
            Some(files) if logged_images(&self.table.props).0 => files.keys().cloned().collect(),
            _ => BTreeSet::new(),
        }
    }

    /// CDC files carry both images: a unit read from them reads no slice.
    pub(super) fn cdc_needs_no_slice(&self) -> bool {
        logged_images(&self.table.props) == (true, true)
    }

    /// The unit's CDC files, where its changes are to be read from them: `read.cdc.from-log`
    /// `auto` (unset) when every write of the instant to an existing file group lists CDC files
    /// (else the diff, logged), `true` the same but a write without them fails naming it,
    /// `false` never.
    pub(super) fn cdc_files(&self, md: &CommitMetadata, instant: &str) -> Result<Option<CdcFiles>, SourceError> {
        if self.read.cdc_from_log == Some(false) {
            return Ok(None);
        }
        let mut out = CdcFiles::new();
        let mut without: Option<(String, String)> = None;
        for (p, w) in md.writes() {
            let (files, fg) = (w.cdc_files(), w.file_id.clone().unwrap_or_default());
            if files.is_empty() {
                if w.prev_slice().is_some() {
                    without.get_or_insert((p.to_string(), fg));
                }
                continue;
            }
            out.entry((p.to_string(), fg)).or_default().extend(files);
        }
        match (without, self.read.cdc_from_log) {
            (None, _) => Ok((!out.is_empty()).then_some(out)),
            (Some((p, fg)), Some(true)) => Err(SourceError::Unreadable {
                why: crate::source::Unreadable::Unfollowable,
                message: format!(
                    "instant {instant}: file group {} was updated without a CDC log file (cdcStats) and \
                     read.cdc.from-log=true; set read.cdc.from-log=auto to diff such instants",
                    join_path(&p, &fg)
                ),
            }),
            (Some((p, fg)), _) => {
                if !out.is_empty() {
                    tracing::info!(connector = %self.connector, instant, file_group = %join_path(&p, &fg),
                        "instant has CDC files for some file groups only: diffing it");
                }
                Ok(None)
            }
        }
    }

    /// A change unit's events from its CDC files (see the module doc).
    pub(super) fn read_cdc(
        &self,
        r: &UnitRead<'_>,
        cdc: &CdcFiles,
        done: &HashSet<String>,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let unit = r.unit;
        tracing::info!(connector = %self.connector, instant = %unit.position.version, file_groups = cdc.len(),
            "change unit read from its CDC log files");
        let cache = FileCache::default();
        let mut paired = PairedSplits::default();
        // the unit's schema: a data file's where one was read (a CDC image has the block's types)
        let mut slice_schema: Option<SchemaRef> = None;
        for sp in &unit.splits {
            let (batches, rows, file, n) = match cdc.get(&(sp.partition.clone(), sp.reads.clone())) {
                Some(files) => {
                    let (batches, rows, n, schema) = self.cdc_split(r, sp, files, &cache)?;
                    slice_schema = schema.or(slice_schema);
                    (batches, rows, join_path("", &files[files.len() - 1]), n)
                }
                None => {
                    let (batches, rows, file, n) = self.diff_split(r, sp, &cache)?;
                    slice_schema = batches.first().map(|b| b.schema()).or(slice_schema);
                    (batches, rows, file, n)
                }
            };
            paired.push(batches, rows, file, Some(n));
        }
        paired.emit(unit, slice_schema, self.keyed_by_partition(), done, emit)
    }

    /// One file group's changes from its CDC files: (batches, change rows, records read, the
    /// schema of a slice read for images).
    #[allow(clippy::type_complexity)]
    fn cdc_split(
        &self,
        r: &UnitRead<'_>,
        sp: &SplitSpec,
        files: &[String],
        cache: &FileCache,
    ) -> Result<(Vec<RecordBatch>, Vec<ChangeRow>, u64, Option<SchemaRef>), SourceError> {
        let (records, path) = self.cdc_records(files)?;
        let Some(first) = records.first() else {
            return Ok((Vec::new(), Vec::new(), 0, None));
        };
        let mut im = Images {
            shape: Shape::of(&first.schema())
                .ok_or_else(|| SourceError::format(&path, "CDC block without record_key or before/after images"))?,
            path,
            old: HashMap::new(),
            new: HashMap::new(),
            out: Vec::new(),
            schema: None,
        };
        let total: u64 = records.iter().map(|b| b.num_rows() as u64).sum();
        // images from the slices where the mode does not log them
        let reader = self.slice_reader(r.tl, cache);
        if im.shape == Shape::OpKey {
            im.old = self.slice_rows(r, &reader, sp, false, &mut im)?;
        }
        if im.shape != Shape::BeforeAfter && !r.is_replaced(sp) {
            im.new = self.slice_rows(r, &reader, sp, true, &mut im)?;
        }
        let mut rows = Vec::new();
        for b in &records {
            self.cdc_rows(b, sp, &r.unit.position.version, &mut im, &mut rows)?;
        }
        Ok((im.out, rows, total, im.schema))
    }

    /// The records of a file group's CDC files, in order, and the path of the last file.
    fn cdc_records(&self, files: &[String]) -> Result<(Vec<RecordBatch>, String), SourceError> {
        let mut records: Vec<RecordBatch> = Vec::new();
        let mut cdc_path = String::new();
        for f in files {
            let path = self.table.path.join(f);
            cdc_path = path.display().to_string();
            for block in log::read_blocks(&self.table.storage, &path, &self.connector)? {
                match block.block_type {
                    BlockType::Cdc | BlockType::AvroData => log::avro_block_batches(&block, &path, &mut |b| {
                        records.push(b);
                        Ok(true)
                    })?,
                    BlockType::Command | BlockType::Corrupt => {}
                    other => {
                        return Err(SourceError::format(
                            &path,
                            format!("unexpected {other:?} block in a CDC log file"),
                        ))
                    }
                }
            }
        }
        Ok((records, cdc_path))
    }

    /// The rows of the file group's previous (`inclusive` false) or new slice, merged, added
    /// to the images; by record key.
    fn slice_rows(
        &self,
        r: &UnitRead<'_>,
        reader: &SliceReader<'_>,
        sp: &SplitSpec,
        inclusive: bool,
        im: &mut Images,
    ) -> Result<HashMap<String, RowRef>, SourceError> {
        let mut index = HashMap::new();
        let Some(merge) = self.open_slice(r, reader, sp, inclusive)? else {
            return Ok(index);
        };
        let st = SliceMerge::collect(merge)?;
        for b in st.batches {
            im.schema = Some(b.schema());
            let keys =
                string_column(&b, "_hoodie_record_key").ok_or_else(|| im.bad("slice without _hoodie_record_key"))?;
            let batch = im.out.len() as u32;
            for i in 0..keys.len() {
                if keys.is_valid(i) {
                    index.insert(keys.value(i).to_string(), RowRef { batch, row: i as u32 });
                }
            }
            im.out.push(b);
        }
        Ok(index)
    }

    /// The change rows of one batch of CDC records: each record's op, and its before and after
    /// images as logged or as found in the slices.
    fn cdc_rows(
        &self,
        b: &RecordBatch,
        sp: &SplitSpec,
        instant: &str,
        im: &mut Images,
        rows: &mut Vec<ChangeRow>,
    ) -> Result<(), SourceError> {
        let ops = string_column(b, "op").ok_or_else(|| im.bad("CDC block without a string `op`"))?;
        let mut image = |name: &str, after: bool| -> Result<Option<u32>, SourceError> {
            let Some(col) = b.column_by_name(name) else {
                return Ok(None);
            };
            let s = col
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| im.bad(format!("`{name}` is not a record")))?;
            im.out.push(self.cdc_image(s, sp, after.then_some(instant))?);
            Ok(Some(im.out.len() as u32 - 1))
        };
        let before_img = image("before", false)?;
        let after_img = image("after", true)?;
        let keys = string_column(b, "record_key");
        for i in 0..b.num_rows() {
            let op = match ops.is_valid(i).then(|| ops.value(i)) {
                Some("i") => Op::Create,
                Some("u") => Op::Update,
                Some("d") => Op::Delete,
                other => return Err(im.bad(format!("CDC record {i}: op {other:?} is not i, u or d"))),
            };
            let key = keys.as_ref().filter(|k| k.is_valid(i)).map(|k| k.value(i));
            let lookup = |index: &HashMap<String, RowRef>, which: &str| -> Result<RowRef, SourceError> {
                let k = key.ok_or_else(|| im.bad(format!("CDC record {i} without record_key")))?;
                index.get(k).copied().ok_or_else(|| {
                    im.bad(format!(
                        "CDC record {i} ({op:?} of key {k}): the {which} slice of file group {} has no such row",
                        sp.id
                    ))
                })
            };
            let logged = |img: Option<u32>| img.map(|batch| RowRef { batch, row: i as u32 });
            let before = match (op, im.shape) {
                (Op::Create, _) => None,
                (_, Shape::OpKey) => Some(lookup(&im.old, "previous")?),
                _ => logged(before_img),
            };
            let after = match (op, im.shape) {
                (Op::Delete, _) => None,
                (_, Shape::BeforeAfter) => logged(after_img),
                _ => Some(lookup(&im.new, "new")?),
            };
            let row = ChangeRow::of(op, before, after).ok_or_else(|| {
                im.bad(format!(
                    "CDC record {i} ({op:?}) has neither a before nor an after image"
                ))
            })?;
            rows.push(row);
        }
        Ok(())
    }

    /// A CDC image (data columns) with the meta columns a slice row has: the key and partition
    /// path derived as the key generator does, and for an after image the commit time.
    fn cdc_image(&self, s: &StructArray, sp: &SplitSpec, commit: Option<&str>) -> Result<RecordBatch, SourceError> {
        // (not RecordBatch::from: an absent image is a null struct, which it refuses; those rows
        // are never referenced)
        let fields: Vec<Field> = s
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect();
        let data = RecordBatch::try_new(Arc::new(Schema::new(fields)), s.columns().to_vec())
            .map_err(SourceError::arrow("CDC image"))?;
        let keyed = with_virtual_keys(&data, &self.table.key_fields, &sp.partition)?;
        let n = keyed.num_rows();
        let time: ArrayRef = match commit {
            Some(t) => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(t, n))),
            None => arrow_array::new_null_array(&DataType::Utf8, n),
        };
        let mut fields = vec![Field::new("_hoodie_commit_time", DataType::Utf8, true)];
        let mut cols = vec![time];
        for (f, c) in keyed.schema().fields().iter().zip(keyed.columns()) {
            fields.push(f.as_ref().clone().with_nullable(true));
            cols.push(c.clone());
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(SourceError::arrow("CDC image"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_images_in_both_spellings() {
        let m = |v: &str| {
            logged_images(&HashMap::from([(
                "hoodie.table.cdc.supplemental.logging.mode".to_string(),
                v.to_string(),
            )]))
        };
        assert_eq!(m("OP_KEY_ONLY"), (false, false));
        assert_eq!(m("cdc_op_key"), (false, false));
        assert_eq!(m("DATA_BEFORE"), (true, false));
        assert_eq!(m("cdc_data_before_after"), (true, true));
        assert_eq!(logged_images(&HashMap::new()), (false, false));
    }
}
