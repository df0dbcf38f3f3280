//! Catalog lookups of a table's current metadata file: the SQL catalog (sqlite, the schema
//! pyiceberg and Iceberg's JDBC catalog write), AWS Glue, and the helpers the REST catalog
//! ([`super::rest`]) shares; and the listings table discovery makes of them (`source::discover`). Their failures are
//! [`SourceError::Catalog`], classified (unauthorized, not found, unavailable) by status and error
//! type, never by message text.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::{GlueCatalog, TableLocation};
use crate::source::{CatalogFailure, SourceError};
use crate::storage::Storage;

fn unreadable(message: String) -> SourceError {
    SourceError::Unreadable {
        why: crate::source::Unreadable::NotATable,
        message,
    }
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

/// The tables of a SQL catalog (table discovery): `iceberg_tables`' rows of the catalog, views
/// left out where the schema marks them (`iceberg_type`, Iceberg's JDBC schema v1). One query.
pub fn sql_tables(db: &Path, catalog: &str) -> Result<Vec<(Vec<String>, String)>, SourceError> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| unreadable(format!("{}: cannot open the sql catalog: {e}", db.display())))?;
    let typed = "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = ?1 \
                 AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')";
    let untyped = "SELECT table_namespace, table_name FROM iceberg_tables WHERE catalog_name = ?1";
    let mut stmt = conn
        .prepare(typed)
        .or_else(|_| conn.prepare(untyped))
        .map_err(|e| unreadable(format!("{}: reading iceberg_tables: {e}", db.display())))?;
    let rows = stmt
        .query_map(rusqlite::params![catalog], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .map_err(|e| unreadable(format!("{}: reading iceberg_tables: {e}", db.display())))?;
    Ok(rows
        .into_iter()
        .map(|(ns, t)| (ns.split('.').map(str::to_string).collect(), t))
        .collect())
}

/// AWS Glue Data Catalog: `GetTable`, its `Parameters.metadata_location` (set by Iceberg's and
/// pyiceberg's `GlueCatalog` on every commit).
pub fn glue_metadata_location(storage: &Storage, loc: &TableLocation) -> Result<PathBuf, SourceError> {
    let TableLocation::Glue {
        catalog,
        database,
        table,
    } = loc
    else {
        return Err(unreadable("not a Glue catalog".into()));
    };
    let name = glue_name(catalog);
    let body = serde_json::json!({ "DatabaseName": database, "Name": table });
    let answer = glue_call(storage, catalog, "GetTable", body, &format!("{database}.{table}"))?;
    let params = answer.pointer("/Table/Parameters");
    let loc = params
        .and_then(|p| p.get("metadata_location"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            let kind = params
                .and_then(|p| p.get("table_type"))
                .and_then(Value::as_str)
                .unwrap_or("no table_type");
            SourceError::Config {
                message: format!(
                    "{name}: table {database}.{table} has no metadata_location parameter ({kind}): not an Iceberg table"
                ),
            }
        })?;
    local(loc)
}

/// The name a Glue catalog's messages carry.
pub fn glue_name(c: &GlueCatalog) -> String {
    format!("Glue catalog {} ({})", c.region, c.endpoint)
}

