//! A head start: a single task's next unit is read while its producer initialises.
//!
//! A task's start is serial: the producer's init (which fences an older instance of the task),
//! the offsets read under it, a poll, then the unit's read; on Kafka the first three are ~50 ms
//! of every start, most of it waiting on the broker. The read depends on the position only, not
//! on the producer. So, as soon as the table is open, an early offsets read (not fenced: it may
//! be overtaken by a zombie's commit) names the position the task will most likely resume from,
//! and the poll and the first unit's read start from it, on the same threads and with the same
//! memory share as ever. Nothing read is published on that guess: the task adopts the head start
//! only when its own position, read under its initialised producer, is the one guessed, with no
//! unit in flight and no handoff, from the same source; else the head start is dropped (its
//! reader stops at its next chunk) and the task polls as before. A fresh connector (no record)
//! and a restart after a unit's end are guessed; a unit in flight, a handoff, several tasks and
//! `idle.release` are not (their starts read more than one record).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::progress::UnitProgress;
use super::state::Offsets;
use super::tasks::{self, Records};
use super::{metrics, RunOptions};
use crate::config::ConnectorConfig;
use crate::sink::ReadTo;
use crate::source::{Position, Resume, Source, SourceError, SplitChanges, Unit};

/// A poll and the first unit's read, started from a guessed position.
pub(super) struct HeadStart {
    source: Arc<dyn Source>,
    /// The position guessed (`None`: nothing issued yet).
    from: Option<Position>,
    /// What the poll found, until the task's first cycle takes it.
    units: Option<Vec<Unit>>,
    /// The first unit's read, until the task emits that unit.
    reading: Option<Reading>,
}

/// A unit being read on the blocking pool, chunk by chunk into `rx`.
pub(super) struct Reading {
    unit: Unit,
    pub rx: mpsc::Receiver<SplitChanges>,
    pub reader: tokio::task::JoinHandle<Result<(), SourceError>>,
    pub shown: UnitProgress,
}

/// The position a single task will most likely resume from, as `all` (read before the producer
/// is initialised) has it: `Some(None)` for a connector with no record, `None` where the start
/// reads more than one record or resumes a unit in flight.
fn guess(all: &Records) -> Option<Option<Position>> {
    let Some(newest) = all.values().map(|o| o.epoch).max() else {
        return Some(None);
    };
    let mut generation = all.iter().filter(|(_, o)| o.epoch == newest);
    let ((shape, task), own) = generation.next()?;
    let one = generation.next().is_none() && shape.tasks() <= 1 && *task == 0;
    (one && own.in_flight.is_none() && own.handoff.is_none()).then(|| own.issued.clone())
}

/// Whether a task whose own position is `state` starts with the poll from `from`: nothing in
/// flight or handed over, the same unit issued last.
fn resumes_at(from: &Option<Position>, state: &Offsets) -> bool {
    state.issued == *from && state.in_flight.is_none() && state.handoff.is_none()
}

/// Start the head start of a single task of `cfg` on `source`; `None` where no position can be
/// guessed or the early read or the poll failed (the task then finds out the usual way).
/// `unrecorded`: the cluster had no offsets topic at the bootstrap probe, so no record to read
/// (read while the producer's init creates the topic, it took ~110 ms on Kafka, longer than the
/// init it was to overlap).
pub(super) async fn begin(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    source: &Arc<dyn Source>,
    unrecorded: bool,
) -> Option<HeadStart> {
    let none = |why: &dyn std::fmt::Display| tracing::debug!(connector = %cfg.name, %why, "no head start");
    let all = match unrecorded {
        true => Records::new(),
        false => tasks::read_offsets(&opts.cluster, cfg, ReadTo::Stable)
            .await
            .map_err(|e| none(&e))
            .ok()?,
    };
    let Some(from) = guess(&all) else {
        none(&"the task's record has a unit in flight, a handoff or other tasks");
        return None;
    };
    let (src, issued) = (source.clone(), from.clone());
    let units = opts
        .polls
        .run(move || src.poll(issued.as_ref()))
        .await
        .map_err(|e| none(&e))
        .ok()?;
    let reading = units
        .first()
        .filter(|u| u.skipped.is_none())
        .map(|u| start_read(cfg, opts, source, u));
    tracing::debug!(connector = %cfg.name, from = %from.as_ref().map_or("none", |p| p.version.as_str()),
        units = units.len(), reading = reading.is_some(), "head start: polled and reading while the producer initialises");
    Some(HeadStart {
        source: source.clone(),
        from,
        units: Some(units),
        reading,
    })
}

