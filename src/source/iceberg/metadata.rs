//! Table metadata (`*.metadata.json`): snapshots, schemas, partition specs; finding the current
//! metadata file of a table directory or catalog; Iceberg types as Arrow types.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use serde::Deserialize;
use serde_json::Value;

use crate::config::TableLocation;
use crate::source::SourceError;
use crate::storage::Storage;

pub const FIELD_ID: &str = "PARQUET:field_id";

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: u8,
    #[serde(default)]
    pub location: String,
    #[serde(default)]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub schemas: Vec<IcebergSchema>,
    /// Format v1 tables may carry only this.
    #[serde(default)]
    pub schema: Option<IcebergSchema>,
    #[serde(default)]
    pub current_schema_id: Option<i32>,
    #[serde(default)]
    pub partition_specs: Vec<PartitionSpec>,
    /// Earlier metadata versions, oldest first (which snapshot each made current: see `commits`).
    #[serde(default)]
    pub metadata_log: Vec<MetadataLogEntry>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetadataLogEntry {
    pub metadata_file: String,
    pub timestamp_ms: i64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    #[serde(default)]
    pub parent_snapshot_id: Option<i64>,
    #[serde(default)]
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    #[serde(default)]
    pub manifest_list: Option<String>,
    /// Format v1 without a manifest list.
    #[serde(default)]
    pub manifests: Option<Vec<String>>,
    #[serde(default)]
    pub summary: HashMap<String, String>,
    #[serde(default)]
    pub schema_id: Option<i32>,
}

