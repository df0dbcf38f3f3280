//! Reading Iceberg data files: Parquet columns matched to the unit's schema by field id (renames,
//! added and dropped columns, type promotion), a byte range of row groups, and the live-row masks
//! delete files leave.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::ProjectionMask;

use super::manifest::DataFile;
use super::metadata::{field_id, local};
use crate::source::SourceError;
use crate::storage::Storage;

/// Cast / reorder / null-fill a batch read from a file to `target`, columns matched by field id
/// (by name when the file carries no field ids).
pub fn conform_by_id(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch, SourceError> {
    let schema = batch.schema();
    let has_ids = schema.fields().iter().any(|f| field_id(f).is_some());
    let by_id: HashMap<i32, usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, f)| field_id(f).map(|id| (id, i)))
        .collect();
    let mut cols = Vec::with_capacity(target.fields().len());
    for f in target.fields() {
        let src = match (has_ids, field_id(f)) {
            (true, Some(id)) => by_id.get(&id).copied(),
            _ => schema.index_of(f.name()).ok(),
        };
        let col = match src {
            Some(i) if batch.column(i).data_type() == f.data_type() => batch.column(i).clone(),
            Some(i) => {
                crate::source::rows::cast(batch.column(i), f.data_type()).map_err(SourceError::arrow(format!(
                    "column `{}` ({} → {})",
                    f.name(),
                    batch.column(i).data_type(),
                    f.data_type()
                )))?
            }
            None => arrow_array::new_null_array(f.data_type(), batch.num_rows()),
        };
        cols.push(col);
    }
    RecordBatch::try_new(target.clone(), cols).map_err(SourceError::arrow("conforming batch to the snapshot schema"))
}

/// A data file, or the row groups of it that start inside `[start, start + len)`.
#[derive(Debug, Clone)]
pub struct FileRange {
    pub file: Arc<DataFile>,
    pub data_seq: i64,
    pub start: i64,
    pub len: i64,
}

impl FileRange {
    pub fn whole(file: Arc<DataFile>, data_seq: i64) -> Self {
        let len = file.size.max(1);
        Self {
            file,
            data_seq,
            start: 0,
            len,
        }
    }
}

/// The rows of a range conformed to `target`, each batch with the file position of its first row.
pub struct RangeRows {
    pub batches: Vec<(RecordBatch, u64)>,
    pub bytes: u64,
}

pub fn read_range(storage: &Storage, range: &FileRange, target: &SchemaRef) -> Result<RangeRows, SourceError> {
    read_range_at(storage, range, target, None)
}

/// [`read_range`], only the rows at `positions` (ascending file positions) where given: each
/// batch then comes with position 0 and must not meet the file's deletes again (the positions
/// are the caller's choice of live rows).
pub fn read_range_at(
    storage: &Storage,
    range: &FileRange,
    target: &SchemaRef,
    positions: Option<&[u64]>,
) -> Result<RangeRows, SourceError> {
    let f = &range.file;
    if !f.format.eq_ignore_ascii_case("parquet") {
        return Err(SourceError::Unsupported {
            message: format!("{}: {} data files are not supported (Parquet only)", f.path, f.format),
        });
    }
    let path = local(&f.path)?;
    let builder = crate::source::parquet(storage, &path)?;
    let file_schema = builder.schema().clone();
    let has_ids = file_schema.fields().iter().any(|f| field_id(f).is_some());
    let wanted: Vec<usize> = file_schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, ff)| {
            target.fields().iter().any(|t| match (has_ids, field_id(t)) {
                (true, Some(id)) => field_id(ff) == Some(id),
                _ => t.name() == ff.name(),
            })
        })
        .map(|(i, _)| i)
        .collect();
    let meta = builder.metadata().clone();
    let groups = groups_in(&meta, range);
    let bytes: u64 = groups
        .iter()
        .map(|(i, _, _)| meta.row_group(*i).compressed_size().max(0) as u64)
        .sum();
    let mut out = RangeRows {
        batches: Vec::new(),
        bytes,
    };
    let Some(&(_, mut at, _)) = groups.first() else {
        return Ok(out);
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), wanted);
    let mut builder = builder
        .with_projection(mask)
        .with_row_groups(groups.iter().map(|g| g.0).collect())
        .with_batch_size(8192);
    if let Some(p) = positions {
        let read: Vec<(u64, u64)> = groups.iter().map(|g| (g.1, g.2)).collect();
        builder = builder.with_row_selection(crate::source::positions::selection(&read, p));
    }
    let reader = builder.build().map_err(SourceError::parquet(&path))?;
    let mut picked = positions.map(|p| p.iter().copied());
    for b in reader {
        let b = b.map_err(SourceError::arrow(format!("reading {}", path.display())))?;
        let n = b.num_rows() as u64;
        let b = conform_by_id(&b, target)?;
        // row lineage the file did not store: its first row id plus the position, its sequence number
        let defaults = (f.first_row_id, Some(range.data_seq));
        let b = match (super::lineage::has(target), &mut picked) {
            (false, _) => b,
            (true, None) => crate::source::lineage::fill(b, defaults, &mut (at..at + n), &f.path)?,
            (true, Some(p)) => crate::source::lineage::fill(b, defaults, p, &f.path)?,
        };
        out.batches.push((b, if picked.is_some() { 0 } else { at }));
        at += n;
    }
    Ok(out)
}

/// The row groups starting inside `range`: (index, first position, rows).
fn groups_in(meta: &parquet::file::metadata::ParquetMetaData, range: &FileRange) -> Vec<(usize, u64, u64)> {
    let (mut groups, mut pos) = (Vec::new(), 0u64);
    for (i, rg) in meta.row_groups().iter().enumerate() {
        let rg_start = rg
            .columns()
            .iter()
            .map(|c| c.dictionary_page_offset().unwrap_or(c.data_page_offset()))
            .min()
            .unwrap_or(0);
        if rg_start >= range.start && rg_start < range.start + range.len {
            groups.push((i, pos, rg.num_rows() as u64));
        }
        pos += rg.num_rows() as u64;
    }
    groups
}

/// Rows of `batch` where `mask` is true.
pub fn keep(batch: &RecordBatch, mask: &BooleanArray) -> Result<RecordBatch, SourceError> {
    arrow::compute::filter_record_batch(batch, mask).map_err(SourceError::arrow("applying deletes"))
}

/// `a AND NOT b`.
pub fn and_not(a: &BooleanArray, b: &BooleanArray) -> BooleanArray {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| Some(x.unwrap_or(false) && !y.unwrap_or(false)))
        .collect()
}
