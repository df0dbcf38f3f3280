//! Resync (`history.gap=resync`): where the commits after a task's position can no longer be
//! read — cleaned, expired, rolled back or restored, log entries gone — publish the net change
//! from the topic's own state to the table's current commit instead of stopping: `c` for keys the
//! table has and the topic does not, `d` (before: the topic's last image; then the tombstone) for
//! keys live in the topic and gone from the table, `u` (before from the topic) for keys whose row
//! differs, nothing for equal rows. Then the task goes on commit by commit from there.
//!
//! Both sides are read as `verify` reads them (the same readers, digests and key buckets on disk,
//! within `read.memory.budget`), keeping each image's encoded bytes beside the runs so only the
//! keys that differ are read back. The topic is read read_committed, whole: everything this
//! task's keys were ever published with, including an interrupted resync's committed events. So
//! a resync is idempotent: killed at any moment, the next run diffs again from what was
//! committed and publishes only what is still missing; its offsets record (`resync`) carries the
//! target and the buckets done, so a resumed resync skips those. The transaction that finishes it
//! sets the position to the target.
//!
//! Where the Kafka key carries the partition and the table still records what the gap's commits
//! wrote (Hudi's commit metadata outlives the files its cleaner removes), both sides are
//! restricted to those partitions: the table side reads only their file groups, the topic side
//! keeps only their events (a key lives in one partition, so the others' keys did not change).
//!
//! Only a topic that holds every key's last event can be trusted: `cleanup.policy=compact` (a
//! keyless table's, whose null keys cannot be compacted: any other policy) and every partition
//! starting at offset 0; otherwise the task stops naming the topic.

mod apply;
mod diff;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::state::ResyncProgress;
use super::verify::runs::buckets_for;
use super::verify::topic::SharedMine;
use super::verify::{read_sides, SideSpec, VerifyError};
use super::{metrics, RuntimeError, Task};
use crate::changelog::decode::EventDecoder;
use crate::changelog::registry::RegistryClient;
use crate::changelog::resync::ResyncEncoder;
use crate::config::{ConnectorConfig, HistoryGap};
use crate::error::Joined;
use crate::source::{Ownership, Source, SourceError, Unit};

/// A topic's (low, high) watermarks by partition.
type Ends = HashMap<i32, (i64, i64)>;

/// What a task's start owes a resync: with `verify --repair`, one whose target is the position
/// itself; the table's own id, and why a resync is due when it differs from the stored one (the
/// table dropped and re-created).
pub(super) async fn at_start(
    cfg: &ConnectorConfig,
    source: &std::sync::Arc<dyn crate::source::Source>,
    state: &mut super::state::Offsets,
    new_state: bool,
) -> Result<(Option<String>, Option<String>), RuntimeError> {
    if let (true, Some(issued)) = (cfg.runtime.repair, state.issued.clone()) {
        state.resync.get_or_insert(ResyncProgress {
            target: issued,
            buckets: 0,
            done: 0,
            events: [0; 3],
        });
    }
    let s = source.clone();
    let identity = tokio::task::spawn_blocking(move || s.identity())
        .await
        .map_err(|e| VerifyError::Spill(format!("table identity: {e}")))??;
    let recreated = match (&state.table_id, &identity) {
        (Some(was), Some(now)) if was != now && !new_state => Some(format!(
            "the table was dropped and re-created since the stored position (its id was {was}, now {now}): the \
             position's history is gone. Ways out: restart under a new connector name (a full read into a new topic)"
        )),
        _ => None,
    };
    Ok((identity, recreated))
}

/// Whether a failure is a gap in the table's history (what a resync heals).
pub(super) fn is_gap(e: &RuntimeError) -> bool {
    matches!(e, RuntimeError::Source(SourceError::HistoryGone { .. }))
}

/// The topic cannot hold the table's state: the way out.
fn untrusted(topic: &str, why: String) -> RuntimeError {
    RuntimeError::Position(format!(
        "history gap: the commits after the position are gone, and the change topic `{topic}` cannot be resynced \
         from: {why}. Ways out: set cleanup.policy=compact on it (when no record was ever deleted from it), or restart \
         under a new connector name (read.start-commit=earliest / TABLE_SCAN_THEN_INCREMENTAL / starting-version=earliest \
         into a new topic); history.gap=fail stops here without this check"
    ))
}

/// The connector's settings for reading the whole table at its current commit.
fn whole_table(cfg: &ConnectorConfig) -> ConnectorConfig {
    let mut c = cfg.clone();
    (c.runtime.tasks, c.runtime.task_id) = (1, 0);
    (c.read.end, c.read.commits_limit) = (None, None);
    c.read.start = crate::config::StartCommit::Earliest;
    if let Some(i) = c.iceberg.as_mut() {
        i.start = crate::config::StartingStrategy::TableScanThenIncremental;
    }
    if let Some(d) = c.delta.as_mut() {
        d.start = crate::config::DeltaStart::Snapshot;
    }
    c
}

