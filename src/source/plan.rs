//! One planning model for the formats whose versions add and remove whole files (Iceberg
//! snapshots, Delta versions): a version is planned once into a [`PlanKind`] — nothing, rows as
//! they are (split by split), or a diff of the rows it took away against the rows it brought
//! ([`DiffPart`]s, one per partition where tasks divide the table by partition) — kept in a
//! [`PlanCache`] between the poll that planned it and the read, and read by one driver
//! (`plan/read.rs`). A format writes two things: its planner (versions → [`PlanKind`], in its
//! `monitor`/`plan`) and a [`PieceReader`] (one file, one split's files, one file's lineage).
//! Hudi plans file groups and slices, not files, and has its own reader (`source::hudi`).
//!
//! Like iceberg-rust's scan planning, a plan is plain values: reading it needs the storage and
//! nothing else from the planner.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parking_lot::Mutex;

use super::lineage::Lineage;
use super::sides::Sides;
use super::{Op, SourceError, SplitSpec, TableInfo, Unit};
use crate::metrics::SkipReason;

mod read;

pub use read::{changed_positions, key_columns, read_unit, Positions};

/// A file (or range of one) a plan reads, as the shared driver sees it.
pub trait PlanFile: Send + Sync {
    /// Its path, as events' `source.file` name it.
    fn path(&self) -> &str;
    /// What it adds to a unit's reading (for the in-memory or bucketed choice).
    fn bytes(&self) -> u64;
    /// Whether every row of it has a row id (row lineage: Iceberg v3, Delta row tracking).
    fn has_lineage(&self) -> bool;
}

/// What a unit reads.
pub enum PlanKind<F, R> {
    /// Nothing: the version changed no row (compaction, a start marker); the reason is counted.
    Nothing(SkipReason),
    /// Every live row of the files, as `op` events, split by split.
    Rows { op: Op, splits: Vec<Vec<F>> },
    /// Rows the version took away against rows it brought: one part, or one per partition when
    /// tasks divide the table by partition (a split each).
    Diff(Vec<DiffPart<F, R>>),
}

/// Rows a version removed (`old`) against rows it added (`new`); `rewritten`: files whose
/// deletes changed (read once: the rows they hide now against the rows they show again);
/// `cdc`: change-data files, each holding rows of both sides (Delta).
pub struct DiffPart<F, R> {
    pub partition: String,
    pub old: Vec<F>,
    pub new: Vec<F>,
    pub rewritten: Vec<R>,
    pub cdc: Vec<F>,
}

impl<F, R> Default for DiffPart<F, R> {
    fn default() -> Self {
        Self {
            partition: String::new(),
            old: Vec::new(),
            new: Vec::new(),
            rewritten: Vec::new(),
            cdc: Vec::new(),
        }
    }
}

