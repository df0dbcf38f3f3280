//! The binary's reading of connector files: a command's files loaded and checked together (each
//! discovering connector's first search made, unless `validate --offline`), and the one connector
//! a command of one table takes (a file's, or a discovered table's by `--table`). Failures are
//! printed here and become the exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use lakestream::config::{load_file, ConnectorConfig};
use lakestream::runtime::fleet::Discovered;

/// The files of a command, loaded: connectors of one table, and connectors that discover their
/// tables (a prefix or a catalog) with what their first search found.
pub struct Loaded {
    pub files: Vec<ConnectorConfig>,
    pub fleets: Vec<Discovered>,
}

impl Loaded {
    /// Every connector of one table: the files' and the discovered tables'.
    pub fn all(&self) -> impl Iterator<Item = &ConnectorConfig> {
        self.files
            .iter()
            .chain(self.fleets.iter().flat_map(|d| d.view.members.iter()))
    }
}

/// `search`: whether discovering connectors search their prefix (`validate --offline` does not).
pub fn load_files(files: &[PathBuf], task_id: u32, search: bool) -> Result<Loaded, ExitCode> {
    let mut out = Loaded {
        files: Vec::new(),
        fleets: Vec::new(),
    };
    for f in files {
        let t = match load_file(f, task_id) {
            Ok(lakestream::config::Loaded::Table(c)) => {
                out.files.push(*c);
                continue;
            }
            Ok(lakestream::config::Loaded::Tables(t)) => *t,
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(2));
            }
        };
        if !search {
            out.fleets.push(Discovered::unsearched(t));
            continue;
        }
        match Discovered::first(t) {
            Ok(d) => out.fleets.push(d),
            Err(e) => {
                eprintln!(
                    "error: {}: table discovery: {}",
                    f.display(),
                    lakestream::causes::with_causes(&e)
                );
                return Err(ExitCode::from(e.exit_code()));
            }
        }
    }
    for c in out.all() {
        if let Err(e) = lakestream::sink::check_settings(&c.sink()) {
            eprintln!("error: {}: {e}", c.file.display());
            return Err(ExitCode::from(2));
        }
    }
    let mut names = std::collections::HashSet::new();
    let fleet_names = out.fleets.iter().map(|d| (&d.tables.name, &d.tables.file));
    for (name, file) in out.all().map(|c| (&c.name, &c.file)).chain(fleet_names) {
        if !names.insert(name.clone()) {
            eprintln!("error: {}: connector name `{name}` is used twice", file.display());
            return Err(ExitCode::from(2));
        }
    }
    Ok(out)
}

/// The connector of a command of one table (`verify`, `offsets`): the file's, or the stream of
/// the discovered table `--table` names.
pub fn load_one(file: &std::path::Path, task_id: u32, table: Option<&str>) -> Result<ConnectorConfig, ExitCode> {
    let failed = |e: &dyn std::fmt::Display, code: u8| {
        eprintln!("error: {e}");
        ExitCode::from(code)
    };
    match (load_file(file, task_id), table) {
        (Err(e), _) => Err(failed(&e, 2)),
        (Ok(lakestream::config::Loaded::Table(c)), None) => Ok(*c),
        (Ok(lakestream::config::Loaded::Table(_)), Some(_)) => Err(failed(
            &format!(
                "{}: --table names a table of a connector that discovers its tables; this one has one",
                file.display()
            ),
            2,
        )),
        (Ok(lakestream::config::Loaded::Tables(_)), None) => Err(failed(
            &format!(
                "{}: discovers its tables: name one with --table <namespace.table> (`lakestream validate` lists them)",
                file.display()
            ),
            2,
        )),
        (Ok(lakestream::config::Loaded::Tables(t)), Some(table)) => lakestream::runtime::fleet::member_named(*t, table)
            .map_err(|e| failed(&lakestream::causes::with_causes(&e), e.exit_code())),
    }
}
