//! Reading Delta data and change-data files: Parquet columns matched to the table's schema (by
//! field id or physical name under column mapping, else by name; cast where a type widened; null
//! where a column was added later), partition columns filled from the action's
//! `partitionValues`, and the rows a deletion vector marks left out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ProjectionMask;
use roaring::RoaringTreemap;

use super::log::FileAction;
use super::schema::DeltaSchema;
use crate::source::SourceError;
use crate::storage::Storage;

/// `_change_type` of change-data files.
pub const CHANGE_TYPE: &str = "_change_type";

/// A log path (URI-encoded, relative to the table or absolute) as a storage path.
pub fn resolve(root: &Path, path: &str) -> PathBuf {
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    if decoded.contains("://") || decoded.starts_with("file:") {
        crate::storage::path_of(&decoded)
    } else if let Some(abs) = decoded.strip_prefix('/') {
        PathBuf::from(format!("/{abs}"))
    } else {
        root.join(decoded.as_ref())
    }
}

/// The hive-style partition of a file (`a=1/b=x`), in the table's partition column order.
pub fn partition_of(schema: &DeltaSchema, f: &FileAction) -> String {
    let values = f.partition_values.as_ref();
    schema
        .partition_columns
        .iter()
        .map(|c| {
            let v = values
                .and_then(|m| m.get(schema.physical_name(c)).or_else(|| m.get(c)))
                .and_then(|v| v.clone());
            format!("{c}={}", v.as_deref().unwrap_or("__HIVE_DEFAULT_PARTITION__"))
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// What reading needs besides the file.
pub struct Reader<'a> {
    pub storage: &'a Storage,
    pub root: &'a Path,
    pub schema: &'a DeltaSchema,
    /// Row tracking's materialized columns, read where the target ends with [`with_lineage`]'s.
    pub lineage: Option<&'a (String, String)>,
}

fn field_id(f: &Field) -> Option<i32> {
    f.metadata().get("PARQUET:field_id").and_then(|v| v.parse().ok())
}

fn partition_column(f: &Field, value: Option<&str>, rows: usize) -> Result<ArrayRef, SourceError> {
    let strings: ArrayRef = Arc::new(StringArray::from(vec![value.filter(|v| !v.is_empty()); rows]));
    if f.data_type() == &DataType::Utf8 {
        return Ok(strings);
    }
    arrow::compute::cast(&strings, f.data_type()).map_err(SourceError::arrow(format!(
        "partition value `{}` of column `{}` as {}",
        value.unwrap_or(""),
        f.name(),
        f.data_type()
    )))
}

/// Names of the lineage columns a keyless diff reads (see [`crate::source::lineage`]).
pub const ROW_ID: &str = "_row_id";
pub const ROW_VERSION: &str = "_row_commit_version";

/// `schema` with row tracking's two columns at its end.
pub fn with_lineage(schema: &SchemaRef) -> SchemaRef {
    let column = |name: &str| Field::new(name, DataType::Int64, true);
    crate::source::lineage::extended(schema, column(ROW_ID), column(ROW_VERSION))
}

impl Reader<'_> {
    /// The rows of `file` conformed to `target` (the table's columns, plus `_change_type` for a
    /// change-data file), rows in `deleted` left out; batches handed to `sink` in file order.
    /// Returns the bytes read.
    pub fn read(
        &self,
        file: &FileAction,
        target: &SchemaRef,
        deleted: Option<&RoaringTreemap>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        self.read_at(file, target, deleted, None, sink)
    }

    /// [`Self::read`], only the rows at `positions` (ascending file positions) where given: the
    /// caller's choice of rows, which `deleted` is not applied to again.
    pub fn read_at(
        &self,
        file: &FileAction,
        target: &SchemaRef,
        deleted: Option<&RoaringTreemap>,
        positions: Option<&[u64]>,
        sink: &mut dyn FnMut(RecordBatch) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        let path = resolve(self.root, &file.path);
        let (builder, size) = crate::source::parquet_sized(self.storage, &path)?;
        let file_schema = builder.schema().clone();
        let by_id = self.schema.mapped && file_schema.fields().iter().any(|f| field_id(f).is_some());
        let lineage = match (self.lineage, target.fields().len()) {
            (Some(l), n)
                if n >= 2 && target.field(n - 2).name() == ROW_ID && target.field(n - 1).name() == ROW_VERSION =>
            {
                Some(l)
            }
            _ => None,
        };
        let sources = self.column_sources(&file_schema, target, by_id, lineage);
        let mut wanted: Vec<usize> = sources.iter().flatten().copied().collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mask = ProjectionMask::roots(builder.parquet_schema(), wanted.clone());
        let mut builder = builder.with_projection(mask).with_batch_size(8192);
        if let Some(p) = positions {
            let groups = crate::source::positions::row_groups(builder.metadata());
            builder = builder.with_row_selection(crate::source::positions::selection(&groups, p));
        }
        let reader = builder.build().map_err(SourceError::parquet(&path))?;
        let mut picked = positions.map(|p| p.iter().copied());
        let deleted = deleted.filter(|_| positions.is_none());
        let values = file.partition_values.as_ref();
        let mut at = 0u64;
        for b in reader {
            let b = b.map_err(SourceError::arrow(format!("reading {}", path.display())))?;
            let n = b.num_rows();
            let cols = self.conform(&b, target, &sources, &wanted, &path, values)?;
            let batch = RecordBatch::try_new(target.clone(), cols).map_err(SourceError::arrow(format!(
                "{}: conforming to the table schema",
                path.display()
            )))?;
            let batch = match lineage {
                Some(_) => {
                    let defaults = (file.base_row_id, file.default_row_commit_version);
                    let rows: &mut dyn Iterator<Item = u64> = match &mut picked {
                        Some(p) => p,
                        None => &mut (at..at + n as u64),
                    };
                    crate::source::lineage::fill(batch, defaults, rows, &file.path)?
                }
                None => batch,
            };
            let batch = match deleted {
                Some(set) if !set.is_empty() => {
                    let live: BooleanArray = (0..n as u64).map(|r| Some(!set.contains(at + r))).collect();
                    arrow::compute::filter_record_batch(&batch, &live).map_err(SourceError::arrow("deletion vector"))?
                }
                _ => batch,
            };
            at += n as u64;
            if batch.num_rows() > 0 {
                sink(batch)?;
            }
        }
        Ok(size)
    }
    /// For each column of `target`, the file column it is read from (by field id where the table
    /// maps columns and the file has ids, else by physical name); `None` for a partition column
    /// (from the file's partition values) or one the file lacks (nulls).
    fn column_sources(
        &self,
        file_schema: &Schema,
        target: &SchemaRef,
        by_id: bool,
        lineage: Option<&(String, String)>,
    ) -> Vec<Option<usize>> {
        let source_of = |t: &Field| -> Option<usize> {
            if self.schema.partition_columns.iter().any(|p| p == t.name()) {
                return None;
            }
            // row tracking's columns, materialized under the names the table's settings give
            match (lineage, t.name().as_str()) {
                (Some((id, _)), ROW_ID) => return file_schema.index_of(id).ok(),
                (Some((_, version)), ROW_VERSION) => return file_schema.index_of(version).ok(),
                _ => {}
            }
            let (name, id) = match self.schema.physical.get(t.name()) {
                Some((p, id)) => (p.as_str(), *id),
                None => (t.name().as_str(), None),
            };
            match (by_id, id) {
                (true, Some(id)) => file_schema.fields().iter().position(|f| field_id(f) == Some(id)),
                _ => file_schema.index_of(name).ok(),
            }
        };
        target.fields().iter().map(|t| source_of(t)).collect()
    }

    /// The columns of `target` from batch `b` (which holds the `wanted` file columns in file
    /// order), cast where the file's type differs; partition columns from `values`.
    fn conform(
        &self,
        b: &RecordBatch,
        target: &SchemaRef,
        sources: &[Option<usize>],
        wanted: &[usize],
        path: &Path,
        values: Option<&HashMap<String, Option<String>>>,
    ) -> Result<Vec<ArrayRef>, SourceError> {
        let n = b.num_rows();
        let mut cols = Vec::with_capacity(target.fields().len());
        for (t, src) in target.fields().iter().zip(sources) {
            let col = match src {
                Some(i) => {
                    // the projected batch holds the wanted columns in file order
                    let j = wanted
                        .binary_search(i)
                        .map_err(|_| SourceError::format(path, "projection"))?;
                    let c = b.column(j);
                    if c.data_type() == t.data_type() {
                        c.clone()
                    } else {
                        crate::source::rows::cast(c, t.data_type()).map_err(SourceError::arrow(format!(
                            "{}: column `{}` ({} → {})",
                            path.display(),
                            t.name(),
                            c.data_type(),
                            t.data_type()
                        )))?
                    }
                }
                None if self.schema.partition_columns.iter().any(|p| p == t.name()) => {
                    let v = values
                        .and_then(|m| m.get(self.schema.physical_name(t.name())).or_else(|| m.get(t.name())))
                        .and_then(|v| v.as_deref());
                    partition_column(t, v, n)?
                }
                None => arrow_array::new_null_array(t.data_type(), n),
            };
            cols.push(col);
        }
        Ok(cols)
    }
}

/// The table's schema with `_change_type` appended (what a change-data file holds).
pub fn with_change_type(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(CHANGE_TYPE, DataType::Utf8, true));
    Arc::new(Schema::new(fields))
}

