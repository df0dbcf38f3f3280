//! Table discovery in a catalog (`catalog.type` with no `table.identifier`): an Iceberg REST
//! catalog's namespaces and their tables (`listNamespaces`, `listTables`), a SQL catalog's
//! `iceberg_tables`, and an AWS Glue catalog's databases and tables (`GetDatabases`,
//! `GetTables`), where Iceberg, Hudi and Delta tables sit side by side and are told apart by what
//! their engines write into them (see [`glue_table`]).
//!
//! Cost per search: REST 1 + (namespaces) requests (+ one a namespace per deeper level), its
//! `/v1/config` asked once per process; SQL one query; Glue one `GetDatabases` and one
//! `GetTables` a database (a request a 100 tables). An Iceberg table is found by name (its member
//! asks the catalog for its metadata as a connector of one catalog table does); a Hudi or Delta
//! table in Glue by its location.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::config::{Catalog, ConnectorKind, Found};
use crate::source::iceberg::catalog::{glue_list, sql_tables};
use crate::source::iceberg::rest::RestSession;
use crate::source::SourceError;
use crate::storage::Storage;

/// Every table the catalog holds, `depth` namespace levels down (REST), in name order.
pub fn tables(c: &Catalog, depth: u32, storage: &Storage, rest: &RestSession) -> Result<Vec<Found>, SourceError> {
    let mut out: Vec<Found> = match c {
        Catalog::Rest(r) => rest.list_tables(storage, r, depth)?.into_iter().map(iceberg).collect(),
        Catalog::Sql { db, catalog } => sql_tables(db, catalog)?.into_iter().map(iceberg).collect(),
        Catalog::Glue(g) => {
            let mut out = Vec::new();
            let databases = glue_list(storage, g, "GetDatabases", json!({}), "DatabaseList", "databases")?;
            for db in databases.iter().filter_map(|d| d.get("Name")?.as_str()) {
                let body = json!({ "DatabaseName": db, "MaxResults": 100 });
                let listed = glue_list(storage, g, "GetTables", body, "TableList", db)?;
                out.extend(in_glue_database(db, &listed));
            }
            out
        }
    };
    out.sort_by_key(Found::qualified);
    Ok(out)
}

fn iceberg((namespace, table): (Vec<String>, String)) -> Found {
    Found {
        kind: ConnectorKind::Iceberg,
        namespace,
        table,
        path: None,
    }
}

/// The lakehouse tables among one Glue database's. Hudi's Glue sync registers a merge-on-read
/// table twice, as `<table>_ro` and `<table>_rt` (read-optimized and real-time views of one
/// table): the tables of one Hudi base path are one table, named after the one without such a
/// suffix, else the name they share without it.
fn in_glue_database(database: &str, listed: &[Value]) -> Vec<Found> {
    let mut out = Vec::new();
    let mut hudi: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for t in listed {
        let Some((name, kind, path)) = glue_table(t) else {
            continue;
        };
        match (kind, path) {
            (ConnectorKind::Hudi, Some(p)) => hudi.entry(p).or_default().push(name),
            (kind, path) => out.push(Found {
                kind,
                namespace: vec![database.to_string()],
                table: name,
                path,
            }),
        }
    }
    for (path, mut names) in hudi {
        names.sort();
        let bare = |n: &str| {
            n.strip_suffix("_ro")
                .or_else(|| n.strip_suffix("_rt"))
                .unwrap_or(n)
                .to_string()
        };
        let table = match names.iter().find(|n| bare(n) == **n) {
            Some(n) => n.clone(),
            None if names.len() > 1 => bare(&names[0]),
            None => names[0].clone(),
        };
        out.push(Found {
            kind: ConnectorKind::Hudi,
            namespace: vec![database.to_string()],
            table,
            path: Some(path),
        });
    }
    out
}

