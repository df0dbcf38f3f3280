//! The Iceberg monitor: new snapshots after the last issued one (walking the parent chain), the
//! starting strategies, and the units they become, each with its plan (the plan types live here;
//! how a snapshot is planned is in `plan`). Snapshots one catalog commit added together are one
//! unit (see `commits`).

use std::sync::Arc;

use arrow_schema::SchemaRef;

use super::commits::Commits;
use super::deletes::DeleteReader;
use super::manifest::Entry;
use super::metadata::{arrow_schema, current_metadata_file, Snapshot, TableMetadata};
use super::reader::FileRange;
use super::IcebergSource;
use crate::config::StartingStrategy;
use crate::metrics::SkipReason;
use crate::source::plan::{PlanFile, VersionPlan};
use crate::source::{Position, SourceError, SplitSpec, Unit};

/// A file range to read with the delete files that apply to it.
pub type Task = (FileRange, Vec<Entry>);
/// A data file whose delete files changed: (range, deletes before, deletes after).
pub type Rewritten = (FileRange, Vec<Entry>, Vec<Entry>);

/// What a snapshot's unit reads (the shared model, see [`crate::source::plan`]).
pub type PlanKind = crate::source::plan::PlanKind<Task, Rewritten>;
/// Rows the snapshot removed (`old`, deletes as of the parent) against rows it added (`new`);
/// `rewritten` data files had their delete files changed.
pub type DiffPart = crate::source::plan::DiffPart<Task, Rewritten>;

impl PlanFile for FileRange {
    fn path(&self) -> &str {
        &self.file.path
    }
    fn bytes(&self) -> u64 {
        self.len.max(0) as u64
    }
    fn has_lineage(&self) -> bool {
        self.file.first_row_id.is_some()
    }
}

/// A task and a rewritten file plan as their range (`.0`).
macro_rules! plan_as_range {
    ($($t:ty),*) => {$(
        impl PlanFile for $t {
            fn path(&self) -> &str {
                self.0.path()
            }
            fn bytes(&self) -> u64 {
                self.0.bytes()
            }
            fn has_lineage(&self) -> bool {
                self.0.has_lineage()
            }
        }
    )*};
}
plan_as_range!(Task, Rewritten);

pub struct Plan {
    pub snapshot: Snapshot,
    pub schema: SchemaRef,
    pub kind: PlanKind,
    pub deletes: DeleteReader,
}

impl VersionPlan for Plan {
    type File = Task;
    type Rewrite = Rewritten;
    fn kind(&self) -> &PlanKind {
        &self.kind
    }
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }
    fn label(&self) -> String {
        format!("snapshot {}", self.snapshot.snapshot_id)
    }
    fn lineage_on(&self) -> bool {
        true
    }
}

/// How the first pending snapshot is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum First {
    /// A full scan (`r` events).
    Scan,
    /// Its changes, like every later one.
    Changes,
    /// Not at all: it only marks the starting position.
    Nothing,
}

pub fn position(id: i64) -> Position {
    Position {
        version: id.to_string(),
        completed: None,
    }
}

impl IcebergSource {
    /// The table's current metadata. A metadata file is never rewritten (a new version is a new
    /// file), so the one read last is kept and read again only when the catalog or directory
    /// names another: an idle poll fetches no metadata (issue 32).
    pub(super) fn metadata(&self) -> Result<Arc<TableMetadata>, SourceError> {
        let last = self.current.lock().clone();
        let file = current_metadata_file(
            &self.storage,
            &self.opts.location,
            &self.rest,
            last.as_ref().map(|(f, _)| f.as_path()),
        )?;
        if let Some((_, md)) = last.filter(|(f, _)| *f == file) {
            return Ok(md);
        }
        let md = Arc::new(TableMetadata::load(&self.storage, &file)?);
        *self.current.lock() = Some((file, md.clone()));
        Ok(md)
    }