/// A change-data batch split into its old side (`delete`, `update_preimage`) and new side
/// (`insert`, `update_postimage`), `_change_type` dropped.
pub fn split_changes(batch: &RecordBatch, path: &str) -> Result<(RecordBatch, RecordBatch), SourceError> {
    let last = batch.num_columns() - 1;
    let types = batch
        .column(last)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| SourceError::format(path, "`_change_type` is not a string column"))?;
    let mut old = Vec::with_capacity(types.len());
    for i in 0..types.len() {
        old.push(match types.is_valid(i).then(|| types.value(i)) {
            Some("delete" | "update_preimage") => true,
            Some("insert" | "update_postimage") => false,
            other => {
                return Err(SourceError::format(
                    path,
                    format!(
                        "row {i}: `_change_type` {other:?} is not insert, delete, update_preimage or update_postimage"
                    ),
                ))
            }
        });
    }
    let table = batch
        .project(&(0..last).collect::<Vec<_>>())
        .map_err(SourceError::arrow("dropping _change_type"))?;
    let is_old = BooleanArray::from(old);
    let is_new = arrow::compute::not(&is_old).map_err(SourceError::arrow("change sides"))?;
    let f =
        |m: &BooleanArray| arrow::compute::filter_record_batch(&table, m).map_err(SourceError::arrow("change sides"));
    Ok((f(&is_old)?, f(&is_new)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_paths_resolve_against_the_table() {
        let root = Path::new("/t");
        assert_eq!(resolve(root, "p=a%20b/f.parquet"), PathBuf::from("/t/p=a b/f.parquet"));
        assert_eq!(resolve(root, "file:///x/f.parquet"), PathBuf::from("/x/f.parquet"));
        assert_eq!(resolve(root, "/abs/f.parquet"), PathBuf::from("/abs/f.parquet"));
    }

    #[test]
    fn change_rows_split_into_sides() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(CHANGE_TYPE, DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(arrow_array::Int64Array::from(vec![1, 1, 2, 3])),
                Arc::new(StringArray::from(vec![
                    "update_preimage",
                    "update_postimage",
                    "insert",
                    "delete",
                ])),
            ],
        )
        .expect("batch");
        let (old, new) = split_changes(&b, "c.parquet").expect("splits");
        assert_eq!((old.num_rows(), new.num_rows(), old.num_columns()), (2, 2, 1));
    }
}
