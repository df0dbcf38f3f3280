//! The plan of one snapshot: nothing (`replace`), rows (a full scan or a pure append, with the
//! delete files that apply to each data file, bin-packed into splits), or the parts of a keyed
//! diff of what the snapshot (or one catalog commit) removed and added.

use std::collections::{HashMap, HashSet};

use super::deletes::{applies, DeleteReader};
use super::manifest::{Entry, SnapshotFiles, CONTENT_EQUALITY_DELETES};
use super::metadata::{arrow_schema, Snapshot, TableMetadata};
use super::monitor::{DiffPart, Plan, PlanKind, Rewritten, Task};
use super::reader::FileRange;
use super::IcebergSource;
use crate::metrics::SkipReason;
use crate::source::{Op, SourceError};

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
    /// The plan of a snapshot: a full scan of it (`scan`), or its own changes.
    pub(super) fn plan(&self, md: &TableMetadata, snap: &Snapshot, scan: bool) -> Result<Plan, SourceError> {
        let schema = arrow_schema(md.schema_of(Some(snap))?)?;
        let deletes = DeleteReader::new(self.storage.clone());
        self.check_partitions(md, snap)?;
        let kind = if scan {
            self.scan_kind(md, snap)?
        } else {
            self.change_kind(md, snap, &deletes)?
        };
        Ok(Plan {
            snapshot: snap.clone(),
            schema,
            kind,
            deletes,
        })
    }

    /// Every live data file of the snapshot as rows (`r`), with the deletes that apply to it.
    fn scan_kind(&self, md: &TableMetadata, snap: &Snapshot) -> Result<PlanKind, SourceError> {
        let files = SnapshotFiles::load(&self.manifests, snap, true)?;
        let index = DeleteIndex::new(md, files.deletes.iter());
        let splits = self.row_splits(md, files.data.iter().collect(), &index);
        Ok(if splits.is_empty() {
            PlanKind::Nothing(SkipReason::EmptyTable)
        } else {
            PlanKind::Rows { op: Op::Read, splits }
        })
    }

    /// The snapshot's own changes: nothing for a rewrite (`replace`), its added files as
    /// inserts for a pure append, else a diff of the files it removed and added and of those
    /// whose deletes it changed.
    fn change_kind(
        &self,
        md: &TableMetadata,
        snap: &Snapshot,
        deletes: &DeleteReader,
    ) -> Result<PlanKind, SourceError> {
        if snap.operation() == "replace" {
            return Ok(PlanKind::Nothing(SkipReason::Rewrite));
        }
        let id = snap.snapshot_id;
        let own = SnapshotFiles::load(&self.manifests, snap, false)?;
        let changed: Vec<&Entry> = own.added_deletes(id).chain(own.removed_deletes.iter()).collect();
        if own.removed_data.is_empty() && changed.is_empty() {
            let index = DeleteIndex::new(md, own.deletes.iter());
            let splits = self.row_splits(md, own.added_data(id).collect(), &index);
            return Ok(if splits.is_empty() {
                PlanKind::Nothing(SkipReason::NoDataChange)
            } else {
                PlanKind::Rows { op: Op::Create, splits }
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
        let old: Vec<Task> = own
            .removed_data
            .iter()
            .map(|e| (whole(e), before_ix.for_data(md, e)))
            .collect();
        let new: Vec<Task> = own
            .added_data(id)
            .map(|e| (whole(e), after_ix.for_data(md, e)))
            .collect();
        let rewritten = if changed.is_empty() {
            Vec::new()
        } else {
            self.rewritten(md, snap, &changed, [&before_ix, &after_ix], deletes)?
        };
        Ok(PlanKind::Diff(self.parts(old, new, rewritten)))
    }

    /// Data files the snapshot did not add whose deletes it changed (`changed`: deletes added
    /// or removed): each with its deletes before and after.
    fn rewritten(
        &self,
        md: &TableMetadata,
        snap: &Snapshot,
        changed: &[&Entry],
        [before_ix, after_ix]: [&DeleteIndex; 2],
        deletes: &DeleteReader,
    ) -> Result<Vec<Rewritten>, SourceError> {
        let all = SnapshotFiles::load(&self.manifests, snap, true)?;
        // the data files the changed position deletes name
        let mut named: HashSet<String> = HashSet::new();
        for d in changed {
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
        let mut rewritten = Vec::new();
        for e in all
            .data
            .iter()
            .filter(|e| !(e.status == super::manifest::STATUS_ADDED && e.snapshot_id == snap.snapshot_id))
        {
            let touched = changed.iter().any(|d| {
                applies(md, d, e) && (d.file.content == CONTENT_EQUALITY_DELETES || named.contains(&e.file.path))
            });
            if touched {
                rewritten.push((whole(e), before_ix.for_data(md, e), after_ix.for_data(md, e)));
            }
        }
        Ok(rewritten)
    }

    /// Row splits of `data` (each file's ranges with the deletes that apply), packed into
    /// tasks; with tasks dividing the table by partition, a split never mixes partitions.
    fn row_splits(&self, md: &TableMetadata, data: Vec<&Entry>, index: &DeleteIndex) -> Vec<Vec<Task>> {
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
        let mut by: std::collections::BTreeMap<String, Vec<Task>> = Default::default();
        for t in tasks {
            by.entry(t.0.file.partition.clone()).or_default().push(t);
        }
        by.into_values().flat_map(|ts| self.pack(ts)).collect()
    }

    /// With tasks dividing the table by partition, a row's partition must still follow its key.
    pub(super) fn check_partitions(&self, md: &TableMetadata, snap: &Snapshot) -> Result<(), SourceError> {
        if !self.by_partition {
            return Ok(());
        }
        let ischema = md.schema_of(Some(snap))?;
        let key: Vec<i32> = ischema
            .fields
            .iter()
            .filter(|f| self.env.info.key_fields.contains(&f.name))
            .map(|f| f.id)
            .collect();
        md.partition_follows(&key).map_err(|why| SourceError::Unreadable {
            why: crate::source::Unreadable::Unfollowable,
            message: format!(
                "snapshot {}: tasks divide this table by partition, but now {why}; restart the connector (with \
                 tasks.ownership=auto it then divides the table by key)",
                snap.snapshot_id
            ),
        })
    }

    /// The diff's parts: one, or one per partition when tasks divide the table by partition.
    pub(super) fn parts(&self, old: Vec<Task>, new: Vec<Task>, rewritten: Vec<Rewritten>) -> Vec<DiffPart> {
        if !self.by_partition {
            return vec![DiffPart {
                old,
                new,
                rewritten,
                ..Default::default()
            }];
        }
        let mut by: std::collections::BTreeMap<String, DiffPart> = Default::default();
        fn part<'a>(by: &'a mut std::collections::BTreeMap<String, DiffPart>, p: &str) -> &'a mut DiffPart {
            by.entry(p.to_string()).or_insert_with(|| DiffPart::of(p.to_string()))
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
    pub(super) fn plan_commit(
        &self,
        md: &TableMetadata,
        base: Option<&Snapshot>,
        last: &Snapshot,
    ) -> Result<Plan, SourceError> {
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
        let deletes = DeleteReader::new(self.storage.clone());
        if old.is_empty() && new.is_empty() && rewritten.is_empty() {
            return Ok(Plan {
                snapshot: last.clone(),
                schema,
                kind: PlanKind::Nothing(SkipReason::NoDataChange),
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
    pub(super) fn ranges(&self, e: &Entry) -> Vec<FileRange> {
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
    pub(super) fn pack(&self, tasks: Vec<Task>) -> Vec<Vec<Task>> {
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

/// A data file read whole, at its data sequence number.
fn whole(e: &Entry) -> FileRange {
    FileRange::whole(e.file.clone(), e.data_seq)
}
