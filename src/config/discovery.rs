//! A connector that streams every table it discovers (issue 61): `table.path.prefix` (tables found
//! by listing storage) or `catalog.type` with its catalog's keys and no `table.identifier` (the
//! tables an Iceberg REST or SQL catalog holds, or the Iceberg, Hudi and Delta tables of an AWS
//! Glue catalog) names where tables are looked for, `table.include.list` / `table.exclude.list`
//! (Debezium's names: comma-separated regular expressions, each matching a whole
//! `namespace.table`) which of them are streamed, and `topic.prefix` where each one's events go
//! (Debezium's rule: `<topic.prefix>.<namespace>.<table>`). A file with `table.path.prefix` or
//! `topic.prefix` is a discovering one.
//!
//! The rest of the file is a template: each table found becomes a **member**, the connector file
//! that table would have had — the same keys, less the ones its format does not take, plus its
//! `connector.class`, `table.path` (or, for an Iceberg table a catalog names,
//! `table.identifier`), `topic` and the member's name `<name>/<namespace>.<table>`,
//! which keeps its offsets records, transactional ids, placement, status and metric series its
//! own — loaded by the very code that loads a file. Nothing here does I/O: finding tables is the
//! source's (`source::discover`), running members the runtime's. A file is read here
//! ([`load_file`]), which tells the two kinds apart and hands a file of one table to `load`.

use std::path::PathBuf;
use std::time::Duration;

use super::load::load_props;
use super::values::Validator;
use super::{keys, Catalog, ConfigError, ConnectorConfig, ConnectorKind, Properties};

/// The keys that make a connector discover its tables, and that no member keeps.
pub const DISCOVERY_KEYS: &[&str] = &[
    "table.path.prefix",
    "table.include.list",
    "table.exclude.list",
    "topic.prefix",
    "table.discovery.interval",
    "table.discovery.depth",
];

/// Keys that name one table: a discovering connector names none.
const ONE_TABLE_KEYS: &[&str] = &["table.path", "topic", "table.identifier"];

/// Where tables are looked for.
#[derive(Debug, Clone)]
pub enum Search {
    /// `table.path.prefix`: the directory (or object-store prefix) listed, `table.discovery.depth`
    /// directory levels down.
    Prefix { prefix: PathBuf, depth: u32 },
    /// `catalog.type`: the tables of a catalog, `depth` namespace levels down (a REST catalog's
    /// nested namespaces; Glue and SQL catalogs have one level).
    Catalog { catalog: Catalog, depth: u32 },
}

impl Search {
    /// Where, for logs and `validate`: the prefix, or the catalog.
    pub fn describe(&self) -> String {
        match self {
            Search::Prefix { prefix, .. } => prefix.display().to_string(),
            Search::Catalog { catalog, .. } => catalog.summary(),
        }
    }
}

/// Where tables are looked for and which are streamed.
#[derive(Debug, Clone)]
pub struct Discovery {
    pub search: Search,
    /// `table.discovery.interval`: how often tables are looked for again.
    pub interval: Duration,
    include: Option<regex::Regex>,
    exclude: Option<regex::Regex>,
    /// `connector.class`, where set: only tables of this format.
    pub only: Option<ConnectorKind>,
    topic_prefix: String,
}

/// A table discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: ConnectorKind,
    /// The directories between the prefix and the table (a Spark warehouse's `.db` dropped), or
    /// `default` for a table directly under the prefix.
    pub namespace: Vec<String>,
    pub table: String,
    /// The table's root (where `.hoodie/`, `_delta_log/` or `metadata/` is); `None` for an
    /// Iceberg table its catalog names (its member takes `table.identifier`, the catalog's keys).
    pub path: Option<PathBuf>,
}

impl Found {
    /// `namespace.table`, the name the include and exclude lists match.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.namespace.join("."), self.table)
    }
}

/// A discovering connector, as loaded: its name, where it looks, and the template its members
/// are derived from.
#[derive(Clone)]
pub struct TablesConfig {
    pub file: PathBuf,
    pub name: String,
    pub discovery: Discovery,
    /// Object-store settings for the prefix (the members' own, too).
    pub storage: crate::storage::StorageOptions,
    /// `metrics.port`, where set.
    pub metrics_port: Option<u16>,
    props: Properties,
    task_id: u32,
}

impl std::fmt::Debug for TablesConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TablesConfig")
            .field("name", &self.name)
            .field("file", &self.file)
            .field("search", &self.discovery.search)
            .finish_non_exhaustive()
    }
}

