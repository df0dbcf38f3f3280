//! Rows a copy-on-write rewrite carried over, told by row lineage alone (see [`super::lineage`]):
//! a keyless table's diff then reads whole only the rows the snapshot changed.
//!
//! Pass one reads the two lineage columns of every data file the part removed or added (two
//! longs a row instead of the row; the sequence number is the version that last changed a row),
//! and [`crate::source::lineage::uncarried`] tells the carried-over rows; pass two reads only
//! the other rows' positions. Files with equality deletes (their live rows need the data columns),
//! a row id twice on one side (not a lineage this reasoning holds for), or more lineage than half
//! of `read.memory.budget` (held during pass one only) keep the whole read.

use arrow_array::Array;

use super::lineage;
use super::manifest::CONTENT_EQUALITY_DELETES;
use super::monitor::{DiffPart, Plan, Task};
use super::reader::{read_range, read_range_at, FileRange};
use super::IcebergSource;
use crate::source::lineage::{Lineage, LINEAGE_ROW_BYTES};
use crate::source::{par, SourceError};

/// Per task of a part (old, then new): the file positions of the rows to read.
pub(super) type Positions = Vec<Vec<u64>>;

impl IcebergSource {
    /// The positions of the rows the part's old and new tasks changed (see the module doc);
    /// `None` where the whole read stays.
    pub(super) fn changed_positions(&self, plan: &Plan, part: &DiffPart) -> Result<Option<Positions>, SourceError> {
        let tasks: Vec<&Task> = part.old.iter().chain(&part.new).collect();
        let rows: i64 = tasks.iter().map(|(r, _)| r.file.record_count).sum();
        if rows.max(0) as usize * LINEAGE_ROW_BYTES > self.budget.get() / 2 {
            tracing::debug!(connector = %self.connector, snapshot = plan.snapshot.snapshot_id, rows,
                "row lineage of the rewritten files would take more than half of read.memory.budget: reading them whole");
            return Ok(None);
        }
        let equality = |(_, dels): &&Task| dels.iter().any(|d| d.file.content == CONTENT_EQUALITY_DELETES);
        if tasks.iter().any(equality) {
            return Ok(None);
        }
        let mut lineages: Vec<Lineage> = Vec::with_capacity(tasks.len());
        let read = |i: usize| self.lineage_of(plan, tasks[i]);
        par::ordered(tasks.len(), self.threads, &read, &mut |l| {
            lineages.push(l);
            Ok(())
        })?;
        let written: Vec<i64> = part.new.iter().map(|(range, _)| range.data_seq).collect();
        let unit = format!("snapshot {}", plan.snapshot.snapshot_id);
        Ok(crate::source::lineage::uncarried(
            &self.connector,
            &unit,
            &lineages,
            part.old.len(),
            &written,
        ))
    }

    /// The rows of one task at `positions` (live rows, chosen by [`Self::changed_positions`]),
    /// conformed to `schema`, labelled with their partition and file.
    pub(super) fn read_positions(
        &self,
        schema: &arrow_schema::SchemaRef,
        (range, _): &Task,
        positions: &[u64],
    ) -> Result<super::LabelledBatches, SourceError> {
        let rows = read_range_at(&self.storage, range, schema, Some(positions))?;
        let label = (range.file.partition.clone(), range.file.path.clone());
        let batches: Vec<_> = rows
            .batches
            .into_iter()
            .map(|(b, _)| b)
            .filter(|b| b.num_rows() > 0)
            .collect();
        let labels = vec![label; batches.len()];
        Ok((batches, labels, rows.bytes))
    }

    /// The live rows of one task: position, row id and last-updated sequence number.
    fn lineage_of(&self, plan: &Plan, (range, dels): &Task) -> Result<Lineage, SourceError> {
        let schema = lineage::extended(&std::sync::Arc::new(arrow_schema::Schema::empty()));
        let refs: Vec<_> = dels.iter().collect();
        let set = plan.deletes.for_file(&range.file, &refs, &plan.schema)?;
        let mut out = Lineage::new();
        for (b, first) in read_range(&self.storage, range, &schema)?.batches {
            let live = set.live(&b, first)?;
            let (ids, seqs) = (longs(&b, 0, range)?, longs(&b, 1, range)?);
            for i in (0..b.num_rows()).filter(|&i| live.value(i)) {
                out.push((first + i as u64, ids.value(i), seqs.value(i)));
            }
        }
        Ok(out)
    }
}

fn longs<'a>(
    b: &'a arrow_array::RecordBatch,
    i: usize,
    range: &FileRange,
) -> Result<&'a arrow_array::Int64Array, SourceError> {
    b.column(i)
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| SourceError::Unreadable {
            message: format!("{}: a row without lineage in a file that has it", range.file.path),
        })
}
