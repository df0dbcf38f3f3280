//! The Delta log: `_delta_log/<version>.json` commits (one action per line) and the checkpoints
//! that fold a prefix of them (classic `<v>.checkpoint.parquet`, multi-part
//! `<v>.checkpoint.<i>.<n>.parquet`, and v2 `<v>.checkpoint.<uuid>.{json,parquet}` with sidecars
//! under `_delta_log/_sidecars/`). A checkpoint's rows are turned into the same JSON actions as a
//! commit's lines (`arrow-json`), so one set of action types reads both.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::source::SourceError;
use crate::storage::Storage;

/// A deletion vector descriptor (`add.deletionVector`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DvDescriptor {
    pub storage_type: String,
    pub path_or_inline_dv: String,
    #[serde(default)]
    pub offset: Option<i32>,
    pub size_in_bytes: i32,
    pub cardinality: i64,
}

impl DvDescriptor {
    /// The part of a file's identity the deletion vector adds: `(path, unique id)` names one
    /// logical file.
    pub fn unique_id(&self) -> String {
        match self.offset {
            Some(o) => format!("{}{}@{o}", self.storage_type, self.path_or_inline_dv),
            None => format!("{}{}", self.storage_type, self.path_or_inline_dv),
        }
    }
}

/// A data file the table holds (`add`), or held (`remove`), or a change-data file (`cdc`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileAction {
    pub path: String,
    #[serde(default)]
    pub partition_values: Option<HashMap<String, Option<String>>>,
    #[serde(default)]
    pub size: Option<i64>,
    #[serde(default = "yes")]
    pub data_change: bool,
    #[serde(default)]
    pub deletion_vector: Option<DvDescriptor>,
    /// Row tracking: the row id of the file's first row, and the version its rows were last
    /// changed in where the file does not store theirs.
    #[serde(default)]
    pub base_row_id: Option<i64>,
    #[serde(default)]
    pub default_row_commit_version: Option<i64>,
}

fn yes() -> bool {
    true
}

impl FileAction {
    /// `(path, deletion vector id)`: the logical file an `add` brings and a `remove` takes away.
    pub fn id(&self) -> (String, String) {
        (
            self.path.clone(),
            self.deletion_vector
                .as_ref()
                .map(DvDescriptor::unique_id)
                .unwrap_or_default(),
        )
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    #[serde(default)]
    pub id: String,
    pub schema_string: String,
    #[serde(default)]
    pub partition_columns: Vec<String>,
    #[serde(default)]
    pub configuration: HashMap<String, Option<String>>,
}

impl Metadata {
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.configuration.get(key).and_then(|v| v.as_deref())
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub min_reader_version: i32,
    #[serde(default)]
    pub min_writer_version: i32,
    #[serde(default)]
    pub reader_features: Option<Vec<String>>,
    #[serde(default)]
    pub writer_features: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sidecar {
    path: String,
}

/// One line of a commit or one row of a checkpoint.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    add: Option<FileAction>,
    remove: Option<FileAction>,
    cdc: Option<FileAction>,
    meta_data: Option<Metadata>,
    protocol: Option<Protocol>,
    commit_info: Option<serde_json::Value>,
    sidecar: Option<Sidecar>,
}

/// The actions of one commit, in file order.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    pub version: u64,
    pub adds: Vec<FileAction>,
    pub removes: Vec<FileAction>,
    pub cdcs: Vec<FileAction>,
    pub metadata: Option<Metadata>,
    pub protocol: Option<Protocol>,
    /// `commitInfo.inCommitTimestamp`, else `commitInfo.timestamp` (epoch ms; 0 when absent).
    pub timestamp: i64,
    pub operation: Option<String>,
}

impl Commit {
    fn apply(&mut self, line: Line) {
        self.adds.extend(line.add);
        self.removes.extend(line.remove);
        self.cdcs.extend(line.cdc);
        if line.meta_data.is_some() {
            self.metadata = line.meta_data;
        }
        if line.protocol.is_some() {
            self.protocol = line.protocol;
        }
        if let Some(info) = line.commit_info {
            let ts = |k: &str| info.get(k).and_then(serde_json::Value::as_i64);
            self.timestamp = ts("inCommitTimestamp").or_else(|| ts("timestamp")).unwrap_or(0);
            self.operation = info.get("operation").and_then(|o| o.as_str()).map(str::to_string);
        }
    }
}

/// A checkpoint: the files holding it (all parts of a multi-part one; a v2 top-level file,
/// whose sidecars are found when it is read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub version: u64,
    pub files: Vec<PathBuf>,
}

/// What `_delta_log/` holds.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    pub commits: BTreeMap<u64, PathBuf>,
    /// Complete checkpoints by version (the first complete one found of each version).
    pub checkpoints: BTreeMap<u64, Checkpoint>,
}

impl Listing {
    pub fn latest(&self) -> Option<u64> {
        let c = self.commits.keys().next_back().copied();
        let k = self.checkpoints.keys().next_back().copied();
        c.max(k)
    }

