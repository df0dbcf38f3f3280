//! Sources: a monitor that turns newly committed table versions into [`Unit`]s (one per Hudi
//! instant, Iceberg snapshot or Delta version, or the initial full scan), each made of splits (a
//! Hudi file group, a packed list of Iceberg files, a Delta file, a diff part), and readers that
//! turn a unit into change rows over Arrow batches.
//!
//! Readers are deterministic: reading the same unit twice yields the same splits with the same
//! change rows in the same order. The runtime relies on that to resume inside a unit by skipping
//! the records it already committed.

pub mod buckets;
pub mod budget;
pub mod delta;
pub mod hudi;
pub mod iceberg;
pub mod lineage;
pub mod opening;
pub mod parallel;
pub mod plan;
pub mod positions;
pub mod rows;
pub mod sides;

pub mod discover;
mod error;
pub use error::{CatalogFailure, SourceError, Unreadable};

use std::collections::HashSet;

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::metrics::SkipReason;

/// Open the connector's table (blocking): its key, schema and how tasks divide it. `validate`
/// opens it too, so a table that does not fit the settings fails there.
pub fn open(cfg: &crate::config::SourceSettings) -> Result<std::sync::Arc<dyn Source>, SourceError> {
    // the connector's own storage handle: its `s3.*` settings and clients, used by every read
    let requests = crate::storage::requests::Requests::new(|op| {
        crate::metrics::STORAGE_REQUESTS.with_label_values(&[cfg.name.as_str(), op.label()])
    });
    let storage = crate::storage::Storage::with_requests(cfg.storage.clone(), requests);
    Ok(match cfg.kind {
        crate::config::ConnectorKind::Hudi => std::sync::Arc::new(hudi::HudiSource::open(cfg, storage)?),
        crate::config::ConnectorKind::Iceberg => std::sync::Arc::new(iceberg::IcebergSource::open(cfg, storage)?),
        crate::config::ConnectorKind::Delta => std::sync::Arc::new(delta::DeltaSource::open(cfg, storage)?),
    })
}

/// A Parquet reader builder over a local or remote file.
pub type ParquetBuilder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder<crate::storage::Input>;

/// Open and parse a local or remote path's Parquet footer.
pub fn parquet(storage: &crate::storage::Storage, p: &std::path::Path) -> Result<ParquetBuilder, SourceError> {
    parquet_sized(storage, p).map(|(builder, _)| builder)
}

/// [`parquet`], and the file's size in bytes (a remote file learns it from the ranged GET of its
/// footer: no request of its own).
pub fn parquet_sized(
    storage: &crate::storage::Storage,
    p: &std::path::Path,
) -> Result<(ParquetBuilder, u64), SourceError> {
    let input = storage.open(p).map_err(SourceError::io(p))?;
    let size = parquet::file::reader::Length::len(&input);
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(input.clone())
        .map_err(SourceError::parquet(p))?;
    input.plan(builder.metadata());
    Ok((builder, size))
}

/// A position: the last version a connector issued (see CONTRIBUTING's Words).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The version's id as text: a Hudi requested instant time, an Iceberg snapshot id, a Delta
    /// version (offsets records store it as `instant`, its first name).
    #[serde(rename = "instant")]
    pub version: String,
    /// Where the format orders versions by another id than `version`: a Hudi completion time
    /// (table version 8+); order is by it when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<String>,
}

impl Position {
    /// The timeline order: completion time where the table records one, else requested time.
    pub fn order_key(&self) -> &str {
        self.completed.as_deref().unwrap_or(&self.version)
    }

    /// The version as an Iceberg snapshot id.
    pub fn snapshot_id(&self) -> Result<i64, SourceError> {
        self.number("an Iceberg snapshot id")
    }

    /// The version as a Delta table version.
    pub fn delta_version(&self) -> Result<u64, SourceError> {
        self.number("a Delta table version")
    }

