//! Row lineage, shared by the formats that have it (Iceberg v3 `_row_id` /
//! `_last_updated_sequence_number`, Delta row tracking's row ids and row commit versions): a row
//! id kept through updates and rewrites, stored in the file where a writer copied or updated the
//! row, else the file's first row id plus the row's position in it; and the version that last
//! changed the row, stored, else the file's. A keyless table's diff is keyed by the row id where
//! every file it reads has lineage: an updated row is one `u`, not a `d` and a `c`. The two
//! columns ride at the end of the batches the diff reads and are taken off before the events are
//! made.
//!
//! A copy-on-write rewrite carries most rows over unchanged: [`uncarried`] tells them from their
//! lineage alone, so the diff reads whole only the rows the version changed.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use hashbrown::{HashMap, HashSet};

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
                why: crate::source::Unreadable::Damaged,
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
            why: crate::source::Unreadable::Damaged,
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
            why: crate::source::Unreadable::Internal,
            message: "a batch without its row lineage columns".into(),
        })?;
        let id = b
            .column(n)
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
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

/// What a lineage pass keeps of a file's live row: (position in the file, row id, version that
/// last changed it).
pub type Lineage = Vec<(u64, i64, i64)>;

/// Bytes a lineage pass holds a row (its [`Lineage`] entry and a table slot).
pub const LINEAGE_ROW_BYTES: usize = 48;

/// The rows of a rewrite that were not carried over, per file: `lineages` holds the live rows of
/// the `old` removed files, then of the added files, each written at version `written[i]`.
///
/// A row of an added file whose version is older than its file's was copied, not written; it is
/// carried over when a removed file held the same row id at the same version (writers give an
/// updated row the new version, so the images are the same). Both copies are left out: a row id
/// on both sides with the same image emits nothing, so the diff of the other rows gives the same
/// events. `None` where a row id is twice on one side (not a lineage this reasoning holds for).
/// Logged and counted per `connector`.
pub fn uncarried(
    connector: &str,
    unit: &str,
    lineages: &[Lineage],
    old: usize,
    written: &[i64],
) -> Option<Vec<Vec<u64>>> {
    let (was, now) = lineages.split_at(old.min(lineages.len()));
    // rows of the added files copied with their lineage: row id → version
    let mut copied: HashMap<i64, i64> = HashMap::with_capacity(now.iter().map(Vec::len).sum());
    for (rows, &version) in now.iter().zip(written) {
        for &(_, id, v) in rows.iter().filter(|r| r.2 < version) {
            if copied.insert(id, v).is_some() {
                return None;
            }
        }
    }
    let mut carried: HashSet<i64> = HashSet::with_capacity(copied.len());
    for &(_, id, v) in was.iter().flatten() {
        if copied.get(&id) == Some(&v) && !carried.insert(id) {
            return None;
        }
    }
    let keep = |rows: &Lineage| -> Vec<u64> { rows.iter().filter(|r| !carried.contains(&r.1)).map(|r| r.0).collect() };
    let positions: Vec<Vec<u64>> = lineages.iter().map(keep).collect();
    let rows: usize = lineages.iter().map(Vec::len).sum();
    let read: usize = positions.iter().map(Vec::len).sum();
    tracing::debug!(
        connector,
        unit,
        rows,
        carried = carried.len(),
        read,
        "rewrite narrowed by row lineage"
    );
    crate::metrics::LINEAGE_CARRIED_ROWS
        .with_label_values(&[connector])
        .inc_by(2 * carried.len() as u64);
    Some(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carried_rows_are_left_out_on_both_sides() {
        // old file: ids 1..=3 at version 1; new file (version 2): 1 copied, 2 updated, 4 new
        let old = vec![(0, 1, 1), (1, 2, 1), (2, 3, 1)];
        let new = vec![(0, 1, 1), (1, 2, 2), (2, 4, 2)];
        let got = uncarried("t", "v2", &[old.clone(), new], 1, &[2]);
        assert_eq!(got, Some(vec![vec![1, 2], vec![1, 2]]));
        // a copied row id twice: no narrowing
        let twice = vec![(0, 1, 1), (1, 1, 1)];
        assert_eq!(uncarried("t", "v2", &[old, twice], 1, &[2]), None);
    }
}