    /// The newest checkpoint at or before `v`.
    pub fn checkpoint_for(&self, v: u64) -> Option<&Checkpoint> {
        self.checkpoints.range(..=v).next_back().map(|(_, c)| c)
    }
}

fn version_of(name: &str) -> Option<u64> {
    let digits = name.get(..20)?;
    digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse().ok())?
}

/// Parse the names under `_delta_log/` (other files are ignored).
pub fn parse_listing(log: &Path, names: impl IntoIterator<Item = String>) -> Listing {
    let mut out = Listing::default();
    let mut parts: BTreeMap<(u64, u32), BTreeMap<u32, PathBuf>> = BTreeMap::new();
    for name in names {
        let Some(v) = version_of(&name) else { continue };
        let rest = &name[20..];
        let path = log.join(&name);
        if rest == ".json" {
            out.commits.insert(v, path);
        } else if rest == ".checkpoint.parquet" {
            out.checkpoints.entry(v).or_insert(Checkpoint {
                version: v,
                files: vec![path],
            });
        } else if let Some(tail) = rest.strip_prefix(".checkpoint.") {
            let fields: Vec<&str> = tail.split('.').collect();
            match fields.as_slice() {
                [i, n, "parquet"] if i.len() == 10 && n.len() == 10 => {
                    if let (Ok(i), Ok(n)) = (i.parse::<u32>(), n.parse::<u32>()) {
                        parts.entry((v, n)).or_default().insert(i, path);
                    }
                }
                [_uuid, "json" | "parquet"] => {
                    out.checkpoints.entry(v).or_insert(Checkpoint {
                        version: v,
                        files: vec![path],
                    });
                }
                _ => {}
            }
        }
    }
    for ((v, n), got) in parts {
        if got.len() == n as usize && got.keys().copied().eq(1..=n) {
            out.checkpoints.entry(v).or_insert(Checkpoint {
                version: v,
                files: got.into_values().collect(),
            });
        }
    }
    out
}

/// A table's log, read through the connector's storage.
#[derive(Clone)]
pub struct DeltaLog {
    pub root: PathBuf,
    pub dir: PathBuf,
    storage: Storage,
    /// The last listing, which [`DeltaLog::list_new`] extends.
    last: std::sync::Arc<parking_lot::Mutex<Option<Listing>>>,
}

