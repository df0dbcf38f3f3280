//! `idle.release`: a caught-up task that found nothing to publish for that long drops its Kafka
//! producer (librdkafka's threads and connections with it) and keeps polling the table; work
//! takes the producer back as a restart would: a new producer whose `init_transactions` fences
//! any other holder of the transactional id, then the position re-read from the offsets topic.
//!
//! Taking the id back must never take it from a *newer* instance of the task (a pod that
//! replaced this one, a second process started by hand): that one would be fenced, and the task
//! would end up run by the older instance. So, with `idle.release` on, every run of a task
//! records its instance (a random id and its process's start time) in its offsets record from
//! its start ([`Holder`], committed before its first poll), and:
//! * a parked task reads its record before taking the producer back, and again once its
//!   producer is initialised (so does every later run of the instance, after an outage too):
//!   written by a newer instance, or naming none (an older build, `offsets set`) → it stops,
//!   fenced (exit 1);
//! * a task fenced while the record names itself or an instance older than itself (an older
//!   instance took the producer in the moment between its check and its init) waits a second,
//!   reads again, and takes the producer back if that still holds; the older one then meets the
//!   newer record and stops.
//!
//! So of two live instances the newer keeps the task, whatever the interleaving; events are
//! exactly-once throughout (each taking fences the other's open transaction and resumes from the
//! settled position). Instances are ordered by start time, then id: clocks more than the gap
//! between two starts apart could order them wrongly, which costs which instance runs the task,
//! never an event.

use std::sync::Arc;
use std::time::Duration;

use super::state::{Holder, Offsets};
use super::{tasks, RunOptions, RuntimeError};
use crate::config::ConnectorConfig;
use crate::health::TaskHealthHandle;
use crate::sink::{ReadTo, SinkError};
use crate::source::{Position, Source};

/// What a parked task keeps: its table, and the position it polls from.
pub struct Parked {
    pub source: Arc<dyn Source>,
    pub issued: Position,
}

/// How long a fenced task waits before it reads who holds its record (long enough for the
/// instance that fenced it to commit its claim).
const RETAKE_AFTER: Duration = Duration::from_secs(1);

impl Holder {
    /// This process's instance: a random id and the start time.
    pub fn this_process() -> Holder {
        Holder {
            instance: format!("{:016x}", rand::random::<u64>()),
            started_ms: super::now_ms(),
        }
    }

    /// Whether a record written by `self` lets `me` hold the task: written by `me`, or by an
    /// instance older than `me`.
    pub fn yields_to(&self, me: &Holder) -> bool {
        self.instance == me.instance || (self.started_ms, &self.instance) < (me.started_ms, &me.instance)
    }
}

/// This task's newest record, as committed now.
async fn own_record(opts: &RunOptions, cfg: &ConnectorConfig) -> Result<Option<Offsets>, RuntimeError> {
    let all = tasks::read_offsets(&opts.cluster, cfg, ReadTo::Stable).await?;
    Ok(all
        .into_iter()
        .filter(|((_, task), _)| *task == cfg.runtime.task_id)
        .map(|(_, o)| o)
        .max_by_key(|o| o.epoch))
}

impl super::Task {
    /// Idle for `idle.release` with everything committed, no unit or handoff under way and no
    /// earlier failure watched: nothing the producer still has to do.
    pub(super) fn may_park(&self) -> bool {
        let idle = match (self.cfg.runtime.idle_release, self.idle_since) {
            (Some(after), Some(since)) => since.elapsed() >= after,
            _ => false,
        };
        idle && !self.opts.once
            && !self.first_record
            && self.state.issued.is_some()
            && self.state.in_flight.is_none()
            && self.state.handoff.is_none()
            && self.watch.is_none()
            && self.state == self.committed
            && self.sink.txn_records() == 0
    }
}

/// The error of a task whose record another instance holds.
fn taken_over(cfg: &ConnectorConfig, by: Option<&Holder>, when: &str) -> RuntimeError {
    let by = by.map_or(
        "an instance that records none (an older build, or `offsets set/reset`)".to_string(),
        |h| format!("instance {} (started at {} ms)", h.instance, h.started_ms),
    );
    RuntimeError::Sink(SinkError::Fenced(format!(
        "task {} of connector {} is held by {by}, {when}: this instance stops it (idle.release)",
        cfg.runtime.task_id, cfg.name
    )))
}

