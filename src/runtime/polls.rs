//! The threads the connectors of a process poll their tables on: a few, shared. On Tokio's
//! blocking pool every poll woke a parked thread, so each of 200 connectors polling every second
//! kept a thread of its own alive (202 of 1,207 threads, issue 32). Polls are short and
//! independent; [`POLL_THREADS`] of them run at once, the rest wait their turn. Unit reads stay
//! on the blocking pool: they are long, and a poll never waits for one.

use super::{RuntimeError, Task};
use crate::error::Joined;
use crate::source::Unit;

/// Polls running at once in one process.
pub const POLL_THREADS: usize = 8;

/// One process's poll threads (a Tokio runtime with no async workers to speak of: its blocking
/// pool is the point), handed to every task in [`super::RunOptions`].
pub struct Polls {
    rt: Option<tokio::runtime::Runtime>,
}

impl Default for Polls {
    fn default() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(POLL_THREADS)
            .thread_name("lakestream-poll")
            .build()
            .map_err(|e| tracing::warn!(error = %e, "no poll threads of their own: polls use the task's runtime"))
            .ok();
        Polls { rt }
    }
}

impl Polls {
    /// Run `f` on a poll thread; its result when done.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let h = match &self.rt {
            Some(rt) => rt.spawn_blocking(f),
            None => tokio::task::spawn_blocking(f),
        };
        h.await.joined()
    }
}

impl Drop for Polls {
    fn drop(&mut self) {
        // dropped from inside the task runtime, where a runtime may not block on its shutdown
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Task {
    /// The units after the task's position (an interrupted unit first, exactly as it was planned).
    /// (A future that does not borrow the task, which is not `Sync`.)
    pub(super) fn poll(&self) -> impl std::future::Future<Output = Result<Vec<Unit>, RuntimeError>> + 'static {
        let (src, issued) = (self.source.clone(), self.state.issued.clone());
        let in_flight = self.state.in_flight.clone();
        let polls = self.opts.polls.clone();
        let polled = tokio::spawn(async move {
            polls
                .run(move || match &in_flight {
                    Some(f) => src.unit_at(&f.unit, f.snapshot).map(|u| vec![u]),
                    None => src.poll(issued.as_ref()),
                })
                .await
        });
        async move { Ok(polled.await.joined()?) }
    }
}