impl Snapshot {
    pub fn operation(&self) -> &str {
        self.summary.get("operation").map(String::as_str).unwrap_or("append")
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IcebergSchema {
    #[serde(default)]
    pub schema_id: i32,
    pub fields: Vec<NestedField>,
    #[serde(default)]
    pub identifier_field_ids: Vec<i32>,
}

impl TableMetadata {
    /// Top-level columns whose identity changed in the table's history: a name held by two field
    /// ids (dropped and re-added) or a field id under two names (renamed). Rows published before
    /// the change carry them under their old meaning.
    pub fn unstable_columns(&self) -> Vec<String> {
        let mut ids_of: HashMap<&str, HashSet<i32>> = HashMap::new();
        let mut names_of: HashMap<i32, HashSet<&str>> = HashMap::new();
        for f in self.schemas.iter().flat_map(|s| &s.fields) {
            ids_of.entry(&f.name).or_default().insert(f.id);
            names_of.entry(f.id).or_default().insert(&f.name);
        }
        let mut out: Vec<String> = ids_of
            .iter()
            .filter(|(_, ids)| ids.len() > 1 || ids.iter().any(|id| names_of[id].len() > 1))
            .map(|(n, _)| n.to_string())
            .collect();
        out.sort();
        out
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct NestedField {
    pub id: i32,
    pub name: String,
    #[serde(default)]
    pub required: bool,
    #[serde(rename = "type")]
    pub ty: Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PartitionSpec {
    #[serde(default)]
    pub spec_id: i32,
    #[serde(default)]
    pub fields: Vec<Value>,
}

impl TableMetadata {
    pub fn load(storage: &Storage, path: &Path) -> Result<Self, SourceError> {
        let text = storage.read(path).map_err(SourceError::io(path))?;
        let mut md: TableMetadata = serde_json::from_slice(&text)
            .map_err(|e| SourceError::format(path, format!("not Iceberg table metadata: {e}")))?;
        if md.current_snapshot_id == Some(-1) {
            md.current_snapshot_id = None;
        }
        if md.schemas.is_empty() {
            md.schemas.extend(md.schema.take());
        }
        Ok(md)
    }

    pub fn snapshot(&self, id: i64) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The current snapshot and its ancestors still in the metadata, newest first.
    pub fn ancestors(&self) -> Vec<&Snapshot> {
        let mut chain = Vec::new();
        let mut at = self.current_snapshot_id;
        while let Some(s) = at.and_then(|id| self.snapshot(id)) {
            chain.push(s);
            at = s.parent_snapshot_id;
        }
        chain
    }

    pub fn schema_of(&self, snap: Option<&Snapshot>) -> Result<&IcebergSchema, SourceError> {
        let id = snap.and_then(|s| s.schema_id).or(self.current_schema_id).unwrap_or(0);
        self.schemas
            .iter()
            .find(|s| s.schema_id == id)
            .or_else(|| self.schemas.last())
            .ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: "the table metadata has no schema (damaged metadata.json?)".into(),
            })
    }

    /// `Ok` when a row's partition is a function of the columns `key` (ids) in every partition spec
    /// the table ever had, which must all be one spec; else why not.
    pub fn partition_follows(&self, key: &[i32]) -> Result<(), String> {
        let mut specs = self.partition_specs.iter();
        let Some(first) = specs.next() else {
            return Err("the table has no partition spec".into());
        };
        if let Some(other) = specs.find(|s| s.fields != first.fields) {
            return Err(format!(
                "the partition spec changed (spec {} and spec {}): a key's partition differs between them",
                first.spec_id, other.spec_id
            ));
        }
        for f in &first.fields {
            let source = f.get("source-id").and_then(Value::as_i64).map(|i| i as i32);
            let name = f.get("name").and_then(Value::as_str).unwrap_or("?");
            if !source.is_some_and(|s| key.contains(&s)) {
                return Err(format!("partition field `{name}` is not computed from the key columns"));
            }
        }
        Ok(())
    }

    /// Whether the table has a partitioned spec.
    pub fn partitioned(&self) -> bool {
        self.partition_specs.iter().any(|s| !s.fields.is_empty())
    }

    /// Whether a partition spec has no fields (its deletes apply table-wide).
    pub fn spec_unpartitioned(&self, spec_id: i32) -> bool {
        self.partition_specs
            .iter()
            .find(|s| s.spec_id == spec_id)
            .is_none_or(|s| s.fields.is_empty())
    }
}

pub use super::catalog::local;

/// The version number of a metadata file name: `v12.metadata.json` or `00012-<uuid>.metadata.json`.
fn metadata_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".metadata.json")?;
    let stem = stem.strip_suffix(".gz").unwrap_or(stem);
    if let Some(v) = stem.strip_prefix('v') {
        return v.parse().ok();
    }
    stem.split('-').next()?.parse().ok()
}

/// The newest metadata file of a table directory that held `last` at the last poll: for a
/// Hadoop table's `v{N}.metadata.json`, HEADs of `v{N+1}`, `v{N+2}`… until one is missing (one
/// request when nothing changed, no `version-hint.text` read); for other names, a listing.
fn newer_in_dir(storage: &Storage, last: &Path) -> Result<PathBuf, SourceError> {
    let name = last.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let (Some(dir), Some(rest)) = (last.parent(), name.strip_prefix('v')) else {
        return newest_listed(storage, last.parent().unwrap_or(last));
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let (Ok(mut n), tail) = (digits.parse::<u64>(), &rest[digits.len()..]) else {
        return newest_listed(storage, dir);
    };
    let mut newest = last.to_path_buf();
    loop {
        let next = dir.join(format!("v{}{tail}", n + 1));
        match storage.size(&next) {
            Ok(_) => (newest, n) = (next, n + 1),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(newest),
            Err(e) => return Err(SourceError::Io { path: next, source: e }),
        }
    }
}

/// The metadata file with the highest version in `dir`.
fn newest_listed(storage: &Storage, dir: &Path) -> Result<PathBuf, SourceError> {
    let newest = storage
        .list(dir)
        .map_err(SourceError::io(dir))?
        .into_iter()
        .filter_map(|e| metadata_version(&e.name).map(|v| (v, e.path)))
        .max_by_key(|(v, _)| *v);
    newest.map(|(_, p)| p).ok_or_else(|| SourceError::Unreadable {
        why: crate::source::Unreadable::NotATable,
        message: format!(
            "{}: no Iceberg metadata (*.metadata.json or version-hint.text) found",
            dir.display()
        ),
    })
}

/// The current metadata file of a table. `last`: the file this source read at its last poll (a
/// table directory is then probed from it, see [`newer_in_dir`]).
pub fn current_metadata_file(
    storage: &Storage,
    loc: &TableLocation,
    rest: &std::sync::Arc<super::rest::RestSession>,
    last: Option<&Path>,
) -> Result<PathBuf, SourceError> {
    match (loc, last) {
        (TableLocation::Path(p), _) if p.to_string_lossy().ends_with(".metadata.json") => Ok(p.clone()),
        (TableLocation::Path(_), Some(last)) => newer_in_dir(storage, last),
        (TableLocation::Path(p), None) => {
            let dir = if p.ends_with("metadata") {
                p.clone()
            } else {
                p.join("metadata")
            };
            let hint = dir.join("version-hint.text");
            if let Ok(text) = storage.read_to_string(&hint) {
                let v = text.trim();
                let f = dir.join(format!("v{v}.metadata.json"));
                if storage.size(&f).is_ok() {
                    return Ok(f);
                }
            }
            newest_listed(storage, &dir)
        }
        (
            TableLocation::Sql {
                db,
                catalog,
                namespace,
                table,
            },
            _,
        ) => super::catalog::sql_metadata_location(db, catalog, namespace, table),
        (TableLocation::Rest { .. }, _) => rest.metadata_location(storage, loc),
        (TableLocation::Glue { .. }, _) => super::catalog::glue_metadata_location(storage, loc),
    }
}

/// Arrow type of an Iceberg type (JSON form).
pub fn arrow_type(t: &Value) -> Result<DataType, SourceError> {
    let bad = |what: String| SourceError::Unsupported {
        message: format!("Iceberg type {what} is not supported"),
    };
    if let Some(s) = t.as_str() {
        return Ok(match s {
            "boolean" => DataType::Boolean,
            "int" => DataType::Int32,
            "long" => DataType::Int64,
            "float" => DataType::Float32,
            "double" => DataType::Float64,
            "date" => DataType::Date32,
            "time" => DataType::Time64(TimeUnit::Microsecond),
            "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "timestamptz" => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
            "timestamp_ns" => DataType::Timestamp(TimeUnit::Nanosecond, None),
            "timestamptz_ns" => DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into())),
            "string" => DataType::Utf8,
            "uuid" => DataType::FixedSizeBinary(16),
            "binary" => DataType::Binary,
            s if s.starts_with("fixed[") => {
                let n = s[6..s.len() - 1].trim().parse().map_err(|_| bad(s.into()))?;
                DataType::FixedSizeBinary(n)
            }
            s if s.starts_with("decimal(") => {
                let inner = &s[8..s.len() - 1];
                let (p, sc) = inner.split_once(',').ok_or_else(|| bad(s.into()))?;
                let p: u8 = p.trim().parse().map_err(|_| bad(s.into()))?;
                let sc: i8 = sc.trim().parse().map_err(|_| bad(s.into()))?;
                DataType::Decimal128(p, sc)
            }
            other => return Err(bad(other.into())),
        });
    }
    match t.get("type").and_then(Value::as_str) {
        Some("struct") => {
            let fields: Vec<NestedField> = serde_json::from_value(t.get("fields").cloned().unwrap_or(Value::Null))
                .map_err(|e| bad(format!("struct ({e})")))?;
            Ok(DataType::Struct(fields_of(&fields)?))
        }
        Some("list") => {
            let id = t.get("element-id").and_then(Value::as_i64).unwrap_or(0);
            let req = t.get("element-required").and_then(Value::as_bool).unwrap_or(false);
            let el = arrow_type(t.get("element").unwrap_or(&Value::Null))?;
            Ok(DataType::List(Arc::new(with_id(Field::new("element", el, !req), id))))
        }
        Some("map") => {
            let kid = t.get("key-id").and_then(Value::as_i64).unwrap_or(0);
            let vid = t.get("value-id").and_then(Value::as_i64).unwrap_or(0);
            let vreq = t.get("value-required").and_then(Value::as_bool).unwrap_or(false);
            let k = with_id(
                Field::new("key", arrow_type(t.get("key").unwrap_or(&Value::Null))?, false),
                kid,
            );
            let v = with_id(
                Field::new("value", arrow_type(t.get("value").unwrap_or(&Value::Null))?, !vreq),
                vid,
            );
            let entries = Field::new("key_value", DataType::Struct(vec![k, v].into()), false);
            Ok(DataType::Map(Arc::new(entries), false))
        }
        _ => Err(bad(t.to_string())),
    }
}

fn with_id(f: Field, id: i64) -> Field {
    f.with_metadata(HashMap::from([(FIELD_ID.to_string(), id.to_string())]))
}

fn fields_of(fields: &[NestedField]) -> Result<Fields, SourceError> {
    fields
        .iter()
        .map(|f| {
            Ok(with_id(
                Field::new(&f.name, arrow_type(&f.ty)?, !f.required),
                f.id as i64,
            ))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Fields::from)
}

/// The Arrow schema of an Iceberg schema: every top-level field nullable (a change event's columns
/// must accept rows of older files), field ids kept in the field metadata.
pub fn arrow_schema(schema: &IcebergSchema) -> Result<SchemaRef, SourceError> {
    let fields: Vec<Field> = fields_of(&schema.fields)?
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true))
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// The field id of an Arrow field read from Parquet (or built by [`arrow_schema`]).
pub fn field_id(f: &Field) -> Option<i32> {
    f.metadata().get(FIELD_ID).and_then(|v| v.parse().ok())
}
