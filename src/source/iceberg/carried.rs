//! Rows a copy-on-write rewrite carried over, told by row lineage alone (see [`super::lineage`]):
//! a keyless table's diff then reads whole only the rows the snapshot changed.
//!
//! The passes are the shared driver's ([`crate::source::plan::changed_positions`]); here
//! is what Iceberg adds: each live row's lineage (the sequence number is the snapshot that last
//! changed a row), and the parts it declines: files with equality deletes (their live rows need
//! the data columns), or more rows than half of `read.memory.budget` holds as lineage (known
//! from the manifests before anything is read).

use arrow_array::Array;

use super::lineage;
use super::manifest::CONTENT_EQUALITY_DELETES;
use super::monitor::{DiffPart, Plan, Task};
use super::reader::{read_range, FileRange};
use super::IcebergSource;
use crate::source::lineage::{Lineage, LINEAGE_ROW_BYTES};
use crate::source::SourceError;

impl IcebergSource {
    /// Whether row lineage may narrow the part (see the module doc): no equality deletes, and
    /// its files' rows' lineage within half of the budget.
    pub(super) fn lineage_fits(&self, plan: &Plan, part: &DiffPart) -> bool {
        let tasks: Vec<&Task> = part.old.iter().chain(&part.new).collect();
        let rows: i64 = tasks.iter().map(|(r, _)| r.file.record_count).sum();
        if rows.max(0) as usize * LINEAGE_ROW_BYTES > self.env.budget.get() / 2 {
            tracing::debug!(connector = %self.env.connector, snapshot = plan.snapshot.snapshot_id, rows,
                "row lineage of the rewritten files would take more than half of read.memory.budget: reading them whole");
            return false;
        }
        let equality = |(_, dels): &&Task| dels.iter().any(|d| d.file.content == CONTENT_EQUALITY_DELETES);
        !tasks.iter().any(equality)
    }

    /// The live rows of one task: position, row id and last-updated sequence number.
    pub(super) fn task_lineage(&self, plan: &Plan, (range, dels): &Task) -> Result<Lineage, SourceError> {
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
            why: crate::source::Unreadable::Damaged,
            message: format!("{}: a row without lineage in a file that has it", range.file.path),
        })
}