/// What one Glue table is, by what its engine writes: an Iceberg table has
/// `Parameters.table_type` `ICEBERG` (Iceberg's and pyiceberg's `GlueCatalog`; it is then found
/// by name); a Delta table `spark.sql.sources.provider` `delta` (Spark's catalog) or `table_type`
/// `DELTA` (Athena's DDL); a Hudi table `spark.sql.sources.provider` `hudi` (Hudi's Glue and Hive
/// sync, `sync_as_datasource` on by default) or a Hudi input format (`org.apache.hudi.hadoop.*`,
/// `com.uber.hoodie.hadoop.*`: Trino's rule). A Delta or Hudi table's root is Spark's `path` serde
/// parameter where there is one (Spark writes a `-__PLACEHOLDER__` location), else its
/// `StorageDescriptor.Location`. Views and other tables: `None`.
fn glue_table(t: &Value) -> Option<(String, ConnectorKind, Option<PathBuf>)> {
    let name = t.get("Name")?.as_str()?.to_string();
    if t.get("TableType").and_then(Value::as_str) == Some("VIRTUAL_VIEW") {
        return None;
    }
    let param = |k: &str| {
        t.pointer("/Parameters")
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
    };
    let (table_type, provider) = (param("table_type"), param("spark.sql.sources.provider"));
    let sd = t.get("StorageDescriptor");
    let input = sd
        .and_then(|s| s.get("InputFormat"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = if table_type.as_deref() == Some("iceberg") {
        return Some((name, ConnectorKind::Iceberg, None));
    } else if provider.as_deref() == Some("delta") || table_type.as_deref() == Some("delta") {
        ConnectorKind::Delta
    } else if provider.as_deref() == Some("hudi")
        || input.starts_with("org.apache.hudi.")
        || input.starts_with("com.uber.hoodie.")
    {
        ConnectorKind::Hudi
    } else {
        return None;
    };
    let serde_path = sd
        .and_then(|s| s.pointer("/SerdeInfo/Parameters/path"))
        .and_then(Value::as_str);
    let location = sd
        .and_then(|s| s.get("Location"))
        .and_then(Value::as_str)
        .filter(|l| !l.ends_with("__PLACEHOLDER__"));
    let root = serde_path.or(location)?;
    let path = crate::storage::parse_location(root.trim_end_matches('/')).ok()?;
    Some((name, kind, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glue_tables_are_told_apart_by_what_their_engines_write() {
        let listed = json!([
            {"Name": "orders", "Parameters": {"table_type": "ICEBERG", "metadata_location": "s3://b/o/metadata/1.metadata.json"},
             "StorageDescriptor": {"Location": "s3://b/o"}},
            {"Name": "items", "Parameters": {"spark.sql.sources.provider": "delta"},
             "StorageDescriptor": {"Location": "s3://b/db/items-__PLACEHOLDER__", "SerdeInfo": {"Parameters": {"path": "s3://b/items"}}}},
            {"Name": "events", "Parameters": {"table_type": "DELTA"}, "StorageDescriptor": {"Location": "s3://b/events/"}},
            {"Name": "trips_ro", "StorageDescriptor": {"Location": "s3://b/trips",
             "InputFormat": "org.apache.hudi.hadoop.HoodieParquetInputFormat"}},
            {"Name": "trips_rt", "StorageDescriptor": {"Location": "s3://b/trips",
             "InputFormat": "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"}},
            {"Name": "rides", "Parameters": {"spark.sql.sources.provider": "hudi"}, "StorageDescriptor": {"Location": "s3://b/rides"}},
            {"Name": "rides_rt", "StorageDescriptor": {"Location": "s3://b/rides",
             "InputFormat": "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"}},
            {"Name": "csv", "StorageDescriptor": {"Location": "s3://b/csv", "InputFormat": "org.apache.hadoop.mapred.TextInputFormat"}},
            {"Name": "v", "TableType": "VIRTUAL_VIEW", "Parameters": {"table_type": "ICEBERG"}},
            {"Name": "nowhere", "Parameters": {"spark.sql.sources.provider": "delta"}}
        ]);
        let mut got: Vec<(String, ConnectorKind, Option<String>)> = in_glue_database("db", listed.as_array().unwrap())
            .into_iter()
            .map(|f| (f.qualified(), f.kind, f.path.map(|p| p.display().to_string())))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let s = |x: &str| Some(x.to_string());
        assert_eq!(
            got,
            vec![
                ("db.events".into(), ConnectorKind::Delta, s("s3://b/events")),
                ("db.items".into(), ConnectorKind::Delta, s("s3://b/items")),
                ("db.orders".into(), ConnectorKind::Iceberg, None),
                ("db.rides".into(), ConnectorKind::Hudi, s("s3://b/rides")),
                ("db.trips".into(), ConnectorKind::Hudi, s("s3://b/trips")),
            ]
        );
    }
}
