//! The Hudi monitor: the timeline (active and archived instants) turned into units in timeline
//! order: a full scan, or one change unit per completed instant with the file groups it touched.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::files::{list_partition, list_partitions};
use super::timeline::{instant_millis, Action, CommitMetadata, Instant, MetaSource, Timeline};
use super::{archive, split_spec, HudiPlan, HudiSource};
use crate::config::StartCommit;
use crate::metrics::SkipReason;
use crate::source::{Position, SourceError, Unit};

impl HudiSource {
    fn ts_ms(i: &Instant) -> i64 {
        let mtime = match &i.meta {
            MetaSource::File(f) => std::fs::metadata(f)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64),
            MetaSource::Archived(_) | MetaSource::Json(_) => None,
        };
        mtime
            .or_else(|| instant_millis(i.completed.as_deref().unwrap_or(&i.requested)))
            .unwrap_or(0)
    }

    /// The active timeline, with the archived one added. Archival moves the oldest instants off
    /// the active timeline, so the archive is read again only when the oldest active instant
    /// changed: an idle poll is one listing of the timeline, whatever the table version (a
    /// version-6 archive cost a listing and a HEAD per archive file, a version-8 one a GET of
    /// `_version_`, every poll).
    pub(super) fn timeline(&self) -> Result<Timeline, SourceError> {
        let active = Timeline::load(&self.table)?;
        let oldest = active.first_active().map(str::to_string);
        let mut cache = self.archived.lock();
        if cache.as_ref().map(|(v, _)| v) != Some(&oldest) {
            *cache = Some((oldest, Arc::new(archive::load_archived(&self.table)?)));
        }
        let archived = cache.as_ref().map(|(_, a)| a.as_ref().clone()).unwrap_or_default();
        Ok(active.with_archived(archived))
    }

    fn position(i: &Instant) -> Position {
        Position {
            version: i.requested.clone(),
            completed: i.completed.clone(),
        }
    }

    fn snapshot_unit(&self, tl: &Arc<Timeline>, at: &Instant) -> Result<Unit, SourceError> {
        let replaced = self.replaced_up_to(tl, at.order_key())?;
        let mut splits = Vec::new();
        for p in list_partitions(&self.table.storage, &self.table.path)? {
            let files = list_partition(&self.table.storage, &self.table.path, &p)?;
            let groups: BTreeSet<&String> = files.base.keys().chain(files.logs.keys()).collect();
            for fg in groups {
                if replaced.contains(&(p.clone(), fg.clone())) {
                    continue;
                }
                let visible = |i: &str| tl.completed_order(i).is_some_and(|o| o.as_str() <= at.order_key());
                let base_visible = files
                    .base
                    .get(fg)
                    .is_some_and(|b| b.iter().any(|f| visible(&f.instant)));
                // log file names carry an instant that may differ from their blocks' (layout 1)
                let logs_present = files.logs.get(fg).is_some_and(|l| !l.is_empty());
                if base_visible || logs_present {
                    splits.push(split_spec(&p, fg));
                }
            }
        }
        let unit = Unit {
            position: Self::position(at),
            action: at.action.name().into(),
            operation: None,
            snapshot: true,
            ts_ms: Self::ts_ms(at),
            splits,
            skipped: None,
        };
        self.plans.insert(
            &unit,
            HudiPlan {
                timeline: tl.clone(),
                commit: None,
                replaced,
            },
        );
        Ok(unit)
    }

    /// File groups replaced by completed replacecommits up to `at` (inclusive).
    pub(super) fn replaced_up_to(&self, tl: &Timeline, at: &str) -> Result<BTreeSet<(String, String)>, SourceError> {
        let mut out = BTreeSet::new();
        for i in tl
            .completed
            .iter()
            .filter(|i| i.action == Action::ReplaceCommit && i.order_key() <= at)
        {
            let md = CommitMetadata::load(&self.table.storage, &i.meta)?;
            out.extend(md.replaced().map(|(p, f)| (p.to_string(), f.to_string())));
        }
        Ok(out)
    }

    /// A commit's unit, its plan kept for the read (the timeline, the commit's metadata, the file
    /// groups it replaced).
    fn change_unit(&self, tl: &Arc<Timeline>, i: &Instant) -> Result<Unit, SourceError> {
        let (unit, commit) = self.change_unit_of(i)?;
        let replaced = commit
            .iter()
            .flat_map(|md| md.replaced().map(|(p, f)| (p.to_string(), f.to_string())))
            .collect();
        self.plans.insert(
            &unit,
            HudiPlan {
                timeline: tl.clone(),
                commit: commit.map(Arc::new),
                replaced,
            },
        );
        Ok(unit)
    }

    fn change_unit_of(&self, i: &Instant) -> Result<(Unit, Option<CommitMetadata>), SourceError> {
        let mut unit = Unit {
            position: Self::position(i),
            action: i.action.name().into(),
            operation: None,
            snapshot: false,
            ts_ms: Self::ts_ms(i),
            splits: Vec::new(),
            skipped: None,
        };
        match i.action {
            a if a.is_write() => {}
            Action::Restore => {
                return Err(SourceError::HistoryGone {
                    message: format!(
                        "instant {} is a restore: it rewinds committed data, which a changelog cannot follow; \
                         restart the connector with a new name and read.start-commit=earliest (full rescan)",
                        i.requested
                    ),
                })
            }
            _ => {
                unit.skipped = Some(SkipReason::NoDataChange);
                return Ok((unit, None));
            }
        }
        let md = CommitMetadata::load(&self.table.storage, &i.meta)?;
        unit.operation = md.operation.clone();
        match md.operation.as_deref() {
            Some("COMPACT") | Some("LOG_COMPACT") if self.read.skip_compaction => {
                unit.skipped = Some(SkipReason::Compaction);
                return Ok((unit, None));
            }
            Some("CLUSTER") if self.read.skip_clustering => {
                unit.skipped = Some(SkipReason::Clustering);
                return Ok((unit, None));
            }
            _ => {}
        }
        self.check_not_blank(i, &md)?;
        let mut touched = BTreeSet::new();
        for (p, w) in md.writes() {
            touched.insert((p.to_string(), w.file_id.clone().unwrap_or_default()));
        }
        touched.extend(md.replaced().map(|(p, f)| (p.to_string(), f.to_string())));
        unit.splits = touched.iter().map(|(p, fg)| split_spec(p, fg)).collect();
        Ok((unit, Some(md)))
    }

    /// A completed write whose metadata names no files must really have written none: an empty
    /// or damaged commit file would otherwise advance the position past its changes. Hudi always
    /// writes `partitionToWriteStats` (an empty map for an empty commit, `hoodie.allow.empty.commit`),
    /// so its absence is damage; an empty map is checked against the files on storage.
    fn check_not_blank(&self, i: &Instant, md: &CommitMetadata) -> Result<(), SourceError> {
        let file = match &i.meta {
            MetaSource::File(f) => f.display().to_string(),
            _ => format!("archived instant {}", i.requested),
        };
        let way_out = "Restore the file from the writer's storage (or a backup); to go on without that instant's \
                       changes deliberately, restart under a new connector name with read.start-commit set to the \
                       next instant";
        if md.write_stats.is_none() && md.replaced.is_none() {
            return Err(SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: format!(
                    "completed {} {} has no write statistics ({file} is empty or damaged): its changes cannot be \
                     planned, and nothing after it is emitted. {way_out}",
                    i.action, i.requested
                ),
            });
        }
        if md.writes().next().is_some() || md.replaced().next().is_some() {
            return Ok(());
        }
        for p in list_partitions(&self.table.storage, &self.table.path)? {
            let files = list_partition(&self.table.storage, &self.table.path, &p)?;
            let named = files.base.values().flatten().map(|b| (&b.instant, &b.name));
            let logs = files.logs.values().flatten().map(|l| (&l.instant, &l.name));
            if let Some((_, name)) = named.chain(logs).find(|(t, _)| **t == i.requested) {
                return Err(SourceError::Unreadable {
                    why: crate::source::Unreadable::Damaged,
                    message: format!(
                        "completed {} {} names no files ({file}), but `{}` was written by it: the metadata is damaged \
                         and its changes cannot be planned; nothing after it is emitted. {way_out}",
                        i.action,
                        i.requested,
                        super::join_path(&p, name)
                    ),
                });
            }
        }
        Ok(())
    }

    pub(super) fn plan(&self, after: Option<&Position>) -> Result<Vec<Unit>, SourceError> {
        let tl = Arc::new(self.timeline()?);
        let mut candidates: Vec<&Instant> = match after {
            Some(p) => {
                // a position the timeline does not hold would skip every instant before its time
                if tl.get(&p.version).is_none() {
                    // rewound by a restore or rollback completed since: a gap in history; else
                    // the record is not this table's (never resynced over)
                    let rewound = tl
                        .completed
                        .iter()
                        .any(|i| i.action.rewinds() && i.requested.as_str() > p.version.as_str());
                    // a table dropped and re-created: its whole history is after the position
                    let recreated = tl
                        .completed
                        .first()
                        .is_some_and(|i| i.requested.as_str() > p.version.as_str())
                        && tl.first_active().is_none_or(|f| f > p.version.as_str());
                    let message = format!(
                        "the stored position, instant {}, is not on the table's timeline (active or archived): a \
                             restore or rollback removed it, or the offsets record is not this table's. Nothing is \
                             skipped. Ways out: check `lakestream offsets show`; restart under a new connector name \
                             with read.start-commit=earliest (full rescan) or an instant time",
                        p.version
                    );
                    return Err(match rewound || recreated {
                        true => SourceError::HistoryGone { message },
                        false => SourceError::Unreadable {
                            why: crate::source::Unreadable::ForeignPosition,
                            message,
                        },
                    });
                }
                tl.completed.iter().filter(|i| i.order_key() > p.order_key()).collect()
            }
            None => match &self.read.start {
                StartCommit::Earliest => {
                    return match tl.latest() {
                        Some(l) => Ok(vec![self.snapshot_unit(&tl, l)?]),
                        None => Ok(Vec::new()),
                    }
                }
                StartCommit::Latest => {
                    return Ok(tl
                        .latest()
                        .map(|l| Unit {
                            position: Self::position(l),
                            action: l.action.name().into(),
                            operation: None,
                            snapshot: false,
                            ts_ms: Self::ts_ms(l),
                            splits: Vec::new(),
                            skipped: Some(SkipReason::StartAtLatest),
                        })
                        .into_iter()
                        .collect())
                }
                StartCommit::Instant(x) => tl
                    .completed
                    .iter()
                    .filter(|i| i.requested.as_str() >= x.as_str())
                    .collect(),
            },
        };
        if let Some(end) = &self.read.end {
            candidates.retain(|i| i.requested.as_str() <= end.as_str());
        }
        if let Some(limit) = self.read.commits_limit {
            candidates.truncate(limit);
        }
        candidates.into_iter().map(|i| self.change_unit(&tl, i)).collect()
    }

    pub(super) fn plan_at(&self, position: &Position, snapshot: bool) -> Result<Unit, SourceError> {
        let tl = Arc::new(self.timeline()?);
        let i = tl.get(&position.version).ok_or_else(|| SourceError::HistoryGone {
            message: format!(
                "the interrupted instant {} is no longer on the active timeline (archived, or rolled back by a \
                 restore); restart with read.start-commit=latest or earliest under a new connector name",
                position.version
            ),
        })?;
        if snapshot {
            self.snapshot_unit(&tl, i)
        } else {
            self.change_unit(&tl, i)
        }
    }
}
