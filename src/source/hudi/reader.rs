//! The Hudi reader: a unit's file slices (merged base + log files) as change rows: a full scan
//! split by split, a change unit as one keyed diff over every file group it touched, or in
//! changelog mode the log records themselves.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::files::Listings;
use super::keys::KeyFilter;
use super::merge::SliceMerge;
use super::slice::{self, FileCache, SliceReader};
use super::timeline::Timeline;
use super::{changelog, join_path, CdcFiles, HudiPlan, HudiSource};

mod inputs;
use crate::metrics;
use crate::source::buckets::{buckets_for, restrict};
use crate::source::rows::{conform, nullable};
use crate::source::{ChangeRow, Resume, RowRef, SourceError, SplitChanges, SplitSpec, Unit};

impl HudiSource {
    pub(super) fn slice_reader<'a>(&'a self, timeline: &'a Timeline, cache: &'a FileCache) -> SliceReader<'a> {
        SliceReader {
            keys: None,
            spill: slice::SpillConfig {
                budget: self.budget.get(),
                ..self.spill.clone()
            },
            table: &self.table,
            timeline,
            merge: &self.merge,
            cache,
            connector: &self.connector,
        }
    }

    /// A slice reader for a unit: it reads only the unit's candidate keys where it has them.
    pub(super) fn unit_reader<'a>(&'a self, r: &UnitRead<'a>, cache: &'a FileCache) -> SliceReader<'a> {
        let mut reader = self.slice_reader(r.tl, cache);
        reader.keys = r.keys;
        reader
    }

    /// A slice reader for one of the threads of a parallel read: its share of the budget.
    pub(super) fn shared_slice_reader<'a>(&'a self, timeline: &'a Timeline, cache: &'a FileCache) -> SliceReader<'a> {
        let mut r = self.slice_reader(timeline, cache);
        r.spill.budget /= self.threads.max(1);
        r
    }

    /// The merge of split `sp`'s file slice as of the unit (after it when `inclusive`), read
    /// through `reader`; a file gone from storage becomes the cleaned-file error with its way out.
    pub(super) fn open_slice<'r>(
        &self,
        r: &UnitRead<'_>,
        reader: &'r SliceReader<'r>,
        sp: &SplitSpec,
        inclusive: bool,
    ) -> Result<Option<SliceMerge<'r>>, SourceError> {
        let files = r.listings.partition(&sp.partition)?;
        let (base, logs) = files.group(&sp.reads);
        SliceMerge::plan(
            reader,
            &sp.partition,
            base,
            logs,
            r.unit.position.order_key(),
            inclusive,
        )
    }

    /// Changelog mode: the log records each touched file group got, one event each; file groups
    /// the instant wrote a base file for (inserts, compaction) are diffed.
    fn read_changelog(
        &self,
        r: &UnitRead<'_>,
        done: &HashSet<String>,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let (unit, tl, listings) = (r.unit, r.tl, r.listings);
        let cache = FileCache::default();
        let reader = self.slice_reader(tl, &cache);
        let at = unit.position.order_key();
        // every split is read (done ones too): keys moving between file groups pair across splits
        let mut paired = PairedSplits::default();
        for sp in &unit.splits {
            let files = listings.partition(&sp.partition)?;
            let (base, logs) = files.group(&sp.reads);
            let wrote_base = base.iter().any(|b| b.instant == unit.position.version);
            let (batches, rows, file) = if wrote_base || r.is_replaced(sp) {
                let (batches, rows, file, _) = self.diff_split(r, sp, &cache)?;
                (batches, rows, file)
            } else {
                let old = self
                    .open_slice(r, &reader, sp, false)?
                    .map(SliceMerge::collect)
                    .transpose()?;
                let blocks = reader.instant_blocks(&sp.partition, base, logs, at, &unit.position.version)?;
                let old_batches = old.map(|o| o.batches).unwrap_or_default();
                let (batches, rows) =
                    changelog::changelog_rows(&old_batches, &blocks, &self.merge, !self.read.skip_merge)?;
                let file = logs
                    .iter()
                    .rfind(|l| l.instant <= unit.position.version)
                    .map(|l| join_path(&sp.partition, &l.name));
                (batches, rows, file.unwrap_or_default())
            };
            paired.push(batches, rows, file, None);
        }
        paired.emit(unit, None, self.keyed_by_partition(), done, emit)
    }

    /// The Kafka key carries the partition path (`key.partition-path`): a key moving to another
    /// partition is another key.
    pub(super) fn keyed_by_partition(&self) -> bool {
        self.info.key_fields.iter().any(|k| k == super::PARTITION_PATH)
    }

    pub(super) fn key_columns(&self, schema: &SchemaRef) -> Result<(Vec<usize>, Option<usize>), SourceError> {
        let keys = self
            .info
            .key_fields
            .iter()
            .map(|k| {
                schema.index_of(k).map_err(|_| SourceError::Unreadable { why: crate::source::Unreadable::Damaged,
                    message: format!(
                        "table {}: record key field `{k}` (hoodie.table.recordkey.fields) is not a column of the data files",
                        self.table.path.display()
                    ),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((keys, schema.index_of("_hoodie_commit_time").ok()))
    }

    /// The unit's plan: kept from the poll that handed it out, or made again (a restarted task
    /// reading its unit in flight, a plan let go).
    fn plan_of(&self, unit: &Unit) -> Result<Arc<HudiPlan>, SourceError> {
        self.plans
            .get_or_plan(unit, || self.plan_at(&unit.position, unit.snapshot).map(drop))
    }

    /// What a change unit's read needs of its commit beyond the plan: the CDC files it wrote
    /// (where they are read); its inputs checked to be there. A full scan's plan holds no commit:
    /// nothing.
    fn unit_inputs(
        &self,
        plan: &HudiPlan,
        unit: &Unit,
        listings: &Listings,
        changelog: bool,
    ) -> Result<Option<CdcFiles>, SourceError> {
        let Some(md) = plan.commit.as_deref() else {
            return Ok(None);
        };
        let cdc = match changelog {
            true => None,
            false => self.cdc_files(md, &unit.position.version)?,
        };
        self.verify_inputs(md, listings, &self.cdc_previous_optional(cdc.as_ref()))?;
        Ok(cdc)
    }

    pub(super) fn read(
        &self,
        unit: &Unit,
        resume: &Resume,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let done = &resume.done;
        if unit.splits.is_empty() {
            return Ok(());
        }
        let plan = self.plan_of(unit)?;
        let listings = Listings::new(&self.table.storage, &self.table.path);
        let changelog = (self.read.changelog || self.read.skip_merge) && self.table.is_mor();
        let cdc = self.unit_inputs(&plan, unit, &listings, changelog)?;
        let r = UnitRead {
            unit,
            tl: &plan.timeline,
            replaced: &plan.replaced,
            listings: &listings,
            keys: None,
        };
        if unit.snapshot {
            return self.read_snapshot(&r, &resume.done, emit);
        }
        if changelog {
            return self.read_changelog(&r, done, emit);
        }
        // which keys the unit changed, from narrow columns: then only their rows are read whole
        let candidates = match cdc {
            None => self.changed_keys(&r)?,
            Some(_) => None,
        };
        let r = UnitRead {
            keys: candidates.as_ref().map(|c| &c.keys),
            ..r
        };
        if let Some(c) = &candidates {
            metrics::CHANGE_KEYS
                .with_label_values(&[&self.connector])
                .inc_by(c.keys.len() as u64);
        }
        let buckets = match (resume.buckets, &candidates) {
            (Some(b), _) => b.max(1),
            (None, Some(c)) => buckets_for(c.restricted_bytes(), self.budget.get()),
            (None, None) => self.change_buckets(&r)?,
        };
        if let Some(cdc) = cdc {
            // images from the slices are held in memory: beyond the budget the (bucketed) diff
            // gives the same events; files with both images need no slice
            if buckets == 1 || self.cdc_needs_no_slice() {
                return self.read_cdc(&r, &cdc, done, emit);
            }
        }
        // identities confined to a partition are diffed partition by partition: in memory where
        // the whole unit would have been bucketed on disk, and emitted while the next is read
        // (`read.change.detection=full` keeps the whole-unit diff, the reference)
        let groups = match self.read.narrow_changes {
            true => self.diff_groups(unit),
            false => one_group(unit.splits.len()),
        };
        if buckets > 1 {
            if resume.buckets.is_some() || !self.groups_fit(&r, &groups, candidates.as_ref())? {
                return self.read_bucketed(&r, done, buckets, emit);
            }
            tracing::info!(connector = %self.connector, instant = %unit.position.version, groups = groups.len(),
                budget = self.budget.get(), "change unit larger than read.memory.budget: diffed partition by partition in memory");
        }
        self.read_diffed(&r, &groups, done, emit)
    }
}

/// The whole unit as one group of splits (see `diffed`).
pub(super) fn one_group(n: usize) -> Vec<std::ops::Range<usize>> {
    std::iter::once(0..n).collect()
}

/// What reading one unit needs: the unit, the timeline, the file groups replaced by then, the
/// partition listings (each partition listed once per unit), and the keys it reads.
#[derive(Clone, Copy)]
pub(super) struct UnitRead<'a> {
    pub unit: &'a Unit,
    pub tl: &'a Timeline,
    pub replaced: &'a BTreeSet<(String, String)>,
    pub listings: &'a Listings,
    /// The unit's candidate keys (see [`super::narrow`]): only their rows are read. `None`: all.
    pub keys: Option<&'a KeyFilter>,
}

impl UnitRead<'_> {
    pub fn is_replaced(&self, sp: &SplitSpec) -> bool {
        self.replaced.contains(&(sp.partition.clone(), sp.reads.clone()))
    }
}

/// The change rows of a unit's splits over one list of batches, so that keys moving between
/// file groups pair into one update before the splits are emitted (changelog mode, CDC files).
#[derive(Default)]
pub(super) struct PairedSplits {
    batches: Vec<RecordBatch>,
    rows: Vec<Vec<ChangeRow>>,
    files: Vec<String>,
    /// Rows each split read (`None`: its change rows as emitted).
    rows_read: Vec<Option<u64>>,
}

impl PairedSplits {
    /// The next split of the unit: its batches, its change rows (indexing those batches), the
    /// file it names, the rows it read.
    pub fn push(&mut self, batches: Vec<RecordBatch>, rows: Vec<ChangeRow>, file: String, rows_read: Option<u64>) {
        let offset = self.batches.len() as u32;
        let shift = |r: RowRef| RowRef {
            batch: r.batch + offset,
            row: r.row,
        };
        self.rows.push(rows.into_iter().map(|c| c.moved(shift)).collect());
        self.batches.extend(batches);
        self.files.push(file);
        self.rows_read.push(rows_read);
    }

    /// Conform every batch to one schema (`target`, else the newest batch's), so a moved key's
    /// before and after share it; pair moves; emit the unit's splits in order, skipping `done`.
    pub fn emit(
        mut self,
        unit: &Unit,
        target: Option<SchemaRef>,
        by_partition: bool,
        done: &HashSet<String>,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let Some(target) = target.or_else(|| self.batches.last().map(|b| b.schema())) else {
            return Ok(());
        };
        let target = nullable(&target, &[]);
        let all: Vec<RecordBatch> = self
            .batches
            .iter()
            .map(|b| conform(b, &target))
            .collect::<Result<_, _>>()?;
        changelog::pair_moves(&all, &mut self.rows, by_partition);
        let all = Arc::new(all);
        let splits = unit.splits.iter().zip(self.rows).zip(self.files).zip(self.rows_read);
        for (((sp, rows), file), rows_read) in splits {
            if done.contains(&sp.id) {
                continue;
            }
            let rows_read = rows_read.unwrap_or(rows.len() as u64);
            let (batches, rows) = restrict(&all, rows);
            let mut sc = SplitChanges::whole(sp.clone(), file, batches, rows);
            sc.rows_read = rows_read;
            emit(sc)?;
        }
        Ok(())
    }
}