    /// Snapshots to emit after `after` (or per the starting strategy), oldest first, with how the
    /// first one is emitted.
    pub(super) fn pending(
        &self,
        md: &TableMetadata,
        after: Option<&Position>,
    ) -> Result<(Vec<i64>, First), SourceError> {
        let Some(current) = md.current_snapshot_id else {
            return Ok((Vec::new(), First::Changes));
        };
        // the current snapshot's ancestors still in the metadata, newest first
        let chain = md.ancestors();
        let oldest_first = |c: Vec<&Snapshot>| c.into_iter().rev().map(|s| s.snapshot_id).collect::<Vec<_>>();
        let mut ids = match after.map(Position::snapshot_id).transpose()? {
            Some(last) => {
                let Some(n) = chain
                    .iter()
                    .position(|s| s.snapshot_id == last || s.parent_snapshot_id == Some(last))
                else {
                    return Err(SourceError::HistoryGone {
                        message: format!(
                            "snapshot {last} (the last one emitted) is not an ancestor of the current snapshot {current}: the \
                             snapshots after it were expired before they were read, or the table was rolled back. The \
                             changelog cannot be continued exactly. Ways out: restart under a new connector name with \
                             starting-strategy=INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE (skip the gap) or \
                             TABLE_SCAN_THEN_INCREMENTAL (full rescan); keep snapshot expiry longer than the connector's lag"
                        ),
                    });
                };
                let take = if chain[n].snapshot_id == last { n } else { n + 1 };
                oldest_first(chain[..take].to_vec())
            }
            None => match &self.opts.start {
                StartingStrategy::TableScanThenIncremental => return Ok((vec![current], First::Scan)),
                StartingStrategy::IncrementalFromLatest => vec![current],
                StartingStrategy::IncrementalFromLatestExclusive => return Ok((vec![current], First::Nothing)),
                StartingStrategy::IncrementalFromEarliest => oldest_first(chain),
                StartingStrategy::FromSnapshotId(id) => {
                    let n = chain.iter().position(|s| s.snapshot_id == *id).ok_or_else(|| SourceError::Unreadable { why: crate::source::Unreadable::Expired,
                        message: format!(
                            "start-snapshot-id {id} is not an ancestor of the current snapshot {current} (expired, or on \
                             another branch)"
                        ),
                    })?;
                    oldest_first(chain[..=n].to_vec())
                }
                StartingStrategy::FromTimestamp(ts) => {
                    oldest_first(chain.into_iter().take_while(|s| s.timestamp_ms >= *ts).collect())
                }
            },
        };
        // a snapshot that ended no commit was never visible: its changes go with the commit's last
        let commits = Commits::load(md, &self.currents);
        let n = ids.len();
        ids = ids
            .into_iter()
            .enumerate()
            .filter(|(i, id)| *i + 1 == n || md.snapshot(*id).is_none_or(|s| commits.ends_unit(md, s)))
            .map(|(_, id)| id)
            .collect();
        if let Some(end) = self.end {
            if let Some(i) = ids.iter().position(|id| *id == end) {
                ids.truncate(i + 1);
            }
        }
        if let Some(max) = self.opts.max_planning_snapshots {
            ids.truncate(max);
        }
        Ok((ids, First::Changes))
    }

    /// The unit of one snapshot, or of the commit it ended with the snapshots before it that no
    /// reader saw (planned, and the plan kept for reading). `floor`: the last position emitted,
    /// which a commit never reaches back past.
    pub(super) fn unit(
        &self,
        md: &TableMetadata,
        id: i64,
        scan: bool,
        exclusive_start: bool,
        floor: Option<&Position>,
    ) -> Result<Unit, SourceError> {
        let snap = md.snapshot(id).ok_or_else(|| SourceError::Unreadable { why: crate::source::Unreadable::Expired,
            message: format!(
                "snapshot {id} is no longer in the table metadata (expired before it was read); restart under a new \
                 connector name with starting-strategy=INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE or TABLE_SCAN_THEN_INCREMENTAL"
            ),
        })?;
        // the snapshot before the commit this one ended (a full scan or a start marker has none)
        let base = (!scan && !exclusive_start).then(|| {
            let floor = floor.and_then(|p| p.snapshot_id().ok());
            Commits::load(md, &self.currents).base_of(md, snap, floor)
        });
        let plan = if exclusive_start {
            Plan {
                snapshot: snap.clone(),
                schema: arrow_schema(md.schema_of(Some(snap))?)?,
                kind: PlanKind::Nothing(SkipReason::StartAtLatest),
                deletes: DeleteReader::new(self.storage.clone()),
            }
        } else if let Some(base) = base.filter(|b| *b != snap.parent_snapshot_id) {
            self.plan_commit(md, base.and_then(|b| md.snapshot(b)), snap)?
        } else {
            self.plan(md, snap, scan)?
        };
        let (splits, skipped) = match &plan.kind {
            PlanKind::Nothing(why) => (Vec::new(), Some(*why)),
            PlanKind::Rows { splits, .. } => (splits.iter().enumerate().map(|(i, s)| split_spec(i, s)).collect(), None),
            PlanKind::Diff(parts) => (parts.iter().map(|p| p.split(!self.by_partition)).collect(), None),
        };
        let unit = Unit {
            position: position(id),
            action: snap.operation().to_string(),
            operation: Some(snap.operation().to_string()),
            snapshot: scan,
            ts_ms: snap.timestamp_ms,
            splits,
            skipped,
        };
        self.plans.insert(&unit, plan);
        Ok(unit)
    }
}

/// A split of a unit's rows: the first task's file and offset name it.
pub(super) fn split_spec(i: usize, tasks: &[Task]) -> SplitSpec {
    let first = tasks.first().map(|t| &t.0);
    let name = first
        .map(|r| r.file.path.rsplit('/').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let start = first.map(|r| r.start).unwrap_or(0);
    SplitSpec {
        id: format!("{i:05}:{name}@{start}"),
        partition: first.map(|r| r.file.partition.clone()).unwrap_or_default(),
        reads: name,
    }
}
