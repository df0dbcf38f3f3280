//! What a task checks when it resumes from its stored offsets: that the key the published events
//! carry is still the table's, and that a start setting the stored position overrides is said.

use super::RuntimeError;
use crate::config::ConnectorConfig;
use crate::source::{Position, Source};

/// The key to publish under: the table's, which must be the stored one when there is one. The
/// events already published were keyed by the stored key fields: a run keyed otherwise (a
/// damaged hoodie.properties, a changed key.fields) would make keyed replay wrong.
pub(super) fn checked_key(stored: &[String], source: &dyn Source) -> Result<Vec<String>, RuntimeError> {
    let key = source.info().stored_key();
    if !stored.is_empty() && stored != key.as_slice() {
        return Err(RuntimeError::Position(format!(
            "the table's key is now {key:?}, but the events already published were keyed by {stored:?} (stored with \
             the position). Check the table's properties (hoodie.properties, identifier fields) and `key.fields`; if \
             the change is deliberate, start under a new connector name (and topic) so no topic mixes two keys"
        )));
    }
    Ok(key)
}

/// The start strategy only applies without a stored position: a start point set after it (meant
/// to skip ahead) does nothing, which the operator should hear about.
pub(super) fn warn_start_after_stored(cfg: &ConnectorConfig, source: &dyn Source, issued: &Position) {
    for k in ["read.start-commit", "start-snapshot-id"] {
        let Some(v) = cfg.raw.get(k).filter(|v| v.chars().all(|c| c.is_ascii_digit())) else {
            continue;
        };
        let at = |id: &str| {
            source
                .order(&Position {
                    instant: id.to_string(),
                    completed: None,
                })
                .ok()
        };
        if let (Some(start), Some(stored)) = (at(v), source.order(issued).ok()) {
            if start > stored {
                tracing::warn!(connector = %cfg.name, key = k, value = %v, issued = %issued.instant,
                    "the start point lies after the stored position, which wins: the connector continues from the \
                     stored position. `lakestream offsets set` moves the position (or `offsets reset` to apply the \
                     start setting)");
            }
        }
    }
}

/// A Hudi connector left at `key.partition-path=auto` whose stored key is its key without the
/// partition path (published by a version that keyed by the record key alone).
pub(super) fn kept_record_key(cfg: &ConnectorConfig, stored: &[String], key: &[String]) -> bool {
    cfg.read.key_partition_path.is_none()
        && key.last().is_some_and(|k| k == crate::source::hudi::PARTITION_PATH)
        && stored == &key[..key.len() - 1]
}
