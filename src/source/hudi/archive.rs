//! The archived timeline, so a reader that lags behind archival keeps going instead of failing:
//! table versions 8/9 keep archived instants in an LSM history under `.hoodie/timeline/history/`
//! (`_version_` names the live `manifest_N`, which lists Parquet files with `instantTime,
//! completionTime, action, metadata`; `metadata` is the instant's Avro commit metadata).

use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Deserialize;

use super::timeline::{Instant, MetaSource, TableConfig};
use crate::source::SourceError;

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
pub fn history_version(table: &TableConfig) -> Option<u64> {
    let dir = table.timeline_dir.join("history");
    std::fs::read_to_string(dir.join("_version_")).ok()?.trim().parse().ok()
}

/// Completed instants of the archived timeline, in no particular order.
pub fn load_archived(table: &TableConfig) -> Result<Vec<Instant>, SourceError> {
    if table.layout < 2 {
        let dir = table.path.join(".hoodie").join("archived");
        let has_archive = std::fs::read_dir(&dir)
            .map(|mut d| d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(".commits_.archive"))))
            .unwrap_or(false);
        if has_archive {
            tracing::warn!(dir = %dir.display(), "archived timeline of table version 6 is not read by this build; \
                instants before the active timeline are treated as completed but cannot be emitted as changes");
        }
        return Ok(Vec::new());
    }
    let Some(version) = history_version(table) else { return Ok(Vec::new()) };
    let dir = table.timeline_dir.join("history");
    let manifest_path = dir.join(format!("manifest_{version}"));
    let manifest: Manifest = serde_json::from_slice(&std::fs::read(&manifest_path).map_err(SourceError::io(&manifest_path))?)
        .map_err(|e| SourceError::format(&manifest_path, format!("bad history manifest: {e}")))?;
    let mut out = Vec::new();
    for f in manifest.files {
        read_history_file(&dir.join(&f.file_name), &mut out)?;
    }
    Ok(out)
}

fn read_history_file(path: &Path, out: &mut Vec<Instant>) -> Result<(), SourceError> {
    let file = std::fs::File::open(path).map_err(SourceError::io(path))?;
    let perr = |source| SourceError::Parquet { path: path.into(), source };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(perr)?.build().map_err(perr)?;
    for batch in reader {
        let batch = batch.map_err(SourceError::arrow(format!("reading {}", path.display())))?;
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| SourceError::format(path, format!("history file without `{name}`")))
        };
        let (req, comp, action, meta) = (col("instantTime")?, col("completionTime")?, col("action")?, col("metadata")?);
        let (req, comp, action) = (req.as_string::<i32>(), comp.as_string::<i32>(), action.as_string::<i32>());
        let meta = meta.as_binary::<i32>();
        for i in 0..batch.num_rows() {
            if req.is_null(i) || action.is_null(i) {
                continue;
            }
            out.push(Instant {
                requested: req.value(i).to_string(),
                completed: comp.is_valid(i).then(|| comp.value(i).to_string()),
                action: action.value(i).to_string(),
                meta: MetaSource::Archived(Arc::from(if meta.is_valid(i) { meta.value(i) } else { &[][..] })),
            });
        }
    }
    Ok(())
}
