//! History headroom (see [`crate::source::Source::history_headroom`]): before a poll, at most once a minute, how
//! many commits (and seconds) the table's retention leaves between the oldest commit whose inputs
//! still exist and the task's position, as gauges, and a warning while it is below
//! `history.headroom.warn.commits` (every ten minutes at most): a connector about to fall behind
//! the cleaner, the snapshot expiry or the log cleanup is seen before its next unit is gone.

use std::time::{Duration, Instant};

use super::Task;
use crate::metrics;
use crate::source::Headroom;

const EVERY: Duration = Duration::from_secs(60);
const WARN_EVERY: Duration = Duration::from_secs(600);

/// When the headroom was last looked at and last warned of.
#[derive(Default)]
pub(super) struct Watch {
    checked: Option<Instant>,
    warned: Option<Instant>,
}

impl Task {
    /// Look at the headroom if a minute has passed (a failure to read it is logged, not fatal:
    /// the next unit's read says what is gone).
    pub(super) async fn check_headroom(&mut self) {
        let Some(at) = self.state.issued.clone() else { return };
        if self.headroom.checked.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.headroom.checked = Some(Instant::now());
        let src = self.source.clone();
        let found = self.opts.polls.run(move || src.history_headroom(&at)).await;
        let task = self.cfg.runtime.task_id.to_string();
        let labels = [self.cfg.name.as_str(), task.as_str()];
        match found {
            Ok(Some(h)) => {
                metrics::HEADROOM_COMMITS
                    .with_label_values(&labels)
                    .set(h.commits as f64);
                metrics::HEADROOM_SECONDS
                    .with_label_values(&labels)
                    .set(h.seconds.unwrap_or(-1.0));
                self.warn_headroom(&h);
            }
            Ok(None) => {
                metrics::HEADROOM_COMMITS.with_label_values(&labels).set(-1.0);
                metrics::HEADROOM_SECONDS.with_label_values(&labels).set(-1.0);
            }
            Err(e) => tracing::debug!(connector = %self.cfg.name, error = %e, "history headroom not read"),
        }
    }

    fn warn_headroom(&mut self, h: &Headroom) {
        if h.commits >= self.cfg.runtime.headroom_warn_commits
            || self.headroom.warned.is_some_and(|t| t.elapsed() < WARN_EVERY)
        {
            return;
        }
        self.headroom.warned = Some(Instant::now());
        tracing::warn!(connector = %self.cfg.name, task = self.cfg.runtime.task_id, commits = h.commits,
            seconds = h.seconds.unwrap_or(-1.0), oldest_retained = %h.oldest,
            position = %self.state.issued.as_ref().map_or("", |p| p.version.as_str()),
            "history headroom low: the table's retention is about to remove what the next units read \
             (raise the cleaner's or the expiry's retention, or let the connector catch up)");
    }
}
