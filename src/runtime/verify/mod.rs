//! `lakestream verify`: prove that the topic equals the table. The connector's committed position
//! (the least far of its tasks' issued commits, or an earlier commit named with `--at`) is the
//! point compared: the topic is read whole, read_committed, and replayed by key up to that commit;
//! the table is read at that commit through the source's snapshot path; both are digested by the
//! connector's own encoder and decoder, spilled by key into bucket files ([`runs`]) and compared
//! bucket by bucket ([`compare`]), so memory stays within `read.memory.budget` whatever the table's
//! size. Also run in the background by `lakestream run` with `verify.interval` ([`periodic`]).

mod compare;
mod periodic;
mod report;
pub(super) mod runs;
pub(super) mod table;
#[cfg(test)]
mod tests;
pub(super) mod topic;

use std::time::Instant;

pub use self::periodic::run_periodically;
pub use self::report::Report;
use self::runs::{RunWriter, Side};
use super::state::FirstUnit;
use super::RuntimeError;
use crate::changelog::decode::EventDecoder;
use crate::changelog::registry::RegistryClient;
use crate::changelog::ChangelogError;
use crate::config::ConnectorConfig;
use crate::error::ErrorKind;
use crate::sink::SinkError;
use crate::source::{HistoryOrder, Position, Source, SourceError};

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Changelog(#[from] ChangelogError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A record of the topic that cannot be replayed (named by partition and offset).
    #[error("topic: {0}")]
    Topic(String),
    /// The spill files in `read.spill.dir` could not be written or read.
    #[error("verify spill files: {0}")]
    Spill(String),
    /// Nothing to compare yet, or `--at` names a commit the topic does not cover.
    #[error("{0}")]
    Position(String),
}

