//! Catalog lookups of a table's current metadata file: the SQL catalog (sqlite, the schema
//! pyiceberg and Iceberg's JDBC catalog write), AWS Glue, and the helpers the REST catalog
//! ([`super::rest`]) shares. Their failures are
//! [`SourceError::Catalog`], classified (unauthorized, not found, unavailable) by status and error
//! type, never by message text.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::TableLocation;
use crate::source::{CatalogFailure, SourceError};
use crate::storage::Storage;

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

/// AWS Glue Data Catalog: `GetTable`, SigV4-signed with the connector's AWS credentials (see
/// `storage::AwsSigner`), its `Parameters.metadata_location` (set by Iceberg's and pyiceberg's
/// `GlueCatalog` on every commit).
pub fn glue_metadata_location(storage: &Storage, loc: &TableLocation) -> Result<PathBuf, SourceError> {
    let TableLocation::Glue {
        region,
        endpoint,
        catalog_id,
        database,
        table,
    } = loc
    else {
        return Err(unreadable("not a Glue catalog".into()));
    };
    let name = format!("Glue catalog {region} ({endpoint})");
    let mut body = serde_json::json!({ "DatabaseName": database, "Name": table });
    if let Some(id) = catalog_id {
        body["CatalogId"] = Value::from(id.as_str());
    }
    let body = body.to_string();
    let url = format!("{endpoint}/");
    let signer = storage
        .aws_signer(region)
        .map_err(|e| catalog_error(&name, CatalogFailure::Unauthorized, e.to_string()))?;
    let headers = signer
        .sign(
            "glue",
            "POST",
            &url,
            &[
                ("content-type", "application/x-amz-json-1.1"),
                ("x-amz-target", "AWSGlue.GetTable"),
            ],
            body.as_bytes(),
        )
        .map_err(|e| catalog_error(&name, CatalogFailure::Unauthorized, e.to_string()))?;
    let mut req = http_client(&name)?.post(&url).body(body);
    for (k, v) in &headers {
        req = req.header(k, v);
    }
    let resp = req.send().map_err(|e| unavailable(&name, e.to_string()))?;
    let status = resp.status().as_u16();
    let text = resp.text().map_err(|e| unavailable(&name, e.to_string()))?;
    let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
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
        return Err(catalog_error(
            &name,
            failure,
            format!("GetTable {database}.{table}: HTTP {status} {kind}: {why}"),
        ));
    }
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