/// Whether this instance may hold the task, given its record (see the module doc).
pub fn check(cfg: &ConnectorConfig, me: &Holder, record: Option<&Offsets>, when: &str) -> Result<(), RuntimeError> {
    let holder = record.and_then(|o| o.holder.as_ref());
    match (record, holder) {
        // nothing recorded for this task yet: nobody else holds it
        (None, _) => Ok(()),
        (Some(_), Some(h)) if h.yields_to(me) => Ok(()),
        _ => Err(taken_over(cfg, holder, when)),
    }
}

/// Before a parked task takes its producer back.
pub async fn check_before_taking(opts: &RunOptions, cfg: &ConnectorConfig) -> Result<(), RuntimeError> {
    let record = own_record(opts, cfg).await?;
    check(
        cfg,
        &opts.instance,
        record.as_ref(),
        "found before taking the producer back",
    )
}

/// Poll the table from `parked.issued` until it has a unit (`true`) or the task is shut down
/// (`false`). A failed poll also ends the wait: the task's run meets the error as it would.
pub async fn wait_for_work(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    health: &TaskHealthHandle,
    parked: Parked,
) -> bool {
    let mut sd = opts.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(cfg.read.check_interval) => {}
            _ = sd.changed() => return false,
        }
        if *opts.shutdown.borrow() {
            return false;
        }
        let (src, issued) = (parked.source.clone(), parked.issued.clone());
        let found = opts.polls.run(move || src.poll(Some(&issued))).await;
        match found {
            Ok(units) if units.is_empty() => health.progress(),
            _ => return true,
        }
    }
}

/// After a fence: whether this instance takes the producer back (the record still names it or
/// an older instance, a second later), `false` to stop as fenced (also when the record cannot be
/// read: stopping is what a fence meant before `idle.release`).
pub async fn retake_after_fence(cfg: &ConnectorConfig, opts: &RunOptions) -> bool {
    let mut sd = opts.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(RETAKE_AFTER) => {}
        _ = sd.changed() => return false,
    }
    let record = match own_record(opts, cfg).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(connector = %cfg.name, task = cfg.runtime.task_id, error = %e,
                "fenced, and the offsets record cannot be read to tell by whom: stopping");
            return false;
        }
    };
    let retake = record
        .as_ref()
        .and_then(|o| o.holder.as_ref())
        .is_some_and(|h| h.yields_to(&opts.instance));
    if retake {
        tracing::warn!(connector = %cfg.name, task = cfg.runtime.task_id,
            "fenced by an older instance of this task taking its producer back: taking it back (the older one stops)");
    }
    retake
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(instance: &str, started_ms: i64) -> Holder {
        Holder {
            instance: instance.into(),
            started_ms,
        }
    }

    #[test]
    fn the_newer_instance_keeps_the_task() {
        let (old, new) = (h("b", 1), h("a", 2));
        assert!(old.yields_to(&new), "an older holder yields to a newer instance");
        assert!(
            !new.yields_to(&old),
            "a newer holder does not yield to an older instance"
        );
        assert!(new.yields_to(&new), "a holder keeps its own task");
        // same start time: the id decides, one way only
        let (x, y) = (h("x", 3), h("y", 3));
        assert!(x.yields_to(&y) != y.yields_to(&x));
    }

    #[test]
    fn a_record_of_another_newer_or_unknown_holder_stops_the_task() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.properties");
        std::fs::write(&file, "name=c\nconnector.class=hudi\ntable.path=s3://lake/t\ntopic=t\nbootstrap.servers=k:9092\nschema.registry.url=http://r:8081\n").unwrap();
        let cfg = crate::config::load_connector(&file, 0).unwrap();
        let me = h("me", 10);
        let record = |holder| Offsets {
            holder,
            ..Default::default()
        };
        assert!(check(&cfg, &me, None, "x").is_ok(), "nothing recorded");
        assert!(check(&cfg, &me, Some(&record(Some(me.clone()))), "x").is_ok());
        assert!(check(&cfg, &me, Some(&record(Some(h("old", 5)))), "x").is_ok());
        let newer = check(&cfg, &me, Some(&record(Some(h("new", 20)))), "x").unwrap_err();
        assert_eq!(newer.kind(), crate::error::ErrorKind::Fenced);
        assert!(newer.to_string().contains("instance new"), "{newer}");
        assert!(
            check(&cfg, &me, Some(&record(None)), "x").is_err(),
            "a record without a holder"
        );
    }
}