impl VerifyError {
    fn spill(e: std::io::Error) -> Self {
        VerifyError::Spill(e.to_string())
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            VerifyError::Changelog(e) => e.kind(),
            VerifyError::Sink(e) => e.kind(),
            VerifyError::Source(e) => e.kind(),
            VerifyError::Topic(_) => ErrorKind::Data,
            VerifyError::Spill(_) => ErrorKind::Internal,
            VerifyError::Position(_) => ErrorKind::Config,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// A commit (Hudi instant, Iceberg snapshot) at or before the connector's position.
    pub at: Option<String>,
    /// Example keys named per kind of difference.
    pub examples: usize,
}

/// The commit compared, and what the stored position says of the stream.
struct Target {
    position: Position,
    tasks: u32,
    first: Option<FirstUnit>,
}

fn order(source: &dyn Source, p: &Position) -> Result<HistoryOrder, VerifyError> {
    Ok(source.order(p)?)
}

/// The position to verify: the least far issued commit of the connector's current generation
/// (every task has published everything up to it), or `at` when it is not after that.
fn target(cfg: &ConnectorConfig, source: &dyn Source, at: Option<&str>) -> Result<Target, RuntimeError> {
    let records = super::state::records_of(cfg)?;
    let epoch = records.values().map(|(.., o)| o.epoch).max();
    let Some(epoch) = epoch else {
        return Err(VerifyError::Position(format!(
            "connector {}: no stored position (nothing published yet): run it first",
            cfg.name
        ))
        .into());
    };
    let current: Vec<_> = records.values().filter(|(.., o)| o.epoch == epoch).collect();
    let tasks = current.iter().map(|(t, ..)| (*t).max(1)).max().unwrap_or(1);
    let mut least: Option<(HistoryOrder, Position)> = None;
    let mut first = None;
    for t in 0..tasks {
        let Some((.., o)) = current.iter().find(|(_, task, ..)| *task == t) else {
            return Err(VerifyError::Position(format!(
                "connector {}: task {t} of {tasks} has no stored position yet: verify once every task has published",
                cfg.name
            ))
            .into());
        };
        let Some(issued) = &o.issued else {
            return Err(VerifyError::Position(format!(
                "connector {}: task {t} of {tasks} has not finished its first commit yet (in flight: {})",
                cfg.name,
                o.in_flight.as_ref().map_or("nothing", |f| f.unit.version.as_str())
            ))
            .into());
        };
        let ord = order(source, issued)?;
        if least.as_ref().is_none_or(|(l, _)| ord < *l) {
            least = Some((ord, issued.clone()));
        }
        first = first.or(o.first.clone());
    }
    let (least_order, least) = least.expect("at least one task");
    let position = match at {
        None => least,
        Some(id) => {
            let p = source.position_of(id)?;
            if order(source, &p)? > least_order {
                return Err(VerifyError::Position(format!(
                    "--at {id} is after the connector's position {} (the least far of its tasks): the topic does not \
                     hold it yet",
                    least.version
                ))
                .into());
            }
            p
        }
    };
    Ok(Target { position, tasks, first })
}

/// The topic holds every key's last event only while nothing was deleted from its head: a
/// partition whose log starts past offset 0 lost records (retention under
/// `cleanup.policy=delete`, `DeleteRecords`), and a replay of it cannot say what the table is.
fn trusted(topic: &str, ends: &std::collections::HashMap<i32, (i64, i64)>) -> Result<(), VerifyError> {
    match trimmed(ends) {
        None => Ok(()),
        Some((p, (lo, _))) => Err(VerifyError::Topic(format!(
            "{topic}: partition {p} starts at offset {lo}, not 0: records were deleted from it (retention under \
             cleanup.policy=delete, or DeleteRecords), so it no longer holds every key's last event and cannot be \
             replayed into the table's state. Set cleanup.policy=compact on the change topic; to compare again, stream \
             the table into a new topic (a new connector name, read.start-commit=earliest)"
        ))),
    }
}

/// The first partition (and its low watermark) whose head was deleted: a log starting past 0.
pub(super) fn trimmed(ends: &std::collections::HashMap<i32, (i64, i64)>) -> Option<(&i32, &(i64, i64))> {
    ends.iter().filter(|(_, (lo, _))| *lo > 0).min_by_key(|(p, _)| **p)
}

/// What a verify reads: the table opened whole, the commit, its unit, where the runs go.
struct Plan {
    source: std::sync::Arc<dyn Source>,
    target: Target,
    unit: crate::source::Unit,
    buckets: u32,
    buffer: usize,
    dir: tempfile::TempDir,
    /// Columns renamed or re-added in the table's history (not compared), and their Avro names.
    unstable: Vec<String>,
    skip: std::collections::HashSet<String>,
    /// The topic's (low, high) watermarks by partition: where its read ends.
    ends: std::collections::HashMap<i32, (i64, i64)>,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("verify step panicked")
}

async fn plan(cfg: &ConnectorConfig, opts: &VerifyOptions) -> Result<Plan, RuntimeError> {
    // the whole table, not one task's share; no end bound
    let mut whole = cfg.clone();
    (whole.runtime.tasks, whole.runtime.task_id) = (1, 0);
    (whole.read.end, whole.read.commits_limit) = (None, None);
    let source = super::open_source_async(&whole).await?;
    let (c, s, at) = (cfg.clone(), source.clone(), opts.at.clone());
    let target = blocking(move || target(&c, s.as_ref(), at.as_deref())).await?;
    let (s, p) = (source.clone(), target.position.clone());
    let unit = blocking(move || s.unit_at(&p, true)).await?;
    let (c, t) = (cfg.sink(), cfg.kafka.topic.clone());
    // taken after the position was read: every record it accounts for is below them
    let ends = blocking(move || crate::sink::scan::watermarks(&c, &t)).await?;
    trusted(&cfg.kafka.topic, &ends)?;
    let expected: u64 = ends.values().map(|(lo, hi)| (hi - lo).max(0) as u64).sum();
    let buckets = runs::buckets_for(expected, cfg.read.memory_budget);
    let spill = |e: std::io::Error| VerifyError::Spill(format!("{}: {e}", cfg.read.spill_dir.display()));
    std::fs::create_dir_all(&cfg.read.spill_dir).map_err(spill)?;
    let dir = tempfile::Builder::new()
        .prefix("lakestream-verify-")
        .tempdir_in(&cfg.read.spill_dir)
        .map_err(spill)?;
    let s = source.clone();
    let unstable = blocking(move || s.unstable_columns()).await?;
    let skip = unstable.iter().map(|c| crate::changelog::avro::avro_name(c)).collect();
    tracing::info!(connector = %cfg.name, position = %target.position.version, topic_records = expected, buckets,
        "verify: reading the topic and the table");
    Ok(Plan {
        source,
        target,
        unit,
        buckets,
        buffer: (cfg.read.memory_budget / 8 / buckets as usize).clamp(4096, 1 << 16),
        dir,
        unstable,
        skip,
        ends,
    })
}

/// What both sides are read with: the table's unit, where the runs go, which events count.
pub(super) struct SideSpec {
    pub source: std::sync::Arc<dyn Source>,
    pub unit: crate::source::Unit,
    pub dir: std::path::PathBuf,
    pub buckets: u32,
    pub buffer: usize,
    /// Columns left out of the digests.
    pub skip: std::collections::HashSet<String>,
    /// Where the topic's read ends (its watermarks taken after the position was read).
    pub ends: std::collections::HashMap<i32, (i64, i64)>,
    /// Events of lake commits after this one are left out (`None`: every event counts).
    pub up_to: Option<Position>,
    /// Keep each image's encoded payload beside the runs (a resync publishes from them).
    pub payloads: bool,
    /// Only what this task owns, by framed key and table partition (`None`: all).
    pub mine: Option<topic::SharedMine>,
}

/// Both sides read at once, each on a blocking thread, into their runs.
pub(super) async fn read_sides(
    cfg: &ConnectorConfig,
    spec: &SideSpec,
) -> Result<(topic::TopicSide, table::TableSide), RuntimeError> {
    let keyless = spec.source.info().keyless();
    let decoder = || RegistryClient::new(&cfg.registry, &cfg.name).map(EventDecoder::new);
    let writer = |side| -> Result<RunWriter, VerifyError> {
        let w = RunWriter::new(&spec.dir, side, spec.buckets, spec.buffer).map_err(VerifyError::spill)?;
        match spec.payloads {
            true => w.with_payloads(spec.buffer).map_err(VerifyError::spill),
            false => Ok(w),
        }
    };
    let (topic_out, table_out) = (writer(Side::Topic)?, writer(Side::Table)?);
    let (columns_tx, columns_rx) = std::sync::mpsc::channel();
    let up_to = spec
        .up_to
        .as_ref()
        .map(|p| order(spec.source.as_ref(), p))
        .transpose()?;
    let (c, s, dec, skip, ends, mine) = (
        cfg.clone(),
        spec.source.clone(),
        decoder()?,
        spec.skip.clone(),
        spec.ends.clone(),
        spec.mine.clone(),
    );
    let handle = tokio::runtime::Handle::current();
    let topic_side = blocking(move || {
        let at_or_before = |p: &Position| match &up_to {
            Some(t) => s.order(p).ok().map(|o| o <= *t),
            None => Some(true),
        };
        let reader = topic::TopicReader {
            cfg: &c,
            decoder: dec,
            handle,
            keyless,
            at_or_before: &at_or_before,
            columns: columns_rx,
            skip,
            ends,
            mine: mine.as_deref().map(|m| m as &topic::Mine),
        };
        topic::read(reader, topic_out)
    });
    let encoder = super::encoder_for(cfg, spec.source.info().clone())?;
    let mut dec = decoder()?;
    dec.set_columns(crate::changelog::decode::Columns {
        keep: None,
        skip: spec.skip.clone(),
    });
    let (s, name, unit, handle, mine) = (
        spec.source.clone(),
        cfg.name.clone(),
        spec.unit.clone(),
        tokio::runtime::Handle::current(),
        spec.mine.clone(),
    );
    let table_side = blocking(move || {
        let reader = table::TableReader {
            connector: &name,
            source: s.as_ref(),
            unit: &unit,
            encoder,
            decoder: dec,
            handle,
            keyless,
            columns: columns_tx,
            mine: mine.as_deref().map(|m| m as &topic::Mine),
        };
        table::read(reader, table_out)
    });
    let (topic_side, table_side) = futures::join!(topic_side, table_side);
    Ok((topic_side?, table_side?))
}

/// Compare the runs bucket by bucket.
fn compare_runs(
    topic_side: &topic::TopicSide,
    table_side: &table::TableSide,
    keyless: bool,
    limit: usize,
    duplicates: bool,
) -> std::io::Result<compare::Tally> {
    let mut tally = compare::Tally {
        limit,
        duplicates,
        ..Default::default()
    };
    let names = compare::Names {
        topic: &topic_side.partitions,
        table: &table_side.partitions,
    };
    for (a, b) in topic_side.paths.iter().zip(&table_side.paths) {
        if keyless {
            compare::keyless(a, b, &names, &mut tally)?;
        } else {
            compare::keyed(a, b, &names, &mut tally)?;
        }
    }
    Ok(tally)
}

/// Compare the topic with the table at the connector's position (or `opts.at`).
pub async fn verify(cfg: &ConnectorConfig, opts: &VerifyOptions) -> Result<Report, RuntimeError> {
    let started = Instant::now();
    let plan = plan(cfg, opts).await?;
    let spec = SideSpec {
        source: plan.source.clone(),
        unit: plan.unit.clone(),
        dir: plan.dir.path().to_path_buf(),
        buckets: plan.buckets,
        buffer: plan.buffer,
        skip: plan.skip.clone(),
        ends: plan.ends.clone(),
        up_to: Some(plan.target.position.clone()),
        payloads: false,
        mine: None,
    };
    let (topic_side, table_side) = read_sides(cfg, &spec).await?;
    let keyless = plan.source.info().keyless();
    let (limit, duplicates) = (opts.examples, !cfg.read.changelog);
    let (tally, topic_side) =
        blocking(move || compare_runs(&topic_side, &table_side, keyless, limit, duplicates).map(|t| (t, topic_side)))
            .await
            .map_err(VerifyError::spill)?;
    let mut report = Report::new(
        cfg,
        &plan.source,
        &plan.target,
        &plan.unit,
        tally,
        &topic_side,
        plan.buckets,
        started.elapsed(),
    );
    report.columns_not_compared = plan.unstable.clone();
    drop(plan.dir);
    tracing::info!(connector = %cfg.name, position = %report.position, equal = report.equal, mismatched = report.total.mismatched(),
        table_rows = report.total.table_rows, seconds = report.seconds, "verify finished");
    Ok(report)
}