/// What one round of discovery means for a connector: the members to stream, and the tables
/// found but not streamed, with why.
#[derive(Debug, Default)]
pub struct View {
    pub members: Vec<ConnectorConfig>,
    /// (table, reason): another format than `connector.class`, a topic that collides, a member
    /// the template cannot be made into.
    pub skipped: Vec<(String, String)>,
    /// Tables the include or exclude list leaves out.
    pub excluded: usize,
}

/// A connector file, loaded: one table, or a connector that discovers its tables.
pub enum Loaded {
    Table(Box<ConnectorConfig>),
    Tables(Box<TablesConfig>),
}

/// Parse and validate one connector file. `task_id` comes from the command line / `TASK_ID`.
pub fn load_file(file: &std::path::Path, task_id: u32) -> Result<Loaded, ConfigError> {
    let props = Properties::load(file)?;
    if ["table.path.prefix", "topic.prefix"]
        .iter()
        .any(|k| props.entries.contains_key(*k))
    {
        return load(props, task_id).map(|t| Loaded::Tables(Box::new(t)));
    }
    if let Some((k, (_, line))) = props.entries.iter().find(|(k, _)| DISCOVERY_KEYS.contains(&k.as_str())) {
        return Err(ConfigError::Invalid {
            file: props.file.clone(),
            line: *line,
            key: k.clone(),
            message: "is a setting of table discovery; set topic.prefix and table.path.prefix (or catalog.type) \
                      too, or remove it"
                .into(),
        });
    }
    load_props(props, task_id).map(|c| Loaded::Table(Box::new(c)))
}

/// [`load_file`] of a file that names one table (a discovering file is refused, naming the key).
pub fn load_connector(file: &std::path::Path, task_id: u32) -> Result<ConnectorConfig, ConfigError> {
    match load_file(file, task_id)? {
        Loaded::Table(c) => Ok(*c),
        Loaded::Tables(t) => Err(ConfigError::Invalid {
            file: t.file.clone(),
            line: t.props.entries.get("topic.prefix").map(|(_, l)| *l).unwrap_or(0),
            key: "topic.prefix".into(),
            message: "this command takes a connector of one table".into(),
        }),
    }
}

/// The discovery settings of a file that has `table.path.prefix` or `topic.prefix`; the template checked by
/// deriving a member of each format it may find (so a value wrong for every table stops the start
/// with exit 2, naming its line, rather than skipping every table; a key only some tables need,
/// such as Delta's `key.fields`, skips the tables that lack it).
fn load(props: Properties, task_id: u32) -> Result<TablesConfig, ConfigError> {
    super::load::known_keys(&props)?;
    let v = Validator { props: &props };
    refuse_one_table_keys(&v)?;
    let name = v.required("name", "the connector's unique name")?;
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '/') {
        return Err(v.invalid(
            "name",
            "must be non-empty and contain no whitespace or `/` (a discovered table's stream is named `<name>/<namespace>.<table>`)"
                .into(),
        ));
    }
    let only = match v.get("connector.class") {
        Some(_) => Some(super::load::connector_class(&v)?),
        None => None,
    };
    if let Some(kind) = only {
        // one format only: a key of another is a mistake, as in a file of one table (a catalog's
        // keys say where Hudi and Delta tables are found, too)
        if let Some((k, why)) = keys::foreign_key(kind, |k| !k.starts_with("catalog.") && v.get(k).is_some()) {
            return Err(v.invalid(k, why));
        }
    }
    let search = search(&v, only)?;
    let (include, exclude) = (
        super::load::regex_list(&v, "table.include.list")?,
        super::load::regex_list(&v, "table.exclude.list")?,
    );
    if include.is_some() && exclude.is_some() {
        return Err(v.invalid(
            "table.exclude.list",
            "set with table.include.list: use one of the two (as Debezium)".into(),
        ));
    }
    let topic_prefix = v.required(
        "topic.prefix",
        "each discovered table's topic is `<topic.prefix>.<namespace>.<table>`",
    )?;
    super::checks::topic_name(&v, "topic.prefix", topic_prefix.clone())?;
    let discovery = Discovery {
        search,
        interval: v.duration_or("table.discovery.interval", Duration::from_secs(60))?,
        include,
        exclude,
        only,
        topic_prefix,
    };
    let storage = super::load::storage(&v)?;
    let metrics_port = v
        .get("metrics.port")
        .map(|_| v.u64_in("metrics.port", 0, 1..=65_535))
        .transpose()?
        .map(|p| p as u16);
    let t = TablesConfig {
        file: props.file.clone(),
        name,
        discovery,
        storage,
        metrics_port,
        props,
        task_id,
    };
    t.probe_members()?;
    Ok(t)
}

