//! One unit emitted, in four steps per chunk of change rows: **filter** (rows another task owns,
//! or that the previous generation already published during a handoff), **encode** (Avro from the
//! Arrow columns), **produce** (into the open transaction), **checkpoint** (the unit's per-split
//! progress goes into the position the next commit writes). The splits are read on a blocking
//! thread and arrive here chunk by chunk through a small channel, so reading and producing
//! overlap. A transaction commits by size, by age, on shutdown and at the unit's end.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::head_start::{self, Reading};
use super::progress::UnitProgress;
use super::state::{FirstUnit, InFlight, RowOwner, SplitProgress};
use super::{metrics, now_ms, RuntimeError, Task};
use crate::changelog::transaction::Markers;
use crate::changelog::{KafkaRecord, SplitEncoder};
use crate::error::Joined;
use crate::metrics::{RecordOp, UnitOutcome};
use crate::source::{ChangeRow, Op, Ownership, Resume, SplitChanges, Unit};

/// What one unit's emission carries from chunk to chunk.
struct UnitEmit<'u> {
    unit: &'u Unit,
    name: String,
    task_label: String,
    /// Per split: rows committed (or being committed), and whether it is done.
    progress: BTreeMap<String, SplitProgress>,
    finished: usize,
    total: usize,
    shown: UnitProgress,
    /// Rows are divided among tasks by key, or a handoff decides which were published already.
    filter: bool,
    /// Tasks read only their own partitions' splits (no row filter for ownership).
    by_partition: bool,
    txn_age_limit: Duration,
    /// Transaction metadata: BEGIN/END records and each event's place in the lake commit.
    markers: Option<Arc<Markers>>,
    txn_id: String,
    /// Events of the unit published so far (the next `total_order`; 0: BEGIN not yet sent).
    events: u64,
    records: Vec<KafkaRecord>,
    key_buf: Vec<u8>,
}

impl UnitEmit<'_> {
    /// The unit's progress as the position records it.
    fn in_flight(&self, buckets: u32) -> InFlight {
        InFlight {
            unit: self.unit.position.clone(),
            snapshot: self.unit.snapshot,
            splits: self.progress.clone(),
            buckets: Some(buckets).filter(|b| *b != 1),
            events: self.events,
        }
    }

    fn consumed(&mut self, split: &str, next_row: u64) {
        self.progress.entry(split.to_string()).or_default().consumed = next_row;
    }
}

/// Events produced from one chunk, counted once per chunk (a labelled metric lookup per record
/// was 3 % of a full scan's CPU).
#[derive(Default)]
struct ChunkCounts {
    record_bytes: u64,
    by_op: [u64; 4],
    tombstones: u64,
}

enum ChunkEnd {
    Continue,
    /// Shutdown committed mid-chunk: the unit stops here, its progress stored.
    Stopped,
}

impl Task {
    pub(super) async fn emit_unit(&mut self, unit: &Unit) -> Result<(), RuntimeError> {
        let name = self.cfg.name.clone();
        let resumed = self
            .state
            .in_flight
            .clone()
            .filter(|f| f.unit == unit.position && f.snapshot == unit.snapshot);
        if let Some(why) = unit.skipped {
            tracing::debug!(connector = %name, instant = %unit.position.version, why = why.label(), "instant emits nothing");
            metrics::UNITS
                .with_label_values(&[name.as_str(), UnitOutcome::Skipped.label()])
                .inc();
            metrics::SKIPPED.with_label_values(&[name.as_str(), why.label()]).inc();
            return self.finish_unit(unit).await;
        }
        let progress = resumed.as_ref().map(|f| f.splits.clone()).unwrap_or_default();
        let (resume, read) = self.plan_read(unit, resumed.as_ref(), &progress);
        let finished = progress.values().filter(|p| p.done).count();
        let total = read.splits.len();
        let head = match resumed {
            None => self.head.as_mut().and_then(|h| h.take_reading(unit)),
            Some(_) => None,
        };
        let Reading {
            mut rx, reader, shown, ..
        } = match head {
            Some(r) => r,
            None => head_start::read_from(&self.cfg, &self.opts, &self.source, &read, resume, finished),
        };
        shown.announce(&name, unit);
        self.note_first(unit).await?;
        let by_partition = self.cfg.runtime.tasks > 1 && self.ownership == Ownership::Partition;
        let mut e = UnitEmit {
            unit,
            shown,
            task_label: self.cfg.runtime.task_id.to_string(),
            progress,
            finished,
            total,
            filter: (self.cfg.runtime.tasks > 1 && !by_partition) || self.state.handoff.is_some(),
            by_partition,
            txn_age_limit: Duration::from_millis(self.cfg.kafka.transaction_timeout_ms / 3),
            markers: if self.cfg.events.txn_metadata {
                Some(self.encoder.markers().await?)
            } else {
                None
            },
            txn_id: unit.position.version.clone(),
            events: resumed.as_ref().map_or(0, |f| f.events),
            records: Vec::with_capacity(4),
            key_buf: Vec::with_capacity(64),
            name,
        };
        while let Some(sc) = rx.recv().await {
            if let ChunkEnd::Stopped = self.emit_chunk(&mut e, sc).await? {
                drop(rx);
                let _ = reader.await;
                return Ok(());
            }
            if self.stopping() {
                break;
            }
        }
        drop(rx); // a reader blocked on a full channel must see the end
        reader
            .await
            .joined()
            .or_else(|err| if self.stopping() { Ok(()) } else { Err(err) })?;
        self.unit_read(e, unit).await
    }

