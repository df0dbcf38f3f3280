//! The task loop: poll the source, read units split by split (reading runs ahead of producing on
//! the blocking pool), encode, produce, and commit transactions at boundaries with the offsets
//! record inside. Resumes from the stored offsets, skipping what was committed; replays from the
//! last committed offsets after an aborted transaction; commits and exits on shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

mod error;
pub use error::RuntimeError;
mod emit;
pub mod fleet;
mod head_start;
mod headroom;
pub mod idle_release;
pub mod memory;
mod outage;
pub mod placement;
pub mod polls;
mod progress;
mod resume;
pub mod resync;
mod start;
pub mod state;
pub mod tasks;
pub mod verify;

use self::state::{FirstUnit, InFlight, Offsets};
use crate::changelog::{ChangelogEncoder, ChangelogError};
use crate::config::{ConnectorConfig, TxnBoundary};
use crate::error::Joined;
use crate::health::{Health, TaskHealthHandle};
use crate::metrics;
use crate::sink::{Cluster, Sink, SinkError};
use crate::source::{Ownership, Source, SourceError, Unit};

#[derive(Clone)]
pub struct RunOptions {
    /// Emit every instant committed so far, then return.
    pub once: bool,
    pub shutdown: watch::Receiver<bool>,
    /// Where the task reports progress and connectivity (`/healthz`, `/ready`).
    pub health: Arc<Health>,
    /// How task 0 tells the other tasks of its connector in this process where it starts.
    pub first_units: Arc<tasks::FirstUnits>,
    /// Where the connector writes: [`crate::sink::Kafka`] (tests put an in-memory one here).
    pub cluster: Arc<dyn Cluster>,
    /// The process's poll threads, shared by its tasks.
    pub polls: Arc<polls::Polls>,
    /// This process as a holder of tasks (`idle.release`, see [`park`]).
    pub instance: state::Holder,
    /// The process's memory budget, shared by its tasks' units (`run --memory-budget`).
    pub memory: Arc<memory::MemoryShares>,
}

/// How a run of a task ended without an error.
pub(crate) enum Outcome {
    /// Shut down, `--once` caught up, or the configured end reached.
    Stopped,
    /// Nothing to publish for `idle.release`: the producer is dropped (see [`park`]).
    Parked(idle_release::Parked),
}

struct Task {
    cfg: ConnectorConfig,
    /// How this task's generation divides the table (resolved when the source opened).
    ownership: Ownership,
    source: Arc<dyn Source>,
    sink: Box<dyn Sink>,
    encoder: ChangelogEncoder,
    /// What the open transaction will commit.
    state: Offsets,
    /// What the last committed transaction committed.
    committed: Offsets,
    written: HashMap<metrics::RecordOp, u64>,
    /// Commit times of the units polled and not yet emitted, oldest first (lag).
    pending: std::collections::VecDeque<i64>,
    /// What this task read from storage (logged when it stops).
    read: ReadTotals,
    /// A new task's first record, not yet committed (a later generation hands over from it): with
    /// one task, committed once its first poll answered, while its first unit is being read (the
    /// commit was ~10 ms of every fresh start on Kafka when it waited before the read); any
    /// commit puts it on record.
    first_record: bool,
    /// An earlier run's failed transaction, looked for again once its changes are republished.
    watch: Option<resume::Watch>,
    /// Since when polls have found nothing (`idle.release`).
    idle_since: Option<Instant>,
    /// The first poll and unit read, begun while the producer initialised (see [`head`]).
    head: Option<head_start::HeadStart>,
    opts: RunOptions,
    health: TaskHealthHandle,
    headroom: headroom::Watch,
    /// The table's own id, stored with each position (see `Source::identity`).
    identity: Option<String>,
    /// The table was dropped and re-created since the stored position: why (a resync is due).
    recreated: Option<String>,
}

enum Flow {
    Continue,
    Stop,
}

pub async fn run_connector(cfg: ConnectorConfig, opts: RunOptions) -> Result<(), RuntimeError> {
    let name = cfg.name.clone();
    let task = cfg.runtime.task_id.to_string();
    metrics::init_task(&name, &task);
    metrics::TASK_RUNNING.with_label_values(&[&name, &task]).set(1.0);
    metrics::TASK_PARKED.with_label_values(&[&name, &task]).set(0.0);
    let health = opts.health.task(&cfg.name, cfg.runtime.task_id, cfg.stall_limit());
    let res = outage::ride_out(&cfg, &opts, &health).await;
    metrics::TASK_RUNNING.with_label_values(&[&name, &task]).set(0.0);
    health.stopped(res.as_ref().err().map(|e| crate::causes::with_causes(e)).as_deref());
    res
}

