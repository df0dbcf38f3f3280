//! What a task checks when it resumes from its stored offsets: that the key the published events
//! carry is still the table's, that a start setting the stored position overrides is said, and
//! what became of a transaction whose commit left its outcome unknown.

use std::sync::Arc;

use super::RuntimeError;
use crate::config::ConnectorConfig;
use crate::sink::{Cluster, TxnTrace};
use crate::source::{Position, Source};

/// A commit failed without an answer (timed out, its response lost): the broker may have
/// committed it or not. The new producer's init settled it and the position was read back
/// settled; here the transaction's own records say which it was: its position record and its
/// first change record must be both committed or both not. Anything else is a broker that broke
/// a transaction in two (events visible without their position would be published again from
/// the older position): stop, naming both offsets, rather than publish anything twice.
pub(super) async fn resolve_unknown_outcome(
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    trace: TxnTrace,
) -> Result<(), RuntimeError> {
    let (cl, c) = (cluster.clone(), cfg.clone());
    let t = trace.clone();
    let seen = tokio::task::spawn_blocking(move || -> Result<_, RuntimeError> {
        let position = match &t.position {
            Some((p, o)) => Some(cl.committed_at(&c, &c.kafka.offsets_topic, *p, *o)?),
            None => None,
        };
        let change = match &t.change {
            Some((topic, p, o)) => Some(cl.committed_at(&c, topic, *p, *o)?),
            None => None,
        };
        Ok((position, change))
    })
    .await
    .expect("outcome check panicked")?;
    let at = |r: Option<(&str, i32, i64)>| r.map_or("none".to_string(), |(t, p, o)| format!("{t}/{p}@{o}"));
    let position_at = at(trace.position.map(|(p, o)| (cfg.kafka.offsets_topic.as_str(), p, o)));
    let change_at = at(trace.change.as_ref().map(|(t, p, o)| (t.as_str(), *p, *o)));
    match seen {
        (Some(a), Some(b)) if a != b => Err(RuntimeError::Position(format!(
            "a transaction whose commit went unanswered is torn: its change records ({change_at}) are {} but its \
             position record ({}) is {}. The broker did not commit them atomically; resuming would publish those \
             changes {}. Check the broker (transaction markers, unclean leader election); `lakestream verify` tells \
             whether the topic still equals the table",
            if b { "committed" } else { "aborted" },
            position_at,
            if a { "committed" } else { "aborted" },
            if b { "again" } else { "never" },
        ))),
        (position, change) => {
            let outcome = match position.or(change) {
                Some(true) => "committed",
                Some(false) => "aborted",
                None => "empty",
            };
            tracing::info!(connector = %cfg.name, task = cfg.runtime.task_id, outcome, position = %position_at,
                change = %change_at, "commit outcome resolved from the cluster");
            Ok(())
        }
    }
}

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
