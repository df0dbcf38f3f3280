//! Commit metadata (JSON on layout 1, Avro on layout 2): the files a write touched, the table
//! schema it wrote with, and the clean plans that say which files a clean removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;

use super::{Action, MetaSource, TableConfig, Timeline};
use crate::source::SourceError;
use crate::storage::Storage;

/// The parts of commit metadata the reader uses (JSON on layout 1, Avro on layout 2).
#[derive(Debug, Default, Deserialize)]
pub struct CommitMetadata {
    #[serde(rename = "partitionToWriteStats", default)]
    pub write_stats: Option<BTreeMap<String, Option<Vec<WriteStat>>>>,
    #[serde(rename = "partitionToReplaceFileIds", default)]
    pub replaced: Option<BTreeMap<String, Option<Vec<String>>>>,
    #[serde(rename = "operationType", default)]
    pub operation: Option<String>,
    /// Writer-supplied metadata; `schema` is the write's Avro schema.
    #[serde(rename = "extraMetadata", default)]
    pub extra: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct WriteStat {
    #[serde(rename = "fileId", default)]
    pub file_id: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    /// Base instant of the file group's previous slice (`"null"` for a new group).
    #[serde(rename = "prevCommit", default)]
    pub prev_commit: Option<String>,
    /// CDC log files the write produced (relative path → size), on CDC-enabled tables.
    #[serde(rename = "cdcStats", default)]
    pub cdc_stats: Option<serde_json::Value>,
}

impl WriteStat {
    /// Relative paths of the CDC log files of this write (Avro metadata may wrap the map in its union branch).
    pub fn cdc_files(&self) -> Vec<String> {
        let map = match &self.cdc_stats {
            Some(serde_json::Value::Object(m)) => match m.get("map") {
                Some(serde_json::Value::Object(inner)) if m.len() == 1 => inner,
                _ => m,
            },
            _ => return Vec::new(),
        };
        map.keys().cloned().collect()
    }

    /// The base instant of the file group's previous slice (`None`: a new file group).
    pub fn prev_slice(&self) -> Option<&str> {
        self.prev_commit.as_deref().filter(|c| !c.is_empty() && *c != "null")
    }
}

/// The top-level columns of the table's writer schema, required where their Avro type is not a
/// union with `null`: the newest write's schema (`extraMetadata.schema`), else the schema the
/// table was created with (`hoodie.table.create.schema`).
pub fn columns(table: &TableConfig) -> Result<Vec<crate::source::opening::Column>, SourceError> {
    let timeline = Timeline::load(table)?;
    let newest = match timeline.completed.iter().rev().find(|i| i.is_write()) {
        Some(i) => CommitMetadata::load(&table.storage, &i.meta)?.writer_schema(),
        None => None,
    };
    let Some(schema) = newest.or_else(|| table.props.get("hoodie.table.create.schema").cloned()) else {
        return Ok(Vec::new());
    };
    let parsed: serde_json::Value = serde_json::from_str(&schema)
        .map_err(|e| SourceError::format(&table.timeline_dir, format!("the writer schema is not JSON: {e}")))?;
    let nullable = |t: &serde_json::Value| t.as_array().is_some_and(|u| u.iter().any(|b| b == "null")) || t == "null";
    let fields = parsed["fields"].as_array().map(Vec::as_slice).unwrap_or_default();
    Ok(fields
        .iter()
        .filter_map(|f| {
            let name = f["name"].as_str()?.to_string();
            let required = !nullable(&f["type"]);
            Some(crate::source::opening::Column { name, required })
        })
        .collect())
}

impl CommitMetadata {
    /// The write's Avro schema (JSON text), when the writer recorded it.
    pub fn writer_schema(&self) -> Option<String> {
        let extra = self.extra.as_ref()?;
        // Avro-encoded metadata wraps the map in its union branch
        let map = extra
            .get("map")
            .filter(|_| extra.as_object().is_some_and(|o| o.len() == 1))
            .unwrap_or(extra);
        map.get("schema")?.as_str().filter(|s| !s.is_empty()).map(String::from)
    }

    pub fn load(storage: &Storage, source: &MetaSource) -> Result<Self, SourceError> {
        match source {
            MetaSource::File(file) => Self::parse(&storage.read(file).map_err(SourceError::io(file))?, file),
            MetaSource::Archived(bytes) => Self::parse(bytes, Path::new("(archived timeline)")),
            MetaSource::Json(v) if v.is_null() => Ok(Self::default()),
            MetaSource::Json(v) => serde_json::from_value(v.as_ref().clone())
                .map_err(|e| SourceError::format("(archived timeline)", format!("unexpected commit metadata: {e}"))),
        }
    }

    fn parse(bytes: &[u8], file: &Path) -> Result<Self, SourceError> {
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(Self::default());
        }
        serde_json::from_value(metadata_json(bytes, file, "commit")?)
            .map_err(|e| SourceError::format(file, format!("unexpected commit metadata: {e}")))
    }

    /// (partition, write stat) of every write that names its file group.
    pub fn writes(&self) -> impl Iterator<Item = (&str, &WriteStat)> {
        self.write_stats.iter().flatten().flat_map(|(p, stats)| {
            stats
                .iter()
                .flatten()
                .filter(|s| s.file_id.is_some())
                .map(move |s| (p.as_str(), s))
        })
    }

