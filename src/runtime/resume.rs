//! What a task checks when it resumes from its stored offsets: that the key the published events
//! carry is still the table's, that a start setting the stored position overrides is said, and
//! what became of a transaction whose commit left its outcome unknown.

use std::sync::Arc;

use super::RuntimeError;
use crate::config::ConnectorConfig;
use crate::error::Joined;
use crate::sink::{Cluster, SentRecords, TxnTrace};
use crate::source::{Position, Source};

/// A commit failed without an answer (timed out, its response lost): the broker may have
/// committed it or not. The new producer's init settled it and the position was read back
/// settled; here the transaction's own records say which it was: its position record and its
/// first change record must be both committed or both not. Anything else is a broker that broke
/// a transaction in two (events visible without their position would be published again from
/// the older position): stop, naming both offsets, rather than publish anything twice.
///
/// A transaction that did not commit must also have none of its change records visible (found by
/// fingerprint, acknowledged or not): one that is would be published twice. Returns its records
/// to watch while its changes are republished (see [`Watch`]).
pub(super) async fn resolve_unknown_outcome(
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    trace: TxnTrace,
) -> Result<Option<SentRecords>, RuntimeError> {
    let (cl, c) = (cluster.clone(), cfg.sink());
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
    .joined()?;
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
            let outcome = match (position.or(change), trace.aborted) {
                (Some(true), _) => "committed",
                (Some(false), _) | (None, true) => "aborted",
                (None, false) => "empty",
            };
            tracing::info!(connector = %cfg.name, task = cfg.runtime.task_id, outcome, position = %position_at,
                change = %change_at, "commit outcome resolved from the cluster");
            match trace.sent {
                Some(sent) if outcome != "committed" && !sent.prints.is_empty() => {
                    let visible = find_sent(cluster, cfg, &sent).await?;
                    if !visible.is_empty() {
                        return Err(RuntimeError::Position(format!(
                            "{} of the {} change records of a transaction that did not commit ({outcome}) are visible \
                             read_committed ({}) though its position record is not: the broker let records of a failed \
                             transaction through. Resuming would publish those changes twice. Check the broker \
                             (transaction markers, fencing of aborted producer epochs); `lakestream verify` tells whether \
                             the topic still equals the table",
                            visible.len(),
                            sent.prints.len(),
                            offsets(&sent.topic, &visible),
                        )));
                    }
                    Ok(Some(sent))
                }
                _ => Ok(None),
            }
        }
    }
}

/// What a run must not lose track of when it fails: the last transaction that did not commit
/// (resolved by the next run before it emits) and failed transactions still watched.
#[derive(Default)]
pub(super) struct Unsettled {
    pub trace: Option<TxnTrace>,
    pub watched: Vec<SentRecords>,
}

/// Failed transactions' records, looked for once more after the run has committed as many
/// records again: a broker that kept them past the abort (a batch of the aborted producer epoch,
/// committed by the next transaction that writes to its partition — noida-db does this) shows
/// them only then, beside their republished copies. Found, the task stops: the topic holds
/// those changes twice, and a broker that does this must not be written to on. A run that fails
/// before its watch is due hands it on to the next (`Unsettled`).
pub(super) struct Watch {
    sent: Vec<SentRecords>,
    /// Records committed since the failed transaction, and in how many transactions.
    committed: u64,
    commits: u32,
}

/// Transactions after which a watch looks even if fewer records were republished (the table
/// may have changed meanwhile).
const WATCH_COMMITS: u32 = 64;

impl Watch {
    /// A watch over `sent` (`None` when there is nothing to watch).
    pub(super) fn over(sent: Vec<SentRecords>) -> Option<Self> {
        (!sent.is_empty()).then_some(Watch {
            sent,
            committed: 0,
            commits: 0,
        })
    }

    /// What it watches, for the next run.
    pub(super) fn into_sent(self) -> Vec<SentRecords> {
        self.sent
    }

    /// A transaction of `records` committed: whether it is time to look.
    pub(super) fn due_after(&mut self, records: u64) -> bool {
        self.committed += records;
        self.commits += u32::from(records > 0);
        let most = self.sent.iter().map(|s| s.records).max().unwrap_or(0);
        self.committed >= most || self.commits >= WATCH_COMMITS
    }

    /// Look: none of the failed transactions' records may be visible.
    pub(super) async fn check(self, cluster: &Arc<dyn Cluster>, cfg: &ConnectorConfig) -> Result<(), RuntimeError> {
        for sent in &self.sent {
            let visible = find_sent(cluster, cfg, sent).await?;
            if !visible.is_empty() {
                return Err(RuntimeError::Position(format!(
                    "the broker made {} change records of a transaction that did not commit visible after it failed \
                     ({}): it committed them with a later transaction, and their changes were published again since, \
                     so the topic holds them twice. The broker does not fence aborted producer epochs; stopping rather \
                     than write on. `lakestream verify` tells whether the topic still equals the table",
                    visible.len(),
                    offsets(&sent.topic, &visible),
                )));
            }
        }
        tracing::info!(connector = %cfg.name, task = cfg.runtime.task_id, records = self.committed, transactions = self.commits,
            failed = self.sent.len(), "republished after a failed transaction: none of its records became visible");
        Ok(())
    }
}

async fn find_sent(
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    sent: &SentRecords,
) -> Result<Vec<(i32, i64)>, RuntimeError> {
    let (cl, c, s) = (cluster.clone(), cfg.sink(), sent.clone());
    Ok(tokio::task::spawn_blocking(move || cl.find_sent(&c, &s))
        .await
        .joined()?)
}

/// `topic/partition@offset` of the first few of `at`, and how many more.
fn offsets(topic: &str, at: &[(i32, i64)]) -> String {
    let mut s: Vec<String> = at.iter().take(5).map(|(p, o)| format!("{topic}/{p}@{o}")).collect();
    if at.len() > 5 {
        s.push(format!("and {} more", at.len() - 5));
    }
    s.join(", ")
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
                    version: id.to_string(),
                    completed: None,
                })
                .ok()
        };
        if let (Some(start), Some(stored)) = (at(v), source.order(issued).ok()) {
            if start > stored {
                tracing::warn!(connector = %cfg.name, key = k, value = %v, issued = %issued.version,
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
