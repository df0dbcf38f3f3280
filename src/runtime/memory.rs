//! One memory budget for a process's connectors (`run --memory-budget`, issue 32): each unit a
//! task reads takes a share of it for as long as it reads, and gives it back when done; the
//! share becomes the unit's budget in place of `read.memory.budget` (never above it). Without
//! `--memory-budget` every connector keeps its own `read.memory.budget`, as before.
//!
//! A unit's share is what is left of the process budget, at most half of it while the process
//! runs more than one task (a connector catching up on a full scan leaves the other half to a
//! fresh commit elsewhere) and at most the connector's own budget; when less than [`FLOOR`] is
//! left the unit takes the floor anyway (a unit is never made to wait: it spills sooner). So
//! the process's reading stays within the budget plus the floor for each unit that started
//! when it was spent. Readers spill beyond their share as they spill beyond
//! `read.memory.budget`: the same events, more disk.

use std::sync::Arc;

use parking_lot::Mutex;

/// The least a unit is given, whatever is left.
pub const FLOOR: usize = 16 << 20;

/// The process's budget and what units hold of it now.
#[derive(Debug, Default)]
pub struct MemoryShares {
    /// `--memory-budget` (`None`: each connector its own budget).
    total: Option<usize>,
    /// Tasks the process runs (one alone may take the whole budget).
    tasks: usize,
    held: Mutex<usize>,
}

/// A unit's share, given back when dropped.
#[derive(Debug)]
pub struct Share {
    bytes: Option<usize>,
    from: Option<Arc<MemoryShares>>,
}

impl MemoryShares {
    pub fn new(total: Option<usize>, tasks: usize) -> Arc<Self> {
        Arc::new(MemoryShares {
            total,
            tasks,
            held: Mutex::new(0),
        })
    }

    /// A share for a unit of a connector whose own budget is `own`.
    pub fn take(self: &Arc<Self>, own: usize) -> Share {
        let Some(total) = self.total else {
            return Share {
                bytes: None,
                from: None,
            };
        };
        let mut held = self.held.lock();
        let cap = if self.tasks > 1 { total / 2 } else { total };
        let bytes = own.min(cap).min(total.saturating_sub(*held)).max(FLOOR.min(own));
        *held += bytes;
        Share {
            bytes: Some(bytes),
            from: Some(self.clone()),
        }
    }

    /// Bytes held by units now.
    pub fn held(&self) -> usize {
        *self.held.lock()
    }
}

impl Share {
    /// The unit's budget (`None`: the connector's own).
    pub fn bytes(&self) -> Option<usize> {
        self.bytes
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let (Some(from), Some(b)) = (&self.from, self.bytes) {
            let mut held = from.held.lock();
            *held = held.saturating_sub(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn without_a_process_budget_each_connector_keeps_its_own() {
        let m = MemoryShares::new(None, 3);
        assert_eq!(m.take(256 * MIB).bytes(), None);
    }

    #[test]
    fn a_full_scan_leaves_half_to_a_fresh_commit_and_shares_come_back() {
        let m = MemoryShares::new(Some(512 * MIB), 3);
        let scan = m.take(1024 * MIB);
        assert_eq!(scan.bytes(), Some(256 * MIB), "at most half while others may read");
        let fresh = m.take(256 * MIB);
        assert_eq!(fresh.bytes(), Some(256 * MIB));
        let third = m.take(256 * MIB);
        assert_eq!(third.bytes(), Some(FLOOR), "spent: the floor");
        assert_eq!(m.held(), 512 * MIB + FLOOR);
        drop((scan, third));
        assert_eq!(m.held(), 256 * MIB);
        assert_eq!(
            m.take(64 * MIB).bytes(),
            Some(64 * MIB),
            "never above the connector's own"
        );
        drop(fresh);
    }

    #[test]
    fn a_lone_task_may_take_the_whole_budget() {
        let m = MemoryShares::new(Some(512 * MIB), 1);
        assert_eq!(m.take(1024 * MIB).bytes(), Some(512 * MIB));
        assert_eq!(m.take(MIB).bytes(), Some(MIB), "a budget below the floor is kept");
    }
}
