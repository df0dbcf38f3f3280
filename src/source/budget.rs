//! A source's memory budget for the unit it is reading: its connector's `read.memory.budget`,
//! or less where the process shares one budget among its connectors (`run --memory-budget`, see
//! `runtime::memory`): the runtime hands each unit its share in [`super::Resume::budget`], and
//! the format's reader sets it here before it plans the unit's reading (a source reads one unit
//! at a time).

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub struct Budget {
    /// `read.memory.budget`.
    own: usize,
    /// The unit being read's.
    now: AtomicUsize,
}

impl Budget {
    pub fn new(own: usize) -> Self {
        Budget {
            own,
            now: AtomicUsize::new(own),
        }
    }

    /// The budget of the unit being read.
    pub fn get(&self) -> usize {
        self.now.load(Ordering::Relaxed)
    }

    /// The next unit's budget: its share where the process gives one (never above the
    /// connector's own budget), else the connector's own.
    pub fn for_unit(&self, share: Option<usize>) {
        let b = share.map_or(self.own, |s| s.min(self.own));
        self.now.store(b.max(1), Ordering::Relaxed);
    }
}
