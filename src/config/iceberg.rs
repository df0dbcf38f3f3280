//! Iceberg options: where the table is (a path, or a catalog) and how the monitor starts and plans
//! splits. Names follow the Flink IcebergSource where it has one (`starting-strategy`,
//! `start-snapshot-id`, `split-size`, ...).

use std::path::PathBuf;

use super::{parse_size, ConfigError, Validator};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableLocation {
    /// A table directory (Hadoop layout: `metadata/version-hint.text` or the newest
    /// `metadata/*.metadata.json`), or one metadata file (that version only).
    Path(PathBuf),
    /// pyiceberg's / JDBC `SqlCatalog` over sqlite: `iceberg_tables.metadata_location`.
    Sql {
        db: PathBuf,
        catalog: String,
        namespace: Vec<String>,
        table: String,
    },
    /// Iceberg REST catalog: `GET {uri}/v1/{prefix}/namespaces/{ns}/tables/{table}`.
    Rest {
        catalog: RestCatalog,
        namespace: Vec<String>,
        table: String,
    },
    /// AWS Glue Data Catalog: `GetTable` → `Parameters.metadata_location`, SigV4-signed.
    Glue {
        catalog: GlueCatalog,
        database: String,
        table: String,
    },
}

/// An Iceberg REST catalog and how the connector authenticates to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestCatalog {
    /// `catalog.uri`, without a trailing `/`.
    pub uri: String,
    pub warehouse: Option<String>,
    /// A static bearer token (`catalog.token`).
    pub token: Option<String>,
    /// OAuth 2 client credentials (`catalog.credential`: `<id>:<secret>` or `<secret>`), their
    /// token endpoint and scope.
    pub credential: Option<String>,
    pub oauth2_server_uri: Option<String>,
    pub scope: Option<String>,
    /// AWS SigV4-signed requests (`catalog.rest.sigv4-enabled`): (region, signing name).
    pub sigv4: Option<(String, String)>,
}

/// An AWS Glue Data Catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlueCatalog {
    pub region: String,
    /// The endpoint (`catalog.uri`), else `https://glue.{region}.amazonaws.com`.
    pub endpoint: String,
    /// `catalog.glue.catalog-id`: another account's catalog.
    pub catalog_id: Option<String>,
}

/// A catalog as `catalog.type` and its keys configure it, without a table: what a
/// [`TableLocation`] names a table in, and what table discovery lists (`config::discovery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Catalog {
    Sql { db: PathBuf, catalog: String },
    Rest(RestCatalog),
    Glue(GlueCatalog),
}

impl Catalog {
    /// A table of this catalog.
    pub fn table(&self, namespace: Vec<String>, table: String) -> TableLocation {
        match self {
            Catalog::Sql { db, catalog } => TableLocation::Sql {
                db: db.clone(),
                catalog: catalog.clone(),
                namespace,
                table,
            },
            Catalog::Rest(c) => TableLocation::Rest {
                catalog: c.clone(),
                namespace,
                table,
            },
            Catalog::Glue(c) => TableLocation::Glue {
                catalog: c.clone(),
                database: namespace.join("."),
                table,
            },
        }
    }

