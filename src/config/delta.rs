//! Delta Lake options: where reading starts and stops and what the Kafka key is. Names follow
//! Spark's Delta streaming source where it has one (`startingVersion` → `starting-version`,
//! `startingTimestamp` → `starting-timestamp`, `endingVersion` → `ending-version`).

use super::{ConfigError, Validator};

/// Where a Delta connector with no stored offsets starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaStart {
    /// The current version read whole (`r` events), then every later version.
    Snapshot,
    /// Only versions committed after start.
    Latest,
    /// Every version from this one (inclusive), as changes (0: the whole history).
    Version(u64),
    /// Every version from the first one committed at or after this epoch-ms time.
    Timestamp(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaOptions {
    pub start: DeltaStart,
    /// Kafka key columns (Delta declares no primary key).
    pub key_fields: Vec<String>,
    /// `key.mode=none`: null Kafka keys, rows compared whole.
    pub keyless: bool,
}

/// An epoch-ms time, or an ISO-8601 date / date-time (UTC unless it names an offset).
fn timestamp(v: &Validator<'_>, key: &str, s: &str) -> Result<i64, ConfigError> {
    if let Ok(ms) = s.parse::<i64>() {
        return Ok(ms);
    }
    let parsed = chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").map(|t| t.and_utc().timestamp_millis())
        })
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc().timestamp_millis())
        });
    parsed.map_err(|_| {
        v.invalid(
            key,
            format!("`{s}` is not epoch milliseconds, a date (2024-01-31) or a date-time (2024-01-31T12:00:00Z)"),
        )
    })
}

fn version(v: &Validator<'_>, key: &str) -> Result<Option<u64>, ConfigError> {
    v.get(key)
        .map(|s| {
            s.parse::<u64>()
                .map_err(|_| v.invalid(key, format!("`{s}` is not a table version (0, 1, 2, ...)")))
        })
        .transpose()
}

pub(super) fn load(v: &Validator<'_>) -> Result<DeltaOptions, ConfigError> {
    let start = match (v.get("starting-version"), v.get("starting-timestamp")) {
        (Some(_), Some(_)) => {
            return Err(v.invalid(
                "starting-timestamp",
                "contradicts starting-version: set one of them".into(),
            ))
        }
        (None, Some(t)) => DeltaStart::Timestamp(timestamp(v, "starting-timestamp", &t)?),
        (None, None) => DeltaStart::Snapshot,
        (Some(s), None) => match s.to_ascii_lowercase().as_str() {
            "earliest" | "snapshot" => DeltaStart::Snapshot,
            "latest" => DeltaStart::Latest,
            _ => DeltaStart::Version(version(v, "starting-version")?.unwrap_or_default()),
        },
    };
    let (key_fields, keyless) = super::iceberg::key_settings(v)?;
    if key_fields.is_empty() && !keyless {
        return Err(ConfigError::Missing {
            file: v.props.file.clone(),
            key: "key.fields".into(),
            help: "Delta tables declare no primary key: name the Kafka key columns (comma-separated), \
                   or set key.mode=none for a keyless table",
        });
    }
    Ok(DeltaOptions {
        start,
        key_fields,
        keyless,
    })
}
