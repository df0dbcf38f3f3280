//! Table discovery (issue 61): the tables a catalog holds ([`catalog`]), or those under a
//! `table.path.prefix`, found by listing — a directory holding `.hoodie/` (with its `hoodie.properties`) is a Hudi table,
//! `_delta_log/` (with a commit or checkpoint in it) a Delta table, and a `metadata/` directory
//! with an Iceberg metadata file (`*.metadata.json`, or `version-hint.text`) an Iceberg table; a
//! table still being created (its marker directory there, its first file not yet) is found at a
//! later search. A table is never descended into; directories whose names begin with `.` or `_`,
//! or that look like Hive partitions (`k=v`), are not searched.
//!
//! Cost: each directory searched is listed once (a delimiter listing on object stores), and a
//! table the last search confirmed is not looked into again ([`Known`]): a search of a prefix
//! whose tables are known costs 1 + (namespace directories) listings, whatever the number of
//! tables; a new table one listing and one request to confirm it. The requests are counted in
//! `lakestream_storage_requests_total` under the connector's name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::config::{ConnectorKind, Discovery, Found, Search};
use crate::storage::{Entry, Storage};

use super::iceberg::rest::RestSession;
use super::SourceError;

mod catalog;

/// The tables earlier searches confirmed, by root: found again by their directory alone.
type Known = HashMap<PathBuf, ConnectorKind>;

/// What a connector's searches keep from one to the next: the tables a prefix's last search
/// confirmed, a REST catalog's session (its token, its routes' prefix).
#[derive(Default)]
pub struct Searcher {
    known: Known,
    rest: RestSession,
}

impl Searcher {
    /// Every table the connector's search finds now, in name order.
    pub fn search(&mut self, d: &Discovery, storage: &Storage) -> Result<Vec<Found>, SourceError> {
        match &d.search {
            Search::Prefix { prefix, depth } => under_prefix(prefix, *depth, storage, &mut self.known),
            Search::Catalog { catalog, depth } => catalog::tables(catalog, *depth, storage, &self.rest),
        }
    }

    /// Whether a table found before is still there (looked for again): to tell a table dropped
    /// from one that failed. A catalog that cannot be asked says it is (its failure is then the
    /// member's, loud).
    pub fn exists(&self, d: &Discovery, found: &Found, storage: &Storage) -> bool {
        match (&d.search, &found.path) {
            (Search::Prefix { .. }, Some(path)) => {
                let children = list_dirs(storage, path).unwrap_or_default();
                matches!(table_kind(storage, path, &children), Ok(Some(k)) if k == found.kind)
            }
            (Search::Prefix { .. }, None) => true,
            (Search::Catalog { catalog, depth }, _) => catalog::tables(catalog, *depth, storage, &self.rest)
                .map(|all| {
                    all.iter()
                        .any(|f| f.kind == found.kind && f.qualified() == found.qualified())
                })
                .unwrap_or(true),
        }
    }
}

/// Every table under the prefix, at most `depth` directories down, in path order. `known` holds
/// the tables confirmed before and gains those confirmed now; a table no longer listed leaves it.
fn under_prefix(prefix: &Path, depth: u32, storage: &Storage, known: &mut Known) -> Result<Vec<Found>, SourceError> {
    let mut out = Vec::new();
    let top = list_dirs(storage, prefix)?;
    walk(storage, top, &mut Vec::new(), depth, known, &mut out)?;
    known.retain(|p, _| out.iter().any(|f| f.path.as_deref() == Some(p.as_path())));
    Ok(out)
}

fn list_dirs(storage: &Storage, dir: &Path) -> Result<Vec<Entry>, SourceError> {
    let mut dirs: Vec<Entry> = storage
        .list(dir)
        .map_err(SourceError::io(dir))?
        .into_iter()
        .filter(|e| e.is_dir)
        .collect();
    dirs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(dirs)
}

/// The tables among `dirs` (a directory's subdirectories) and below them.
fn walk(
    storage: &Storage,
    dirs: Vec<Entry>,
    ns: &mut Vec<String>,
    depth: u32,
    known: &mut Known,
    out: &mut Vec<Found>,
) -> Result<(), SourceError> {
    for e in dirs {
        if e.name.starts_with(['.', '_']) || e.name.contains('=') {
            continue;
        }
        let (kind, children) = match known.get(&e.path) {
            Some(k) => (Some(*k), Vec::new()),
            None => {
                let children = list_dirs(storage, &e.path)?;
                (table_kind(storage, &e.path, &children)?, children)
            }
        };
        match kind {
            Some(kind) => {
                known.insert(e.path.clone(), kind);
                out.push(Found {
                    kind,
                    namespace: if ns.is_empty() {
                        vec!["default".into()]
                    } else {
                        ns.clone()
                    },
                    table: e.name.clone(),
                    path: Some(e.path.clone()),
                });
            }
            None if depth > 1 => {
                ns.push(e.name.strip_suffix(".db").unwrap_or(&e.name).to_string());
                walk(storage, children, ns, depth - 1, known, out)?;
                ns.pop();
            }
            None => {}
        }
    }
    Ok(())
}