/// One run of the task. `unsettled`: a transaction an earlier run left failed (resolved here
/// before anything is emitted) and failed ones still watched; where this run leaves its own.
/// `retaking`: the run takes back a producer this instance released or was fenced from (see
/// [`park`]): the task's record must still let this instance hold it. `unrecorded`: the cluster
/// had no offsets topic when the connector began (nothing to read for a guess, see [`head`]).
async fn run_inner(
    cfg: ConnectorConfig,
    opts: RunOptions,
    health: TaskHealthHandle,
    unsettled: &mut resume::Unsettled,
    retaking: bool,
    unrecorded: bool,
) -> Result<Outcome, RuntimeError> {
    let release = cfg.runtime.idle_release.is_some();
    if release && retaking {
        idle_release::check_before_taking(&opts, &cfg).await?;
    }
    let single = cfg.runtime.tasks <= 1;
    let start::Opened {
        mut source,
        head,
        early_sink,
        stable,
    } = start::open_early(&cfg, &opts, &health, unrecorded).await?;
    let ownership = tasks::effective_ownership(&opts.cluster, &cfg, &source, stable.as_ref()).await?;
    let by_partition = ownership == Ownership::Partition;
    let sink = match early_sink {
        Some(sink) => sink,
        None => opts.cluster.start(&cfg.sink(), by_partition, health.clone()).await?,
    };
    let (mut state, new_state) = tasks::resume_state(&opts.cluster, &cfg, ownership, &source, stable).await?;
    if release {
        start::claim(&cfg, &opts, &mut state, new_state, retaking)?;
    }
    if resume::kept_record_key(&cfg, &state.key, &source.info().key_fields) {
        source = start::reopen_with_record_key(&cfg, &state.key).await?;
    }
    state.key = resume::checked_key(&state.key, source.as_ref())?;
    let watch = start::settle(&cfg, &opts, unsettled).await?;
    if let (false, Some(issued)) = (new_state, &state.issued) {
        resume::warn_start_after_stored(&cfg, source.as_ref(), issued);
    }
    tracing::info!(connector = %cfg.name, task = cfg.runtime.task_id, tasks = cfg.runtime.tasks, ownership = %ownership.name(),
        issued = %state.issued.as_ref().map_or("none", |p| p.version.as_str()),
        in_flight = state.in_flight.is_some(), handoff = state.handoff.is_some(), "resuming from stored offsets");
    let head = head.and_then(|h| h.fits(&state, &source));
    let (identity, recreated) = resync::at_start(&cfg, &source, &mut state, new_state).await?;
    let encoder = encoder_for(&cfg, source.info().clone())?;
    let mut task = Task {
        cfg,
        ownership,
        source,
        sink,
        encoder,
        committed: state.clone(),
        state,
        written: HashMap::new(),
        pending: Default::default(),
        read: ReadTotals::default(),
        // one task: committed once its first unit is being read; tasks of a generation: before anything
        // (a task waiting for task 0's first unit is on record meanwhile); with idle.release,
        // every run: the record names its holder from the start
        first_record: (new_state || release) && single,
        watch,
        idle_since: None,
        head,
        opts,
        health,
        headroom: Default::default(),
        identity,
        recreated,
    };
    let (res, parked) = task.run_through((new_state || release) && !single).await;
    task.ended(res, parked, unsettled)
}

impl Task {
    /// The run's loop, with a first commit before it where `commit_first` (a failed one leaves
    /// its transaction on record like any other) and the first record committed if the run
    /// stopped before its first poll. Returns the result and whether the task parked.
    async fn run_through(&mut self, commit_first: bool) -> (Result<(), RuntimeError>, bool) {
        let mut res = match commit_first {
            true => self.commit().await,
            false => Ok(()),
        };
        let mut parked = false;
        if res.is_ok() {
            res = self.run().await.map(|p| parked = p);
        }
        if res.is_ok() && self.first_record {
            res = self.commit().await;
        }
        (res, parked)
    }

    /// How the run ends: an error leaves what became of its transaction to the next run; a parked
    /// task hands its source on.
    fn ended(
        mut self,
        res: Result<(), RuntimeError>,
        parked: bool,
        unsettled: &mut resume::Unsettled,
    ) -> Result<Outcome, RuntimeError> {
        if res.is_err() {
            unsettled.trace = self.sink.unknown_outcome();
            unsettled.watched = self.watch.take().map(resume::Watch::into_sent).unwrap_or_default();
        }
        if let (Ok(()), true, Some(issued)) = (&res, parked, self.committed.issued.clone()) {
            tracing::info!(connector = %self.cfg.name, task = self.cfg.runtime.task_id, position = %issued.version,
                "idle: producer released (idle.release); polling the table without it");
            return Ok(Outcome::Parked(idle_release::Parked {
                source: self.source.clone(),
                issued,
            }));
        }
        tracing::info!(connector = %self.cfg.name, task = self.cfg.runtime.task_id, rows_read = self.read.rows, bytes_read = self.read.bytes, ok = res.is_ok(),
            "task stopped");
        res.map(|()| Outcome::Stopped)
    }
}

