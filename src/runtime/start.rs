//! How a run of a task starts: the table, the producer and the stored offsets opened together
//! where they can be, the task claimed (`idle.release`), an earlier run's unknown outcome settled.

use std::sync::Arc;

use super::state::Offsets;
use super::{head_start, idle_release, open_source_async, resume, tasks, RunOptions, RuntimeError};
use crate::config::ConnectorConfig;
use crate::health::TaskHealthHandle;
use crate::sink::{ReadTo, Sink};
use crate::source::Source;

/// With `idle.release`, this instance takes the task: a retaking run reads under its new
/// producer, so an instance that took the task meanwhile is on record now.
pub(super) fn claim(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    state: &mut Offsets,
    new_state: bool,
    retaking: bool,
) -> Result<(), RuntimeError> {
    if retaking {
        let stored = (!new_state).then_some(&*state);
        idle_release::check(cfg, &opts.instance, stored, "found once the producer was taken back")?;
    }
    state.holder = Some(opts.instance.clone());
    Ok(())
}

/// The transaction an earlier run left with its outcome unknown, settled by this producer's init:
/// what is visible now is what became of it; what it sent is watched for with the rest.
pub(super) async fn settle(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    unsettled: &mut resume::Unsettled,
) -> Result<Option<resume::Watch>, RuntimeError> {
    if let Some(trace) = unsettled.trace.clone() {
        let sent = resume::resolve_unknown_outcome(&opts.cluster, cfg, trace).await?;
        unsettled.watched.extend(sent);
        unsettled.trace = None;
    }
    Ok(resume::Watch::over(std::mem::take(&mut unsettled.watched)))
}

/// What a run opens before it decides ownership: the table, the head start, and (one task) the
/// producer with the stable offsets read under it.
pub(super) struct Opened {
    pub(super) source: Arc<dyn Source>,
    pub(super) head: Option<head_start::HeadStart>,
    pub(super) early_sink: Option<Box<dyn Sink>>,
    pub(super) stable: Option<tasks::Records>,
}

pub(super) async fn open_early(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    health: &TaskHealthHandle,
    unrecorded: bool,
) -> Result<Opened, RuntimeError> {
    let release = cfg.runtime.idle_release.is_some();
    // one task: its transactional id does not depend on how tasks divide the table, so the
    // producer initialises first and one offsets read after it serves both the ownership and
    // the resume decision (each read is ~0.1 s of a start on Kafka); the table opens meanwhile
    // (neither needs the other; a table that cannot be opened fails in milliseconds, before the
    // topics are made in practice, though nothing orders the two)
    let (source, head, (early_sink, stable)) = if cfg.runtime.tasks <= 1 {
        let early = async {
            // (one task's ids do not depend on how tasks divide the table)
            let sink = opts.cluster.start(&cfg.sink(), false, health.clone()).await?;
            let stable = tasks::read_offsets(&opts.cluster, cfg, ReadTo::Stable).await?;
            Ok::<_, RuntimeError>((Some(sink), Some(stable)))
        };
        let source = async {
            let source = open_source_async(cfg).await.map_err(RuntimeError::from)?;
            // (with idle.release a start reads its record's holder first)
            let head = match release {
                false => head_start::begin(cfg, opts, &source, unrecorded).await,
                true => None,
            };
            Ok::<_, RuntimeError>((source, head))
        };
        let ((source, head), early) = tokio::try_join!(source, early)?;
        (source, head, early)
    } else {
        (open_source_async(cfg).await?, None, (None, None))
    };
    Ok(Opened {
        source,
        head,
        early_sink,
        stable,
    })
}

/// The source opened again keyed as the events already published are: before
/// `key.partition-path=auto` keyed Hudi rows by partition too, `key` was the record key alone, and
/// a topic never mixes two keys (the README says how to switch).
pub(super) async fn reopen_with_record_key(
    cfg: &ConnectorConfig,
    key: &[String],
) -> Result<Arc<dyn Source>, RuntimeError> {
    tracing::warn!(connector = %cfg.name, key = %key.join(","), "the events already published are keyed by the record key \
        alone: keeping that key (key.partition-path=false). Two live rows with one record key in two partitions \
        share a Kafka key; to key by partition too, start a new connector name with key.partition-path=auto");
    // (the source opened again with that key; the connector's settings stay as loaded)
    let mut kept = cfg.clone();
    kept.read.key_partition_path = Some(false);
    Ok(open_source_async(&kept).await?)
}