    /// The one place a position's text becomes a number; an offsets record another connector
    /// type (or another table) wrote fails here, saying so.
    fn number<N: std::str::FromStr>(&self, what: &str) -> Result<N, SourceError> {
        self.version.parse().map_err(|_| SourceError::Unreadable {
            why: Unreadable::ForeignPosition,
            message: format!(
                "position `{}` is not {what} (offsets of another connector type or table?); use a new connector \
                 name, or inspect it with `lakestream offsets show`",
                self.version
            ),
        })
    }
}

/// How the tasks of a connector divide a table (see `tasks.ownership`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ownership {
    /// A row belongs to the task its key hashes to; every task reads every split.
    #[default]
    Key,
    /// A row belongs to the task its partition hashes to; a task reads only its partitions' splits.
    Partition,
}

impl Ownership {
    /// The scheme a table gets: `proof` is `Ok` when the table shows a row's identity cannot
    /// leave its partition, else why not. Logged once, at open.
    pub fn decide(
        cfg: &crate::config::SourceSettings,
        table: &str,
        partitioned: bool,
        proof: Result<(), String>,
    ) -> Ownership {
        use crate::config::TaskOwnership as C;
        let (choice, many) = (cfg.ownership, cfg.tasks > 1);
        let chosen = match (choice, partitioned, &proof) {
            (C::Key, ..) => Ownership::Key,
            (_, false, _) => Ownership::Key,
            (C::Auto, true, Ok(())) | (C::Partition, true, Ok(())) => Ownership::Partition,
            (C::Auto, true, Err(why)) => {
                if many {
                    tracing::info!(table, why = %why, "tasks divide this table by key hash (every task reads every file): \
                    set tasks.ownership=partition if no key ever lives in two partitions (non-global index)");
                }
                Ownership::Key
            }
            (C::Partition, true, Err(why)) => {
                tracing::warn!(table, why = %why, "tasks.ownership=partition: tasks read only their partitions; a key \
                    that moves to another partition may then be published out of order (correct only where a \
                    (partition, key) pair is the row's identity, as under Hudi's non-global indexes)");
                Ownership::Partition
            }
        };
        if many && chosen == Ownership::Partition {
            tracing::info!(
                table,
                "tasks divide this table by partition: each task reads only its partitions' files"
            );
        }
        if choice == C::Partition && !partitioned {
            tracing::warn!(
                table,
                "tasks.ownership=partition on an unpartitioned table: tasks divide it by key hash"
            );
        }
        chosen
    }

    /// The scheme's name, as `tasks.ownership` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Ownership::Key => "key",
            Ownership::Partition => "partition",
        }
    }

    /// The hash that places a partition on a task.
    pub fn partition_hash(partition: &str) -> u32 {
        // FNV-1a: stable across builds and processes (the owner of a partition is stored state)
        partition
            .bytes()
            .fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Create,
    Update,
    Delete,
}

impl From<Op> for crate::metrics::RecordOp {
    fn from(op: Op) -> Self {
        use crate::metrics::RecordOp;
        match op {
            Op::Read => RecordOp::Read,
            Op::Create => RecordOp::Create,
            Op::Update => RecordOp::Update,
            Op::Delete => RecordOp::Delete,
        }
    }
}

impl Op {
    /// Debezium's op code (`r`, `c`, `u`, `d`): the events' `op`, and the `op` label their
    /// counters carry, from the one table of them (`metrics::RecordOp`).
    pub fn code(self) -> &'static str {
        crate::metrics::RecordOp::from(self).label()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitSpec {
    /// Stable id within its unit: Hudi `<partition>/<file group>`; Iceberg `<index>:<first
    /// file>@<offset>`; Delta the file; a diff part `diff` or `diff:<partition>`.
    pub id: String,
    pub partition: String,
    /// What the split reads within its partition: a Hudi file group id, an Iceberg split's first
    /// file name, a Delta file, a diff part's id.
    pub reads: String,
}

/// Where a version stands in its table's history, to compare positions by (tasks', a start
/// setting's, verify's target): a number (Iceberg's sequence number, Delta's version), or a Hudi
/// timeline time (completion time where the table records one), compared as Hudi compares them.
/// The positions compared are one table's: one variant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum HistoryOrder {
    Sequence(i64),
    Timeline(String),
}

