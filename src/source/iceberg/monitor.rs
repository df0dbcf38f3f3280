//! The Iceberg monitor: new snapshots after the last issued one (walking the parent chain), the
//! starting strategies, and the plan of each snapshot: nothing (`replace`), rows (a full scan or
//! a pure append, bin-packed into splits), or a keyed diff of what the snapshot removed and added.
//! Snapshots one catalog commit added together are one unit (see `commits`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_schema::SchemaRef;

use super::commits::Commits;
use super::deletes::{applies, DeleteReader};
use super::manifest::{Entry, SnapshotFiles, CONTENT_EQUALITY_DELETES};
use super::metadata::{arrow_schema, current_metadata_file, Snapshot, TableMetadata};
use super::reader::FileRange;
use super::IcebergSource;
use crate::config::StartingStrategy;
use crate::source::{Op, Position, SourceError, SplitSpec, Unit};

/// A file range to read with the delete files that apply to it.
pub type Task = (FileRange, Vec<Entry>);

pub enum PlanKind {
    Nothing(&'static str),
    /// Every live row of the tasks, as `op` events, split by split.
    Rows {
        op: Op,
        splits: Vec<Vec<Task>>,
    },
    /// Rows the snapshot removed against rows it added: one part, or one per partition when
    /// tasks divide the table by partition (a split each).
    Diff(Vec<DiffPart>),
}

/// Rows the snapshot removed (`old`, deletes as of the parent) against rows it added (`new`);
/// `rewritten` data files had their delete files changed: (range, deletes before, after).
#[derive(Default)]
pub struct DiffPart {
    pub partition: String,
    pub old: Vec<Task>,
    pub new: Vec<Task>,
    pub rewritten: Vec<(FileRange, Vec<Entry>, Vec<Entry>)>,
}

impl DiffPart {
    /// The split of this part: `diff` when the diff is one part (as always before partitions
    /// divided it), else `diff:<partition>`.
    fn split(&self, whole: bool) -> SplitSpec {
        let id = if whole {
            "diff".to_string()
        } else {
            format!("diff:{}", self.partition)
        };
        SplitSpec {
            id: id.clone(),
            partition: self.partition.clone(),
            file_group: id,
        }
    }

    pub fn bytes(&self) -> i64 {
        self.old
            .iter()
            .chain(&self.new)
            .map(|t| t.0.len)
            .chain(self.rewritten.iter().map(|r| r.0.len))
            .sum()
    }
}

pub struct Plan {
    pub snapshot: Snapshot,
    pub schema: SchemaRef,
    pub kind: PlanKind,
    pub deletes: DeleteReader,
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
        instant: id.to_string(),
        completed: None,
    }
}

fn parse_id(p: &Position) -> Result<i64, SourceError> {
    p.instant.parse().map_err(|_| SourceError::Unreadable {
        message: format!(
            "stored position `{}` is not an Iceberg snapshot id (offsets of another connector type?); use a new connector name",
            p.instant
        ),
    })
}

/// Deletes indexed by the data file or partition they can apply to.
struct DeleteIndex<'a> {
    by_file: HashMap<&'a str, Vec<&'a Entry>>,
    by_partition: HashMap<(i32, &'a str), Vec<&'a Entry>>,
    global: Vec<&'a Entry>,
}

impl<'a> DeleteIndex<'a> {
    fn new(md: &TableMetadata, deletes: impl Iterator<Item = &'a Entry>) -> Self {
        let mut ix = DeleteIndex {
            by_file: HashMap::new(),
            by_partition: HashMap::new(),
            global: Vec::new(),
        };
        for d in deletes {
            let f = &d.file;
            if let Some(r) = f.referenced_data_file.as_deref() {
                ix.by_file.entry(r).or_default().push(d);
            } else if f.content == CONTENT_EQUALITY_DELETES && md.spec_unpartitioned(f.spec_id) {
                ix.global.push(d);
            } else {
                ix.by_partition
                    .entry((f.spec_id, f.partition.as_str()))
                    .or_default()
                    .push(d);
            }
        }
        ix
    }

    fn for_data(&self, md: &TableMetadata, e: &Entry) -> Vec<Entry> {
        let f = &e.file;
        let file = self.by_file.get(f.path.as_str()).into_iter().flatten();
        let part = self
            .by_partition
            .get(&(f.spec_id, f.partition.as_str()))
            .into_iter()
            .flatten();
        file.chain(part)
            .chain(self.global.iter())
            .filter(|d| applies(md, d, e))
            .map(|d| (*d).clone())
            .collect()
    }
}