/// The format of the table rooted at `dir` (whose subdirectories are `children`), if it is one
/// whose first file is written.
fn table_kind(storage: &Storage, dir: &Path, children: &[Entry]) -> Result<Option<ConnectorKind>, SourceError> {
    let has = |n: &str| children.iter().any(|c| c.name == n);
    if has(".hoodie") {
        let props = dir.join(".hoodie").join("hoodie.properties");
        return Ok(storage.exists(&props).then_some(ConnectorKind::Hudi));
    }
    if has("_delta_log") {
        // the first name after "0": a commit or checkpoint (`.tmp` files sort before it); one
        // request however long the log
        let log = dir.join("_delta_log");
        let first = std::sync::atomic::AtomicBool::new(true);
        let names = storage
            .list_after(&log, "0", move |_| {
                first.swap(false, std::sync::atomic::Ordering::Relaxed)
            })
            .map_err(SourceError::io(&log))?;
        let versioned = names
            .iter()
            .any(|f| f.name.len() > 20 && f.name[..20].bytes().all(|b| b.is_ascii_digit()));
        return Ok(versioned.then_some(ConnectorKind::Delta));
    }
    if has("metadata") {
        let meta = dir.join("metadata");
        let files = storage.list(&meta).map_err(SourceError::io(&meta))?;
        let iceberg = files
            .iter()
            .any(|f| !f.is_dir && (f.name.ends_with(".metadata.json") || f.name == "version-hint.text"));
        return Ok(iceberg.then_some(ConnectorKind::Iceberg));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkdirs(root: &Path, dirs: &[&str]) {
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
    }

    #[test]
    fn finds_each_format_names_namespaces_and_never_descends_into_a_table() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        mkdirs(
            root,
            &[
                "orders/.hoodie",
                "orders/inner/_delta_log", // inside a table: never looked at
                "sales.db/items/_delta_log",
                "sales.db/events/metadata",
                "sales.db/notyet/metadata", // no metadata file: not a table
                "a/b/c/deep/_delta_log",    // deeper than depth 3
                "_tmp/x/.hoodie",
                "dt=2024/y/.hoodie",
            ],
        );
        std::fs::write(root.join("sales.db/events/metadata/v1.metadata.json"), "{}").unwrap();
        std::fs::write(root.join("orders/.hoodie/hoodie.properties"), "").unwrap();
        std::fs::write(root.join("sales.db/items/_delta_log/00000000000000000000.json"), "").unwrap();
        std::fs::write(root.join("a/b/c/deep/_delta_log/00000000000000000000.json"), "").unwrap();
        // a table being created: found once its first commit is there
        std::fs::create_dir_all(root.join("sales.db/new/_delta_log")).unwrap();
        std::fs::write(root.join("sales.db/new/_delta_log/.00000000000000000000.json.tmp"), "").unwrap();
        let d = discovery(root, 3);
        let mut searcher = Searcher::default();
        let found = searcher.search(&d, &Storage::new(Default::default())).unwrap();
        let got: Vec<(ConnectorKind, String)> = found.iter().map(|f| (f.kind, f.qualified())).collect();
        assert_eq!(
            got,
            vec![
                (ConnectorKind::Hudi, "default.orders".to_string()),
                (ConnectorKind::Iceberg, "sales.events".to_string()),
                (ConnectorKind::Delta, "sales.items".to_string()),
            ]
        );
        assert_eq!(searcher.known.len(), 3);
        // known tables are not looked into again
        let counter = prometheus::IntCounter::new("requests", "storage requests").unwrap();
        let c = counter.clone();
        let counted = Storage::with_requests(
            Default::default(),
            crate::storage::requests::Requests::new(move |_| c.clone()),
        );
        std::fs::write(root.join("sales.db/new/_delta_log/00000000000000000000.json"), "").unwrap();
        let again = searcher.search(&d, &counted).unwrap();
        assert_eq!(again.len(), 4, "{again:?}");
        // the prefix, sales.db, new (+ its log), notyet (+ its metadata, and that searched as a
        // directory), a, a/b, a/b/c: no known table is listed
        assert_eq!(counter.get(), 10);
        assert!(searcher.exists(&d, &found[0], &Storage::new(Default::default())));
        std::fs::remove_dir_all(root.join("orders")).unwrap();
        assert!(!searcher.exists(&d, &found[0], &Storage::new(Default::default())));
        let left = searcher.search(&d, &Storage::new(Default::default())).unwrap();
        assert_eq!(left.len(), 3);
        assert!(!searcher.known.contains_key(&root.join("orders")));
        let deeper = Searcher::default()
            .search(&discovery(root, 4), &Storage::new(Default::default()))
            .unwrap();
        assert!(deeper.iter().any(|f| f.qualified() == "a.b.c.deep"), "{deeper:?}");
    }

    fn discovery(root: &Path, depth: u32) -> Discovery {
        let file = root.join("c.properties");
        std::fs::write(
            &file,
            format!(
                "name=lake\ntable.path.prefix={}\ntopic.prefix=p\nbootstrap.servers=k:9092\nschema.registry.url=http://r\n\
                 table.discovery.depth={depth}\n",
                root.display()
            ),
        )
        .unwrap();
        match crate::config::load_file(&file, 0).unwrap() {
            crate::config::Loaded::Tables(t) => t.discovery.clone(),
            crate::config::Loaded::Table(_) => panic!("a discovering file"),
        }
    }
}
