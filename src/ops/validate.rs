//! `lakestream validate`: what a connector's files reach — `--online`, the table, Kafka (the
//! topics, the stored position) and the Schema Registry; a discovering connector's tables.

use super::offsets::show_offsets;
use crate::config::ConnectorConfig;
use crate::error::Joined;
use crate::runtime::fleet::Discovered;
use crate::runtime::{open_source_async, RuntimeError};

/// `validate` of a discovering connector: what its prefix holds now — each table streamed (its
/// format, topic and stream name, its key, or what keeps it from streaming; `online`: also what
/// [`validate_online`] finds of it), each table skipped and why — then each stream's settings as
/// `key = value` lines (a file of its own for `verify` and `offsets`). A table that cannot be
/// streamed is not an error of the connector: it is skipped when it runs, too.
pub async fn validate_tables(d: &Discovered, online: bool) -> Vec<String> {
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
            o.issued.as_ref().map_or("nothing yet", |p| p.version.as_str()),
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
