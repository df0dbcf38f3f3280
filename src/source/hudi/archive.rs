//! The archived timeline, so a reader that lags behind archival keeps going instead of failing:
//! table versions 8/9 keep archived instants in an LSM history under `.hoodie/timeline/history/`
//! (`_version_` names the live `manifest_N`, which lists Parquet files with `instantTime,
//! completionTime, action, metadata`; `metadata` is the instant's Avro commit metadata); table
//! version 6 keeps them in `.hoodie/archived/.commits_.archive.N_*`, log files whose Avro data
//! blocks hold `HoodieArchivedMetaEntry` records (`commitTime`, `actionType`, `actionState`,
//! `hoodieCommitMetadata` / `hoodieReplaceCommitMetadata`).

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::Array;
use serde::Deserialize;

use super::log;
use super::timeline::{Action, Instant, MetaSource, TableConfig};
use crate::source::SourceError;
use crate::storage::Storage;

#[derive(Deserialize)]
struct Manifest {
    files: Vec<ManifestFile>,
}

#[derive(Deserialize)]
struct ManifestFile {
    #[serde(rename = "fileName")]
    file_name: String,
}

/// The version of the live history manifest (`None` when there is no history).
fn history_version(table: &TableConfig) -> Option<u64> {
    let dir = table.timeline_dir.join("history");
    table
        .storage
        .read_to_string(&dir.join("_version_"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn v6_archive_dir(table: &TableConfig) -> std::path::PathBuf {
    table.path.join(".hoodie").join(
        table
            .props
            .get("hoodie.archivelog.folder")
            .map(String::as_str)
            .unwrap_or("archived"),
    )
}

/// Archive files of table version 6, oldest first.
fn v6_archive_files(table: &TableConfig) -> Vec<(u64, std::path::PathBuf)> {
    let mut out: Vec<(u64, std::path::PathBuf)> = table
        .storage
        .list(&v6_archive_dir(table))
        .map(|d| {
            d.into_iter()
                .filter_map(|e| {
                    let n = e
                        .name
                        .strip_prefix(".commits_.archive.")?
                        .split('_')
                        .next()?
                        .parse()
                        .ok()?;
                    Some((n, e.path))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Completed instants of the archived timeline, in no particular order.
pub fn load_archived(table: &TableConfig) -> Result<Vec<Instant>, SourceError> {
    if table.layout < 2 {
        return load_v6(table);
    }
    let Some(version) = history_version(table) else {
        return Ok(Vec::new());
    };
    let dir = table.timeline_dir.join("history");
    let manifest_path = dir.join(format!("manifest_{version}"));
    let manifest: Manifest = serde_json::from_slice(
        &table
            .storage
            .read(&manifest_path)
            .map_err(SourceError::io(&manifest_path))?,
    )
    .map_err(|e| SourceError::format(&manifest_path, format!("bad history manifest: {e}")))?;
    let mut out = Vec::new();
    for f in manifest.files {
        read_history_file(&table.storage, &dir.join(&f.file_name), &mut out)?;
    }
    Ok(out)
}

fn read_history_file(storage: &Storage, path: &Path, out: &mut Vec<Instant>) -> Result<(), SourceError> {
    let reader = crate::source::parquet(storage, path)?
        .build()
        .map_err(SourceError::parquet(path))?;
    for batch in reader {
        let batch = batch.map_err(SourceError::arrow(format!("reading {}", path.display())))?;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| SourceError::format(path, format!("history file without `{name}`")))
        };
        let (req, comp, action, meta) = (
            col("instantTime")?,
            col("completionTime")?,
            col("action")?,
            col("metadata")?,
        );
        let (req, comp, action) = (
            req.as_string::<i32>(),
            comp.as_string::<i32>(),
            action.as_string::<i32>(),
        );
        let meta = meta.as_binary::<i32>();
        for i in 0..batch.num_rows() {
            // an action the active timeline does not read either (timeline::Action) is skipped
            let Some(a) = action.is_valid(i).then(|| Action::named(action.value(i))).flatten() else {
                continue;
            };
            if req.is_null(i) {
                continue;
            }
            out.push(Instant {
                requested: req.value(i).to_string(),
                completed: comp.is_valid(i).then(|| comp.value(i).to_string()),
                action: a,
                meta: MetaSource::Archived(Arc::from(if meta.is_valid(i) { meta.value(i) } else { &[][..] })),
            });
        }
    }
    Ok(())
}

fn load_v6(table: &TableConfig) -> Result<Vec<Instant>, SourceError> {
    let mut out = Vec::new();
    for (_, path) in v6_archive_files(table) {
        for block in log::read_blocks(&table.storage, &path, &table.name)? {
            if block.block_type != log::BlockType::AvroData {
                continue;
            }
            for rec in log::avro_block_json(&block, &path)? {
                // older archives hold completed instants only; newer ones say which state
                if rec["actionState"].as_str().is_some_and(|s| s != "COMPLETED") {
                    continue;
                }
                let (Some(time), Some(action)) = (
                    rec["commitTime"].as_str(),
                    rec["actionType"].as_str().and_then(Action::named),
                ) else {
                    continue;
                };
                let meta = match action {
                    Action::ReplaceCommit => rec["hoodieReplaceCommitMetadata"].clone(),
                    _ => rec["hoodieCommitMetadata"].clone(),
                };
                out.push(Instant {
                    requested: time.to_string(),
                    completed: None,
                    action,
                    meta: MetaSource::Json(Arc::new(meta)),
                });
            }
        }
    }
    Ok(out)
}