/// What a resync publishes from: both sides' runs and payloads, and the encoders.
struct Sides {
    topic: Vec<std::path::PathBuf>,
    table: Vec<std::path::PathBuf>,
    keyless: bool,
    encoder: Option<ResyncEncoder>,
    decoder: EventDecoder,
    _dir: tempfile::TempDir,
}

impl Task {
    /// Heal a gap: converge to the table's current commit (or stop, with `history.gap=fail`).
    /// `cause`: the failure that found the gap (`None`: a resync the stored record left under way).
    pub(super) async fn resync(&mut self, cause: Option<RuntimeError>) -> Result<(), RuntimeError> {
        if let Some(e) = cause {
            if self.cfg.runtime.history_gap == HistoryGap::Fail {
                return Err(e);
            }
            tracing::warn!(connector = %self.cfg.name, task = self.cfg.runtime.task_id, gap = %e,
                "history gap: resyncing from the topic's state to the table's current commit (history.gap=resync)");
        }
        // what the open transaction held is published again by the diff, if still a change; what
        // the start polled or read ahead is of the old position
        self.sink.abort().await?;
        self.head = None;
        self.state = self.committed.clone();
        let ends = self.trust().await?;
        let started = Instant::now();
        // the whole table, opened once for the target and the read
        let source = super::open_source_async(&whole_table(&self.cfg)).await?;
        let (target, buckets, done) = self.resync_target(&source, &ends).await?;
        let mut progress = ResyncProgress {
            target: target.position.clone(),
            buckets,
            done,
            events: self
                .state
                .resync
                .as_ref()
                .filter(|p| p.target == target.position)
                .map_or([0; 3], |p| p.events),
        };
        let partitions = self.gap_partitions(&source, &target).await;
        tracing::info!(connector = %self.cfg.name, task = self.cfg.runtime.task_id, target = %target.position.version,
            buckets, resumed_from_bucket = done, committed_events = progress.events.iter().sum::<u64>(),
            partitions = %partitions.as_ref().map_or("all".to_string(), |p| format!("{} the gap wrote", p.len())),
            "resync: reading the topic and the table");
        let mut sides = self
            .resync_sides(source.clone(), &target, buckets, ends.clone(), partitions.as_ref())
            .await?;
        if sides.encoder.is_none() && partitions.is_some() {
            // no row left in the partitions the gap wrote, and a format that gives no schema
            // without one: the other partitions' rows give it
            tracing::info!(connector = %self.cfg.name, "resync: the partitions the gap wrote hold no row; reading them all");
            sides = self.resync_sides(source, &target, buckets, ends, None).await?;
        }
        self.state.resync = Some(progress.clone());
        self.commit().await?;
        let task = self.cfg.runtime.task_id.to_string();
        let gauge = metrics::RESYNC_PROGRESS.with_label_values(&[&self.cfg.name, &task]);
        let limit = std::time::Duration::from_millis(self.cfg.kafka.transaction_timeout_ms / 3);
        let mut duplicates = 0u64;
        for b in done..buckets {
            duplicates += self.apply_bucket(&mut sides, b, &mut progress, limit).await?;
            progress.done = b + 1;
            self.state.resync = Some(progress.clone());
            gauge.set(progress.done as f64 / buckets as f64);
            if self.sink.txn_age().is_some_and(|a| a >= limit) || self.stopping() {
                self.commit().await?;
                if self.stopping() {
                    return Ok(());
                }
            }
        }
        // the position moves to the target in the transaction with the last events
        self.state.issued = Some(target.position.clone());
        (self.state.in_flight, self.state.handoff, self.state.resync) = (None, None, None);
        self.commit().await?;
        gauge.set(0.0);
        metrics::RESYNCS.with_label_values(&[&self.cfg.name, &task]).inc();
        if duplicates > 0 {
            tracing::warn!(connector = %self.cfg.name, keys = duplicates, "resync: the table holds these keys more than \
                once (it cannot be replayed by key): each converged to one of its rows");
        }
        let [c, u, d] = progress.events;
        tracing::info!(connector = %self.cfg.name, task = %task, target = %target.position.version, created = c,
            updated = u, deleted = d, seconds = started.elapsed().as_secs_f64(), "resync finished: the topic equals the \
            table at the target; going on commit by commit");
        Ok(())
    }

