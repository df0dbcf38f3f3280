//! Rows a Delta rewrite carried over, told by row tracking alone: a keyless table's version
//! that removed and added files (an UPDATE, DELETE or MERGE without deletion vectors rewrites
//! whole files, copying the rows it did not touch) reads whole only the rows it changed.
//!
//! Pass one reads row tracking's two columns of every file the part removed or added (the
//! materialized row id and row commit version where the writer stored them, else the file's
//! `baseRowId` + position and `defaultRowCommitVersion`), live rows only;
//! [`crate::source::lineage::uncarried`] tells the carried-over rows (same row id and version
//! on both sides); pass two reads only the other rows' positions. A part with lineage beyond
//! half of `read.memory.budget` (held during pass one only) keeps the whole read.

use std::sync::Arc;

use arrow_array::{Array, Int64Array};
use arrow_schema::Schema;

use super::log::FileAction;
use super::plan::{DiffPart, Plan};
use super::read::with_lineage;
use super::DeltaSource;
use crate::source::lineage::{Lineage, LINEAGE_ROW_BYTES};
use crate::source::{par, SourceError};

/// Per file of a part (removed, then added): the positions of the live rows to read.
pub(super) type Positions = Vec<Vec<u64>>;

impl DeltaSource {
    /// The positions of the rows the part's removed and added files changed (see the module
    /// doc); `None` where the whole read stays (nothing both removed and added, a row id twice
    /// on one side, lineage beyond half of the budget).
    pub(super) fn changed_positions(&self, plan: &Plan, part: &DiffPart) -> Result<Option<Positions>, SourceError> {
        if part.old.is_empty() || part.new.is_empty() {
            return Ok(None);
        }
        let files: Vec<&FileAction> = part.old.iter().chain(&part.new).collect();
        let limit = self.budget.get() / 2 / LINEAGE_ROW_BYTES;
        let (mut lineages, mut rows, mut over) = (Vec::with_capacity(files.len()), 0usize, false);
        let read = |i: usize| self.lineage_of(plan, files[i]);
        let pass = par::ordered(files.len(), self.threads, &read, &mut |l: Lineage| {
            rows += l.len();
            lineages.push(l);
            over = rows > limit;
            match over {
                // stops the pass (told apart from a failed read by `over`)
                true => Err(SourceError::Unreadable {
                    message: "row tracking beyond the budget".into(),
                }),
                false => Ok(()),
            }
        });
        match pass {
            Err(_) if over => {
                tracing::debug!(connector = %self.connector, version = plan.version, rows,
                    "row tracking of the rewritten files would take more than half of read.memory.budget: reading them whole");
                return Ok(None);
            }
            r => r?,
        }
        let written: Vec<i64> = part
            .new
            .iter()
            .map(|f| f.default_row_commit_version.unwrap_or(plan.version as i64))
            .collect();
        let unit = format!("version {}", plan.version);
        Ok(crate::source::lineage::uncarried(
            &self.connector,
            &unit,
            &lineages,
            part.old.len(),
            &written,
        ))
    }

    /// The live rows of one file: position, row id and row commit version.
    fn lineage_of(&self, plan: &Plan, f: &FileAction) -> Result<Lineage, SourceError> {
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
