//! `lakestream offsets reset|set|show`: an operator moves or reads a connector's position. Every
//! offsets record of the connector (every task of every generation) is replaced in one
//! transaction, after every transactional id that could still write one is fenced, so no running
//! task can commit over the change (it is fenced and exits). `reset` forgets the position: the
//! next run applies the start strategy. `set` puts every task of the configured generation at a
//! completed instant / snapshot: the next run emits what follows it.

use crate::config::ConnectorConfig;
use crate::error::Joined;
use crate::runtime::state::{read_offsets_matching, records_of, Offsets, Records};
use crate::runtime::{now_ms, open_source_async, tasks, RuntimeError};
use crate::sink::ReadTo;
use crate::source::Ownership;

/// Replace every record of the connector with `new` (key -> record), fencing every transactional
/// id of the old records and of the new ones first. Returns what was replaced.
/// `by_partition`: the new records' generation divides the table by partition.
async fn replace(
    cfg: &ConnectorConfig,
    by_partition: bool,
    new: Vec<(String, Offsets)>,
    old: Records,
) -> Result<usize, RuntimeError> {
    let mut ids: Vec<String> = old
        .values()
        .map(|(tasks, task, by, _)| cfg.transactional_id_for(*tasks, *task, *by))
        .collect();
    ids.extend((0..cfg.runtime.tasks.max(1)).map(|t| cfg.transactional_id_for(cfg.runtime.tasks, t, by_partition)));
    ids.sort();
    ids.dedup();
    for id in ids.iter().skip(1) {
        crate::sink::fence(&cfg.sink(), id).await?;
    }
    let mut records: Vec<(String, Option<Vec<u8>>)> = old
        .keys()
        .filter(|k| !new.iter().any(|(n, _)| n == *k))
        .map(|k| (k.clone(), None))
        .collect();
    for (k, o) in &new {
        records.push((
            k.clone(),
            Some(serde_json::to_vec(o).map_err(|e| RuntimeError::Position(e.to_string()))?),
        ));
    }
    // written under the first id, which init_transactions fences in the same step
    crate::sink::write_offsets_records(&cfg.sink(), &ids[0], records).await?;
    Ok(old.len())
}

fn refuse_without_force(force: bool, what: &str) -> Result<(), RuntimeError> {
    if force {
        return Ok(());
    }
    Err(RuntimeError::Usage(format!(
        "offsets {what} fences every task of the connector (a running one is stopped by it, exit 1): stop the \
         connector first (e.g. scale its StatefulSet to 0), then run again with --force"
    )))
}

/// `offsets reset`: forget the position (every task, every generation).
pub async fn reset(cfg: &ConnectorConfig, force: bool) -> Result<String, RuntimeError> {
    refuse_without_force(force, "reset")?;
    let c = cfg.clone();
    let old = tokio::task::spawn_blocking(move || records_of(&c)).await.joined()?;
    if old.is_empty() {
        return Ok(format!("connector {}: no stored position; nothing to reset", cfg.name));
    }
    let n = replace(cfg, false, Vec::new(), old).await?;
    Ok(format!(
        "connector {}: {n} offsets records removed; the next run applies the start strategy",
        cfg.name
    ))
}

/// `offsets set --instant/--snapshot ID`: every task of the configured generation at `id`.
pub async fn set(cfg: &ConnectorConfig, id: &str, force: bool) -> Result<String, RuntimeError> {
    refuse_without_force(force, "set")?;
    let source = open_source_async(cfg).await?;
    let (s, i) = (source.clone(), id.to_string());
    let position = tokio::task::spawn_blocking(move || s.position_of(&i)).await.joined()?;
    let c = cfg.clone();
    let old = tokio::task::spawn_blocking(move || records_of(&c)).await.joined()?;
    let newest = old.values().max_by_key(|(.., o)| o.epoch).map(|(.., o)| o.ownership);
    let ownership = tasks::kept_ownership(source.as_ref(), newest);
    let by_partition = ownership == Ownership::Partition;
    let key = old
        .values()
        .map(|(.., o)| o.key.clone())
        .find(|k| !k.is_empty())
        .unwrap_or_else(|| source.info().stored_key());
    let epoch = old.values().map(|(.., o)| o.epoch).max().unwrap_or(0);
    let new: Vec<(String, Offsets)> = (0..cfg.runtime.tasks.max(1))
        .map(|t| {
            let o = Offsets {
                issued: Some(position.clone()),
                tasks: cfg.runtime.tasks,
                epoch,
                ownership,
                key: key.clone(),
                updated_ms: now_ms(),
                ..Default::default()
            };
            (cfg.offsets_key_for(cfg.runtime.tasks, t, by_partition), o)
        })
        .collect();
    let tasks = new.len();
    replace(cfg, by_partition, new, old).await?;
    Ok(format!(
        "connector {}: position set to {} for {tasks} task(s); the next run emits what follows it",
        cfg.name, position.version
    ))
}

/// Print the stored offsets of a connector (for `lakestream offsets show`).
/// The task's record under either ownership scheme (the newer generation's when both exist),
/// read once every transaction below the end is settled: on Kafka 4 (KIP-890) a commit's markers
/// are written after the producer's commit returns, so a `show` right after `run --once` exited
/// could read the position before its last transaction (seen once in CI).
pub fn show_offsets(cfg: &ConnectorConfig) -> Result<Option<Offsets>, RuntimeError> {
    let keys = [false, true].map(|p| cfg.offsets_key_for(cfg.runtime.tasks, cfg.runtime.task_id, p));
    let mut found = read_offsets_matching(
        &crate::sink::Kafka,
        cfg,
        &|k| keys.iter().any(|key| key.as_bytes() == k),
        ReadTo::Settled,
    )?;
    Ok(keys
        .iter()
        .filter_map(|k| found.remove(k.as_bytes()))
        .max_by_key(|o| o.epoch))
}
