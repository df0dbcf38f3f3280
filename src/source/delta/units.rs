//! Reading a Delta plan's pieces for the shared driver ([`crate::source::plan`]): a removed or
//! added file (its live rows, or the rows row tracking chose), a file whose deletion vector
//! changed (the rows it now hides against the rows it shows again), a change-data file (both
//! sides), a split's file.

use arrow_array::{BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use roaring::RoaringTreemap;

use super::log::FileAction;
use super::plan::{file_split, Plan};
use super::read::{self, split_changes, with_change_type, Reader};
use super::{dv, DeltaSource};
use crate::source::lineage::Lineage;
use crate::source::plan::{Piece, PieceOf, PieceReader, ReadEnv};
use crate::source::sides::Sides;
use crate::source::{SourceError, SplitSpec};

impl DeltaSource {
    pub(super) fn reader<'a>(&'a self, plan: &'a Plan) -> Reader<'a> {
        Reader {
            storage: &self.storage,
            root: &self.log.root,
            schema: &plan.meta.schema,
            lineage: plan.meta.lineage.as_ref(),
        }
    }

    pub(super) fn deleted(&self, f: &FileAction) -> Result<Option<RoaringTreemap>, SourceError> {
        f.deletion_vector
            .as_ref()
            .map(|d| dv::read(&self.storage, &self.log.root, &f.path, d))
            .transpose()
    }
}

impl PieceReader for DeltaSource {
    type Plan = Plan;

    fn env(&self) -> &ReadEnv {
        &self.env
    }

    fn with_lineage(&self, schema: &SchemaRef) -> SchemaRef {
        read::with_lineage(schema)
    }

    fn rows_split(&self, plan: &Plan, _i: usize, files: &[FileAction]) -> SplitSpec {
        match files.first() {
            Some(f) => file_split(&plan.meta.schema, f),
            None => SplitSpec::default(),
        }
    }

    /// A removed or added file (only the live rows at `positions` where row tracking chose
    /// them, see [`super::carried`]), a file whose deletion vector changed, or a change-data
    /// file.
    fn read_piece(
        &self,
        plan: &Plan,
        target: &SchemaRef,
        piece: PieceOf<'_, Self>,
        positions: Option<&[u64]>,
    ) -> Result<Sides, SourceError> {
        let reader = self.reader(plan);
        let mut sides = Sides::default();
        let label = |f: &FileAction| (read::partition_of(&plan.meta.schema, f), f.path.clone());
        match piece {
            Piece::Old(f) | Piece::New(f) => {
                let is_new = matches!(piece, Piece::New(_));
                if positions.is_some_and(|p| p.is_empty()) {
                    return Ok(sides);
                }
                let deleted = match positions {
                    Some(_) => None,
                    None => self.deleted(f)?,
                };
                let l = label(f);
                let side = if is_new { &mut sides.new } else { &mut sides.old };
                sides.bytes = reader.read_at(f, target, deleted.as_ref(), positions, &mut |b| {
                    side.push((b, l.clone()));
                    Ok(())
                })?;
            }
            Piece::Rewritten((was, now)) => {
                let (was_deleted, now_deleted) = (
                    self.deleted(was)?.unwrap_or_default(),
                    self.deleted(now)?.unwrap_or_default(),
                );
                // only the rows whose deletion state changed are read: live before and hidden now
                // (the old side), or shown again (the new side)
                let changed: Vec<u64> = (&was_deleted ^ &now_deleted).iter().collect();
                if changed.is_empty() {
                    return Ok(sides);
                }
                let l = label(now);
                let mut at = 0usize;
                let bytes = reader.read_at(now, target, None, Some(&changed), &mut |b| {
                    let rows = changed
                        .get(at..at + b.num_rows())
                        .ok_or_else(|| SourceError::Unreadable {
                            why: crate::source::Unreadable::Internal,
                            message: format!("{}: more rows read than chosen", now.path),
                        })?;
                    at += b.num_rows();
                    let gone: BooleanArray = rows.iter().map(|&r| Some(now_deleted.contains(r))).collect();
                    let back = arrow::compute::not(&gone).map_err(SourceError::arrow("deletion vector change"))?;
                    let f = |m: &BooleanArray| {
                        arrow::compute::filter_record_batch(&b, m).map_err(SourceError::arrow("deletion vector change"))
                    };
                    sides.push_pair(f(&gone)?, f(&back)?, &l);
                    Ok(())
                })?;
                sides.bytes = bytes;
            }
            Piece::Changes(f) => {
                let l = label(f);
                let path = f.path.clone();
                let bytes = reader.read(f, &with_change_type(target), None, &mut |b| {
                    let (old, new) = split_changes(&b, &path)?;
                    sides.push_pair(old, new, &l);
                    Ok(())
                })?;
                sides.bytes = bytes;
            }
        }
        Ok(sides)
    }

    fn read_files(
        &self,
        plan: &Plan,
        target: &SchemaRef,
        files: &[FileAction],
        sink: &mut dyn FnMut(RecordBatch, Option<(String, String)>) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError> {
        let mut bytes = 0;
        for f in files {
            let deleted = self.deleted(f)?;
            bytes += self
                .reader(plan)
                .read(f, target, deleted.as_ref(), &mut |b| sink(b, None))?;
        }
        Ok(bytes)
    }

    fn lineage_of(&self, plan: &Plan, f: &FileAction) -> Result<Lineage, SourceError> {
        self.file_lineage(plan, f)
    }

    fn written(&self, plan: &Plan, f: &FileAction) -> i64 {
        f.default_row_commit_version.unwrap_or(plan.version as i64)
    }
}