/// One piece of a [`DiffPart`], by its index (old files, new files, rewritten, change files).
pub enum Piece<'a, F, R> {
    Old(&'a F),
    New(&'a F),
    Rewritten(&'a R),
    Changes(&'a F),
}

impl<F, R> Clone for Piece<'_, F, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<F, R> Copy for Piece<'_, F, R> {}

impl<F: PlanFile, R: PlanFile> DiffPart<F, R> {
    /// A part of one partition.
    pub fn of(partition: String) -> Self {
        Self {
            partition,
            ..Default::default()
        }
    }

    /// The split of this part: `diff` when the diff is one part, else `diff:<partition>`.
    pub fn split(&self, whole: bool) -> SplitSpec {
        let id = match whole {
            true => "diff".to_string(),
            false => format!("diff:{}", self.partition),
        };
        SplitSpec {
            id: id.clone(),
            partition: self.partition.clone(),
            reads: id,
        }
    }

    /// How many pieces it is read in.
    pub fn len(&self) -> usize {
        self.old.len() + self.new.len() + self.rewritten.len() + self.cdc.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Piece `i` (`i < self.len()`).
    pub fn piece(&self, i: usize) -> Option<Piece<'_, F, R>> {
        let (no, nn, nr) = (self.old.len(), self.new.len(), self.rewritten.len());
        match i {
            i if i < no => self.old.get(i).map(Piece::Old),
            i if i < no + nn => self.new.get(i - no).map(Piece::New),
            i if i < no + nn + nr => self.rewritten.get(i - no - nn).map(Piece::Rewritten),
            i => self.cdc.get(i - no - nn - nr).map(Piece::Changes),
        }
    }

    /// Whether every row it reads has a row id (change-data files carry none).
    pub fn has_lineage(&self) -> bool {
        self.cdc.is_empty()
            && self.old.iter().chain(&self.new).all(F::has_lineage)
            && self.rewritten.iter().all(R::has_lineage)
    }

    pub fn bytes(&self) -> u64 {
        let files: u64 = self.old.iter().chain(&self.new).chain(&self.cdc).map(F::bytes).sum();
        files + self.rewritten.iter().map(R::bytes).sum::<u64>()
    }
}

/// A planned version, as the shared driver reads it.
pub trait VersionPlan: Send + Sync {
    type File: PlanFile;
    type Rewrite: PlanFile;
    fn kind(&self) -> &PlanKind<Self::File, Self::Rewrite>;
    /// The table's columns at this version.
    fn schema(&self) -> &SchemaRef;
    /// The version in messages and logs (`snapshot 12`, `version 3`).
    fn label(&self) -> String;
    /// Whether its rows may carry row lineage at all (Delta: row tracking on).
    fn lineage_on(&self) -> bool;
}

/// What each format's source holds for reading, once.
pub struct ReadEnv {
    pub info: TableInfo,
    pub threads: usize,
    /// The unit being read's memory budget (`read.memory.budget`, or its share of the
    /// process's): a diff beyond it goes to key buckets (in `spill_dir`).
    pub budget: super::budget::Budget,
    /// `read.change.detection=narrow`: a diff beyond the budget decides its changed keys first.
    pub narrow: bool,
    pub spill_dir: std::path::PathBuf,
    pub connector: String,
}

impl ReadEnv {
    pub fn new(cfg: &crate::config::SourceSettings, info: TableInfo) -> Self {
        Self {
            info,
            threads: super::parallel::default_threads(),
            budget: super::budget::Budget::new(cfg.read.memory_budget),
            narrow: cfg.read.narrow_changes,
            spill_dir: cfg.read.spill_dir.clone(),
            connector: cfg.name.clone(),
        }
    }
}

/// What a format reads for the shared driver: one piece of a diff, one split's rows, one file's
/// lineage.
pub trait PieceReader: Sync {
    type Plan: VersionPlan;
    fn env(&self) -> &ReadEnv;
    /// `schema` with the format's two row-lineage columns at its end.
    fn with_lineage(&self, schema: &SchemaRef) -> SchemaRef;
    /// The split a `Rows` plan's `i`th files are read as (planning names them the same way).
    fn rows_split(&self, plan: &Self::Plan, i: usize, files: &[File<Self>]) -> SplitSpec;
    /// One piece of a diff part as sides conformed to `target`: only the live rows at
    /// `positions` where given (chosen by lineage, see [`read::changed_positions`]).
    fn read_piece(
        &self,
        plan: &Self::Plan,
        target: &SchemaRef,
        piece: PieceOf<'_, Self>,
        positions: Option<&[u64]>,
    ) -> Result<Sides, SourceError>;
    /// The live rows of `files` conformed to `target`, batch by batch in order, each with its
    /// (partition, file) where the format labels batches (`None`: the split's own). Returns the
    /// bytes read.
    fn read_files(
        &self,
        plan: &Self::Plan,
        target: &SchemaRef,
        files: &[File<Self>],
        sink: &mut dyn FnMut(RecordBatch, Option<(String, String)>) -> Result<(), SourceError>,
    ) -> Result<u64, SourceError>;
    /// Position, row id and version of each live row of one old or new file.
    fn lineage_of(&self, plan: &Self::Plan, file: &File<Self>) -> Result<Lineage, SourceError>;
    /// The version that wrote a new file's rows (a carried-over row keeps an older one).
    fn written(&self, plan: &Self::Plan, file: &File<Self>) -> i64;
    /// Whether lineage may narrow `part` beyond the shared limits (e.g. no equality deletes).
    fn may_narrow(&self, _plan: &Self::Plan, _part: &Part<Self>) -> bool {
        true
    }
}

/// A reader's file type.
pub type File<R> = <<R as PieceReader>::Plan as VersionPlan>::File;
/// A reader's diff piece type.
pub type PieceOf<'a, R> =
    Piece<'a, <<R as PieceReader>::Plan as VersionPlan>::File, <<R as PieceReader>::Plan as VersionPlan>::Rewrite>;
/// A reader's diff part type.
pub type Part<R> =
    DiffPart<<<R as PieceReader>::Plan as VersionPlan>::File, <<R as PieceReader>::Plan as VersionPlan>::Rewrite>;

/// The plans of the units handed out, by (position, full scan): a unit is planned when a poll
/// hands it out and read from its plan; a restarted task plans it again.
pub struct PlanCache<P> {
    plans: Mutex<HashMap<(String, bool), Arc<P>>>,
}

impl<P> Default for PlanCache<P> {
    fn default() -> Self {
        Self {
            plans: Mutex::new(HashMap::new()),
        }
    }
}

/// Plans kept at most (a poll plans a few units ahead of the one being read).
const PLANS_KEPT: usize = 64;

impl<P> PlanCache<P> {
    pub fn insert(&self, unit: &Unit, plan: P) {
        let mut plans = self.plans.lock();
        if plans.len() > PLANS_KEPT {
            plans.clear();
        }
        plans.insert((unit.position.version.clone(), unit.snapshot), Arc::new(plan));
    }

    /// The unit's plan, planned by `plan` (which inserts it) where it is not kept.
    pub fn get_or_plan(
        &self,
        unit: &Unit,
        plan: impl FnOnce() -> Result<(), SourceError>,
    ) -> Result<Arc<P>, SourceError> {
        let key = (unit.position.version.clone(), unit.snapshot);
        if let Some(p) = self.plans.lock().get(&key) {
            return Ok(p.clone());
        }
        plan()?;
        self.plans
            .lock()
            .get(&key)
            .cloned()
            .ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Internal,
                message: format!("unit {}: planning it left no plan", unit.position.version),
            })
    }
}
