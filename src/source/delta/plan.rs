//! The Delta monitor and planner: versions committed after the last issued one (or per the
//! starting version) become units, one per version, each planned from its commit:
//! - a snapshot (`starting-version=earliest`): every live file of the version, rows as `r`;
//! - change-data files (`cdc` actions; the writer wrote them because it had CDF on): the change
//!   rows, `delete`/`update_preimage` against `insert`/`update_postimage`, diffed by key (a pre
//!   and post image of one key are one `u`);
//! - only added files: rows as `c`;
//! - removed and added files: the removed files' live rows against the added files' (a file
//!   whose deletion vector changed is read once: rows it now hides against rows it shows again),
//!   diffed by key, so rows copied unchanged into a rewritten file emit nothing;
//! - only `dataChange=false` actions (OPTIMIZE, ZORDER, purge): nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::log::{Commit, FileAction, Listing};
use super::read::partition_of;
use super::schema::{check_protocol, DeltaSchema};
use super::state::{missing_commit, TableState};
use super::DeltaSource;
use crate::config::DeltaStart;
use crate::metrics::SkipReason;
use crate::source::plan::{PlanFile, VersionPlan};
use crate::source::{Op, Position, SourceError, SplitSpec, Unit};

/// The table's definition in effect at a version.
#[derive(Debug)]
pub struct Meta {
    /// The table's id (`metaData.id`): a new one when the table is re-created.
    pub id: String,
    pub schema: DeltaSchema,
    pub cdf: bool,
    /// Row tracking's materialized columns (row id, row commit version), where it is on.
    pub lineage: Option<(String, String)>,
}

/// What a version's unit reads (the shared model, see [`crate::source::plan`]); a `Rows` split is
/// one file.
pub type PlanKind = crate::source::plan::PlanKind<FileAction, Rewritten>;
/// Rows one version took away against rows it brought, in one partition (or all of them).
pub type DiffPart = crate::source::plan::DiffPart<FileAction, Rewritten>;
/// One file whose deletion vector changed: (as removed, as added).
pub type Rewritten = (FileAction, FileAction);

fn size(f: &FileAction) -> u64 {
    f.size.unwrap_or(0).max(0) as u64
}

/// Whether a file has row tracking's base row id and default row commit version.
fn tracked(f: &FileAction) -> bool {
    f.base_row_id.is_some() && f.default_row_commit_version.is_some()
}

impl PlanFile for FileAction {
    fn path(&self) -> &str {
        &self.path
    }
    fn bytes(&self) -> u64 {
        size(self)
    }
    fn has_lineage(&self) -> bool {
        tracked(self)
    }
}

impl PlanFile for Rewritten {
    fn path(&self) -> &str {
        &self.1.path
    }
    fn bytes(&self) -> u64 {
        size(&self.0)
    }
    fn has_lineage(&self) -> bool {
        tracked(&self.0) && tracked(&self.1)
    }
}

pub struct Plan {
    pub version: u64,
    pub meta: Arc<Meta>,
    pub kind: PlanKind,
}

impl VersionPlan for Plan {
    type File = FileAction;
    type Rewrite = Rewritten;
    fn kind(&self) -> &PlanKind {
        &self.kind
    }
    fn schema(&self) -> &arrow_schema::SchemaRef {
        &self.meta.schema.arrow
    }
    fn label(&self) -> String {
        format!("Delta version {}", self.version)
    }
    fn lineage_on(&self) -> bool {
        self.meta.lineage.is_some()
    }
}

/// Versions planned per poll at most.
const MAX_UNITS_PER_POLL: u64 = 256;

pub fn position(v: u64) -> Position {
    Position {
        version: v.to_string(),
        completed: None,
    }
}

pub fn file_split(schema: &DeltaSchema, f: &FileAction) -> SplitSpec {
    SplitSpec {
        id: f.path.clone(),
        partition: partition_of(schema, f),
        reads: f.path.clone(),
    }
}

