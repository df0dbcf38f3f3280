//! Manifest lists and manifests (Avro), with sequence-number and snapshot-id inheritance applied.
//! Both are immutable once written, so parsed ones are cached by path.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use apache_avro::types::Value;

use super::metadata::{local, Snapshot};
use crate::source::SourceError;
use crate::storage::Storage;

pub const STATUS_EXISTING: i32 = 0;
pub const STATUS_ADDED: i32 = 1;
pub const STATUS_DELETED: i32 = 2;

pub const CONTENT_DATA: i32 = 0;
// 1: position deletes (every delete file that is not equality deletes)
pub const CONTENT_EQUALITY_DELETES: i32 = 2;

#[derive(Debug, Clone)]
pub struct ManifestFile {
    pub path: String,
    /// 0 data, 1 deletes.
    pub content: i32,
    pub sequence_number: i64,
    pub added_snapshot_id: Option<i64>,
    /// The first row id of the data files it added (v3 row lineage), where assigned.
    pub first_row_id: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct DataFile {
    pub content: i32,
    pub path: String,
    pub format: String,
    /// `name=value/...` for display, and the identity of the partition tuple.
    pub partition: String,
    pub spec_id: i32,
    pub record_count: i64,
    pub size: i64,
    pub split_offsets: Vec<i64>,
    pub equality_ids: Vec<i32>,
    pub referenced_data_file: Option<String>,
    pub content_offset: Option<i64>,
    pub content_size: Option<i64>,
    /// The row id of its first row (v3 row lineage; inherited from the manifest where null):
    /// a row's `_row_id` is its stored value, else this plus its position in the file.
    pub first_row_id: Option<i64>,
}

impl DataFile {
    pub fn is_dv(&self) -> bool {
        self.format.eq_ignore_ascii_case("puffin")
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub status: i32,
    pub snapshot_id: i64,
    /// Data sequence number (inherited from the manifest when the entry was added by it).
    pub data_seq: i64,
    pub file: Arc<DataFile>,
}

pub struct ManifestCache {
    storage: Storage,
    lists: Mutex<HashMap<String, Arc<Vec<ManifestFile>>>>,
    manifests: Mutex<HashMap<String, Arc<Vec<Entry>>>>,
}

fn field<'a>(rec: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    rec.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| unwrap_union(v))
        .filter(|v| !matches!(v, Value::Null))
}

fn unwrap_union(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => unwrap_union(inner),
        other => other,
    }
}

fn as_i64(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(i) => Some(*i as i64),
        Value::Long(l) => Some(*l),
        _ => None,
    }
}

