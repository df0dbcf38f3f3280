//! Rows a Delta rewrite carried over, told by row tracking alone: a keyless table's version
//! that removed and added files (an UPDATE, DELETE or MERGE without deletion vectors rewrites
//! whole files, copying the rows it did not touch) reads whole only the rows it changed.
//!
//! The passes are the shared driver's ([`crate::source::plan::changed_positions`]); here is each
//! live row's lineage: row tracking's materialized row id and row commit version where the
//! writer stored them, else the file's `baseRowId` + position and `defaultRowCommitVersion`.

use std::sync::Arc;

use arrow_array::{Array, Int64Array};
use arrow_schema::Schema;

use super::log::FileAction;
use super::plan::Plan;
use super::read::with_lineage;
use super::DeltaSource;
use crate::source::lineage::Lineage;
use crate::source::SourceError;

impl DeltaSource {
    /// The live rows of one file: position, row id and row commit version.
    pub(super) fn file_lineage(&self, plan: &Plan, f: &FileAction) -> Result<Lineage, SourceError> {
        let deleted = self.deleted(f)?;
        let schema = with_lineage(&Arc::new(Schema::empty()));
        let (mut out, mut at) = (Lineage::new(), 0u64);
        self.reader(plan).read(f, &schema, None, &mut |b| {
            let long = |i: usize| {
                b.column(i)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .filter(|a| a.null_count() == 0)
                    .cloned()
                    .ok_or_else(|| SourceError::Unreadable {
                        why: crate::source::Unreadable::Damaged,
                        message: format!("{}: a row without row tracking in a file that has it", f.path),
                    })
            };
            let (ids, versions) = (long(0)?, long(1)?);
            for i in 0..b.num_rows() {
                let pos = at + i as u64;
                if !deleted.as_ref().is_some_and(|d| d.contains(pos)) {
                    out.push((pos, ids.value(i), versions.value(i)));
                }
            }
            at += b.num_rows() as u64;
            Ok(())
        })?;
        Ok(out)
    }
}