/// One committed table version to emit, in order.
#[derive(Debug, Clone)]
pub struct Unit {
    pub position: Position,
    pub action: String,
    pub operation: Option<String>,
    /// The initial full scan (`r` events) rather than a change.
    pub snapshot: bool,
    /// Commit time in epoch millis (for `source.ts_ms` and lag).
    pub ts_ms: i64,
    pub splits: Vec<SplitSpec>,
    /// Why a unit without splits emits nothing (counted by reason).
    pub skipped: Option<SkipReason>,
}

/// A row of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowRef {
    pub batch: u32,
    pub row: u32,
}

/// A change of one row: its op and its images, the row before, the row after or both, never
/// neither (a change without an image cannot be built).
#[derive(Debug, Clone, Copy)]
pub struct ChangeRow {
    pub op: Op,
    images: Images,
}

#[derive(Debug, Clone, Copy)]
enum Images {
    Before(RowRef),
    After(RowRef),
    Both(RowRef, RowRef),
}

impl ChangeRow {
    /// A change whose row after is `after` (`r`, `c`, or `u` with its before image).
    pub fn to(op: Op, before: Option<RowRef>, after: RowRef) -> ChangeRow {
        let images = match before {
            Some(b) => Images::Both(b, after),
            None => Images::After(after),
        };
        ChangeRow { op, images }
    }

    /// A `d` of the row `before`.
    pub fn deleted(before: RowRef) -> ChangeRow {
        ChangeRow {
            op: Op::Delete,
            images: Images::Before(before),
        }
    }

    /// A change of the images given; `None` where there is neither.
    pub fn of(op: Op, before: Option<RowRef>, after: Option<RowRef>) -> Option<ChangeRow> {
        let images = match (before, after) {
            (Some(b), Some(a)) => Images::Both(b, a),
            (Some(b), None) => Images::Before(b),
            (None, Some(a)) => Images::After(a),
            (None, None) => return None,
        };
        Some(ChangeRow { op, images })
    }

    pub fn before(&self) -> Option<RowRef> {
        match self.images {
            Images::Before(b) | Images::Both(b, _) => Some(b),
            Images::After(_) => None,
        }
    }

    pub fn after(&self) -> Option<RowRef> {
        match self.images {
            Images::After(a) | Images::Both(_, a) => Some(a),
            Images::Before(_) => None,
        }
    }

    /// The row the change's key is read from: the row after, else the row before.
    pub fn key_row(&self) -> RowRef {
        match self.images {
            Images::After(r) | Images::Both(_, r) | Images::Before(r) => r,
        }
    }

    /// The same change with its images' rows moved by `f` (batches renumbered).
    pub fn moved(self, mut f: impl FnMut(RowRef) -> RowRef) -> ChangeRow {
        let images = match self.images {
            Images::Before(b) => Images::Before(f(b)),
            Images::After(a) => Images::After(f(a)),
            Images::Both(b, a) => {
                let b = f(b);
                Images::Both(b, f(a))
            }
        };
        ChangeRow { op: self.op, images }
    }
}