/// Read `unit` whole (nothing of it emitted yet) on the blocking pool, with the unit's share of
/// the process's memory budget; chunks arrive in the returned reading's `rx`.
pub(super) fn start_read(cfg: &ConnectorConfig, opts: &RunOptions, source: &Arc<dyn Source>, unit: &Unit) -> Reading {
    read_from(cfg, opts, source, unit, Resume::default(), 0)
}

/// Read what `resume` leaves of `read` (`finished` of its splits done).
pub(super) fn read_from(
    cfg: &ConnectorConfig,
    opts: &RunOptions,
    source: &Arc<dyn Source>,
    read: &Unit,
    mut resume: Resume,
    finished: usize,
) -> Reading {
    // the unit's share of the process's memory budget, held while it is read
    let share = opts.memory.take(cfg.read.memory_budget);
    resume.budget = share.bytes();
    if let Some(bytes) = share.bytes() {
        tracing::info!(connector = %cfg.name, instant = %read.position.version, share_bytes = bytes,
            process_held_bytes = opts.memory.held(), "unit memory share (run --memory-budget)");
    }
    metrics::MEMORY_SHARE
        .with_label_values(&[cfg.name.as_str(), &cfg.runtime.task_id.to_string()])
        .set(share.bytes().unwrap_or(cfg.read.memory_budget) as f64);
    let (tx, rx) = mpsc::channel::<SplitChanges>(2);
    // the unit's time counts from here: its first read
    let shown = UnitProgress::start(read, read.splits.len(), finished);
    let (src, unit) = (source.clone(), read.clone());
    let reader = tokio::task::spawn_blocking(move || {
        let _share = share;
        src.read_unit(&unit, &resume, &mut |sc| {
            tx.blocking_send(sc).map_err(|_| SourceError::Stopped)
        })
    });
    Reading {
        unit: read.clone(),
        rx,
        reader,
        shown,
    }
}

impl HeadStart {
    /// The head start if the task's own position, read under its initialised producer, is the
    /// one it guessed (see the module doc).
    pub(super) fn fits(self, state: &Offsets, source: &Arc<dyn Source>) -> Option<HeadStart> {
        let fits = Arc::ptr_eq(&self.source, source) && resumes_at(&self.from, state);
        if !fits {
            tracing::debug!(from = %self.from.as_ref().map_or("none", |p| p.version.as_str()),
                "head start dropped: the task resumes elsewhere");
        }
        fits.then_some(self)
    }

    /// What the head start's poll found (once).
    pub(super) fn take_units(&mut self) -> Option<Vec<Unit>> {
        self.units.take()
    }

    /// The read of `unit` if it is the one the head start began.
    pub(super) fn take_reading(&mut self, unit: &Unit) -> Option<Reading> {
        let r = self.reading.take()?;
        (r.unit.position == unit.position && r.unit.snapshot == unit.snapshot).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::state::tests::pos;
    use crate::runtime::state::InFlight;

    #[test]
    fn a_head_start_is_guessed_only_for_a_lone_record_between_units() {
        let mut all = Records::new();
        assert_eq!(guess(&all), Some(None), "no record: a fresh start");
        let own = Offsets {
            issued: Some(pos("1")),
            epoch: 0,
            ..Default::default()
        };
        all.insert(tasks::Shape::by_key(1, 0), own.clone());
        assert_eq!(guess(&all), Some(Some(pos("1"))));
        let mut flying = own.clone();
        flying.in_flight = Some(InFlight::new(pos("2"), false));
        all.insert(tasks::Shape::by_key(1, 0), flying);
        assert_eq!(guess(&all), None, "a unit in flight resumes its progress");
        all.insert(tasks::Shape::by_key(1, 0), own);
        all.insert(
            tasks::Shape::by_key(2, 1),
            Offsets {
                epoch: 0,
                ..Default::default()
            },
        );
        assert_eq!(guess(&all), None, "two records of one generation");
    }

    #[test]
    fn a_head_start_is_adopted_only_where_the_task_resumes_from_its_guess() {
        let at = |issued: Option<Position>| Offsets {
            issued,
            ..Default::default()
        };
        assert!(resumes_at(&None, &at(None)));
        assert!(resumes_at(&Some(pos("1")), &at(Some(pos("1")))));
        assert!(
            !resumes_at(&None, &at(Some(pos("1")))),
            "a record came between the guess and the task's read"
        );
        assert!(
            !resumes_at(&Some(pos("1")), &at(Some(pos("2")))),
            "a zombie committed a unit meanwhile"
        );
        let mut flying = at(Some(pos("1")));
        flying.in_flight = Some(InFlight::new(pos("2"), false));
        assert!(
            !resumes_at(&Some(pos("1")), &flying),
            "a unit in flight resumes its progress"
        );
    }
}
