//! `lakestream offsets reset|set`: an operator moves a connector's position. Every offsets record
//! of the connector (every task of every generation) is replaced in one transaction, after every
//! transactional id that could still write one is fenced, so no running task can commit over
//! the change (it is fenced and exits). `reset` forgets the position: the next run applies the
//! start strategy. `set` puts every task of the configured generation at a completed instant /
//! snapshot: the next run emits what follows it. Also what only looks: `offsets show` and
//! `validate --online`.

use std::collections::HashMap;

use super::state::{read_offsets_matching, Offsets};
use super::{open_source_async, RuntimeError};
use crate::config::ConnectorConfig;
use crate::error::Joined;
use crate::sink::ReadTo;
use crate::source::Ownership;

/// A connector's offsets records: key -> (tasks, task, by partition, record).
type Records = HashMap<String, (u32, u32, bool, Offsets)>;

/// The offsets records of `cfg`'s connector and table.
pub(super) fn records_of(cfg: &ConnectorConfig) -> Result<Records, RuntimeError> {
    let shape = |k: &[u8]| -> Option<(u32, u32, bool)> {
        let v: serde_json::Value = serde_json::from_slice(k).ok()?;
        let (name, o) = (v.get(0)?.as_str()?, v.get(1)?.as_object()?);
        (name == cfg.name && o.get("table")?.as_str()? == cfg.table_id).then_some(())?;
        let tasks = o.get("tasks").and_then(|t| t.as_u64()).unwrap_or(1) as u32;
        Some((
            tasks,
            o.get("task")?.as_u64()? as u32,
            o.get("by").and_then(|b| b.as_str()) == Some("partition"),
        ))
    };
    let found = read_offsets_matching(&crate::sink::Kafka, cfg, &|k| shape(k).is_some(), ReadTo::Stable)?;
    Ok(found
        .into_iter()
        .filter_map(|(k, o)| {
            let (tasks, task, by) = shape(&k)?;
            Some((String::from_utf8_lossy(&k).into_owned(), (tasks, task, by, o)))
        })
        .collect())
}

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
    let ownership = super::tasks::kept_ownership(source.as_ref(), newest);
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
                updated_ms: super::now_ms(),
                ..Default::default()
            };
            (cfg.offsets_key_for(cfg.runtime.tasks, t, by_partition), o)
        })
        .collect();
    let tasks = new.len();
    replace(cfg, by_partition, new, old).await?;
    Ok(format!(
        "connector {}: position set to {} for {tasks} task(s); the next run emits what follows it",
        cfg.name, position.instant
    ))
}

/// `validate` of a discovering connector: what its prefix holds now — each table streamed (its
/// format, topic and stream name, its key, or what keeps it from streaming; `online`: also what
/// [`validate_online`] finds of it), each table skipped and why — then each stream's settings as
/// `key = value` lines (a file of its own for `verify` and `offsets`). A table that cannot be
/// streamed is not an error of the connector: it is skipped when it runs, too.
pub async fn validate_tables(d: &super::fleet::Discovered, online: bool) -> Vec<String> {
    let (t, view) = (&d.tables, &d.view);
    let mut out = vec![format!(
        "# {}: ok, discovering in {}: {} tables streamed, {} skipped, {} left out by the lists",
        t.file.display(),
        t.discovery.search.describe(),
        view.members.len(),
        view.skipped.len(),
        view.excluded
    )];
    for m in &view.members {
        // opened on a blocking thread: a catalog's HTTP client blocks
        let mut checked = open_source_async(m)
            .await
            .map_err(RuntimeError::from)
            .map(|s| format!("key {:?}", s.info().key_fields));
        if let (Ok(key), true) = (&checked, online) {
            checked = validate_online(m)
                .await
                .map(|lines| format!("{key}; {}", lines.join("; ")));
        }
        let (state, detail) = match checked {
            Ok(d) => ("table", d),
            Err(e) => ("skipped", crate::causes::with_causes(&e)),
        };
        out.push(format!(
            "{state} {} ({}) -> topic {} as {}: {detail}",
            m.table_id,
            m.kind.name(),
            m.kafka.topic,
            m.name
        ));
    }
    out.extend(
        view.skipped
            .iter()
            .map(|(table, why)| format!("skipped {table}: {why}")),
    );
    out.extend(
        view.members
            .iter()
            .map(|m| format!("\n## {}\n{}", m.name, m.describe())),
    );
    out
}

/// `validate --online`: reach the table, Kafka (the topics, the stored position) and the
/// Schema Registry with the connector's settings, and say what is there.
pub async fn validate_online(cfg: &ConnectorConfig) -> Result<Vec<String>, RuntimeError> {
    let source = open_source_async(cfg).await?;
    let info = source.info().clone();
    let s = source.clone();
    let mut lines = vec![
        format!(
            "table: {}",
            tokio::task::spawn_blocking(move || s.describe()).await.joined()?
        ),
        format!(
            "key: {}",
            if info.keyless() {
                "none (key.mode=none)".to_string()
            } else {
                info.key_fields.join(", ")
            }
        ),
    ];
    if let Some(catalog) = cfg.iceberg.as_ref().and_then(|i| i.catalog_summary()) {
        lines.push(format!("catalog: {catalog}: table found"));
    }
    crate::sink::reach(&cfg.sink()).await?;
    lines.push(format!(
        "kafka: {} accepted the connector's {}",
        cfg.kafka.bootstrap_servers,
        crate::sink::login(&cfg.sink())
    ));
    lines.extend(crate::sink::describe_topics(&cfg.sink()).await?);
    let c = cfg.clone();
    let stored = tokio::task::spawn_blocking(move || show_offsets(&c)).await.joined()?;
    if let Some(at) = stored.as_ref().and_then(|o| o.issued.clone()) {
        let s = source.clone();
        let headroom = tokio::task::spawn_blocking(move || s.history_headroom(&at))
            .await
            .joined()?;
        lines.push(match headroom {
            None => "history headroom: unbounded (no retention removes what the next units read)".to_string(),
            Some(h) => format!(
                "history headroom: {} commits ({}) between the oldest retained commit {} and the position{}",
                h.commits,
                h.seconds.map_or("time not known".to_string(), |s| format!("{s:.0} s")),
                h.oldest,
                if h.commits < cfg.runtime.headroom_warn_commits {
                    " (low: raise the table's retention or let the connector catch up)"
                } else {
                    ""
                }
            ),
        });
    }
    lines.push(match stored {
        None => "position: none stored (the start strategy applies at the first run)".to_string(),
        Some(o) => format!(
            "position: issued {}{} (task {} of {}, stored key {})",
            o.issued.as_ref().map_or("nothing yet", |p| p.instant.as_str()),
            if o.in_flight.is_some() {
                ", a unit in flight"
            } else {
                ""
            },
            cfg.runtime.task_id,
            o.tasks.max(1),
            o.key.join(",")
        ),
    });
    let registry = crate::changelog::registry::RegistryClient::new(&cfg.registry, &cfg.name)?;
    for subject in [format!("{}-key", cfg.kafka.topic), format!("{}-value", cfg.kafka.topic)] {
        let versions = registry.versions(&subject).await?;
        lines.push(match versions {
            None => format!("registry: subject {subject} absent (registered at the first event)"),
            Some(v) => format!("registry: subject {subject} versions {v:?}"),
        });
    }
    Ok(lines)
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