    /// `catalog.type`'s value for it.
    pub fn kind(&self) -> &'static str {
        match self {
            Catalog::Sql { .. } => "sql",
            Catalog::Rest(_) => "rest",
            Catalog::Glue(_) => "glue",
        }
    }

    /// Which catalog and how the connector authenticates to it (`validate --online`).
    pub fn summary(&self) -> String {
        match self {
            Catalog::Sql { db, .. } => format!("sql {}", db.display()),
            Catalog::Glue(GlueCatalog { region, .. }) => {
                format!("Glue {region}, SigV4 with the connector's AWS credentials")
            }
            Catalog::Rest(RestCatalog {
                uri,
                token,
                credential,
                sigv4,
                ..
            }) => {
                let how = match (token, credential, sigv4) {
                    (_, _, Some((region, service))) => format!("SigV4 ({service}, {region})"),
                    (Some(_), _, _) => "a static bearer token".to_string(),
                    (_, Some(_), _) => "an OAuth 2 token (client credentials)".to_string(),
                    _ => "no authentication".to_string(),
                };
                format!("REST {uri}, {how}")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingStrategy {
    /// Full scan of the current snapshot (`r`), then every later snapshot.
    TableScanThenIncremental,
    /// The current snapshot's own changes, then every later snapshot (Flink: inclusive).
    IncrementalFromLatest,
    /// Only snapshots committed after start.
    IncrementalFromLatestExclusive,
    /// Every snapshot from the oldest ancestor still in the metadata.
    IncrementalFromEarliest,
    /// Every snapshot from this one (inclusive).
    FromSnapshotId(i64),
    /// Every snapshot from the first one committed at or after this epoch-ms time.
    FromTimestamp(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergOptions {
    pub location: TableLocation,
    pub start: StartingStrategy,
    pub max_planning_snapshots: Option<usize>,
    pub split_size: u64,
    pub split_lookback: usize,
    pub split_open_cost: u64,
    /// Kafka key columns when the schema declares no identifier fields.
    pub key_fields: Vec<String>,
    /// `key.fields.override`: `key.fields` may replace declared identifier fields.
    pub key_fields_override: bool,
    /// `key.mode=none`: a keyless table; events carry a null Kafka key and rows are compared
    /// whole (a multiset), never paired into updates.
    pub keyless: bool,
}

impl IcebergOptions {
    /// Which catalog and how the connector authenticates to it (`validate --online`); `None` for
    /// a table by path.
    pub fn catalog_summary(&self) -> Option<String> {
        let catalog = match &self.location {
            TableLocation::Path(_) => return None,
            TableLocation::Sql { db, catalog, .. } => Catalog::Sql {
                db: db.clone(),
                catalog: catalog.clone(),
            },
            TableLocation::Rest { catalog, .. } => Catalog::Rest(catalog.clone()),
            TableLocation::Glue { catalog, .. } => Catalog::Glue(catalog.clone()),
        };
        Some(catalog.summary())
    }

    /// A stable name of the table for offsets keys.
    pub fn table_id(&self) -> String {
        match &self.location {
            TableLocation::Path(p) => p.display().to_string(),
            TableLocation::Sql {
                catalog,
                namespace,
                table,
                ..
            } => format!("sql:{catalog}.{}.{table}", namespace.join(".")),
            TableLocation::Rest {
                catalog,
                namespace,
                table,
                ..
            } => format!("rest:{}#{}.{table}", catalog.uri, namespace.join(".")),
            TableLocation::Glue {
                catalog,
                database,
                table,
            } => format!(
                "glue:{}:{}#{database}.{table}",
                catalog.region,
                catalog.catalog_id.as_deref().unwrap_or("")
            ),
        }
    }
}

fn identifier(v: &Validator<'_>) -> Result<(Vec<String>, String), ConfigError> {
    let id = v.required("table.identifier", "namespace.table, e.g. db.events")?;
    let mut parts: Vec<String> = id.split('.').map(str::to_string).collect();
    let table = parts.pop().filter(|t| !t.is_empty());
    match table {
        Some(t) if !parts.is_empty() && parts.iter().all(|p| !p.is_empty()) => Ok((parts, t)),
        _ => Err(v.invalid("table.identifier", format!("`{id}` is not `namespace.table`"))),
    }
}

fn location(v: &Validator<'_>) -> Result<TableLocation, ConfigError> {
    let Some(catalog) = catalog(v)? else {
        let raw = v.required("table.path", "the table directory or a metadata.json file")?;
        let p = super::local_path(&raw).map_err(|m| v.invalid("table.path", m))?;
        if !crate::storage::is_remote(&p) && !p.exists() {
            return Err(v.invalid("table.path", format!("`{}` does not exist", p.display())));
        }
        return Ok(TableLocation::Path(p));
    };
    let (namespace, table) = identifier(v)?;
    if matches!(catalog, Catalog::Glue(_)) && namespace.len() != 1 {
        return Err(v.invalid(
            "table.identifier",
            format!(
                "`{}.{table}`: a Glue table is `database.table` (one namespace level)",
                namespace.join(".")
            ),
        ));
    }
    Ok(catalog.table(namespace, table))
}

/// The catalog `catalog.type` and its keys name; `None` for `hadoop` (a table by path, the
/// default).
pub(super) fn catalog(v: &Validator<'_>) -> Result<Option<Catalog>, ConfigError> {
    let kind = v
        .get("catalog.type")
        .unwrap_or_else(|| "hadoop".into())
        .to_ascii_lowercase();
    match kind.as_str() {
        "hadoop" | "path" => Ok(None),
        "sql" | "jdbc" => sql_catalog(v).map(Some),
        "rest" => rest_catalog(v).map(Some),
        "glue" => glue_catalog(v).map(Some),
        other => Err(v.invalid(
            "catalog.type",
            format!("`{other}` is not one of: hadoop, sql, rest, glue"),
        )),
    }
}

/// `catalog.type=sql`: a sqlite catalog (`catalog.uri`, `catalog.name`).
fn sql_catalog(v: &Validator<'_>) -> Result<Catalog, ConfigError> {
    let uri = v.required("catalog.uri", "sqlite:///path/to/catalog.db")?;
    // sqlite:///rel/or/abs, sqlite:////abs (SQLAlchemy), jdbc:sqlite:/abs
    let rest = uri
        .strip_prefix("jdbc:sqlite:")
        .or_else(|| uri.strip_prefix("sqlite:///"))
        .ok_or_else(|| {
            v.invalid(
                "catalog.uri",
                format!("`{uri}`: only sqlite catalogs (sqlite:///path) are supported"),
            )
        })?;
    let db = PathBuf::from(format!("/{}", rest.trim_start_matches('/')));
    if !db.is_file() {
        return Err(v.invalid("catalog.uri", format!("`{}` is not a file", db.display())));
    }
    Ok(Catalog::Sql {
        db,
        catalog: v.get("catalog.name").unwrap_or_else(|| "default".into()),
    })
}

/// `catalog.type=rest`: the catalog's URL and how requests authenticate.
fn rest_catalog(v: &Validator<'_>) -> Result<Catalog, ConfigError> {
    let uri = v.required("catalog.uri", "the REST catalog base URL")?;
    if !(uri.starts_with("http://") || uri.starts_with("https://")) {
        return Err(v.invalid("catalog.uri", format!("`{uri}` is not an http(s) URL")));
    }
    let (token, credential) = (v.get("catalog.token"), v.get("catalog.credential"));
    if token.is_some() && credential.is_some() {
        return Err(v.invalid(
            "catalog.credential",
            "set catalog.token (a static bearer token) or catalog.credential (OAuth 2 client credentials), not both"
                .to_string(),
        ));
    }
    let oauth2_server_uri = v.get("catalog.oauth2-server-uri");
    if let Some(u) = oauth2_server_uri
        .as_ref()
        .filter(|u| !(u.starts_with("http://") || u.starts_with("https://")))
    {
        return Err(v.invalid("catalog.oauth2-server-uri", format!("`{u}` is not an http(s) URL")));
    }
    let sigv4 = rest_sigv4(v, token.is_some() || credential.is_some())?;
    Ok(Catalog::Rest(RestCatalog {
        uri: uri.trim_end_matches('/').to_string(),
        warehouse: v.get("catalog.warehouse"),
        token,
        credential,
        oauth2_server_uri,
        scope: v.get("catalog.scope"),
        sigv4,
    }))
}

/// `catalog.rest.sigv4-enabled`: the signing region and service name; refused beside a bearer
/// token or credential (`bearer`).
fn rest_sigv4(v: &Validator<'_>, bearer: bool) -> Result<Option<(String, String)>, ConfigError> {
    match v.bool_or("catalog.rest.sigv4-enabled", false)? {
        false => Ok(None),
        true if bearer => Err(v.invalid(
            "catalog.rest.sigv4-enabled",
            "SigV4-signed requests carry AWS credentials: unset catalog.token / catalog.credential".to_string(),
        )),
        true => {
            let region =
                aws_region(v, &["catalog.rest.signing-region", "catalog.region", "s3.region"]).ok_or_else(|| {
                    v.invalid(
                        "catalog.rest.signing-region",
                        "required with catalog.rest.sigv4-enabled=true (or s3.region, or AWS_REGION)".to_string(),
                    )
                })?;
            let name = v
                .get("catalog.rest.signing-name")
                .unwrap_or_else(|| "execute-api".into());
            Ok(Some((region, name)))
        }
    }
}

/// The AWS region: the first of `keys` set, else `AWS_REGION`, else `AWS_DEFAULT_REGION`.
fn aws_region(v: &Validator<'_>, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(k))
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
}

/// `catalog.type=glue`: the region, endpoint and catalog id.
fn glue_catalog(v: &Validator<'_>) -> Result<Catalog, ConfigError> {
    let region = aws_region(v, &["catalog.region", "s3.region"]).ok_or_else(|| {
        v.invalid(
            "catalog.region",
            "required for catalog.type=glue (or s3.region, or AWS_REGION)".to_string(),
        )
    })?;
    let endpoint = match v.get("catalog.uri") {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") => u.trim_end_matches('/').to_string(),
        Some(u) => return Err(v.invalid("catalog.uri", format!("`{u}` is not an http(s) URL"))),
        None => format!("https://glue.{region}.amazonaws.com"),
    };
    Ok(Catalog::Glue(GlueCatalog {
        region,
        endpoint,
        catalog_id: v.get("catalog.glue.catalog-id"),
    }))
}

fn i64_key(v: &Validator<'_>, key: &str) -> Result<Option<i64>, ConfigError> {
    v.get(key)
        .map(|s| {
            s.parse::<i64>()
                .map_err(|_| v.invalid(key, format!("`{s}` is not an integer")))
        })
        .transpose()
}

fn size_key(v: &Validator<'_>, key: &str, default: u64) -> Result<u64, ConfigError> {
    match v.get(key) {
        None => Ok(default),
        Some(s) => parse_size(&s)
            .map(|n| n as u64)
            .filter(|n| *n > 0)
            .ok_or_else(|| v.invalid(key, format!("`{s}` is not a positive size (bytes, or KiB/MiB/GiB)"))),
    }
}

/// `key.fields` (comma-separated) and `key.mode` (`fields` / `none`), checked against each other;
/// shared by the formats that take the key from the connector's settings (Iceberg, Delta).
pub(super) fn key_settings(v: &Validator<'_>) -> Result<(Vec<String>, bool), ConfigError> {
    let key_fields: Vec<String> = v
        .get("key.fields")
        .map(|s| {
            s.split(',')
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let keyless = match v.get("key.mode").as_deref() {
        None | Some("fields") => false,
        Some("none") if !key_fields.is_empty() => {
            return Err(v.invalid(
                "key.mode",
                "`none` (no key) contradicts key.fields: set one of them".into(),
            ))
        }
        Some("none") => true,
        Some(s) => return Err(v.invalid("key.mode", format!("`{s}` is not one of: fields, none"))),
    };
    Ok((key_fields, keyless))
}

pub(super) fn load(v: &Validator<'_>) -> Result<IcebergOptions, ConfigError> {
    let start_id = i64_key(v, "start-snapshot-id")?;
    let start_ts = i64_key(v, "start-snapshot-timestamp")?;
    let strategy = v.get("starting-strategy").map(|s| s.to_ascii_uppercase());
    let start = match strategy.as_deref() {
        None if start_id.is_some() => StartingStrategy::FromSnapshotId(start_id.unwrap_or_default()),
        None if start_ts.is_some() => StartingStrategy::FromTimestamp(start_ts.unwrap_or_default()),
        None | Some("TABLE_SCAN_THEN_INCREMENTAL") => StartingStrategy::TableScanThenIncremental,
        Some("INCREMENTAL_FROM_LATEST_SNAPSHOT") => StartingStrategy::IncrementalFromLatest,
        Some("INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE") => StartingStrategy::IncrementalFromLatestExclusive,
        Some("INCREMENTAL_FROM_EARLIEST_SNAPSHOT") => StartingStrategy::IncrementalFromEarliest,
        Some("INCREMENTAL_FROM_SNAPSHOT_ID") => StartingStrategy::FromSnapshotId(start_id.ok_or_else(|| {
            v.invalid(
                "starting-strategy",
                "INCREMENTAL_FROM_SNAPSHOT_ID needs start-snapshot-id".into(),
            )
        })?),
        Some("INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP") => StartingStrategy::FromTimestamp(start_ts.ok_or_else(|| {
            v.invalid(
                "starting-strategy",
                "INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP needs start-snapshot-timestamp (epoch ms)".into(),
            )
        })?),
        Some(s) => {
            return Err(v.invalid(
                "starting-strategy",
                format!(
                    "`{s}` is not one of: TABLE_SCAN_THEN_INCREMENTAL, INCREMENTAL_FROM_LATEST_SNAPSHOT, \
                     INCREMENTAL_FROM_LATEST_SNAPSHOT_EXCLUSIVE, INCREMENTAL_FROM_EARLIEST_SNAPSHOT, \
                     INCREMENTAL_FROM_SNAPSHOT_ID, INCREMENTAL_FROM_SNAPSHOT_TIMESTAMP"
                ),
            ))
        }
    };
    let (key_fields, keyless) = key_settings(v)?;
    Ok(IcebergOptions {
        location: location(v)?,
        start,
        max_planning_snapshots: v.limit("max-planning-snapshot-count")?,
        split_size: size_key(v, "split-size", 128 << 20)?,
        split_lookback: v.u64_in("split-lookback", 10, 1..=10_000)? as usize,
        split_open_cost: size_key(v, "split-file-open-cost", 4 << 20)?,
        key_fields,
        key_fields_override: v.bool_or("key.fields.override", false)?,
        keyless,
    })
}