/// The connector's encoder of `table`'s rows, as its settings shape the events.
fn encoder_for(cfg: &ConnectorConfig, table: crate::source::TableInfo) -> Result<ChangelogEncoder, ChangelogError> {
    Ok(ChangelogEncoder::new(
        &cfg.name,
        &cfg.kafka.topic,
        table,
        cfg.events.tombstones_on_delete,
        &cfg.registry,
    )?
    .with_transaction_topic(cfg.events.txn_metadata.then(|| cfg.transaction_topic()))
    .with_column_exclude(cfg.events.column_exclude.clone())
    .with_time_mode(cfg.events.time_mode))
}

/// [`crate::source::open`] on a blocking thread.
pub(crate) async fn open_source_async(cfg: &ConnectorConfig) -> Result<Arc<dyn Source>, SourceError> {
    let c = cfg.clone();
    tokio::task::spawn_blocking(move || crate::source::open(&c.source()))
        .await
        .joined()
}

/// Rows and bytes a task read from storage.
#[derive(Debug, Default, Clone, Copy)]
struct ReadTotals {
    rows: u64,
    bytes: u64,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Task {
    /// Cycles until stopped. An aborted transaction is not replayed here from the in-memory
    /// position: when a commit's outcome is ambiguous (its response lost, the broker stalled) the
    /// transaction may have committed after all. The error goes to `ride_out`, which re-reads the
    /// position from the offsets topic under a new producer (measured: replaying from memory
    /// duplicated a split once in 25 broker stalls). `true`: idle for `idle.release`, nothing
    /// open: the run ends for the producer to be released.
    async fn run(&mut self) -> Result<bool, RuntimeError> {
        loop {
            match self.cycle().await {
                Ok(Flow::Stop) => return Ok(false),
                Ok(Flow::Continue) => {}
                Err(e) => {
                    let _ = self.sink.abort().await;
                    return Err(e);
                }
            }
            if self.stopping() {
                return Ok(false);
            }
            if self.may_park() {
                return Ok(true);
            }
            let mut sd = self.opts.shutdown.clone();
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.read.check_interval) => {}
                _ = sd.changed() => {}
            }
        }
    }

    fn stopping(&self) -> bool {
        *self.opts.shutdown.borrow()
    }

    fn end_reached(&self) -> bool {
        self.state.issued.as_ref().is_some_and(|p| self.source.reached_end(p))
    }

    /// One poll and everything it found. `Stop` when done (`--once`, end commit, shutdown).
    /// Whether this task of a generation starts fresh (nothing on record); a fresh task other than
    /// task 0 starts where task 0's start strategy chose, so a later change of tasks.max can hand
    /// over from one common first unit.
    async fn start_where_task0_does(&mut self) -> bool {
        let fresh = self.cfg.runtime.tasks > 1
            && self.state.issued.is_none()
            && self.state.in_flight.is_none()
            && self.state.handoff.is_none();
        if fresh && self.cfg.runtime.task_id != 0 {
            let (firsts, cluster) = (&self.opts.first_units, &self.opts.cluster);
            if let Some(f) = tasks::first_unit_of_task0(firsts, cluster, &self.cfg, self.ownership).await {
                self.state.first = Some(f.clone());
                self.state.in_flight = Some(InFlight::new(f.unit, f.snapshot));
            }
        }
        fresh
    }

    /// A poll answered `units` (begun at `started`): a fresh task 0 tells the others where it
    /// starts; the poll's time, the pending units and the lag's commit times are noted.
    fn polled(&mut self, units: &[Unit], fresh: bool, started: Instant) {
        if fresh && self.cfg.runtime.task_id == 0 {
            let first = units.first().map(|u| FirstUnit {
                unit: u.position.clone(),
                snapshot: u.snapshot,
            });
            self.opts.first_units.publish(&self.cfg, first);
        }
        metrics::POLL_SECONDS
            .with_label_values(&[&self.cfg.name, &self.cfg.runtime.task_id.to_string()])
            .observe(started.elapsed().as_secs_f64());
        self.moved();
        metrics::PENDING_UNITS
            .with_label_values(&[&self.cfg.name])
            .set(units.len() as f64);
        self.pending = units.iter().filter(|u| !u.snapshot).map(|u| u.ts_ms).collect();
    }

    async fn cycle(&mut self) -> Result<Flow, RuntimeError> {
        'poll: loop {
            if self.resync_due().await? {
                if self.stopping() || self.cfg.runtime.repair {
                    return Ok(Flow::Stop);
                }
                continue;
            }
            if self.end_reached() {
                tracing::info!(connector = %self.cfg.name, "configured end reached (read.end-commit / end-snapshot-id)");
                return Ok(Flow::Stop);
            }
            let started = Instant::now();
            let fresh = self.start_where_task0_does().await;
            // before the poll: where the position's successors are gone, the poll is what fails
            self.check_headroom().await;
            let units = match self.head.as_mut().and_then(head_start::HeadStart::take_units) {
                Some(units) => units,
                None => match self.poll().await {
                    Err(e) if resync::is_gap(&e) => {
                        self.resync(Some(e)).await?;
                        continue;
                    }
                    polled => polled?,
                },
            };
            self.polled(&units, fresh, started);
            if units.is_empty() {
                if self.first_record {
                    self.commit().await?;
                }
                self.idle_since.get_or_insert_with(Instant::now);
                self.update_lag();
                self.flush().await?;
                return Ok(if self.opts.once { Flow::Stop } else { Flow::Continue });
            }
            self.idle_since = None;
            for unit in units {
                if self.stopping() {
                    self.flush().await?;
                    return Ok(Flow::Stop);
                }
                match self.emit_unit(&unit).await {
                    Err(e) if resync::is_gap(&e) => {
                        // (what the open transaction held of the unit is aborted)
                        self.resync(Some(e)).await?;
                        continue 'poll;
                    }
                    emitted => emitted?,
                }
                if self.end_reached() {
                    self.flush().await?;
                    return Ok(Flow::Stop);
                }
            }
            if !self.opts.once && self.cfg.read.commits_limit.is_none() {
                self.flush().await?;
                return Ok(Flow::Continue);
            }
        }
    }

    async fn finish_unit(&mut self, unit: &Unit) -> Result<(), RuntimeError> {
        self.state.issued = Some(unit.position.clone());
        self.state.in_flight = None;
        if self.state.handoff.as_mut().is_some_and(|h| h.finished(&unit.position)) {
            tracing::info!(connector = %self.cfg.name, task = self.cfg.runtime.task_id, "handoff from the previous tasks.max complete");
            self.state.handoff = None;
        }
        if self.pending.front().is_some() && !unit.snapshot {
            self.pending.pop_front();
        }
        self.update_lag();
        match self.cfg.runtime.boundary {
            TxnBoundary::Instant => self.commit().await,
            TxnBoundary::Interval(every) => {
                if self.sink.txn_age().unwrap_or(Duration::MAX) >= every {
                    self.commit().await
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Lag: 0 when every polled unit is emitted, else how old the oldest one not yet emitted is
    /// (a caught-up quiet table is not lagging, however old its last commit).
    fn update_lag(&self) -> f64 {
        let lag = self
            .pending
            .front()
            .map_or(0.0, |ts| ((now_ms() - ts) as f64 / 1000.0).max(0.0));
        metrics::LAG_SECONDS
            .with_label_values(&[&self.cfg.name, &self.cfg.runtime.task_id.to_string()])
            .set(lag);
        lag
    }

    /// Commit whatever is pending (interval boundary, shutdown).
    async fn flush(&mut self) -> Result<(), RuntimeError> {
        if self.state != self.committed || self.sink.txn_records() > 0 {
            self.commit().await?;
        }
        Ok(())
    }

    async fn commit(&mut self) -> Result<(), RuntimeError> {
        self.state.updated_ms = now_ms();
        if self.recreated.is_none() {
            self.state.table_id.clone_from(&self.identity);
        }
        let record = serde_json::to_vec(&self.state).map_err(|e| SinkError::Offsets(e.to_string()))?;
        let records = self.sink.txn_records();
        self.sink.commit(record).await?;
        self.first_record = false;
        if let Some(w) = self.watch.take_if(|w| w.due_after(records)) {
            w.check(&self.opts.cluster, &self.cfg).await?;
        }
        for (op, n) in self.written.drain() {
            metrics::RECORDS_WRITTEN
                .with_label_values(&[&self.cfg.name, op.label()])
                .inc_by(n);
        }
        self.committed = self.state.clone();
        self.health.position(
            self.committed.issued.as_ref().map(|p| p.version.as_str()),
            self.update_lag(),
        );
        Ok(())
    }

    /// A poll answered or a chunk of rows arrived: not stalled (the sink reports commits).
    fn moved(&self) {
        self.health.progress();
    }
}

#[cfg(test)]
mod tests;
