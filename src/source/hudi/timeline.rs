//! The Hudi table config (`hoodie.properties`) and active timeline, both layouts:
//! layout 1 (table version 6: `.hoodie/<instant>.<action>`, JSON commit metadata, no completion
//! times) and layout 2 (table versions 8/9: `.hoodie/timeline/<requested>_<completion>.<action>`,
//! Avro commit metadata, ordered by completion time).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::source::SourceError;
use crate::storage::Storage;

/// A timeline action, as Hudi names it in instant file names and archived entries. A name not
/// here (say `schemacommit`) is no action of the connector's: its instants are not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Commit,
    DeltaCommit,
    ReplaceCommit,
    Rollback,
    Clean,
    Savepoint,
    Restore,
    Indexing,
    Compaction,
    LogCompaction,
    Clustering,
}

impl Action {
    const ALL: [Action; 11] = [
        Action::Commit,
        Action::DeltaCommit,
        Action::ReplaceCommit,
        Action::Rollback,
        Action::Clean,
        Action::Savepoint,
        Action::Restore,
        Action::Indexing,
        Action::Compaction,
        Action::LogCompaction,
        Action::Clustering,
    ];

    /// Hudi's name.
    pub fn name(self) -> &'static str {
        match self {
            Action::Commit => "commit",
            Action::DeltaCommit => "deltacommit",
            Action::ReplaceCommit => "replacecommit",
            Action::Rollback => "rollback",
            Action::Clean => "clean",
            Action::Savepoint => "savepoint",
            Action::Restore => "restore",
            Action::Indexing => "indexing",
            Action::Compaction => "compaction",
            Action::LogCompaction => "logcompaction",
            Action::Clustering => "clustering",
        }
    }

    /// The action of Hudi's name `name`.
    pub fn named(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }

    /// A completed action that may change data.
    pub fn is_write(self) -> bool {
        matches!(self, Action::Commit | Action::DeltaCommit | Action::ReplaceCommit)
    }

    /// A completed action that takes committed data back.
    pub fn rewinds(self) -> bool {
        matches!(self, Action::Restore | Action::Rollback)
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `hoodie.table.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableType {
    CopyOnWrite,
    MergeOnRead,
}

impl TableType {
    /// `hoodie.table.type` of `hoodie.properties` (`file`): a value Hudi does not write is damage,
    /// not a copy-on-write table.
    fn of(props: &HashMap<String, String>, file: &Path) -> Result<TableType, SourceError> {
        match props.get("hoodie.table.type").map(|t| t.trim()) {
            Some("MERGE_ON_READ") => Ok(TableType::MergeOnRead),
            Some("COPY_ON_WRITE") => Ok(TableType::CopyOnWrite),
            other => Err(SourceError::format(
                file,
                format!(
                    "hoodie.table.type is `{}`, neither COPY_ON_WRITE nor MERGE_ON_READ (the file is damaged); \
                     restore it from the writer's storage or a backup",
                    other.unwrap_or_default()
                ),
            )),
        }
    }

    /// Hudi's name (`COPY_ON_WRITE`, `MERGE_ON_READ`).
    pub fn name(self) -> &'static str {
        match self {
            TableType::CopyOnWrite => "COPY_ON_WRITE",
            TableType::MergeOnRead => "MERGE_ON_READ",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TableConfig {
    pub path: PathBuf,
    pub name: String,
    pub version: u32,
    pub layout: u32,
    pub table_type: TableType,
    pub key_fields: Vec<String>,
    pub timeline_dir: PathBuf,
    pub props: HashMap<String, String>,
    /// The connector's storage, which every read of the table goes through.
    pub storage: Storage,
}

impl TableConfig {
    pub fn load(storage: Storage, path: &Path) -> Result<Self, SourceError> {
        let file = path.join(".hoodie").join("hoodie.properties");
        let f = storage.read(&file).map_err(|e| SourceError::Unreadable {
            why: crate::source::Unreadable::NotATable,
            message: format!(
                "{}: not a Hudi table (cannot open {}: {e})",
                path.display(),
                file.display()
            ),
        })?;
        let props = java_properties::read(std::io::BufReader::new(&f[..]))
            .map_err(|e| SourceError::format(&file, e.to_string()))?;
        // every Hudi writer records these: a file without them is damaged (truncated), and
        // defaults would silently change the key or the table type
        let missing: Vec<&str> = ["hoodie.table.name", "hoodie.table.type", "hoodie.table.version"]
            .into_iter()
            .filter(|k| !props.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            return Err(SourceError::format(
                &file,
                format!(
                    "missing {} (the file is damaged or truncated); restore it from the writer's storage or a backup",
                    missing.join(", ")
                ),
            ));
        }
        let version: u32 = props
            .get("hoodie.table.version")
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| SourceError::format(&file, "hoodie.table.version is not a number"))?;
        let layout: u32 = props
            .get("hoodie.timeline.layout.version")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if version >= 8 { 2 } else { 1 });
        let timeline_dir = if layout >= 2 {
            path.join(".hoodie").join(
                props
                    .get("hoodie.timeline.path")
                    .map(String::as_str)
                    .unwrap_or("timeline"),
            )
        } else {
            path.join(".hoodie")
        };
        let table_type = TableType::of(&props, &file)?;
        let key_fields = props
            .get("hoodie.table.recordkey.fields")
            .map(|s| {
                s.split(',')
                    .map(|f| f.trim().to_string())
                    .filter(|f| !f.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            path: path.to_path_buf(),
            name: props
                .get("hoodie.table.name")
                .cloned()
                .unwrap_or_else(|| "table".into()),
            version,
            layout,
            table_type,
            key_fields,
            timeline_dir,
            props,
            storage,
        })
    }

    /// `hoodie.table.partition.fields` (Hudi 1.x writes `field:type` for the custom key generator).
    pub fn partition_fields(&self) -> Vec<String> {
        let raw = self
            .props
            .get("hoodie.table.partition.fields")
            .map(String::as_str)
            .unwrap_or("");
        raw.split(',')
            .map(|f| f.split(':').next().unwrap_or("").trim().to_string())
            .filter(|f| !f.is_empty())
            .collect()
    }

    /// Where the table says a record key is unique across partitions: the index type its writer
    /// recorded (`hoodie.index.type` GLOBAL_*, RECORD_INDEX, HBASE) or a record index in its
    /// metadata table (`hoodie.table.metadata.partitions`). `None`: Hudi's default indexes
    /// (SIMPLE, BLOOM, BUCKET) are per partition.
    pub fn global_index(&self) -> Option<String> {
        if let Some(t) = self
            .props
            .get("hoodie.index.type")
            .map(|t| t.trim().to_ascii_uppercase())
        {
            if t.starts_with("GLOBAL_") || t == "RECORD_INDEX" || t == "HBASE" {
                return Some(format!("hoodie.index.type={t}"));
            }
            return None;
        }
        let mdt = self
            .props
            .get("hoodie.table.metadata.partitions")
            .map(String::as_str)
            .unwrap_or("");
        mdt.split(',')
            .any(|p| p.trim() == "record_index")
            .then(|| "record index in the metadata table".to_string())
    }

    pub fn is_mor(&self) -> bool {
        self.table_type == TableType::MergeOnRead
    }
}

/// Where an instant's metadata lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaSource {
    /// The completed instant file on the active timeline.
    File(PathBuf),
    /// Commit metadata bytes from the archived timeline (table versions 8/9).
    Archived(std::sync::Arc<[u8]>),
    /// Commit metadata decoded from a version-6 archive entry.
    Json(std::sync::Arc<serde_json::Value>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant {
    pub requested: String,
    pub completed: Option<String>,
    pub action: Action,
    pub meta: MetaSource,
}

impl Instant {
    pub fn order_key(&self) -> &str {
        self.completed.as_deref().unwrap_or(&self.requested)
    }
    pub fn is_write(&self) -> bool {
        self.action.is_write()
    }
}

#[derive(Debug, Default)]
pub struct Timeline {
    /// Completed instants in timeline order.
    pub completed: Vec<Instant>,
    /// Requested times of instants that are requested or inflight only.
    pub pending: HashSet<String>,
    by_requested: HashMap<String, usize>,
    /// Smallest requested time on the active timeline; earlier instants are archived.
    first_active: Option<String>,
}

impl Timeline {
    pub fn load(table: &TableConfig) -> Result<Self, SourceError> {
        let dir = &table.timeline_dir;
        let entries = table.storage.list(dir).map_err(SourceError::io(dir))?;
        let mut completed = Vec::new();
        let mut seen_states: BTreeMap<String, bool> = BTreeMap::new(); // requested -> has completed file
        for e in entries {
            let name = e.name.clone();
            let Some(parsed) = parse_name(&name, table.layout) else {
                continue;
            };
            match parsed {
                Parsed::Completed {
                    requested,
                    completed: c,
                    action,
                } => {
                    seen_states.insert(requested.clone(), true);
                    completed.push(Instant {
                        requested,
                        completed: c,
                        action,
                        meta: MetaSource::File(e.path.clone()),
                    });
                }
                Parsed::Pending { requested } => {
                    seen_states.entry(requested).or_insert(false);
                }
            }
        }
        completed.sort_by(|a, b| a.order_key().cmp(b.order_key()).then(a.requested.cmp(&b.requested)));
        let by_requested = completed
            .iter()
            .enumerate()
            .map(|(i, x)| (x.requested.clone(), i))
            .collect();
        let pending = seen_states
            .iter()
            .filter(|(_, c)| !**c)
            .map(|(r, _)| r.clone())
            .collect();
        let first_active = seen_states.keys().next().cloned();
        Ok(Self {
            completed,
            pending,
            by_requested,
            first_active,
        })
    }

    /// The oldest instant's requested time (any state) on the timeline.
    pub fn first_active(&self) -> Option<&str> {
        self.first_active.as_deref()
    }

    /// Add archived instants (those not also on the active timeline), keeping timeline order.
    pub fn with_archived(mut self, archived: Vec<Instant>) -> Self {
        if archived.is_empty() {
            return self;
        }
        if let Some(first) = archived.iter().map(|i| i.requested.clone()).min() {
            if self.first_active.as_ref().is_none_or(|f| first < *f) {
                self.first_active = Some(first);
            }
        }
        for i in archived {
            if !self.by_requested.contains_key(&i.requested) && !self.pending.contains(&i.requested) {
                self.completed.push(i);
            }
        }
        self.completed
            .sort_by(|a, b| a.order_key().cmp(b.order_key()).then(a.requested.cmp(&b.requested)));
        self.by_requested = self
            .completed
            .iter()
            .enumerate()
            .map(|(i, x)| (x.requested.clone(), i))
            .collect();
        self
    }

    pub fn get(&self, requested: &str) -> Option<&Instant> {
        self.by_requested.get(requested).map(|i| &self.completed[*i])
    }

    /// The timeline order key of a file's instant when that instant is completed: its completion
    /// time on the active timeline, or its own time when it predates the active timeline
    /// (archived instants were completed). `None`: pending, rolled back or unknown.
    pub fn completed_order(&self, requested: &str) -> Option<String> {
        if let Some(i) = self.get(requested) {
            return Some(i.order_key().to_string());
        }
        match &self.first_active {
            Some(first) if requested < first.as_str() && !self.pending.contains(requested) => Some(requested.into()),
            _ => None,
        }
    }

    pub fn latest(&self) -> Option<&Instant> {
        self.completed.last()
    }
}

enum Parsed {
    Completed {
        requested: String,
        completed: Option<String>,
        action: Action,
    },
    Pending {
        requested: String,
    },
}

fn is_ts(s: &str) -> bool {
    s.len() >= 14 && s.bytes().all(|b| b.is_ascii_digit())
}

fn parse_name(name: &str, layout: u32) -> Option<Parsed> {
    let mut parts = name.split('.');
    let head = parts.next()?;
    let rest: Vec<&str> = parts.collect();
    let (requested, completed) = match head.split_once('_') {
        Some((r, c)) if layout >= 2 && is_ts(r) && is_ts(c) => (r.to_string(), Some(c.to_string())),
        _ if is_ts(head) => (head.to_string(), None),
        _ => return None,
    };
    match rest.as_slice() {
        [action] if *action == "inflight" => Some(Parsed::Pending { requested }),
        [name] if Action::named(name).is_some() => {
            if layout >= 2 && completed.is_none() {
                // layout 2 names completed instants `<requested>_<completion>.<action>`
                return Some(Parsed::Pending { requested });
            }
            Some(Parsed::Completed {
                requested,
                completed,
                action: Action::named(name)?,
            })
        }
        [_, state] if *state == "requested" || *state == "inflight" => Some(Parsed::Pending { requested }),
        _ => None,
    }
}

mod commit;
pub use commit::{cleaned_by, columns, partitions_written, retained_from, CommitMetadata, WriteStat};

/// Epoch millis of an instant time `yyyyMMddHHmmss[SSS]` read as UTC.
pub fn instant_millis(ts: &str) -> Option<i64> {
    let fmt = if ts.len() >= 17 {
        "%Y%m%d%H%M%S%3f"
    } else {
        "%Y%m%d%H%M%S"
    };
    let t = chrono::NaiveDateTime::parse_from_str(&ts[..ts.len().min(17)], fmt).ok()?;
    Some(t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests;