/// The change rows of one split, or of one chunk of it: a split too large for memory arrives as
/// several chunks, in order, the last with `last` set. All batches share one schema.
#[derive(Debug, Clone)]
pub struct SplitChanges {
    pub split: SplitSpec,
    /// Change rows of this split handed on in earlier chunks (this chunk's first row index).
    pub first_row: u64,
    /// The split's last chunk.
    pub last: bool,
    /// Key buckets the unit was diffed in (1: one in-memory diff). Part of the unit's row order,
    /// so a resumed unit must be read with the same number.
    pub buckets: u32,
    /// The file the rows were read from (new slice, or old one for pure deletes).
    pub file: String,
    pub batches: std::sync::Arc<Vec<RecordBatch>>,
    /// (partition, file) of each batch when a split reads several files; empty: the split's
    /// partition and `file` for every batch.
    pub batch_files: Vec<(String, String)>,
    pub rows: Vec<ChangeRow>,
    /// Each batch's row ids where the read had row lineage (see [`lineage`]): `source.row_id`.
    pub row_ids: Option<std::sync::Arc<Vec<arrow_array::Int64Array>>>,
    /// Rows read from storage for this split (metrics).
    pub rows_read: u64,
    pub bytes_read: u64,
}

/// How to read a unit that was partly emitted before.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// Splits already fully emitted.
    pub done: HashSet<String>,
    /// The key buckets the unit was first read with (`None`: choose by `read.memory.budget`).
    pub buckets: Option<u32>,
    /// The unit's share of the process's memory budget (`run --memory-budget`; `None`: the
    /// connector's `read.memory.budget`). See [`budget::Budget`].
    pub budget: Option<usize>,
}

/// Every row of `batches`, in order, as an `op` change with only an after image (a full scan,
/// an append).
pub fn rows_as(op: Op, batches: &[RecordBatch]) -> Vec<ChangeRow> {
    batches
        .iter()
        .enumerate()
        .flat_map(|(b, batch)| {
            (0..batch.num_rows()).map(move |r| {
                ChangeRow::to(
                    op,
                    None,
                    RowRef {
                        batch: b as u32,
                        row: r as u32,
                    },
                )
            })
        })
        .collect()
}

impl SplitChanges {
    /// A whole split in one chunk.
    pub fn whole(split: SplitSpec, file: String, batches: Vec<RecordBatch>, rows: Vec<ChangeRow>) -> Self {
        SplitChanges {
            split,
            first_row: 0,
            last: true,
            buckets: 1,
            file,
            batches: std::sync::Arc::new(batches),
            batch_files: Vec::new(),
            rows,
            row_ids: None,
            rows_read: 0,
            bytes_read: 0,
        }
    }
}

/// What a table exposes to the changelog layer.
#[derive(Debug, Clone, Default)]
pub struct TableInfo {
    pub name: String,
    /// Record-key columns: the Kafka key.
    pub key_fields: Vec<String>,
    /// `source.connector` of the events: `hudi` or `iceberg`.
    pub connector: &'static str,
    /// `source.db` of the events: the Iceberg namespace (`a.b`), Hudi's `hoodie.database.name`;
    /// empty where the table has none.
    pub db: String,
    /// Top-level columns the table's schema declares required (non-null), when asked for
    /// (`schema.nullability=table`); else empty.
    pub required: Vec<String>,
}

impl TableInfo {
    /// No key (`key.mode=none`): null Kafka keys, rows compared whole.
    pub fn keyless(&self) -> bool {
        self.key_fields.is_empty()
    }

    /// `<db>.<table>`, or the table's name where it has no database (Debezium's data collection).
    pub fn qualified_name(&self) -> String {
        if self.db.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.db, self.name)
        }
    }

    /// The key as stored with a position (the events published under it were keyed so).
    pub fn stored_key(&self) -> Vec<String> {
        if self.keyless() {
            vec!["(key.mode=none)".to_string()]
        } else {
            self.key_fields.clone()
        }
    }
}

pub trait Source: Send + Sync {
    fn info(&self) -> &TableInfo;

    /// Units committed after `after`, oldest first. With `after == None` (no stored offsets) the
    /// start strategy decides: a full-scan unit, an empty unit at the latest instant, or every
    /// instant from a given one.
    fn poll(&self, after: Option<&Position>) -> Result<Vec<Unit>, SourceError>;

    /// The unit at a stored position (to finish one that was interrupted), planned as before.
    fn unit_at(&self, position: &Position, snapshot: bool) -> Result<Unit, SourceError>;

