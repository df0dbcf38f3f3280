//! Which snapshots one catalog commit added. A commit may add several snapshots at once
//! (pyiceberg's `upsert` and `overwrite` write an overwrite then an append in one transaction;
//! Java transactions do the same): only the last was ever the table's current snapshot, so no
//! reader could see the others, and a row deleted by the first and re-added by the second is one
//! change of that row (`u`), not a delete and a create.
//!
//! The table's metadata log tells them apart: a snapshot that was the current snapshot of no
//! metadata version ended no commit. Only history the log still covers is judged (old metadata
//! files are deleted after `write.metadata.previous-versions-max`); a snapshot older than the
//! oldest readable version keeps a unit of its own, as before.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use super::metadata::{Snapshot, TableMetadata};
use crate::storage::Storage;

/// The current snapshot of each metadata file read so far (metadata files never change).
pub struct CurrentCache(Mutex<HashMap<String, Option<i64>>>, Storage);

#[derive(Deserialize)]
struct CurrentOnly {
    #[serde(rename = "current-snapshot-id", default)]
    current: Option<i64>,
}

impl CurrentCache {
    pub fn new(storage: Storage) -> Self {
        CurrentCache(Mutex::default(), storage)
    }

    /// The current snapshot of a metadata file; `None` when it cannot be read (deleted).
    fn current_of(&self, location: &str) -> Option<Option<i64>> {
        if let Some(c) = self.0.lock().get(location) {
            return Some(*c);
        }
        let path = crate::storage::path_of(location);
        let text = self.1.read(&path).ok()?;
        let current = serde_json::from_slice::<CurrentOnly>(&text)
            .ok()?
            .current
            .filter(|c| *c != -1);
        self.0.lock().insert(location.to_string(), current);
        Some(current)
    }
}

/// What the metadata log says about which snapshots ended a commit.
pub struct Commits {
    was_current: HashSet<i64>,
    /// Snapshots created after this time (epoch ms) are judged; older ones count as commit ends.
    judged_after_ms: i64,
}

impl Commits {
    pub fn load(md: &TableMetadata, cache: &CurrentCache) -> Commits {
        let mut was_current: HashSet<i64> = md.current_snapshot_id.into_iter().collect();
        let mut judged_after_ms = i64::MAX;
        // newest first: only the readable stretch that reaches the current version counts
        for entry in md.metadata_log.iter().rev() {
            match cache.current_of(&entry.metadata_file) {
                Some(current) => {
                    was_current.extend(current);
                    judged_after_ms = entry.timestamp_ms;
                }
                None => break,
            }
        }
        Commits {
            was_current,
            judged_after_ms,
        }
    }

    /// Whether `snap` ended a commit: it was current in some metadata version, or it is older
    /// than the history that can tell.
    pub fn ends_commit(&self, snap: &Snapshot) -> bool {
        self.was_current.contains(&snap.snapshot_id) || snap.timestamp_ms <= self.judged_after_ms
    }

    /// Whether `snap` is the last snapshot of a unit: it ended a commit, or its parent expired (a
    /// commit's changes are read against the snapshot before it, which must still be there).
    pub fn ends_unit(&self, md: &TableMetadata, snap: &Snapshot) -> bool {
        self.ends_commit(snap) || snap.parent_snapshot_id.is_some_and(|p| md.snapshot(p).is_none())
    }

    /// The snapshot before the unit that `last` ends: walk back over snapshots that end no unit
    /// (never past `floor`, the last position emitted). `None`: the unit begins the table.
    pub fn base_of(&self, md: &TableMetadata, last: &Snapshot, floor: Option<i64>) -> Option<i64> {
        let mut at = last;
        loop {
            let pid = at.parent_snapshot_id?;
            match md.snapshot(pid) {
                Some(parent) if !self.ends_unit(md, parent) && Some(pid) != floor => at = parent,
                _ => return Some(pid),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(id: i64, parent: Option<i64>, ts: i64) -> Snapshot {
        serde_json::from_value(
            serde_json::json!({"snapshot-id": id, "parent-snapshot-id": parent, "timestamp-ms": ts,
            "manifest-list": "x", "summary": {"operation": "append"}}),
        )
        .unwrap()
    }

    #[test]
    fn snapshots_never_current_fold_into_the_commit_that_ended_them() {
        let md: TableMetadata =
            serde_json::from_value(serde_json::json!({"format-version": 2, "current-snapshot-id": 4})).unwrap();
        let md = TableMetadata {
            snapshots: vec![
                snap(1, None, 10),
                snap(2, Some(1), 20),
                snap(3, Some(2), 21),
                snap(4, Some(3), 30),
            ],
            ..md
        };
        // versions: v1 current 1 (t=11), v2 current 3 (t=22: snapshot 2 was never current), v3 current 4
        let commits = Commits {
            was_current: [1, 3, 4].into(),
            judged_after_ms: 11,
        };
        assert!(commits.ends_commit(md.snapshot(1).unwrap()));
        assert!(!commits.ends_commit(md.snapshot(2).unwrap()));
        assert_eq!(commits.base_of(&md, md.snapshot(3).unwrap(), None), Some(1));
        assert_eq!(commits.base_of(&md, md.snapshot(4).unwrap(), None), Some(3));
        assert_eq!(
            commits.base_of(&md, md.snapshot(3).unwrap(), Some(2)),
            Some(2),
            "never past the floor"
        );
        // an intermediate snapshot whose parent expired ends a unit of its own
        let expired = TableMetadata {
            snapshots: md.snapshots[1..].to_vec(),
            ..md.clone()
        };
        assert!(commits.ends_unit(&expired, expired.snapshot(2).unwrap()));
        assert_eq!(commits.base_of(&expired, expired.snapshot(3).unwrap(), None), Some(2));
        // history the log no longer covers is not judged
        let old = Commits {
            was_current: [4].into(),
            judged_after_ms: 25,
        };
        assert!(old.ends_commit(md.snapshot(2).unwrap()));
    }
}
