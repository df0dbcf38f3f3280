//! Row lineage, shared by the formats that have it (Iceberg v3 `_row_id` /
//! `_last_updated_sequence_number`, Delta row tracking's row ids and row commit versions): a row
//! id kept through updates and rewrites, stored in the file where a writer copied or updated the
//! row, else the file's first row id plus the row's position in it; and the version that last
//! changed the row, stored, else the file's. A keyless table's diff is keyed by the row id where
//! every file it reads has lineage: an updated row is one `u`, not a `d` and a `c`. The two
//! columns ride at the end of the batches the diff reads and are taken off before the events are
//! made.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};

use super::{SourceError, SplitChanges};

/// `schema` with the row id and last-changed version columns at its end.
pub fn extended(schema: &SchemaRef, row_id: Field, version: Field) -> SchemaRef {
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(row_id));
    fields.push(Arc::new(version));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A file's batch conformed to an [`extended`] schema with the lineage it did not store filled
/// in: a row id `first_row_id` + its position (`positions` yields each row's position in the
/// file, before deletes), a version the file's `default_version`.
pub fn fill(
    batch: RecordBatch,
    (first_row_id, default_version): (Option<i64>, Option<i64>),
    positions: &mut dyn Iterator<Item = u64>,
    file: &str,
) -> Result<RecordBatch, SourceError> {
    let n = batch.num_columns();
    let column = |i: usize| -> Result<Int64Array, SourceError> {
        batch
            .column(i)
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| SourceError::Unreadable {
                message: format!("{file}: a row lineage column is not a long"),
            })
    };
    let (ids, versions) = (column(n - 2)?, column(n - 1)?);
    let ids: Int64Array = (0..ids.len())
        .zip(positions)
        .map(|(i, pos)| match ids.is_valid(i) {
            true => Some(ids.value(i)),
            false => first_row_id.map(|f| f + pos as i64),
        })
        .collect();
    if ids.len() != versions.len() {
        return Err(SourceError::Unreadable {
            message: format!("{file}: fewer row positions than rows read"),
        });
    }
    let versions: Int64Array = (0..versions.len())
        .map(|i| match versions.is_valid(i) {
            true => Some(versions.value(i)),
            false => default_version,
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[n - 2] = Arc::new(ids);
    columns[n - 1] = Arc::new(versions);
    RecordBatch::try_new(batch.schema(), columns).map_err(SourceError::arrow("filling in row lineage"))
}

/// [`super::sides::diff_split`] of a diff keyed by row id (`job` over an [`extended`] schema),
/// counted and logged as such, its changes handed on with the lineage columns taken off.
pub fn diff_split(
    job: &super::sides::DiffJob<'_>,
    split: &super::SplitSpec,
    buckets: u32,
    n: usize,
    read: &(dyn Fn(usize) -> Result<super::sides::Sides, SourceError> + Sync),
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    tracing::debug!(connector = %job.connector, unit = %job.unit, split = %split.id, "keyless diff keyed by row id (row lineage)");
    crate::metrics::LINEAGE_DIFFS.with_label_values(&[job.connector]).inc();
    super::sides::diff_split(job, split, buckets, n, read, &mut |c| emit(strip(c)?))
}

/// Changes read with an [`extended`] schema, the lineage columns taken off; each batch's row ids
/// kept for the events' `source.row_id`.
pub fn strip(mut changes: SplitChanges) -> Result<SplitChanges, SourceError> {
    let mut ids = Vec::with_capacity(changes.batches.len());
    let mut batches = Vec::with_capacity(changes.batches.len());
    for b in changes.batches.iter() {
        let n = b.num_columns().checked_sub(2).ok_or_else(|| SourceError::Unreadable {
            message: "a batch without its row lineage columns".into(),
        })?;
        let id = b
            .column(n)
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| SourceError::Unreadable {
                message: "a row lineage column is not a long".into(),
            })?;
        ids.push(id);
        batches.push(
            b.project(&(0..n).collect::<Vec<_>>())
                .map_err(SourceError::arrow("taking off the row lineage columns"))?,
        );
    }
    changes.batches = Arc::new(batches);
    changes.row_ids = Some(Arc::new(ids));
    Ok(changes)
}