    /// A resync due before anything else — the start found the table re-created, or an earlier
    /// run (or `verify --repair`) left one under way — run now. Whether one ran.
    pub(super) async fn resync_due(&mut self) -> Result<bool, RuntimeError> {
        if let Some(message) = self.recreated.take() {
            self.resync(Some(SourceError::HistoryGone { message }.into())).await?;
            return Ok(true);
        }
        if self.state.resync.is_some() {
            self.resync(None).await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// A resync needs a topic that still holds every key's last event: compacted (a keyless
    /// table's null keys cannot be: every event kept), and nothing deleted from its head. Its
    /// watermarks: where the resync's read of it ends (nothing of this task's is open now).
    async fn trust(&mut self) -> Result<Ends, RuntimeError> {
        let topic = self.cfg.kafka.topic.clone();
        let policy = crate::sink::cleanup_policy(&self.cfg.sink(), &topic).await?;
        let keyless = self.source.info().keyless();
        match policy
            .as_deref()
            .map(|p| p.split(',').map(str::trim).collect::<Vec<_>>())
        {
            // (a repair publishes what makes the topic equal now: only its head counts)
            _ if self.cfg.runtime.repair => {}
            Some(p) if !keyless && p == ["compact"] => {}
            Some(p) if keyless && !p.contains(&"compact") => {}
            Some(_) | None => {
                let why = match policy {
                    Some(p) => format!("its cleanup.policy is {p}, so retention may have deleted events"),
                    None => "the cluster does not say its cleanup.policy".to_string(),
                };
                return Err(untrusted(&topic, why));
            }
        }
        let (c, t) = (self.cfg.sink(), topic.clone());
        let ends = tokio::task::spawn_blocking(move || crate::sink::scan::watermarks(&c, &t))
            .await
            .map_err(|e| VerifyError::Spill(e.to_string()))??;
        if let Some((p, (lo, _))) = super::verify::trimmed(&ends) {
            let why = format!("partition {p} starts at offset {lo}, not 0: records were deleted from it");
            return Err(untrusted(&topic, why));
        }
        Ok(ends)
    }

    /// The commit to converge to (a resync left under way keeps its own while the table can
    /// still be read at it), the bucket count, and the buckets already done.
    async fn resync_target(&mut self, source: &Arc<dyn Source>, ends: &Ends) -> Result<(Unit, u32, u32), RuntimeError> {
        // key buckets for the topic's records within `read.memory.budget`, as verify chooses
        let buckets = buckets_for(
            ends.values().map(|(lo, hi)| (hi - lo).max(0) as u64).sum(),
            self.cfg.read.memory_budget,
        );
        if let Some(p) = self.state.resync.clone() {
            let s = source.clone();
            let pos = p.target.clone();
            match tokio::task::spawn_blocking(move || s.unit_at(&pos, true)).await {
                Ok(Ok(unit)) if p.buckets > 0 => return Ok((unit, p.buckets, p.done)),
                Ok(Ok(unit)) => return Ok((unit, buckets, 0)),
                Ok(Err(e)) => tracing::info!(connector = %self.cfg.name, target = %p.target.version, error = %e,
                    "resync: its target can no longer be read; converging to the current commit instead"),
                Err(e) => return Err(VerifyError::Spill(e.to_string()).into()),
            }
        }
        let s = source.clone();
        let units = tokio::task::spawn_blocking(move || s.poll(None))
            .await
            .map_err(|e| VerifyError::Spill(e.to_string()))??;
        let Some(unit) = units.into_iter().next() else {
            return Err(SourceError::HistoryGone {
                message: "history gap: the table has no commit to converge to yet (dropped and not re-created?); \
                          the task stops rather than publish deletes of every key"
                    .into(),
            }
            .into());
        };
        Ok((unit, buckets, 0))
    }

    /// The partitions both sides may be restricted to ([`Source::changed_partitions`] from the
    /// position to the target): not for a repair (its target is the position), nor where the
    /// format cannot tell.
    async fn gap_partitions(&mut self, source: &Arc<dyn Source>, target: &Unit) -> Option<BTreeSet<String>> {
        let issued = self.state.issued.clone()?;
        if self.cfg.runtime.repair || issued == target.position {
            return None;
        }
        let (s, t) = (source.clone(), target.position.clone());
        match tokio::task::spawn_blocking(move || s.changed_partitions(&issued, &t)).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::info!(connector = %self.cfg.name, error = %e, "resync: the partitions the gap wrote cannot be told: reading them all");
                None
            }
            Err(_) => None,
        }
    }

    /// Which events and rows a resync of this task keeps: its share of the keys (tasks > 1), in
    /// `partitions` where given; `None`: all.
    fn resync_filter(&self, partitions: Option<&BTreeSet<String>>) -> Option<SharedMine> {
        let (tasks, me, ownership) = (self.cfg.runtime.tasks, self.cfg.runtime.task_id, self.ownership);
        let mine: Option<SharedMine> = (tasks > 1).then(|| {
            Arc::new(move |key: &[u8], partition: &str| {
                let owner = super::state::RowOwner {
                    // (the hash the task loop takes: of the key's datum, without its framing)
                    key_hash: crc32fast::hash(key.get(5..).unwrap_or_default()),
                    partition_hash: Ownership::partition_hash(partition),
                };
                owner.task(ownership, tasks) == me
            }) as _
        });
        let Some(p) = partitions else {
            return mine;
        };
        let p = Arc::new(p.clone());
        Some(Arc::new(move |key: &[u8], partition: &str| {
            p.contains(partition) && mine.as_ref().is_none_or(|m| m(key, partition))
        }) as _)
    }