    /// While the unit is read: a new task's record is committed (as before the unit began:
    /// without it as the first one), and a task with nothing issued notes it as its first.
    async fn note_first(&mut self, unit: &Unit) -> Result<(), RuntimeError> {
        if self.first_record {
            self.commit().await?;
        }
        if self.state.issued.is_none() && self.state.first.is_none() {
            self.state.first = Some(FirstUnit {
                unit: unit.position.clone(),
                snapshot: unit.snapshot,
            });
        }
        Ok(())
    }

    /// The unit's reader is done: a shutdown mid-unit commits its progress; else the unit is
    /// counted, its end marker sent in the transaction that records it as issued, and finished.
    async fn unit_read(&mut self, e: UnitEmit<'_>, unit: &Unit) -> Result<(), RuntimeError> {
        if self.stopping() && e.finished < e.total {
            return self.commit().await;
        }
        metrics::UNITS
            .with_label_values(&[
                e.name.as_str(),
                if unit.snapshot {
                    UnitOutcome::Snapshot
                } else {
                    UnitOutcome::Emitted
                }
                .label(),
            ])
            .inc();
        if let (Some(m), true) = (&e.markers, e.events > 0) {
            self.sink.send_marker(&m.end(&e.txn_id, e.events, now_ms()))?;
        }
        e.shown.finish(&e.name, &e.task_label, unit);
        self.finish_unit(unit).await
    }

    /// What to read of `unit`: the splits not done yet, in the bucket count it was first read
    /// with (the row order of a unit read in key buckets depends on their number: a resumed unit,
    /// or one an old task of a handoff had half emitted, is read as it was first read), and
    /// under partition ownership only this task's partitions.
    fn plan_read(
        &self,
        unit: &Unit,
        resumed: Option<&InFlight>,
        progress: &BTreeMap<String, SplitProgress>,
    ) -> (Resume, Unit) {
        let done: HashSet<String> = progress
            .iter()
            .filter(|(_, p)| p.done)
            .map(|(k, _)| k.clone())
            .collect();
        let buckets = resumed.and_then(InFlight::pinned_buckets).or_else(|| {
            self.state.handoff.as_ref().and_then(|h| {
                h.old
                    .values()
                    .filter_map(|o| o.in_flight.as_ref())
                    .filter(|f| f.unit == unit.position && f.snapshot == unit.snapshot)
                    .find_map(InFlight::pinned_buckets)
            })
        });
        tracing::info!(connector = %self.cfg.name, instant = %unit.position.version, action = %unit.action,
            operation = %unit.operation.as_deref().unwrap_or(""), snapshot = unit.snapshot, splits = unit.splits.len(),
            resumed_splits = done.len(), buckets = buckets.unwrap_or(0), "emitting instant");
        let mut read = unit.clone();
        let (tasks, me) = (self.cfg.runtime.tasks, self.cfg.runtime.task_id);
        if tasks > 1 && self.ownership == Ownership::Partition {
            read.splits
                .retain(|s| Ownership::partition_hash(&s.partition) % tasks == me);
        }
        (
            Resume {
                done,
                buckets,
                budget: None,
            },
            read,
        )
    }