impl IcebergSource {
    pub(super) fn metadata(&self) -> Result<Arc<TableMetadata>, SourceError> {
        let file = current_metadata_file(&self.opts.location)?;
        Ok(Arc::new(TableMetadata::load(&file)?))
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
        let mut chain: Vec<&Snapshot> = Vec::new();
        let mut at = Some(current);
        while let Some(s) = at.and_then(|id| md.snapshot(id)) {
            chain.push(s);
            at = s.parent_snapshot_id;
        }
        let oldest_first = |c: Vec<&Snapshot>| c.into_iter().rev().map(|s| s.snapshot_id).collect::<Vec<_>>();
        let mut ids = match after.map(parse_id).transpose()? {
            Some(last) => {
                let Some(n) = chain
                    .iter()
                    .position(|s| s.snapshot_id == last || s.parent_snapshot_id == Some(last))
                else {
                    return Err(SourceError::Unreadable {
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
                    let n = chain.iter().position(|s| s.snapshot_id == *id).ok_or_else(|| SourceError::Unreadable {
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
        if let Some(end) = self.opts.end_snapshot_id {
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
        let snap = md.snapshot(id).ok_or_else(|| SourceError::Unreadable {
            message: format!(
                "snapshot {id} is no longer in the table metadata (expired before it was read); restart under a new \
                 connector name with starting-strategy=INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE or TABLE_SCAN_THEN_INCREMENTAL"
            ),
        })?;
        // the snapshot before the commit this one ended (a full scan or a start marker has none)
        let base = (!scan && !exclusive_start).then(|| {
            let floor = floor.and_then(|p| p.instant.parse::<i64>().ok());
            Commits::load(md, &self.currents).base_of(md, snap, floor)
        });
        let plan = if exclusive_start {
            Plan {
                snapshot: snap.clone(),
                schema: arrow_schema(md.schema_of(Some(snap))?)?,
                kind: PlanKind::Nothing("start_at_latest"),
                deletes: DeleteReader::default(),
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
        let mut plans = self.plans.lock().expect("plans lock");
        if plans.len() > 64 {
            plans.clear();
        }
        plans.insert((id, scan), Arc::new(plan));
        Ok(unit)
    }

    fn plan(&self, md: &TableMetadata, snap: &Snapshot, scan: bool) -> Result<Plan, SourceError> {
        let ischema = md.schema_of(Some(snap))?;
        let schema = arrow_schema(ischema)?;
        let id = snap.snapshot_id;
        let deletes = DeleteReader::default();
        self.check_partitions(md, snap)?;
        let rows = |data: Vec<&Entry>, index: &DeleteIndex| -> Vec<Vec<Task>> {
            let tasks: Vec<Task> = data
                .into_iter()
                .flat_map(|e| {
                    let ds = index.for_data(md, e);
                    self.ranges(e).into_iter().map(move |r| (r, ds.clone()))
                })
                .collect();
            if !self.by_partition {
                return self.pack(tasks);
            }
            // splits never mix partitions: a task reads only its partitions' splits
            let mut by: std::collections::BTreeMap<String, Vec<Task>> = Default::default();
            for t in tasks {
                by.entry(t.0.file.partition.clone()).or_default().push(t);
            }
            by.into_values().flat_map(|ts| self.pack(ts)).collect()
        };
        if scan {
            let files = SnapshotFiles::load(&self.manifests, snap, true)?;
            let index = DeleteIndex::new(md, files.deletes.iter());
            let splits = rows(files.data.iter().collect(), &index);
            let kind = if splits.is_empty() {
                PlanKind::Nothing("empty_table")
            } else {
                PlanKind::Rows { op: Op::Read, splits }
            };
            return Ok(Plan {
                snapshot: snap.clone(),
                schema,
                kind,
                deletes,
            });
        }
        if snap.operation() == "replace" {
            let kind = PlanKind::Nothing("rewrite");
            return Ok(Plan {
                snapshot: snap.clone(),
                schema,
                kind,
                deletes,
            });
        }
        let own = SnapshotFiles::load(&self.manifests, snap, false)?;
        let changed: Vec<&Entry> = own.added_deletes(id).chain(own.removed_deletes.iter()).collect();
        if own.removed_data.is_empty() && changed.is_empty() {
            let index = DeleteIndex::new(md, own.deletes.iter());
            let splits = rows(own.added_data(id).collect(), &index);
            let kind = if splits.is_empty() {
                PlanKind::Nothing("no_data_change")
            } else {
                PlanKind::Rows { op: Op::Create, splits }
            };
            return Ok(Plan {
                snapshot: snap.clone(),
                schema,
                kind,
                deletes,
            });
        }
        // deletes as of the snapshot, and as of its parent (live now but not added now, or removed now)
        let after_ix = DeleteIndex::new(md, own.deletes.iter());
        let before: Vec<&Entry> = own
            .deletes
            .iter()
            .filter(|d| !(d.status == super::manifest::STATUS_ADDED && d.snapshot_id == id))
            .chain(own.removed_deletes.iter())
            .collect();
        let before_ix = DeleteIndex::new(md, before.into_iter());
        let whole = |e: &Entry| FileRange::whole(e.file.clone(), e.data_seq);
        let old: Vec<Task> = own
            .removed_data
            .iter()
            .map(|e| (whole(e), before_ix.for_data(md, e)))
            .collect();
        let new: Vec<Task> = own
            .added_data(id)
            .map(|e| (whole(e), after_ix.for_data(md, e)))
            .collect();
        let mut rewritten = Vec::new();
        if !changed.is_empty() {
            let all = SnapshotFiles::load(&self.manifests, snap, true)?;
            let mut named: HashSet<String> = HashSet::new();
            for d in &changed {
                match &d.file.referenced_data_file {
                    Some(r) => {
                        named.insert(r.clone());
                    }
                    None if d.file.content != CONTENT_EQUALITY_DELETES => {
                        named.extend(deletes.position_file(&d.file)?.keys().cloned());
                    }
                    None => {}
                }
            }
            for e in all
                .data
                .iter()
                .filter(|e| !(e.status == super::manifest::STATUS_ADDED && e.snapshot_id == id))
            {
                let touched = changed.iter().any(|d| {
                    applies(md, d, e) && (d.file.content == CONTENT_EQUALITY_DELETES || named.contains(&e.file.path))
                });
                if touched {
                    rewritten.push((whole(e), before_ix.for_data(md, e), after_ix.for_data(md, e)));
                }
            }
        }
        let parts = self.parts(old, new, rewritten);
        Ok(Plan {
            snapshot: snap.clone(),
            schema,
            kind: PlanKind::Diff(parts),
            deletes,
        })
    }

    /// With tasks dividing the table by partition, a row's partition must still follow its key.
    fn check_partitions(&self, md: &TableMetadata, snap: &Snapshot) -> Result<(), SourceError> {
        if !self.by_partition {
            return Ok(());
        }
        let ischema = md.schema_of(Some(snap))?;
        let key: Vec<i32> = ischema
            .fields
            .iter()
            .filter(|f| self.info.key_fields.contains(&f.name))
            .map(|f| f.id)
            .collect();
        md.partition_follows(&key).map_err(|why| SourceError::Unreadable {
            message: format!(
                "snapshot {}: tasks divide this table by partition, but now {why}; restart the connector (with \
                 tasks.ownership=auto it then divides the table by key)",
                snap.snapshot_id
            ),
        })
    }

    /// The diff's parts: one, or one per partition when tasks divide the table by partition.
    fn parts(
        &self,
        old: Vec<Task>,
        new: Vec<Task>,
        rewritten: Vec<(FileRange, Vec<Entry>, Vec<Entry>)>,
    ) -> Vec<DiffPart> {
        if !self.by_partition {
            return vec![DiffPart {
                partition: String::new(),
                old,
                new,
                rewritten,
            }];
        }
        let mut by: std::collections::BTreeMap<String, DiffPart> = Default::default();
        fn part<'a>(by: &'a mut std::collections::BTreeMap<String, DiffPart>, p: &str) -> &'a mut DiffPart {
            by.entry(p.to_string()).or_insert_with(|| DiffPart {
                partition: p.to_string(),
                ..Default::default()
            })
        }
        for t in old {
            part(&mut by, &t.0.file.partition.clone()).old.push(t);
        }
        for t in new {
            part(&mut by, &t.0.file.partition.clone()).new.push(t);
        }
        for r in rewritten {
            part(&mut by, &r.0.file.partition.clone()).rewritten.push(r);
        }
        by.into_values().collect()
    }

    /// The plan of a commit that added several snapshots (`base` is the snapshot before it): the
    /// table as of `base` against the table as of `last`, whatever happened in between — data
    /// files gone, data files new, and data files in both whose delete files changed. Reads every
    /// manifest of both snapshots (a multi-snapshot commit is rare; the cache keeps them).
    fn plan_commit(&self, md: &TableMetadata, base: Option<&Snapshot>, last: &Snapshot) -> Result<Plan, SourceError> {
        self.check_partitions(md, last)?;
        let schema = arrow_schema(md.schema_of(Some(last))?)?;
        let after = SnapshotFiles::load(&self.manifests, last, true)?;
        let before = match base {
            Some(b) => SnapshotFiles::load(&self.manifests, b, true)?,
            None => SnapshotFiles::default(),
        };
        let (before_ix, after_ix) = (
            DeleteIndex::new(md, before.deletes.iter()),
            DeleteIndex::new(md, after.deletes.iter()),
        );
        let paths = |f: &SnapshotFiles| -> HashSet<String> { f.data.iter().map(|e| e.file.path.clone()).collect() };
        let (had, has) = (paths(&before), paths(&after));
        let whole = |e: &Entry| FileRange::whole(e.file.clone(), e.data_seq);
        let names = |ds: &[Entry]| ds.iter().map(|d| d.file.path.clone()).collect::<Vec<_>>();
        let old: Vec<Task> = before
            .data
            .iter()
            .filter(|e| !has.contains(&e.file.path))
            .map(|e| (whole(e), before_ix.for_data(md, e)))
            .collect();
        let new: Vec<Task> = after
            .data
            .iter()
            .filter(|e| !had.contains(&e.file.path))
            .map(|e| (whole(e), after_ix.for_data(md, e)))
            .collect();
        let mut rewritten = Vec::new();
        for e in after.data.iter().filter(|e| had.contains(&e.file.path)) {
            let (b, a) = (before_ix.for_data(md, e), after_ix.for_data(md, e));
            if names(&b) != names(&a) {
                rewritten.push((whole(e), b, a));
            }
        }
        let deletes = DeleteReader::default();
        if old.is_empty() && new.is_empty() && rewritten.is_empty() {
            return Ok(Plan {
                snapshot: last.clone(),
                schema,
                kind: PlanKind::Nothing("no_data_change"),
                deletes,
            });
        }
        let kind = PlanKind::Diff(self.parts(old, new, rewritten));
        Ok(Plan {
            snapshot: last.clone(),
            schema,
            kind,
            deletes,
        })
    }

    /// A data file as ranges of about `split-size` bytes, cut at its split offsets (row groups).
    fn ranges(&self, e: &Entry) -> Vec<FileRange> {
        let f = &e.file;
        let target = self.opts.split_size as i64;
        if f.size <= target || f.split_offsets.len() < 2 {
            return vec![FileRange::whole(f.clone(), e.data_seq)];
        }
        let mut offsets = f.split_offsets.clone();
        offsets.sort_unstable();
        offsets.push(f.size);
        let mut out = Vec::new();
        let mut start = 0i64;
        for w in offsets.windows(2).map(|w| w[1]) {
            if w - start >= target || w == f.size {
                out.push(FileRange {
                    file: f.clone(),
                    data_seq: e.data_seq,
                    start,
                    len: w - start,
                });
                start = w;
            }
        }
        out
    }

    /// Flink's bin packing: each task weighs its bytes plus its delete files, at least the open
    /// cost; a task goes into the first of the last `split-lookback` open bins it fits in.
    fn pack(&self, tasks: Vec<Task>) -> Vec<Vec<Task>> {
        let (target, lookback, cost) = (
            self.opts.split_size as i64,
            self.opts.split_lookback,
            self.opts.split_open_cost as i64,
        );
        let mut open: std::collections::VecDeque<(i64, Vec<Task>)> = Default::default();
        let mut out = Vec::new();
        for t in tasks {
            let w = (t.0.len + t.1.iter().map(|d| d.file.size).sum::<i64>()).max(cost);
            match open.iter_mut().find(|(sum, _)| sum + w <= target) {
                Some(bin) => {
                    bin.0 += w;
                    bin.1.push(t);
                }
                None => {
                    open.push_back((w, vec![t]));
                    if open.len() > lookback {
                        out.extend(open.pop_front().map(|b| b.1));
                    }
                }
            }
        }
        out.extend(open.into_iter().map(|b| b.1));
        out
    }
}

pub(super) fn split_spec(i: usize, tasks: &[Task]) -> SplitSpec {
    let first = tasks.first().map(|t| &t.0);
    let name = first
        .map(|r| r.file.path.rsplit('/').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let start = first.map(|r| r.start).unwrap_or(0);
    SplitSpec {
        id: format!("{i:05}:{name}@{start}"),
        partition: first.map(|r| r.file.partition.clone()).unwrap_or_default(),
        file_group: name,
    }
}
