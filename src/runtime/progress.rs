//! Progress of the unit being emitted, for people and dashboards: a full scan logs from its
//! first second and then every few seconds (splits done of total, events, rate, ETA) and exports
//! the same as gauges; every unit ends with one summary line (events by op, Kafka transactions,
//! seconds).

use std::time::{Duration, Instant};

use crate::metrics;
use crate::source::{Op, Unit};

/// How often a running full scan logs its progress.
const EVERY: Duration = Duration::from_secs(5);

pub struct UnitProgress {
    started: Instant,
    last_log: Instant,
    snapshot: bool,
    total_splits: usize,
    done_splits: usize,
    /// Events by op (`Op as usize`) and tombstones, this run of the unit.
    events: [u64; 4],
    tombstones: u64,
    rows_read: u64,
    /// Kafka transactions committed while the unit was emitted.
    pub transactions: u64,
}

impl UnitProgress {
    /// The unit's clock starts here (its first read); nothing is shown until [`Self::announce`].
    pub fn start(unit: &Unit, total_splits: usize, done_splits: usize) -> Self {
        let now = Instant::now();
        UnitProgress {
            started: now,
            last_log: now,
            snapshot: unit.snapshot,
            total_splits,
            done_splits,
            events: [0; 4],
            tombstones: 0,
            rows_read: 0,
            transactions: 0,
        }
    }

    /// The task emits this unit: a full scan says so (a head start's read may be dropped before
    /// it is adopted, so reading alone does not).
    pub fn announce(&self, connector: &str, unit: &Unit) {
        if self.snapshot {
            tracing::info!(connector = %connector, instant = %unit.position.version, splits = self.total_splits,
                already_done = self.done_splits, "full scan started");
            metrics::SNAPSHOT_PROGRESS
                .with_label_values(&[connector])
                .set(self.total_splits.saturating_sub(self.done_splits) as f64);
        }
    }

    /// A chunk was published: `events` by op, `tombstones`, `rows_read`; `split_done` when it
    /// ended its split.
    pub fn chunk(&mut self, connector: &str, events: &[u64; 4], tombstones: u64, rows_read: u64, split_done: bool) {
        for (a, b) in self.events.iter_mut().zip(events) {
            *a += b;
        }
        self.tombstones += tombstones;
        self.rows_read += rows_read;
        if split_done {
            self.done_splits += 1;
        }
        if !self.snapshot {
            return;
        }
        let remaining = self.total_splits.saturating_sub(self.done_splits);
        metrics::SNAPSHOT_PROGRESS
            .with_label_values(&[connector])
            .set(remaining as f64);
        metrics::SNAPSHOT_EVENTS
            .with_label_values(&[connector])
            .set(self.total_events() as f64);
        let eta = self.eta();
        metrics::SNAPSHOT_ETA
            .with_label_values(&[connector])
            .set(eta.map_or(-1.0, |d| d.as_secs_f64()));
        if self.last_log.elapsed() >= EVERY || (split_done && remaining == 0) {
            self.last_log = Instant::now();
            let secs = self.started.elapsed().as_secs_f64();
            tracing::info!(connector = %connector, splits_done = self.done_splits, splits = self.total_splits, events = self.total_events(),
                rows_read = self.rows_read, events_per_s = (self.total_events() as f64 / secs.max(1e-3)) as u64,
                eta_s = eta.map_or(-1, |d| d.as_secs() as i64), "full scan progress");
        }
    }

    fn total_events(&self) -> u64 {
        self.events.iter().sum()
    }

    /// Time left at the rate of the splits done so far (none before the first split ends).
    fn eta(&self) -> Option<Duration> {
        (self.done_splits > 0).then(|| {
            let per = self.started.elapsed().as_secs_f64() / self.done_splits as f64;
            Duration::from_secs_f64(per * self.total_splits.saturating_sub(self.done_splits) as f64)
        })
    }

    /// The unit is emitted (its position commits with the next transaction).
    pub fn finish(&self, connector: &str, task: &str, unit: &Unit) {
        let e = |op: Op| self.events[op as usize];
        let seconds = self.started.elapsed().as_secs_f64();
        tracing::info!(connector = %connector, instant = %unit.position.version, snapshot = unit.snapshot, r = e(Op::Read), c = e(Op::Create),
            u = e(Op::Update), d = e(Op::Delete), tombstones = self.tombstones, rows_read = self.rows_read,
            transactions = self.transactions + 1, seconds = (seconds * 100.0).round() / 100.0,
            "unit emitted");
        metrics::UNIT_SECONDS
            .with_label_values(&[connector, task, metrics::UnitKind::of(self.snapshot).label()])
            .observe(seconds);
        if self.snapshot {
            metrics::SNAPSHOT_ETA.with_label_values(&[connector]).set(0.0);
        }
    }
}
