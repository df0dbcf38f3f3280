//! Riding out an outage: a failed run whose error is `unavailable` (broker down, restarted or
//! stalled; registry not answering; storage throttled) runs again from the top, with backoff,
//! until it succeeds, the outage outlasts `errors.retry.timeout`, or the task is shut down.

use std::time::{Duration, Instant};

use super::{idle_release, run_inner, Outcome, RunOptions, RuntimeError};
use crate::config::ConnectorConfig;
use crate::error::ErrorKind;
use crate::health::TaskHealthHandle;
use crate::metrics;

/// First wait after a broker outage shows; doubled each retry up to `errors.retry.delay.max.ms`.
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);

/// A parked task waits for work (a new commit) with the producer dropped; `false`: shut down.
async fn parked_until_work(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    health: &TaskHealthHandle,
    parked: idle_release::Parked,
) -> bool {
    let gauge = metrics::TASK_PARKED.with_label_values(&[cfg.name.as_str(), &cfg.runtime.task_id.to_string()]);
    gauge.set(1.0);
    let work = idle_release::wait_for_work(cfg, opts, health, parked).await;
    gauge.set(0.0);
    if work {
        tracing::info!(connector = %cfg.name, task = cfg.runtime.task_id, "work: taking the producer back");
    }
    work
}

/// Run the task, and after a broker outage (down, restarted, stalled: a transient sink error)
/// or a Schema Registry that stopped answering, run it again from the top as a restarted process would: a new producer whose
/// `init_transactions` aborts what the old one left open (or finds it committed), and the
/// position re-read from the offsets topic — never the in-memory one, which an ambiguous commit
/// may have left behind. Backoff doubles up to `errors.retry.delay.max.ms`; an outage lasting
/// longer than `errors.retry.timeout` fails the task. Fencing, damage, bad offsets and
/// configuration stop at once.
pub(super) async fn ride_out(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    health: &TaskHealthHandle,
) -> Result<(), RuntimeError> {
    let name = &cfg.name;
    // (when this outage began, the next wait)
    let mut outage: Option<(Instant, Duration)> = None;
    // a wrong address fails at start, naming it; once running, an outage is ridden out
    let topics = opts.cluster.reach(&cfg.sink()).await?;
    // a connector whose offsets topic the cluster did not have holds no record: its first run
    // guesses its start without reading one (see `head`)
    let mut unrecorded = !topics.contains(&cfg.kafka.offsets_topic);
    // a transaction that failed, for the next attempt to resolve, and failed ones still watched
    let mut unsettled = super::resume::Unsettled::default();
    // with idle.release, every run after this instance's first takes back a producer it released,
    // was fenced from or lost in an outage: its record must still let it hold the task (`park`)
    let release = cfg.runtime.idle_release.is_some();
    let mut retaking = false;
    loop {
        let attempt = Instant::now();
        let run = run_inner(
            cfg.clone(),
            opts.clone(),
            health.clone(),
            &mut unsettled,
            retaking,
            unrecorded,
        )
        .await;
        unrecorded = false;
        retaking = release;
        let err = match run {
            Ok(Outcome::Stopped) => return Ok(()),
            Ok(Outcome::Parked(parked)) => match parked_until_work(cfg, opts, health, parked).await {
                false => return Ok(()),
                true => {
                    outage = None;
                    continue;
                }
            },
            Err(e) => e,
        };
        metrics::ERRORS
            .with_label_values(&[name.as_str(), err.kind().as_str()])
            .inc();
        if release
            && err.kind() == ErrorKind::Fenced
            && !*opts.shutdown.borrow()
            && idle_release::retake_after_fence(cfg, opts).await
        {
            continue;
        }
        if !err.is_transient() || *opts.shutdown.borrow() {
            return Err(err);
        }
        // a run that went on for a while before failing starts a new outage
        let (since, delay) = match outage {
            Some((since, d)) if attempt.elapsed() < 2 * d => (since, d),
            _ => (Instant::now(), FIRST_RETRY_DELAY),
        };
        if cfg.kafka.retry_timeout.is_some_and(|t| since.elapsed() >= t) {
            tracing::error!(connector = %name, error = %err, outage_s = since.elapsed().as_secs(), "outage outlasted errors.retry.timeout");
            return Err(err);
        }
        tracing::warn!(connector = %name, error = %err, retry_in_ms = delay.as_millis() as u64, outage_s = since.elapsed().as_secs(),
            "outage: retrying from the committed position with a new producer");
        metrics::RETRIES.with_label_values(&[name.as_str()]).inc();
        health.recovering(&crate::causes::with_causes(&err));
        let mut sd = opts.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = sd.changed() => return Err(err),
        }
        outage = Some((since, (delay * 2).min(cfg.kafka.retry_delay_max)));
    }
}