    /// Read a unit's changes split by split (a split possibly in several chunks), skipping the
    /// splits in `resume.done`.
    fn read_unit(
        &self,
        unit: &Unit,
        resume: &Resume,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError>;

    /// How tasks divide this table (decided at open from `tasks.ownership` and the table).
    fn ownership(&self) -> Ownership {
        Ownership::Key
    }

    /// Whether [`Self::ownership`] is by partition only because `tasks.ownership=auto` found the
    /// Kafka key carrying the partition: a connector already running by key hash keeps that.
    fn partition_ownership_from_key(&self) -> bool {
        false
    }

    /// Whether a unit's splits depend on the ownership scheme (then a scheme change cannot hand
    /// over a unit an old task had half emitted).
    fn splits_follow_ownership(&self) -> bool {
        false
    }

    /// Whether the configured end (`read.end-commit`, `end-snapshot-id`) has been emitted.
    fn reached_end(&self, issued: &Position) -> bool;

    /// Where a position stands in table history (comparing the positions of tasks).
    fn order(&self, p: &Position) -> Result<HistoryOrder, SourceError>;

    /// What the table is, for `validate --online`: format, version, history.
    fn describe(&self) -> Result<String, SourceError>;

    /// The position of a completed instant / snapshot `id` (`offsets set`); an id the table
    /// does not have is a `SourceError::Config`.
    fn position_of(&self, id: &str) -> Result<Position, SourceError>;

    /// The table's own id where the format keeps one (Delta's `metaData.id`): stored with the
    /// position, a different one at the next start means the table was dropped and re-created.
    fn identity(&self) -> Result<Option<String>, SourceError> {
        Ok(None)
    }

    /// Columns whose identity changed in the table's history (renamed, or dropped and re-added):
    /// events published before the change cannot carry their current values (`verify` leaves
    /// them out of its comparison and says so).
    fn unstable_columns(&self) -> Result<Vec<String>, SourceError> {
        Ok(Vec::new())
    }

    /// How far the table's retention is from `position`: the commits (and seconds) between the
    /// oldest commit whose inputs still exist and the position, before a cleaner or an expiry
    /// removes what the next unit reads. `None`: nothing bounds it (no clean yet, or a format
    /// that does not say).
    fn history_headroom(&self, _position: &Position) -> Result<Option<Headroom>, SourceError> {
        Ok(None)
    }

    /// The partitions the commits after `after` up to `target` wrote, where the table still
    /// records them and the Kafka key carries the partition (a key's events then all name one
    /// partition, so the keys of the others did not change): a resync reads only those of both
    /// sides. `None`: every partition (not recorded any more, a restore or rollback among them,
    /// a key without the partition, or a format whose retention drops what would tell).
    fn changed_partitions(
        &self,
        _after: &Position,
        _target: &Position,
    ) -> Result<Option<std::collections::BTreeSet<String>>, SourceError> {
        Ok(None)
    }

    /// The Arrow schema `unit`'s rows are read with, where the format tells it without a row
    /// (Delta's and Iceberg's plans): a resync whose table side read no row (a table emptied
    /// across the gap, a task owning no partition with rows) encodes its deletes with it.
    fn schema_of(&self, _unit: &Unit) -> Result<Option<arrow_schema::SchemaRef>, SourceError> {
        Ok(None)
    }
}

/// See [`Source::history_headroom`].
#[derive(Debug, Clone, PartialEq)]
pub struct Headroom {
    /// Commits from the oldest retained one up to the position (0: the position is at or before
    /// it, and its next unit may already be unreadable).
    pub commits: u64,
    /// The same span in seconds of commit time (`None`: the format does not say).
    pub seconds: Option<f64>,
    /// The oldest commit whose inputs still exist (a Hudi instant, an Iceberg snapshot, a Delta
    /// version).
    pub oldest: String,
}