fn as_str(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

fn display(v: &Value) -> String {
    match unwrap_union(v) {
        Value::Null => "null".into(),
        Value::Boolean(b) => b.to_string(),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => i.to_string(),
        Value::Long(l) | Value::TimestampMicros(l) | Value::TimestampMillis(l) | Value::TimeMicros(l) => l.to_string(),
        Value::String(s) => s.clone(),
        Value::Float(f) => f.to_string(),
        Value::Double(f) => f.to_string(),
        other => format!("{other:?}"),
    }
}

/// An Avro file's records (fields by name) and its header metadata.
type AvroFile = (Vec<Vec<(String, Value)>>, HashMap<String, Vec<u8>>);

fn records(storage: &Storage, path: &str) -> Result<AvroFile, SourceError> {
    let p = local(path)?;
    let bytes = storage.read(&p).map_err(SourceError::io(&p))?;
    let reader = apache_avro::Reader::new(&bytes[..])
        .map_err(|e| SourceError::format(&p, format!("not an Avro manifest: {e}")))?;
    let meta = reader.user_metadata().clone();
    let mut out = Vec::new();
    for v in reader {
        match v.map_err(|e| SourceError::format(&p, format!("corrupt Avro manifest: {e}")))? {
            Value::Record(r) => out.push(r),
            other => {
                return Err(SourceError::format(
                    &p,
                    format!("manifest row is not a record: {other:?}"),
                ))
            }
        }
    }
    Ok((out, meta))
}

impl ManifestCache {
    pub fn new(storage: Storage) -> Self {
        ManifestCache {
            storage,
            lists: Mutex::default(),
            manifests: Mutex::default(),
        }
    }

    /// The manifests of a snapshot.
    pub fn manifest_list(&self, snap: &Snapshot) -> Result<Arc<Vec<ManifestFile>>, SourceError> {
        let Some(list) = &snap.manifest_list else {
            // format v1 without a manifest list: data manifests, sequence number 0
            let files = snap.manifests.clone().unwrap_or_default();
            return Ok(Arc::new(
                files
                    .into_iter()
                    .map(|path| ManifestFile {
                        path,
                        content: 0,
                        sequence_number: 0,
                        added_snapshot_id: None,
                        first_row_id: None,
                    })
                    .collect(),
            ));
        };
        if let Some(hit) = self.lists.lock().get(list) {
            return Ok(hit.clone());
        }
        let (rows, _) = records(&self.storage, list)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let path = as_str(field(&r, "manifest_path"))
                .ok_or_else(|| SourceError::format(list.as_str(), "manifest list entry without manifest_path"))?;
            out.push(ManifestFile {
                path,
                content: as_i64(field(&r, "content")).unwrap_or(0) as i32,
                sequence_number: as_i64(field(&r, "sequence_number")).unwrap_or(0),
                added_snapshot_id: as_i64(field(&r, "added_snapshot_id")),
                first_row_id: as_i64(field(&r, "first_row_id")),
            });
        }
        let out = Arc::new(out);
        self.lists.lock().insert(list.clone(), out.clone());
        Ok(out)
    }

    /// The entries of one manifest, inheritance applied.
    pub fn entries(&self, m: &ManifestFile) -> Result<Arc<Vec<Entry>>, SourceError> {
        if let Some(hit) = self.manifests.lock().get(&m.path) {
            return Ok(hit.clone());
        }
        let (rows, meta) = records(&self.storage, &m.path)?;
        let spec_id = meta
            .get("partition-spec-id")
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut out = Vec::with_capacity(rows.len());
        // first row id inheritance: data files written without one take the manifest's, plus
        // the record counts of the files before them that took one too
        let mut next_row_id = m.first_row_id;
        for r in rows {
            let status = as_i64(field(&r, "status")).unwrap_or(STATUS_EXISTING as i64) as i32;
            let bad = |what: &str| SourceError::format(m.path.as_str(), format!("manifest entry without {what}"));
            let snapshot_id = as_i64(field(&r, "snapshot_id"))
                .or(m.added_snapshot_id)
                .ok_or_else(|| bad("snapshot_id"))?;
            let data_seq = match as_i64(field(&r, "sequence_number")) {
                Some(s) => s,
                None if status == STATUS_ADDED => m.sequence_number,
                // v1 manifests (and existing entries of old writers) have no sequence numbers
                None => 0,
            };
            let Some(Value::Record(df)) = field(&r, "data_file") else {
                return Err(bad("data_file"));
            };
            let partition = match field(df, "partition") {
                Some(Value::Record(p)) => p
                    .iter()
                    .map(|(k, v)| format!("{k}={}", display(v)))
                    .collect::<Vec<_>>()
                    .join("/"),
                _ => String::new(),
            };
            let list_i64 = |name: &str| -> Vec<i64> {
                match field(df, name) {
                    Some(Value::Array(a)) => a.iter().filter_map(|v| as_i64(Some(unwrap_union(v)))).collect(),
                    _ => Vec::new(),
                }
            };
            let content = as_i64(field(df, "content")).unwrap_or(0) as i32;
            let record_count = as_i64(field(df, "record_count")).unwrap_or(0);
            let first_row_id = match (content, as_i64(field(df, "first_row_id"))) {
                (CONTENT_DATA, None) => {
                    let id = next_row_id;
                    next_row_id = id.map(|n| n + record_count);
                    id
                }
                (CONTENT_DATA, stored) => stored,
                _ => None,
            };
            let file = DataFile {
                content,
                path: as_str(field(df, "file_path")).ok_or_else(|| bad("file_path"))?,
                format: as_str(field(df, "file_format")).unwrap_or_else(|| "PARQUET".into()),
                partition,
                spec_id,
                record_count,
                size: as_i64(field(df, "file_size_in_bytes")).unwrap_or(0),
                split_offsets: list_i64("split_offsets"),
                equality_ids: list_i64("equality_ids").into_iter().map(|i| i as i32).collect(),
                referenced_data_file: as_str(field(df, "referenced_data_file")),
                content_offset: as_i64(field(df, "content_offset")),
                content_size: as_i64(field(df, "content_size_in_bytes")),
                first_row_id,
            };
            out.push(Entry {
                status,
                snapshot_id,
                data_seq,
                file: Arc::new(file),
            });
        }
        let out = Arc::new(out);
        self.manifests.lock().insert(m.path.clone(), out.clone());
        Ok(out)
    }
}

/// The files of one snapshot, as the change planner needs them.
#[derive(Debug, Default)]
pub struct SnapshotFiles {
    /// Live data files (added by this snapshot or earlier).
    pub data: Vec<Entry>,
    /// Live delete files.
    pub deletes: Vec<Entry>,
    /// Data files this snapshot removed (their entries keep the data sequence number).
    pub removed_data: Vec<Entry>,
    /// Delete files this snapshot removed.
    pub removed_deletes: Vec<Entry>,
}

impl SnapshotFiles {
    /// Every file of the snapshot. `data` false reads delete manifests and the snapshot's own data
    /// manifests only (enough for appends and for changes that touch no delete files).
    pub fn load(cache: &ManifestCache, snap: &Snapshot, all_data: bool) -> Result<Self, SourceError> {
        let mut out = SnapshotFiles::default();
        for m in cache.manifest_list(snap)?.iter() {
            let own = m.added_snapshot_id.is_none_or(|id| id == snap.snapshot_id);
            if m.content == CONTENT_DATA && !all_data && !own {
                continue;
            }
            for e in cache.entries(m)?.iter() {
                let is_data = e.file.content == CONTENT_DATA;
                match (e.status, is_data) {
                    (STATUS_DELETED, true) if e.snapshot_id == snap.snapshot_id => out.removed_data.push(e.clone()),
                    (STATUS_DELETED, false) if e.snapshot_id == snap.snapshot_id => out.removed_deletes.push(e.clone()),
                    (STATUS_DELETED, _) => {}
                    (_, true) => out.data.push(e.clone()),
                    (_, false) => out.deletes.push(e.clone()),
                }
            }
        }
        Ok(out)
    }

    pub fn added_data(&self, snapshot_id: i64) -> impl Iterator<Item = &Entry> {
        self.data
            .iter()
            .filter(move |e| e.status == STATUS_ADDED && e.snapshot_id == snapshot_id)
    }

    pub fn added_deletes(&self, snapshot_id: i64) -> impl Iterator<Item = &Entry> {
        self.deletes
            .iter()
            .filter(move |e| e.status == STATUS_ADDED && e.snapshot_id == snapshot_id)
    }
}