impl DeltaSource {
    /// Versions to emit after `after` (or per the starting version), oldest first; the first is
    /// a snapshot, a start marker, or changes like the rest.
    pub(super) fn pending(&self, listing: &Listing, after: Option<&Position>) -> Result<Vec<Unit>, SourceError> {
        let Some(latest) = listing.latest() else {
            return Ok(Vec::new());
        };
        let end = self.end.map_or(latest, |e| e.min(latest));
        let from = match after {
            Some(p) => p.delta_version()? + 1,
            None => match self.opts.start {
                DeltaStart::Snapshot => return Ok(vec![self.unit(listing, end, true, false)?]),
                DeltaStart::Latest => return Ok(vec![self.unit(listing, latest, false, true)?]),
                DeltaStart::Version(v) if v > latest => {
                    return Err(SourceError::Config {
                        message: format!("starting-version {v} is after the table's latest version {latest}"),
                    })
                }
                DeltaStart::Version(v) => v,
                DeltaStart::Timestamp(ts) => match self.first_at_or_after(listing, ts)? {
                    Some(v) => v,
                    None => return Ok(Vec::new()),
                },
            },
        };
        // a lagging connector plans a bounded number of versions per poll (the next poll goes on)
        let last = end.min(from.saturating_add(MAX_UNITS_PER_POLL - 1));
        // every version to emit must still have its commit (log cleanup may have taken it)
        if let Some(v) = (from..=last).find(|v| !listing.commits.contains_key(v)) {
            return Err(missing_commit(&self.log, v, listing));
        }
        (from..=last).map(|v| self.unit(listing, v, false, false)).collect()
    }

