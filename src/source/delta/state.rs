//! Log replay: the table at one version (its live files, metadata and protocol) from the newest
//! checkpoint at or before it and the commits after it, read through [`DeltaLog`].

use std::collections::BTreeMap;

use super::log::{Commit, DeltaLog, FileAction, Listing, Metadata, Protocol};
use crate::source::SourceError;

/// The table at one version (the one it was loaded at): its live files (by path), metadata and
/// protocol.
#[derive(Debug, Clone)]
pub struct TableState {
    pub files: BTreeMap<(String, String), FileAction>,
    pub metadata: Metadata,
    pub protocol: Protocol,
    /// Commit time of that version (epoch ms; 0 where only a checkpoint is left of it).
    pub timestamp: i64,
}

impl TableState {
    /// The state at `version`: the newest checkpoint at or before it, then the commits after it.
    pub fn load(log: &DeltaLog, listing: &Listing, version: u64) -> Result<Self, SourceError> {
        Self::replay(log, listing, version, true)
    }

    /// [`TableState::load`] without the files (metadata and protocol only).
    pub fn load_meta(log: &DeltaLog, listing: &Listing, version: u64) -> Result<Self, SourceError> {
        Self::replay(log, listing, version, false)
    }

    fn replay(log: &DeltaLog, listing: &Listing, version: u64, with_files: bool) -> Result<Self, SourceError> {
        let cp = listing.checkpoint_for(version);
        let mut base = match cp {
            Some(cp) => log.checkpoint(cp, with_files)?,
            None => Commit::default(),
        };
        let first = cp.map_or(0, |c| c.version + 1);
        let mut files: BTreeMap<(String, String), FileAction> = std::mem::take(&mut base.adds)
            .into_iter()
            .map(|a| (a.id(), a))
            .collect();
        let (mut metadata, mut protocol, mut timestamp) = (base.metadata, base.protocol, 0);
        for v in first..=version {
            // a commit the replay needs is there, unless log cleanup removed it
            if !listing.commits.contains_key(&v) {
                return Err(missing_commit(log, v, listing));
            }
            let c = log.commit(v)?;
            if with_files {
                for r in &c.removes {
                    files.remove(&r.id());
                }
                for a in c.adds {
                    files.insert(a.id(), a);
                }
            }
            metadata = c.metadata.or(metadata);
            protocol = c.protocol.or(protocol);
            timestamp = c.timestamp;
        }
        let where_ = || log.dir.join(format!("{version:020}.json"));
        Ok(TableState {
            files,
            metadata: metadata.ok_or_else(|| SourceError::format(where_(), "no metaData action up to this version"))?,
            protocol: protocol.ok_or_else(|| SourceError::format(where_(), "no protocol action up to this version"))?,
            timestamp,
        })
    }
}

/// A commit the connector needs is no longer in the log.
pub fn missing_commit(log: &DeltaLog, v: u64, listing: &Listing) -> SourceError {
    let oldest = listing.commits.keys().next().copied();
    SourceError::HistoryGone {
        message: format!(
            "Delta version {v}: {} is gone (log retention, `delta.logRetentionDuration`, removed it; oldest commit \
             left: {}); its changes cannot be read exactly. Ways out: restart under a new connector name with \
             starting-version=earliest (read the current version whole) or starting-version=latest (skip the gap); \
             keep log retention longer than the connector's lag",
            log.dir.join(format!("{v:020}.json")).display(),
            oldest.map_or("none".to_string(), |o| o.to_string())
        ),
    }
}