/// Keys that name one table (its location, its topic): refused in a discovering file, as is
/// `verify.interval` (not yet with discovery).
fn refuse_one_table_keys(v: &Validator<'_>) -> Result<(), ConfigError> {
    for key in ONE_TABLE_KEYS {
        if v.get(key).is_some() {
            return Err(v.invalid(
                key,
                "a connector that discovers its tables (topic.prefix) names no table: each found table's \
                 location and topic are derived; remove it (or topic.prefix, for a connector of one table)"
                    .into(),
            ));
        }
    }
    if v.get("verify.interval").is_some() {
        return Err(v.invalid(
            "verify.interval",
            "not yet with table discovery: run `lakestream verify` on a discovered table's own settings \
             (`lakestream validate` prints them)"
                .into(),
        ));
    }
    Ok(())
}

impl TablesConfig {
    /// The template checked by deriving a member of each format the search may find: a value
    /// wrong for every table stops the start (exit 2); a key only some tables need is left to them.
    fn probe_members(&self) -> Result<(), ConfigError> {
        for kind in self.formats() {
            if self.discovery.only.is_none_or(|o| o == kind) {
                // a member of each format the search may find; any existing directory stands in for
                // a table's (its files are not read here)
                let path = match &self.discovery.search {
                    Search::Prefix { prefix, .. } => Some(prefix.clone()),
                    Search::Catalog { .. } if kind == ConnectorKind::Iceberg => None,
                    Search::Catalog { .. } => Some(std::env::temp_dir()),
                };
                let probe = Found {
                    kind,
                    namespace: vec!["default".into()],
                    table: "probe".into(),
                    path,
                };
                match self.member(&probe) {
                    // a key some tables need (Delta's key.fields): those tables are skipped, saying so
                    Ok(_) | Err(ConfigError::Missing { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// Where a discovering connector looks: `table.path.prefix`, or the catalog `catalog.type` names
/// (its keys as for one Iceberg table, less `table.identifier`).
fn search(v: &Validator<'_>, only: Option<ConnectorKind>) -> Result<Search, ConfigError> {
    let catalog = super::iceberg::catalog(v)?;
    let depth = |default| v.u64_in("table.discovery.depth", default, 1..=16).map(|d| d as u32);
    match (v.get("table.path.prefix"), catalog) {
        (Some(_), Some(c)) => Err(v.invalid(
            "catalog.type",
            format!(
                "`{}` with table.path.prefix: tables are looked for under a prefix or in a catalog; remove one",
                c.kind()
            ),
        )),
        (Some(raw), None) => Ok(Search::Prefix {
            prefix: super::load::parse_table_path(&raw).map_err(|m| v.invalid("table.path.prefix", m))?,
            depth: depth(3)?,
        }),
        (None, Some(c)) => {
            if let Some(kind) = only.filter(|k| *k != ConnectorKind::Iceberg && !matches!(c, Catalog::Glue(_))) {
                return Err(v.invalid(
                    "connector.class",
                    format!(
                        "`{}`: a {} catalog holds Iceberg tables only (Glue holds Hudi and Delta tables too)",
                        kind.name(),
                        c.kind()
                    ),
                ));
            }
            if matches!(c, Catalog::Glue(_) | Catalog::Sql { .. }) && v.get("table.discovery.depth").is_some() {
                return Err(v.invalid(
                    "table.discovery.depth",
                    format!("a {} catalog's namespaces have one level; remove it", c.kind()),
                ));
            }
            Ok(Search::Catalog {
                catalog: c,
                depth: depth(1)?,
            })
        }
        (None, None) => Err(v.invalid(
            "topic.prefix",
            "set with neither table.path.prefix (tables under a prefix) nor catalog.type=rest, glue or sql (the \
             tables of a catalog): say where tables are looked for"
                .into(),
        )),
    }
}

impl TablesConfig {
    /// The formats its search may find: a REST or SQL catalog holds Iceberg tables only.
    fn formats(&self) -> Vec<ConnectorKind> {
        match &self.discovery.search {
            Search::Catalog {
                catalog: Catalog::Rest(_) | Catalog::Sql { .. },
                ..
            } => vec![ConnectorKind::Iceberg],
            _ => vec![ConnectorKind::Hudi, ConnectorKind::Iceberg, ConnectorKind::Delta],
        }
    }

    /// Whether the include and exclude lists stream a table.
    pub fn streams(&self, qualified: &str) -> bool {
        let d = &self.discovery;
        d.include.as_ref().is_none_or(|r| r.is_match(qualified))
            && !d.exclude.as_ref().is_some_and(|r| r.is_match(qualified))
    }

    /// A table's topic: `<topic.prefix>.<namespace>.<table>`, each character Kafka refuses
    /// replaced by `_` (Debezium's rule).
    pub fn topic_for(&self, found: &Found) -> String {
        let raw = format!("{}.{}", self.discovery.topic_prefix, found.qualified());
        raw.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The member's name: `<name>/<namespace>.<table>`.
    pub fn member_name(&self, found: &Found) -> String {
        format!("{}/{}", self.name, found.qualified())
    }

    /// The file this table would have had, loaded as one.
    pub fn member(&self, found: &Found) -> Result<ConnectorConfig, ConfigError> {
        let line = self.props.entries.get("topic.prefix").map(|(_, l)| *l).unwrap_or(0);
        let mut props = self.props.clone();
        props.entries.retain(|k, _| {
            !DISCOVERY_KEYS.contains(&k.as_str()) && keys::foreign_key(found.kind, |key| key == k).is_none()
        });
        let place = match &found.path {
            Some(p) => {
                // a table by path: a catalog's keys are not its own
                props.entries.retain(|k, _| !k.starts_with("catalog."));
                ("table.path", p.display().to_string())
            }
            None => ("table.identifier", found.qualified()),
        };
        for (k, v) in [
            ("connector.class", found.kind.name().to_string()),
            ("name", self.member_name(found)),
            place,
            ("topic", self.topic_for(found)),
        ] {
            props.entries.insert(k.into(), (v, line));
        }
        load_props(props, self.task_id)
    }

    /// The members of what discovery found: the tables the lists stream, of the format
    /// `connector.class` names, each with a topic of its own. Two tables whose topics Kafka would
    /// take for one (equal once `.` and `_` are made alike) are refused, naming both: at the
    /// first discovery (`running` is `None`) that stops the start (exit 2); later, against the
    /// members already streaming, the newcomer is skipped instead.
    pub fn view(&self, found: &[Found], running: Option<&[ConnectorConfig]>) -> Result<View, ConfigError> {
        let mut view = View::default();
        // Kafka's name for a topic → (its topic, the member writing it, whether it streams already)
        let mut topics: std::collections::BTreeMap<String, (String, String, bool)> = running
            .unwrap_or_default()
            .iter()
            .map(|m| {
                (
                    m.kafka.topic.replace('.', "_"),
                    (m.kafka.topic.clone(), m.name.clone(), true),
                )
            })
            .collect();
        let mut sorted: Vec<&Found> = found.iter().collect();
        sorted.sort_by_key(|f| f.qualified());
        for f in sorted {
            let q = f.qualified();
            if !self.streams(&q) {
                view.excluded += 1;
                continue;
            }
            if let Some(only) = self.discovery.only.filter(|o| *o != f.kind) {
                let why = format!(
                    "a {} table; this connector is connector.class={}",
                    f.kind.title(),
                    only.name()
                );
                view.skipped.push((q, why));
                continue;
            }
            let (topic, name) = (self.topic_for(f), self.member_name(f));
            if topic.len() > 249 {
                view.skipped
                    .push((q, format!("its topic `{topic}` is longer than Kafka's 249 characters")));
                continue;
            }
            let norm = topic.replace('.', "_");
            // a member already streaming is found again; anything else there is another table
            if let Some((other, owner, _)) = topics.get(&norm).filter(|(_, owner, was)| !*was || *owner != name) {
                let owner = owner.strip_prefix(&format!("{}/", self.name)).unwrap_or(owner);
                let message = format!(
                    "table `{q}` would write topic `{topic}`, which Kafka takes for `{other}` of table `{owner}` \
                     (`.` and `_` collide); leave one of them out (table.exclude.list)"
                );
                if running.is_none() {
                    return Err(Validator { props: &self.props }.invalid("topic.prefix", message));
                }
                view.skipped.push((q, message));
                continue;
            }
            topics.insert(norm, (topic, name, false));
            match self.member(f) {
                Ok(m) => view.members.push(m),
                Err(e) => view.skipped.push((q, e.to_string())),
            }
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests;
