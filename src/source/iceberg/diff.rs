//! Reading an Iceberg plan's pieces for the shared driver ([`crate::source::plan`]): a data file
//! with the delete files that apply to it (whole, or the rows lineage chose), a rewritten data
//! file (the rows its new deletes hide against the rows they show again), a split's files.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::manifest;
use super::monitor::{split_spec, DiffPart, Plan, Task};
use super::reader::{and_not, keep, read_range, read_range_at, FileRange};
use super::{lineage, IcebergSource};
use crate::source::lineage::Lineage;
use crate::source::plan::{Piece, PieceOf, PieceReader, ReadEnv};
use crate::source::sides::Sides;
use crate::source::{SourceError, SplitSpec};

impl IcebergSource {
    /// A rewritten data file: rows deleted by this snapshot (old side) and rows it brought back.
    pub(super) fn read_rewritten(
        &self,
        plan: &Plan,
        schema: &SchemaRef,
        range: &FileRange,
        before: &[manifest::Entry],
        after: &[manifest::Entry],
    ) -> Result<Sides, SourceError> {
        let b_refs: Vec<_> = before.iter().collect();
        let a_refs: Vec<_> = after.iter().collect();
        let was = plan.deletes.for_file(&range.file, &b_refs, &plan.schema)?;
        let now = plan.deletes.for_file(&range.file, &a_refs, &plan.schema)?;
        let rows = read_range(&self.storage, range, schema)?;
        let mut sides = Sides {
            bytes: rows.bytes,
            ..Default::default()
        };
        let label = (range.file.partition.clone(), range.file.path.clone());
        for (b, first) in rows.batches {
            let (live_was, live_now) = (was.live(&b, first)?, now.live(&b, first)?);
            let gone = keep(&b, &and_not(&live_was, &live_now))?;
            let back = keep(&b, &and_not(&live_now, &live_was))?;
            sides.old.extend((gone.num_rows() > 0).then(|| (gone, label.clone())));
            sides.new.extend((back.num_rows() > 0).then(|| (back, label.clone())));
        }
        Ok(sides)
    }
}

impl PieceReader for IcebergSource {
    type Plan = Plan;

    fn env(&self) -> &ReadEnv {
        &self.env
    }

    fn with_lineage(&self, schema: &SchemaRef) -> SchemaRef {
        lineage::extended(schema)
    }

    fn rows_split(&self, _plan: &Plan, i: usize, tasks: &[Task]) -> SplitSpec {
        split_spec(i, tasks)
    }

    fn read_piece(
        &self,
        plan: &Plan,
        target: &SchemaRef,
        piece: PieceOf<'_, Self>,
        positions: Option<&[u64]>,
    ) -> Result<Sides, SourceError> {
        let (task, is_new) = match piece {
            Piece::Old(t) => (t, false),
            Piece::New(t) => (t, true),
            Piece::Rewritten((r, b, a)) => return self.read_rewritten(plan, target, r, b, a),
            Piece::Changes(_) => {
                return Err(SourceError::Unreadable {
                    why: crate::source::Unreadable::Internal,
                    message: format!(
                        "snapshot {}: Iceberg plans no change-data files",
                        plan.snapshot.snapshot_id
                    ),
                })
            }
        };
        let mut sides = Sides::default();
        let side = if is_new { &mut sides.new } else { &mut sides.old };
        sides.bytes = match positions {
            Some(p) => {
                let (range, _) = task;
                let rows = read_range_at(&self.storage, range, target, Some(p))?;
                let label = (range.file.partition.clone(), range.file.path.clone());
                side.extend(
                    rows.batches
                        .into_iter()
                        .filter(|(b, _)| b.num_rows() > 0)
                        .map(|(b, _)| (b, label.clone())),
                );
                rows.bytes
            }
            None => self.read_tasks(plan, target, std::slice::from_ref(task), &mut |b, label| {
                side.push((b, label));
                Ok(())
            })?,
        };
        Ok(sides)
    }

    fn read_files(
        &self,
        plan: &Plan,
        target: &SchemaRef,
        tasks: &[Task],
        sink: &mut dyn FnMut(RecordBatch, Option<(String, String)>) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        self.read_tasks(plan, target, tasks, &mut |b, label| sink(b, Some(label)))
    }

    fn lineage_of(&self, plan: &Plan, task: &Task) -> Result<Lineage, SourceError> {
        self.task_lineage(plan, task)
    }

    fn written(&self, _plan: &Plan, (range, _): &Task) -> i64 {
        range.data_seq
    }

    fn may_narrow(&self, plan: &Plan, part: &DiffPart) -> bool {
        self.lineage_fits(plan, part)
    }
}