    /// Both sides read into runs with their payloads: the whole topic, and the table at the
    /// target, each restricted to what this task owns and to `partitions` where given.
    async fn resync_sides(
        &mut self,
        source: Arc<dyn Source>,
        target: &Unit,
        buckets: u32,
        ends: Ends,
        partitions: Option<&BTreeSet<String>>,
    ) -> Result<Sides, RuntimeError> {
        let spill = |e: std::io::Error| VerifyError::Spill(format!("{}: {e}", self.cfg.read.spill_dir.display()));
        std::fs::create_dir_all(&self.cfg.read.spill_dir).map_err(spill)?;
        let dir = tempfile::Builder::new()
            .prefix("lakestream-resync-")
            .tempdir_in(&self.cfg.read.spill_dir)
            .map_err(spill)?;
        let mut unit = target.clone();
        if let Some(p) = partitions {
            unit.splits.retain(|s| p.contains(&s.partition));
        }
        let mine = self.resync_filter(partitions);
        let spec = SideSpec {
            source: source.clone(),
            unit,
            dir: dir.path().to_path_buf(),
            buckets,
            buffer: (self.cfg.read.memory_budget / 8 / buckets as usize).clamp(4096, 1 << 16),
            skip: Default::default(),
            ends,
            up_to: None,
            payloads: true,
            mine,
        };
        let (topic_side, table_side) = read_sides(&self.cfg, &spec).await?;
        tracing::info!(connector = %self.cfg.name, topic_records = topic_side.records, topic_bytes = topic_side.bytes,
            table_rows = table_side.rows, table_bytes = table_side.bytes, "resync: both sides read; publishing the differences");
        // no row read (a table emptied across the gap, or none of it this task's): the schema
        // the format gives, so the topic's keys can be deleted
        let schema = match table_side.schema {
            Some(schema) => Some(schema),
            None => {
                let (src, unit) = (source.clone(), target.clone());
                let schema = tokio::task::spawn_blocking(move || src.schema_of(&unit))
                    .await
                    .joined()?;
                if topic_side.records > 0 {
                    tracing::warn!(connector = %self.cfg.name, instant = %target.position.version, topic_records = topic_side.records,
                        "resync: the table holds no row of this task's at the target: every key of its share of the topic is deleted");
                }
                schema
            }
        };
        let mut encoder = super::encoder_for(&self.cfg, source.info().clone())?;
        let resync_encoder = match &schema {
            Some(schema) => Some(encoder.resync(target, schema).await?),
            None => None,
        };
        Ok(Sides {
            topic: topic_side.paths,
            table: table_side.paths,
            keyless: source.info().keyless(),
            encoder: resync_encoder,
            decoder: EventDecoder::new(RegistryClient::new(&self.cfg.registry, &self.cfg.name)?),
            _dir: dir,
        })
    }
}

/// `verify --repair`: compare; where the topic differs from the table at the connector's
/// position, publish exactly the changes that make it equal (a resync whose target is the
/// position itself, under the task's transactional id: a running instance is fenced), and
/// compare again. One task only (the tasks of several stand at different positions).
pub async fn repair(
    cfg: &ConnectorConfig,
    opts: super::RunOptions,
    examples: usize,
) -> Result<(super::verify::Report, Option<super::verify::Report>), RuntimeError> {
    if cfg.runtime.tasks > 1 {
        return Err(RuntimeError::Usage(format!(
            "verify --repair: connector {} has tasks.max={}: repair runs one task (stop it, set tasks.max=1 \
             for the repair, then set it back)",
            cfg.name, cfg.runtime.tasks
        )));
    }
    let verify_opts = super::verify::VerifyOptions { at: None, examples };
    let before = super::verify::verify(cfg, &verify_opts).await?;
    if before.equal {
        return Ok((before, None));
    }
    tracing::info!(connector = %cfg.name, position = %before.position, mismatched = before.total.mismatched(),
        "verify --repair: publishing the changes that make the topic equal the table at the position");
    let mut task = cfg.clone();
    task.runtime.repair = true;
    task.runtime.history_gap = HistoryGap::Resync;
    super::run_connector(task, opts).await?;
    let after = super::verify::verify(cfg, &verify_opts).await?;
    Ok((before, Some(after)))
}