/// One call of the Glue API (`AWSGlue.{target}`, the catalog's `CatalogId` added), SigV4-signed
/// with the connector's AWS credentials (see `storage::AwsSigner`): its answer, or the failure
/// classified by the error's `__type` and status. `what` names the object in messages.
pub fn glue_call(
    storage: &Storage,
    c: &GlueCatalog,
    target: &str,
    mut body: Value,
    what: &str,
) -> Result<Value, SourceError> {
    let name = glue_name(c);
    if let Some(id) = &c.catalog_id {
        body["CatalogId"] = Value::from(id.as_str());
    }
    let body = body.to_string();
    let url = format!("{}/", c.endpoint);
    let signer = storage
        .aws_signer(&c.region)
        .map_err(|e| catalog_error(&name, CatalogFailure::Unauthorized, e.to_string()))?;
    let amz_target = format!("AWSGlue.{target}");
    let headers = signer
        .sign(
            "glue",
            "POST",
            &url,
            &[
                ("content-type", "application/x-amz-json-1.1"),
                ("x-amz-target", amz_target.as_str()),
            ],
            body.as_bytes(),
        )
        .map_err(|e| catalog_error(&name, CatalogFailure::Unauthorized, e.to_string()))?;
    let mut req = http_client(&name)?.post(&url).body(body);
    for (k, v) in &headers {
        req = req.header(k, v);
    }
    storage.count_catalog();
    let resp = req.send().map_err(|e| unavailable(&name, e.to_string()))?;
    let status = resp.status().as_u16();
    let text = resp.text().map_err(|e| unavailable(&name, e.to_string()))?;
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if (200..300).contains(&status) {
        return Ok(answer);
    }
    // `__type` is `[namespace#]Name`; `message` or `Message` says why
    let kind = answer.get("__type").and_then(Value::as_str).unwrap_or("");
    let kind = kind.rsplit('#').next().unwrap_or(kind);
    let why = answer
        .get("message")
        .or_else(|| answer.get("Message"))
        .and_then(Value::as_str)
        .map_or_else(|| excerpt(&text), str::to_string);
    let failure = match (kind, status) {
        ("EntityNotFoundException", _) => CatalogFailure::NotFound,
        (
            "AccessDeniedException"
            | "UnrecognizedClientException"
            | "InvalidSignatureException"
            | "IncompleteSignature"
            | "MissingAuthenticationToken"
            | "InvalidClientTokenId"
            | "ExpiredTokenException"
            | "SignatureDoesNotMatch",
            _,
        )
        | (_, 401 | 403) => CatalogFailure::Unauthorized,
        ("ThrottlingException" | "InternalServiceException" | "OperationTimeoutException", _)
        | (_, 429 | 500..=599) => CatalogFailure::Unavailable,
        _ => CatalogFailure::Failed,
    };
    Err(catalog_error(
        &name,
        failure,
        format!("{target} {what}: HTTP {status} {kind}: {why}"),
    ))
}

/// Every item of a paged Glue list call's `field` (`NextToken` followed).
pub fn glue_list(
    storage: &Storage,
    c: &GlueCatalog,
    target: &str,
    body: Value,
    field: &str,
    what: &str,
) -> Result<Vec<Value>, SourceError> {
    all_pages(field, "NextToken", |next| {
        let mut b = body.clone();
        if let Some(t) = next {
            b["NextToken"] = Value::from(t);
        }
        glue_call(storage, c, target, b, what)
    })
}

/// Every item of a paged list answer's `field`: `page(token)` asks for the page of a token (the
/// first: none), and the answer's `token` field names the next; followed until there is none, or
/// the same one again. Glue's `NextToken` and the REST catalog's `next-page-token` alike.
pub(super) fn all_pages(
    field: &str,
    token: &str,
    mut page: impl FnMut(Option<&str>) -> Result<Value, SourceError>,
) -> Result<Vec<Value>, SourceError> {
    let mut items = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let answer = page(next.as_deref())?;
        items.extend(answer.get(field).and_then(Value::as_array).cloned().unwrap_or_default());
        match answer.get(token).and_then(Value::as_str) {
            Some(t) if !t.is_empty() && next.as_deref() != Some(t) => next = Some(t.to_string()),
            _ => return Ok(items),
        }
    }
}

pub(super) fn http_client(name: &str) -> Result<reqwest::blocking::Client, SourceError> {
    reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| catalog_error(name, CatalogFailure::Failed, format!("HTTP client: {e}")))
}

pub(super) fn catalog_error(catalog: &str, failure: CatalogFailure, message: String) -> SourceError {
    SourceError::Catalog {
        catalog: catalog.to_string(),
        failure,
        message,
    }
}

pub(super) fn unavailable(catalog: &str, message: String) -> SourceError {
    catalog_error(catalog, CatalogFailure::Unavailable, message)
}

pub(super) fn excerpt(body: &str) -> String {
    body.chars().take(300).collect()
}

/// The storage path of a metadata location (`file:/x`, `file:///x`, `/x`, `s3://b/x`, ...).
pub fn local(location: &str) -> Result<PathBuf, SourceError> {
    crate::storage::parse_location(location).map_err(|message| SourceError::Unsupported { message })
}