    /// The first version committed at or after `ts` (epoch ms) among the commits left.
    fn first_at_or_after(&self, listing: &Listing, ts: i64) -> Result<Option<u64>, SourceError> {
        for &v in listing.commits.keys() {
            if self.commit(listing, v)?.timestamp >= ts {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// A commit's actions (cached: the planner and the metadata replay both read it).
    pub(super) fn commit(&self, listing: &Listing, v: u64) -> Result<Arc<Commit>, SourceError> {
        if let Some(c) = self.commits.lock().get(&v) {
            return Ok(c.clone());
        }
        if !listing.commits.contains_key(&v) {
            return Err(missing_commit(&self.log, v, listing));
        }
        let c = Arc::new(self.log.commit(v)?);
        let mut cache = self.commits.lock();
        if cache.len() >= 256 {
            cache.clear();
        }
        cache.insert(v, c.clone());
        Ok(c)
    }

    /// The table's definition at version `v`: from the one at `v - 1` and `v`'s commit when
    /// known, else replayed from the log.
    pub(super) fn meta_at(&self, listing: &Listing, v: u64) -> Result<Arc<Meta>, SourceError> {
        if let Some(m) = self.metas.lock().get(&v) {
            return Ok(m.clone());
        }
        let prev = v.checked_sub(1).and_then(|p| self.metas.lock().get(&p).cloned());
        let meta = match prev {
            Some(prev) if listing.commits.contains_key(&v) => {
                let c = self.commit(listing, v)?;
                match (&c.metadata, &c.protocol) {
                    (None, None) => prev,
                    _ => {
                        let state = TableState::load_meta(&self.log, listing, v)?;
                        Arc::new(self.meta_of(&state, v)?)
                    }
                }
            }
            _ => {
                let state = TableState::load_meta(&self.log, listing, v)?;
                Arc::new(self.meta_of(&state, v)?)
            }
        };
        let mut metas = self.metas.lock();
        if metas.len() >= 1024 {
            let keep: BTreeMap<u64, Arc<Meta>> = metas.split_off(&v.saturating_sub(16));
            *metas = keep;
        }
        metas.insert(v, meta.clone());
        Ok(meta)
    }

    fn meta_of(&self, state: &TableState, v: u64) -> Result<Meta, SourceError> {
        let at = format!("{} version {v}", self.log.root.display());
        check_protocol(&state.protocol, &at)?;
        Ok(Meta {
            id: state.metadata.id.clone(),
            schema: DeltaSchema::parse(&state.metadata, &at)?,
            cdf: state.metadata.setting("delta.enableChangeDataFeed") == Some("true"),
            lineage: match (
                state.metadata.setting("delta.enableRowTracking"),
                state.metadata.setting("delta.rowTracking.materializedRowIdColumnName"),
                state
                    .metadata
                    .setting("delta.rowTracking.materializedRowCommitVersionColumnName"),
            ) {
                (Some("true"), Some(id), Some(version)) => Some((id.to_string(), version.to_string())),
                _ => None,
            },
        })
    }

    /// The unit of version `v` (planned, and the plan kept for reading): a snapshot, a start
    /// marker (`marker`), or the version's changes.
    pub(super) fn unit(&self, listing: &Listing, v: u64, snapshot: bool, marker: bool) -> Result<Unit, SourceError> {
        let meta = self.meta_at(listing, v)?;
        let (kind, ts, operation) = if snapshot {
            let state = TableState::load(&self.log, listing, v)?;
            let files: Vec<FileAction> = state.files.into_values().collect();
            let kind = if files.is_empty() {
                PlanKind::Nothing(SkipReason::EmptyTable)
            } else {
                PlanKind::Rows {
                    op: Op::Read,
                    splits: files.into_iter().map(|f| vec![f]).collect(),
                }
            };
            (kind, state.timestamp, Some("SNAPSHOT".to_string()))
        } else {
            let c = self.commit(listing, v)?;
            let kind = if marker {
                PlanKind::Nothing(SkipReason::StartAtLatest)
            } else {
                self.plan_changes(listing, &meta, &c)?
            };
            (kind, c.timestamp, c.operation.clone())
        };
        let splits = match &kind {
            PlanKind::Nothing(_) => Vec::new(),
            PlanKind::Rows { splits, .. } => splits.iter().flatten().map(|f| file_split(&meta.schema, f)).collect(),
            PlanKind::Diff(parts) => parts.iter().map(|p| p.split(!self.by_partition)).collect(),
        };
        let skipped = match &kind {
            PlanKind::Nothing(why) => Some(*why),
            _ => None,
        };
        let unit = Unit {
            position: position(v),
            action: "commit".to_string(),
            operation,
            snapshot,
            ts_ms: ts,
            splits,
            skipped,
        };
        self.plans.insert(&unit, Plan { version: v, meta, kind });
        Ok(unit)
    }

    /// How one version's changes are read.
    fn plan_changes(&self, listing: &Listing, meta: &Meta, c: &Commit) -> Result<PlanKind, SourceError> {
        let part = |f: &FileAction| {
            if self.by_partition {
                partition_of(&meta.schema, f)
            } else {
                String::new()
            }
        };
        let mut parts: BTreeMap<String, DiffPart> = BTreeMap::new();
        fn entry(parts: &mut BTreeMap<String, DiffPart>, p: String) -> &mut DiffPart {
            parts.entry(p.clone()).or_insert_with(|| DiffPart::of(p))
        }
        if !c.cdcs.is_empty() {
            // the writer's own change rows: the version's add/remove actions are not read
            for f in &c.cdcs {
                entry(&mut parts, part(f)).cdc.push(f.clone());
            }
            return Ok(PlanKind::Diff(parts.into_values().collect()));
        }
        let adds: Vec<&FileAction> = c.adds.iter().filter(|a| a.data_change).collect();
        let removes: Vec<&FileAction> = c.removes.iter().filter(|r| r.data_change).collect();
        if adds.is_empty() && removes.is_empty() {
            let compaction = matches!(
                c.operation.as_deref(),
                Some("OPTIMIZE" | "ZORDER" | "REORG" | "ZORDER BY")
            );
            return Ok(PlanKind::Nothing(if compaction {
                SkipReason::Compaction
            } else {
                SkipReason::NoDataChange
            }));
        }
        if removes.is_empty() {
            return Ok(PlanKind::Rows {
                op: Op::Create,
                splits: adds.into_iter().map(|a| vec![a.clone()]).collect(),
            });
        }
        // a remove that lacks its partition values takes them from the file as it was added
        let mut before: Option<TableState> = None;
        let mut removed = Vec::with_capacity(removes.len());
        for r in removes {
            let mut r = r.clone();
            if r.partition_values.is_none() && !meta.schema.partition_columns.is_empty() {
                if before.is_none() {
                    before = Some(TableState::load(&self.log, listing, c.version.saturating_sub(1))?);
                }
                if let Some(a) = before.as_ref().and_then(|s| s.files.get(&r.id())) {
                    r.partition_values = a.partition_values.clone();
                    r.size = r.size.or(a.size);
                }
            }
            removed.push(r);
        }
        let mut added: BTreeMap<&str, &FileAction> = adds.iter().map(|a| (a.path.as_str(), *a)).collect();
        for r in removed {
            match added.remove(r.path.as_str()) {
                Some(a) => entry(&mut parts, part(a)).rewritten.push((r, a.clone())),
                None => entry(&mut parts, part(&r)).old.push(r),
            }
        }
        for a in adds.iter().filter(|a| added.contains_key(a.path.as_str())) {
            entry(&mut parts, part(a)).new.push((*a).clone());
        }
        Ok(PlanKind::Diff(parts.into_values().collect()))
    }
}