    /// One chunk: filter, encode, produce, checkpoint.
    async fn emit_chunk(&mut self, e: &mut UnitEmit<'_>, sc: SplitChanges) -> Result<ChunkEnd, RuntimeError> {
        self.moved();
        self.count_read(e, &sc);
        // the partition of each batch hashed once per chunk, not once per row (only when rows are
        // divided among tasks)
        let (split_partition, batch_partitions): (u32, Vec<u32>) = if e.filter {
            let batches = sc
                .batch_files
                .iter()
                .map(|(p, _)| Ownership::partition_hash(p))
                .collect();
            (Ownership::partition_hash(&sc.split.partition), batches)
        } else {
            (0, Vec::new())
        };
        let enc = self.encoder.split(e.unit, &sc).await?;
        let consumed = e.progress.entry(sc.split.id.clone()).or_default().consumed;
        let ts = now_ms();
        let skip = consumed.saturating_sub(sc.first_row) as usize;
        let mut counts = ChunkCounts::default();
        for (i, row) in sc.rows.iter().enumerate().skip(skip) {
            let index = sc.first_row + i as u64;
            if e.filter {
                let partition_hash = match batch_partitions.is_empty() {
                    true => split_partition,
                    false => batch_partitions[row.key_row().batch as usize],
                };
                let owner = RowOwner {
                    key_hash: enc.key_hash(row, &mut e.key_buf),
                    partition_hash,
                };
                if !self.publishes(e, owner, &sc.split.id, index) {
                    e.consumed(&sc.split.id, index + 1);
                    continue;
                }
            }
            self.produce(e, &enc, row, ts, &mut counts)?;
            e.consumed(&sc.split.id, index + 1);
            // by size, by age (a transaction older than transaction.timeout.ms is aborted by the
            // broker: the unit would replay forever), and on shutdown
            let old = i % 1024 == 0 && self.sink.txn_age().is_some_and(|a| a >= e.txn_age_limit);
            if self.sink.txn_records() >= self.cfg.runtime.max_txn_records as u64
                || old
                || (i % 1024 == 0 && self.stopping())
            {
                self.state.in_flight = Some(e.in_flight(sc.buckets));
                self.commit().await?;
                e.shown.transactions += 1;
                if self.stopping() {
                    return Ok(ChunkEnd::Stopped);
                }
            }
        }
        chunk_done(e, &sc, &counts);
        self.state.in_flight = Some(e.in_flight(sc.buckets));
        Ok(ChunkEnd::Continue)
    }

    /// The rows and bytes a chunk read, in the metrics and the task's totals.
    fn count_read(&mut self, e: &UnitEmit<'_>, sc: &SplitChanges) {
        metrics::ROWS_READ
            .with_label_values(&[&e.name, &e.task_label])
            .inc_by(sc.rows_read);
        metrics::BYTES_READ
            .with_label_values(&[&e.name, &e.task_label])
            .inc_by(sc.bytes_read);
        self.read.rows += sc.rows_read;
        self.read.bytes += sc.bytes_read;
    }

    /// Whether this task publishes the row: it owns the row's key (or, by partition, its
    /// partition's splits were the only ones read), and no old owner of a handoff published it.
    fn publishes(&self, e: &UnitEmit<'_>, owner: RowOwner, split: &str, index: u64) -> bool {
        let mine = e.by_partition || owner.task(Ownership::Key, self.cfg.runtime.tasks) == self.cfg.runtime.task_id;
        let published = self
            .state
            .handoff
            .as_ref()
            .is_some_and(|h| h.published(owner, &e.unit.position, e.unit.snapshot, split, index));
        mine && !published
    }

    /// Encode one change row (its event, and a tombstone after a delete) into the open
    /// transaction, the lake commit's BEGIN first when transaction metadata is on.
    fn produce(
        &mut self,
        e: &mut UnitEmit<'_>,
        enc: &SplitEncoder,
        row: &ChangeRow,
        ts: i64,
        counts: &mut ChunkCounts,
    ) -> Result<(), RuntimeError> {
        e.records.clear();
        if let (Some(m), 0) = (&e.markers, e.events) {
            self.sink.send_marker(&m.begin(&e.txn_id, ts))?;
        }
        e.events += 1;
        let txn = e.markers.is_some().then_some((e.txn_id.as_str(), e.events));
        enc.encode(row, ts, txn, &mut e.records);
        counts.record_bytes += e
            .records
            .iter()
            .map(|r| (r.key.len() + r.value.as_ref().map_or(0, Vec::len)) as u64)
            .sum::<u64>();
        self.sink.send(&e.records)?;
        counts.by_op[row.op as usize] += 1;
        *self.written.entry(RecordOp::from(row.op)).or_default() += 1;
        if e.records.len() > 1 {
            *self.written.entry(RecordOp::Tombstone).or_default() += 1;
            counts.tombstones += 1;
        }
        self.state.records += e.records.len() as u64;
        Ok(())
    }
}

/// A chunk produced: its records in the metrics, its split marked done when it was the last
/// chunk, the progress line.
fn chunk_done(e: &mut UnitEmit<'_>, sc: &SplitChanges, counts: &ChunkCounts) {
    metrics::RECORD_BYTES
        .with_label_values(&[&e.name])
        .inc_by(counts.record_bytes);
    for op in [Op::Read, Op::Create, Op::Update, Op::Delete] {
        if counts.by_op[op as usize] > 0 {
            metrics::RECORDS_POLLED
                .with_label_values(&[&e.name, RecordOp::from(op).label()])
                .inc_by(counts.by_op[op as usize]);
        }
    }
    if sc.last {
        e.progress.entry(sc.split.id.clone()).or_default().done = true;
        e.finished += 1;
        metrics::SPLITS_IN_FLIGHT
            .with_label_values(&[&e.name, &e.task_label])
            .set((e.total - e.finished) as f64);
    }
    e.shown
        .chunk(&e.name, &counts.by_op, counts.tombstones, sc.rows_read, sc.last);
}
