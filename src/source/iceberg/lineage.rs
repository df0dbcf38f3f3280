//! Row lineage (format v3): every row of a data file has a row id, kept through updates and
//! rewrites, and the sequence number of the commit that last changed it. A row's `_row_id` is the
//! value its file stores, else the file's `first_row_id` (inherited from its manifest, see
//! [`super::manifest`]) plus its position in the file; its `_last_updated_sequence_number` is
//! the stored value, else the file's data sequence number. Writers store both when they copy a
//! row into a new file (a copy-on-write rewrite, compaction), and the row id alone when they
//! update it.
//!
//! A keyless table's diff is keyed by row id where every file of the diff has lineage: a row
//! that was updated is one `u` (its old and new image share the id) instead of a `d` and a `c`,
//! and a row carried over by a rewrite (same id, same sequence number, same image) emits nothing.
//! The two columns ride at the end of the batches the diff reads and are taken off before the
//! events are made.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::metadata::{field_id, FIELD_ID};
use super::monitor::DiffPart;
use super::reader::FileRange;
use crate::source::{SourceError, SplitChanges};

/// Reserved field ids of the lineage columns.
const ROW_ID: i32 = 2147483540;
const LAST_UPDATED: i32 = 2147483539;

/// Whether every data file the part reads has lineage (a first row id), so that every row has
/// a row id.
pub(super) fn usable(part: &DiffPart) -> bool {
    let files = part.old.iter().chain(&part.new).map(|(r, _)| r);
    files
        .chain(part.rewritten.iter().map(|(r, _, _)| r))
        .all(|r| r.file.first_row_id.is_some())
}

/// `schema` with the two lineage columns at its end.
pub(super) fn extended(schema: &SchemaRef) -> SchemaRef {
    let column = |name: &str, id: i32| {
        Arc::new(
            Field::new(name, DataType::Int64, true)
                .with_metadata(HashMap::from([(FIELD_ID.to_string(), id.to_string())])),
        )
    };
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.push(column("_row_id", ROW_ID));
    fields.push(column("_last_updated_sequence_number", LAST_UPDATED));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `schema` ends with the lineage columns (see [`extended`]).
pub(super) fn has(schema: &SchemaRef) -> bool {
    let n = schema.fields().len();
    n >= 2 && field_id(schema.field(n - 2)) == Some(ROW_ID) && field_id(schema.field(n - 1)) == Some(LAST_UPDATED)
}

/// A batch read from `range` (conformed to an [`extended`] schema; `positions` yields the file
/// position of each of its rows, before deletes) with the lineage its file did not store filled
/// in.
pub(super) fn fill(
    batch: RecordBatch,
    range: &FileRange,
    positions: &mut dyn Iterator<Item = u64>,
) -> Result<RecordBatch, SourceError> {
    let n = batch.num_columns();
    let column = |i: usize| -> Result<Int64Array, SourceError> {
        batch
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| SourceError::Unreadable {
                message: format!("{}: a row lineage column is not a long", range.file.path),
            })
    };
    let (ids, seqs) = (column(n - 2)?, column(n - 1)?);
    let first = range.file.first_row_id;
    let ids: Int64Array = (0..ids.len())
        .zip(positions)
        .map(|(i, pos)| match ids.is_valid(i) {
            true => Some(ids.value(i)),
            false => first.map(|f| f + pos as i64),
        })
        .collect();
    if ids.len() != seqs.len() {
        return Err(SourceError::Unreadable {
            message: format!("{}: fewer row positions than rows read", range.file.path),
        });
    }
    let seqs: Int64Array = (0..seqs.len())
        .map(|i| {
            Some(if seqs.is_valid(i) {
                seqs.value(i)
            } else {
                range.data_seq
            })
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[n - 2] = Arc::new(ids);
    columns[n - 1] = Arc::new(seqs);
    RecordBatch::try_new(batch.schema(), columns).map_err(SourceError::arrow("filling in row lineage"))
}

/// Changes read with an [`extended`] schema, the lineage columns taken off.
pub(super) fn strip(mut changes: SplitChanges) -> Result<SplitChanges, SourceError> {
    let batches = changes
        .batches
        .iter()
        .map(|b| b.project(&(0..b.num_columns().saturating_sub(2)).collect::<Vec<_>>()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(SourceError::arrow("taking off the row lineage columns"))?;
    changes.batches = Arc::new(batches);
    Ok(changes)
}
