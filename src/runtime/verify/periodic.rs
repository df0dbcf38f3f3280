//! `verify.interval`: the audit in the background of `lakestream run`, against the connector's
//! committed position of the moment, exported as `lakestream_verify_last_success_timestamp_seconds`
//! and `lakestream_verify_mismatched_keys` (a failed audit counts in `lakestream_verify_runs_total`
//! and leaves the last success where it was, so an alert on its age catches both).

use std::time::Duration;

use tokio::sync::watch;

use super::{verify, VerifyOptions};
use crate::config::ConnectorConfig;
use crate::metrics::{self, VerifyResult};

/// Audit `cfg`'s connector every `interval` (the first after a minute at most) until shutdown.
pub async fn run_periodically(cfg: ConnectorConfig, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut wait = interval.min(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        if *shutdown.borrow() {
            return;
        }
        wait = interval;
        let opts = VerifyOptions { at: None, examples: 5 };
        let result = tokio::select! {
            r = verify(&cfg, &opts) => r,
            _ = shutdown.changed() => return,
        };
        let label = match result {
            Ok(report) => {
                metrics::VERIFY_MISMATCHED
                    .with_label_values(&[&cfg.name])
                    .set(report.total.mismatched() as f64);
                if report.equal {
                    metrics::VERIFY_LAST_SUCCESS
                        .with_label_values(&[&cfg.name])
                        .set(crate::runtime::now_ms() as f64 / 1000.0);
                    VerifyResult::Equal
                } else {
                    tracing::error!(connector = %cfg.name, report = %report.text(), "verify: the topic differs from the table");
                    VerifyResult::Different
                }
            }
            Err(e) => {
                tracing::warn!(connector = %cfg.name, error = %e, "verify: the audit did not complete; next in {interval:?}");
                VerifyResult::Error
            }
        };
        metrics::VERIFY_RUNS
            .with_label_values(&[&cfg.name, label.label()])
            .inc();
    }
}