    /// (partition, file id) of every file group replaced (insert overwrite, clustering).
    pub fn replaced(&self) -> impl Iterator<Item = (&str, &str)> {
        self.replaced
            .iter()
            .flatten()
            .flat_map(|(p, ids)| ids.iter().flatten().map(move |id| (p.as_str(), id.as_str())))
    }
}

/// The partitions the completed writes after `after` up to `target` (timeline order) wrote or
/// replaced, from their commit metadata (which outlives the files a cleaner removes). `None`
/// where that cannot be told: `after` not a completed write on `timeline` (archived, rolled
/// back, another table), `target` not after it, a restore or rollback completed in between (it
/// may have undone an emitted write), or no partition named at all.
pub fn partitions_written(
    storage: &Storage,
    timeline: &Timeline,
    after: &crate::source::Position,
    target: &crate::source::Position,
) -> Result<Option<BTreeSet<String>>, SourceError> {
    let Some(from) = timeline.get(&after.version).filter(|i| i.is_write()) else {
        return Ok(None);
    };
    let (from, to) = (from.order_key(), target.order_key());
    if to <= from {
        return Ok(None);
    }
    let mut out = BTreeSet::new();
    for i in timeline
        .completed
        .iter()
        .filter(|i| i.order_key() > from && i.order_key() <= to)
    {
        match i.action {
            a if a.rewinds() => return Ok(None),
            _ if i.is_write() => {
                let md = CommitMetadata::load(storage, &i.meta)?;
                out.extend(md.write_stats.iter().flatten().map(|(p, _)| p.clone()));
                out.extend(md.replaced.iter().flatten().map(|(p, _)| p.clone()));
            }
            _ => {}
        }
    }
    Ok(Some(out).filter(|o| !o.is_empty()))
}

/// Instant metadata as JSON: Avro (a one-record container file; every layout-2 file, and clean
/// or rollback metadata on layout 1) or JSON (layout-1 commit metadata).
fn metadata_json(bytes: &[u8], file: &Path, what: &str) -> Result<serde_json::Value, SourceError> {
    if bytes.starts_with(b"Obj\x01") {
        let reader = apache_avro::Reader::new(bytes)
            .map_err(|e| SourceError::format(file, format!("bad Avro {what} metadata: {e}")))?;
        let first = reader
            .into_iter()
            .next()
            .ok_or_else(|| SourceError::format(file, format!("empty Avro {what} metadata")))?
            .map_err(|e| SourceError::format(file, format!("bad Avro {what} metadata: {e}")))?;
        serde_json::Value::try_from(first)
            .map_err(|e| SourceError::format(file, format!("{what} metadata to JSON: {e}")))
    } else {
        serde_json::from_slice(bytes).map_err(|e| SourceError::format(file, format!("bad JSON {what} metadata: {e}")))
    }
}

/// A completed clean's `HoodieCleanMetadata` as JSON (`None`: archived, or an empty file).
fn clean_metadata(table: &TableConfig, clean: &super::Instant) -> Result<Option<serde_json::Value>, SourceError> {
    let MetaSource::File(file) = &clean.meta else {
        return Ok(None);
    };
    let bytes = table.storage.read(file).map_err(SourceError::io(file))?;
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    metadata_json(&bytes, file, "clean").map(Some)
}

/// The oldest instant whose file slices a completed clean kept
/// (`HoodieCleanMetadata.earliestCommitToRetain`; `None` where the clean policy keeps file versions
/// rather than commits, or the metadata is empty).
pub fn retained_from(table: &TableConfig, clean: &super::Instant) -> Result<Option<String>, SourceError> {
    let Some(json) = clean_metadata(table, clean)? else {
        return Ok(None);
    };
    Ok(json
        .get("earliestCommitToRetain")
        .and_then(|v| v.as_str().or_else(|| v.get("string").and_then(|s| s.as_str())))
        .filter(|s| !s.is_empty())
        .map(str::to_string))
}

/// The completed clean on the active timeline that deleted a file named `file_name`
/// (`HoodieCleanMetadata.partitionMetadata.*.successDeleteFiles`, or its `deletePathPatterns`),
/// by requested time.
pub fn cleaned_by(table: &TableConfig, file_name: &str) -> Result<Option<String>, SourceError> {
    let timeline = Timeline::load(table)?;
    for clean in timeline.completed.iter().filter(|i| i.action == Action::Clean) {
        let Some(json) = clean_metadata(table, clean)? else {
            continue;
        };
        let partitions = json
            .get("partitionMetadata")
            .and_then(|p| p.as_object())
            .into_iter()
            .flat_map(|m| m.values());
        let deleted = partitions
            .flat_map(|p| ["successDeleteFiles", "deletePathPatterns"].map(|k| p.get(k).and_then(|v| v.as_array())))
            .flatten()
            .flatten()
            .filter_map(|v| v.as_str());
        if deleted.into_iter().any(|d| d.rsplit('/').next() == Some(file_name)) {
            return Ok(Some(clean.requested.clone()));
        }
    }
    Ok(None)
}