impl DeltaLog {
    pub fn new(storage: Storage, root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            dir: root.join("_delta_log"),
            storage,
            last: Default::default(),
        }
    }

    /// The whole log directory.
    pub fn list(&self) -> Result<Listing, SourceError> {
        let entries = self.storage.list(&self.dir).map_err(SourceError::io(&self.dir))?;
        let l = parse_listing(&self.dir, entries.into_iter().filter(|e| !e.is_dir).map(|e| e.name));
        *self.last.lock() = Some(l.clone());
        Ok(l)
    }

    /// The last listing with what was written from its newest version on (that version's own
    /// names included: a checkpoint of it may have come since), listed from there in one request
    /// however long the log grew (issue 32). Only for telling whether there is anything new: a
    /// file removed since the last whole listing (log cleanup) is still in it.
    pub fn list_new(&self) -> Result<Listing, SourceError> {
        let last = self.last.lock().clone();
        let Some((mut l, newest)) = last.and_then(|l| l.latest().map(|v| (l, v))) else {
            return self.list();
        };
        let entries = self
            .storage
            .list_after(&self.dir, &format!("{newest:020}"), |n| version_of(n).is_some())
            .map_err(SourceError::io(&self.dir))?;
        let new = parse_listing(&self.dir, entries.into_iter().map(|e| e.name));
        l.commits.extend(new.commits);
        for (v, c) in new.checkpoints {
            l.checkpoints.entry(v).or_insert(c);
        }
        *self.last.lock() = Some(l.clone());
        Ok(l)
    }

    /// One commit's actions (`NotFound` when the file is gone: log cleanup).
    pub fn commit(&self, version: u64) -> Result<Commit, SourceError> {
        let path = self.dir.join(format!("{version:020}.json"));
        let text = self.storage.read_to_string(&path).map_err(SourceError::io(&path))?;
        let mut c = Commit {
            version,
            ..Default::default()
        };
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let parsed: Line = serde_json::from_str(line)
                .map_err(|e| SourceError::format(&path, format!("line {}: not a Delta action: {e}", n + 1)))?;
            c.apply(parsed);
        }
        Ok(c)
    }

    /// Every action of a checkpoint, folded into one `Commit` (its adds are the live files);
    /// without `files`, only its metadata and protocol are read.
    pub fn checkpoint(&self, cp: &Checkpoint, files: bool) -> Result<Commit, SourceError> {
        let mut c = Commit {
            version: cp.version,
            ..Default::default()
        };
        for file in &cp.files {
            let mut sidecars = Vec::new();
            self.checkpoint_file(file, files, &mut |l: Line| {
                sidecars.extend(l.sidecar.clone());
                c.apply(l);
                Ok(())
            })?;
            for s in sidecars.into_iter().filter(|_| files) {
                let path = if s.path.contains("://") || s.path.starts_with('/') {
                    crate::storage::path_of(&s.path)
                } else {
                    self.dir.join("_sidecars").join(&s.path)
                };
                self.checkpoint_file(&path, true, &mut |l: Line| {
                    c.apply(l);
                    Ok(())
                })?;
            }
        }
        Ok(c)
    }

    fn checkpoint_file(
        &self,
        path: &Path,
        files: bool,
        f: &mut dyn FnMut(Line) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(".json") {
            let text = self.storage.read_to_string(path).map_err(SourceError::io(path))?;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                f(serde_json::from_str(line)
                    .map_err(|e| SourceError::format(path, format!("not a Delta action: {e}")))?)?;
            }
            return Ok(());
        }
        let mut builder = crate::source::parquet(&self.storage, path)?.with_batch_size(4096);
        if !files {
            let roots: Vec<usize> = builder
                .schema()
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| matches!(f.name().as_str(), "metaData" | "protocol"))
                .map(|(i, _)| i)
                .collect();
            let mask = parquet::arrow::ProjectionMask::roots(builder.parquet_schema(), roots);
            builder = builder.with_projection(mask);
        }
        let reader = builder.build().map_err(SourceError::parquet(path))?;
        for batch in reader {
            let batch = batch.map_err(SourceError::arrow(format!("reading checkpoint {}", path.display())))?;
            let mut w = arrow_json::LineDelimitedWriter::new(Vec::new());
            w.write(&batch)
                .map_err(SourceError::arrow(format!("checkpoint {} as JSON", path.display())))?;
            w.finish().map_err(SourceError::arrow("checkpoint as JSON"))?;
            let text = w.into_inner();
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                f(serde_json::from_slice(line)
                    .map_err(|e| SourceError::format(path, format!("checkpoint row is not a Delta action: {e}")))?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_finds_commits_and_complete_checkpoints_only() {
        let names = [
            "00000000000000000000.json",
            "00000000000000000001.json",
            "00000000000000000002.checkpoint.parquet",
            "00000000000000000002.json",
            "00000000000000000004.checkpoint.0000000001.0000000002.parquet",
            "00000000000000000004.checkpoint.0000000002.0000000002.parquet",
            "00000000000000000006.checkpoint.0000000001.0000000002.parquet",
            "00000000000000000007.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json",
            "00000000000000000007.crc",
            "_last_checkpoint",
        ];
        let l = parse_listing(Path::new("/t/_delta_log"), names.iter().map(|s| s.to_string()));
        assert_eq!(l.commits.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(l.checkpoints.keys().copied().collect::<Vec<_>>(), vec![2, 4, 7]);
        assert_eq!(l.checkpoints[&4].files.len(), 2);
        assert_eq!(l.checkpoint_for(5).map(|c| c.version), Some(4));
        assert_eq!(l.checkpoint_for(1), None);
        assert_eq!(l.latest(), Some(7));
    }

    #[test]
    fn a_line_of_each_action_parses() {
        let mut c = Commit::default();
        for l in [
            r#"{"commitInfo":{"timestamp":1700000000000,"operation":"DELETE","inCommitTimestamp":1700000000005}}"#,
            r#"{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}"#,
            r#"{"metaData":{"id":"x","format":{"provider":"parquet"},"schemaString":"{}","partitionColumns":["p"],"configuration":{"delta.enableChangeDataFeed":"true"}}}"#,
            r#"{"add":{"path":"p=a/f1.parquet","partitionValues":{"p":"a"},"size":10,"modificationTime":1,"dataChange":true,"deletionVector":{"storageType":"u","pathOrInlineDv":"ab^-aqEH.-t@S}K{vb[*k^","offset":1,"sizeInBytes":36,"cardinality":2}}}"#,
            r#"{"remove":{"path":"p=a/f1.parquet","dataChange":true}}"#,
            r#"{"cdc":{"path":"_change_data/c1.parquet","partitionValues":{"p":null},"size":5,"dataChange":false}}"#,
            r#"{"txn":{"appId":"a","version":1}}"#,
        ] {
            c.apply(serde_json::from_str(l).expect("parses"));
        }
        assert_eq!(c.timestamp, 1700000000005);
        assert_eq!(c.operation.as_deref(), Some("DELETE"));
        assert_eq!(c.adds[0].id().1, "uab^-aqEH.-t@S}K{vb[*k^@1");
        assert_eq!(c.removes[0].id().1, "");
        assert_eq!(c.cdcs[0].partition_values.as_ref().and_then(|p| p["p"].clone()), None);
        assert_eq!(
            c.metadata
                .as_ref()
                .and_then(|m| m.setting("delta.enableChangeDataFeed")),
            Some("true")
        );
        assert_eq!(c.protocol.map(|p| p.min_reader_version), Some(3));
    }
}
