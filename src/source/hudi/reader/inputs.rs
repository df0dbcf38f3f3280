//! A change unit's inputs: every file it needs must still be there, and a file that is gone is
//! named with who removed it (a completed clean: skip or rescan; something outside Hudi: restore
//! it), never read as a gap.

use std::collections::BTreeSet;

use super::super::files::Listings;
use super::super::timeline::CommitMetadata;
use super::super::{join_path, HudiSource};
use crate::source::{SourceError, Unit};

impl HudiSource {
    /// Every file a change unit needs must still be there: the files the instant wrote, and the
    /// previous slices of the file groups it touched. A cleaned file is an error, never a gap.
    /// File groups in `optional` (their CDC files log the before images) need no previous slice.
    pub(super) fn verify_inputs(
        &self,
        md: &CommitMetadata,
        listings: &Listings,
        optional: &BTreeSet<(String, String)>,
    ) -> Result<(), SourceError> {
        let gone = |what: String| SourceError::Io {
            path: what.into(),
            source: std::io::ErrorKind::NotFound.into(),
        };
        for (p, w) in md.writes() {
            if let Some(path) = &w.path {
                if !self.table.storage.exists(&self.table.path.join(path)) {
                    return Err(gone(self.table.path.join(path).display().to_string()));
                }
            }
            let (Some(prev), Some(fg)) = (w.prev_slice(), w.file_id.as_deref()) else {
                continue;
            };
            if optional.contains(&(p.to_string(), fg.to_string())) {
                continue;
            }
            let files = listings.partition(p)?;
            let has_prev = files.base.get(fg).is_some_and(|b| b.iter().any(|f| f.instant == prev))
                || (self.table.is_mor() && files.logs.get(fg).is_some_and(|l| !l.is_empty()));
            if !has_prev {
                return Err(gone(format!(
                    "{} (previous slice of file group {fg})",
                    join_path(p, &format!("{fg}_*_{prev}.parquet"))
                )));
            }
        }
        for (p, fg) in md.replaced() {
            let files = listings.partition(p)?;
            if !files.base.contains_key(fg) && !files.logs.contains_key(fg) {
                return Err(gone(format!(
                    "{} (every file of replaced file group {fg})",
                    join_path(p, fg)
                )));
            }
        }
        Ok(())
    }

    /// A file the unit needs is gone: name it, and say whether a completed clean removed it (the
    /// way out is to skip or rescan) or something outside Hudi did (restore it: skipping would
    /// lose its rows silently).
    pub(in crate::source::hudi) fn explain_gone(&self, e: SourceError, unit: &Unit) -> SourceError {
        let path = match &e {
            SourceError::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => path.clone(),
            _ => return e,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (instant, file) = (&unit.position.version, path.display());
        let message = match super::super::timeline::cleaned_by(&self.table, &name) {
            Ok(Some(clean)) => {
                return SourceError::HistoryGone {
                    message: format!(
                "instant {instant}: file {file} was removed by clean {clean} before it was read; the changelog cannot be \
                 continued exactly. Ways out: restart with a new connector name and read.start-commit=latest (skip the \
                 gap), or read.start-commit=earliest (full rescan); keep the cleaner's retention longer than the \
                 connector's lag"
                    ),
                }
            }
            found => format!(
                "instant {instant}: file {file} is missing, and no completed clean on the active timeline removed it{}: it \
                 was deleted outside Hudi (a lifecycle rule, a manual delete, an incomplete copy) or the store is \
                 inconsistent. Restore the file (bucket versioning, backup) and restart; skipping it would lose its rows",
                match found {
                    Err(e) => format!(" (the cleans could not be read: {e})"),
                    Ok(_) => String::new(),
                }
            ),
        };
        SourceError::Unreadable {
            why: crate::source::Unreadable::Missing,
            message,
        }
    }
}
