//! Catalog lookups of a table's current metadata file: the SQL catalog (sqlite, the schema
//! pyiceberg and Iceberg's JDBC catalog write) and the REST catalog.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::TableLocation;
use crate::source::SourceError;

fn unreadable(message: String) -> SourceError {
    SourceError::Unreadable { message }
}

pub fn sql_metadata_location(
    db: &Path,
    catalog: &str,
    namespace: &[String],
    table: &str,
) -> Result<PathBuf, SourceError> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| unreadable(format!("{}: cannot open the sql catalog: {e}", db.display())))?;
    let ns = namespace.join(".");
    let loc: Option<String> = conn
        .query_row(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ?1 AND table_namespace = ?2 AND table_name = ?3",
            rusqlite::params![catalog, ns, table],
            |r| r.get(0),
        )
        .map_err(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => unreadable(format!(
                "{}: catalog `{catalog}` has no table `{ns}.{table}` (check catalog.name and table.identifier)",
                db.display()
            )),
            other => unreadable(format!("{}: reading iceberg_tables: {other}", db.display())),
        })?;
    let loc = loc.ok_or_else(|| {
        unreadable(format!(
            "{}: table `{ns}.{table}` has no metadata_location",
            db.display()
        ))
    })?;
    local(&loc)
}

pub fn rest_metadata_location(loc: &TableLocation) -> Result<PathBuf, SourceError> {
    let TableLocation::Rest {
        uri,
        warehouse,
        token,
        namespace,
        table,
    } = loc
    else {
        return Err(unreadable("not a REST catalog".into()));
    };
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| unreadable(format!("REST catalog client: {e}")))?;
    let get = |url: String| -> Result<Value, SourceError> {
        let mut req = client.get(&url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().map_err(|e| unreadable(format!("REST catalog {url}: {e}")))?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().unwrap_or_default();
            return Err(unreadable(format!(
                "REST catalog {url}: HTTP {status}: {}",
                body.chars().take(300).collect::<String>()
            )));
        }
        resp.json()
            .map_err(|e| unreadable(format!("REST catalog {url}: bad JSON: {e}")))
    };
    let mut config_url = format!("{uri}/v1/config");
    if let Some(w) = warehouse {
        config_url.push_str(&format!("?warehouse={}", encode(w)));
    }
    let config = get(config_url)?;
    let prefix = config
        .pointer("/overrides/prefix")
        .or_else(|| config.pointer("/defaults/prefix"))
        .and_then(Value::as_str)
        .map(|p| format!("{}/", p.trim_matches('/')))
        .unwrap_or_default();
    // namespace levels are joined with the unit separator, URL-encoded
    let ns = namespace.iter().map(|n| encode(n)).collect::<Vec<_>>().join("%1F");
    let body = get(format!("{uri}/v1/{prefix}namespaces/{ns}/tables/{}", encode(table)))?;
    let loc = body.get("metadata-location").and_then(Value::as_str).ok_or_else(|| {
        unreadable(format!(
            "REST catalog: table {}.{table} has no metadata-location",
            namespace.join(".")
        ))
    })?;
    local(loc)
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The storage path of a metadata location (`file:/x`, `file:///x`, `/x`, `s3://b/x`, ...).
pub fn local(location: &str) -> Result<PathBuf, SourceError> {
    crate::storage::parse_location(location).map_err(|message| SourceError::Unsupported { message })
}
