//! Temporal columns and decimals as the sinks downstream want them (`time.precision.mode`):
//! their Avro schemas (Avro logical types, Debezium's `io.debezium.time.*`, Kafka Connect's
//! logical types) and how their values are written ([`TimeWrite`], which the encoder in
//! [`super::avro`] follows).

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::ArrayRef;
use arrow_schema::{DataType, TimeUnit};
use serde_json::{json, Value};

use super::ChangelogError;
use crate::config::TimeMode;

/// How a temporal column's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeWrite {
    /// Days since the epoch.
    Date32,
    /// Milliseconds since the epoch, written as days.
    Date64,
    /// An i32 time of day times this factor.
    Time32(i64),
    /// An i64 value times the first factor, divided (rounding down) by the second.
    Scaled64(i64, i64),
    /// An instant in this unit since the epoch, as an ISO-8601 UTC string (`ZonedTimestamp`).
    Zoned(TimeUnit),
}

/// Avro's decimal; under the Kafka Connect modes also Connect's `Decimal` (what Confluent's
/// AvroConverter writes, so a Connect sink reads it back as a decimal of that scale).
pub fn decimal(precision: u8, scale: i8, time: TimeMode) -> Value {
    let mut v = json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale});
    if time != TimeMode::Avro {
        v["connect.version"] = json!(1);
        v["connect.name"] = json!("org.apache.kafka.connect.data.Decimal");
        v["connect.parameters"] =
            json!({"scale": scale.to_string(), "connect.decimal.precision": precision.to_string()});
    }
    v
}

/// A temporal column's Avro schema and how its values are written, by `time.precision.mode`:
/// - `avro`: Avro's logical types at the column's precision (`timestamp-micros`,
///   `local-timestamp-micros`, `date`, `time-micros`, ...);
/// - `adaptive`: Debezium's semantic types at the column's precision (`io.debezium.time.Date`,
///   `Time`/`MicroTime`/`NanoTime`, `Timestamp`/`MicroTimestamp`/`NanoTimestamp` for timestamps
///   without a zone, `ZonedTimestamp` ISO-8601 strings for instants); `adaptive_time_microseconds`:
///   the same with every time of day in microseconds;
/// - `connect`: Kafka Connect's logical types (`Date`, `Time`, `Timestamp`), milliseconds, as
///   JDBC sinks expect (sub-millisecond digits are dropped, rounding down).
pub fn temporal(dt: &DataType, time: TimeMode) -> Option<(Value, TimeWrite)> {
    Some(match dt {
        DataType::Date32 => (date(time), TimeWrite::Date32),
        DataType::Date64 => (date(time), TimeWrite::Date64),
        DataType::Time32(unit) => time32(*unit, time),
        DataType::Time64(unit) => time64(*unit, time),
        DataType::Timestamp(unit, tz) => timestamp(*unit, tz.is_some(), time),
        _ => return None,
    })
}

/// An Avro schema of type `avro`, with a `logicalType` and a Connect/Debezium name when given.
fn t(avro: &str, logical: Option<&str>, connect: Option<String>) -> Value {
    let mut v = json!({ "type": avro });
    if let Some(l) = logical {
        v["logicalType"] = json!(l);
    }
    if let Some(c) = connect {
        v["connect.version"] = json!(1);
        v["connect.name"] = json!(c);
    }
    v
}

/// A Debezium semantic type's name.
fn dbz(n: &str) -> Option<String> {
    Some(format!("io.debezium.time.{n}"))
}

/// A Kafka Connect logical type's name.
fn connect(n: &str) -> Option<String> {
    Some(format!("org.apache.kafka.connect.data.{n}"))
}

fn date(time: TimeMode) -> Value {
    match time {
        TimeMode::Avro => t("int", Some("date"), None),
        TimeMode::Adaptive | TimeMode::AdaptiveTimeMicroseconds => t("int", None, dbz("Date")),
        TimeMode::Connect => t("int", Some("date"), connect("Date")),
    }
}

fn time32(unit: TimeUnit, time: TimeMode) -> (Value, TimeWrite) {
    use TimeMode::*;
    let ms = if unit == TimeUnit::Second { 1000 } else { 1 };
    match time {
        Avro => (t("int", Some("time-millis"), None), TimeWrite::Time32(ms)),
        Adaptive => (t("int", None, dbz("Time")), TimeWrite::Time32(ms)),
        AdaptiveTimeMicroseconds => (t("long", None, dbz("MicroTime")), TimeWrite::Time32(ms * 1000)),
        Connect => (t("int", Some("time-millis"), connect("Time")), TimeWrite::Time32(ms)),
    }
}

fn time64(unit: TimeUnit, time: TimeMode) -> (Value, TimeWrite) {
    use TimeMode::*;
    let nanos = unit == TimeUnit::Nanosecond;
    match time {
        Avro => (
            t("long", Some("time-micros"), None),
            TimeWrite::Scaled64(1, if nanos { 1000 } else { 1 }),
        ),
        Adaptive | AdaptiveTimeMicroseconds if nanos => (t("long", None, dbz("NanoTime")), TimeWrite::Scaled64(1, 1)),
        Adaptive | AdaptiveTimeMicroseconds => (t("long", None, dbz("MicroTime")), TimeWrite::Scaled64(1, 1)),
        Connect => (
            t("int", Some("time-millis"), connect("Time")),
            TimeWrite::Scaled64(1, if nanos { 1_000_000 } else { 1000 }),
        ),
    }
}

/// A timestamp with a zone (`zoned`, an instant) or without.
fn timestamp(unit: TimeUnit, zoned: bool, time: TimeMode) -> (Value, TimeWrite) {
    use TimeMode::*;
    use TimeUnit::*;
    let (to_millis, precise) = match unit {
        Second => (TimeWrite::Scaled64(1000, 1), TimeWrite::Scaled64(1000, 1)),
        Millisecond => (TimeWrite::Scaled64(1, 1), TimeWrite::Scaled64(1, 1)),
        Microsecond => (TimeWrite::Scaled64(1, 1000), TimeWrite::Scaled64(1, 1)),
        Nanosecond => (TimeWrite::Scaled64(1, 1_000_000), TimeWrite::Scaled64(1, 1)),
    };
    let suffix = match unit {
        Second | Millisecond => "millis",
        Microsecond => "micros",
        Nanosecond => "nanos",
    };
    match time {
        Avro => {
            let local = if zoned { "" } else { "local-" };
            (t("long", Some(&format!("{local}timestamp-{suffix}")), None), precise)
        }
        Adaptive | AdaptiveTimeMicroseconds if zoned => {
            (t("string", None, dbz("ZonedTimestamp")), TimeWrite::Zoned(unit))
        }
        Adaptive | AdaptiveTimeMicroseconds => {
            let name = match unit {
                Second | Millisecond => "Timestamp",
                Microsecond => "MicroTimestamp",
                Nanosecond => "NanoTimestamp",
            };
            (t("long", None, dbz(name)), precise)
        }
        Connect => (t("long", Some("timestamp-millis"), connect("Timestamp")), to_millis),
    }
}

/// Nanoseconds in one `unit`.
fn unit_nanos(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

fn instant(v: i64, unit: TimeUnit) -> Option<chrono::DateTime<chrono::Utc>> {
    let per_second = 1_000_000_000 / unit_nanos(unit);
    let nanos = v.rem_euclid(per_second) * unit_nanos(unit);
    chrono::DateTime::from_timestamp(v.div_euclid(per_second), nanos as u32)
}

/// `2024-05-01T12:30:00.123456Z`: as many fraction digits as the unit has.
pub fn zoned(v: i64, unit: TimeUnit) -> String {
    use chrono::SecondsFormat::*;
    let digits = match unit {
        TimeUnit::Second => Secs,
        TimeUnit::Millisecond => Millis,
        TimeUnit::Microsecond => Micros,
        TimeUnit::Nanosecond => Nanos,
    };
    // checked in range by `zoned_in_range` before any row is written
    instant(v, unit)
        .map(|t| t.to_rfc3339_opts(digits, true))
        .unwrap_or_default()
}

/// Every value of a column written as an ISO-8601 string must be a date chrono can print
/// (years -262143 to 262142): refuse the column rather than write a wrong one.
pub fn zoned_in_range(array: &ArrayRef, unit: TimeUnit, name: &str) -> Result<(), ChangelogError> {
    let values = array.as_primitive::<Int64Type>();
    for v in [arrow::compute::min(values), arrow::compute::max(values)]
        .into_iter()
        .flatten()
    {
        if instant(v, unit).is_none() {
            return Err(ChangelogError::Unsupported(format!(
                "column `{name}` holds {v} ({unit:?}s since the epoch), beyond the years an ISO-8601 ZonedTimestamp can \
                 print; use time.precision.mode=avro for this table"
            )));
        }
    }
    Ok(())
}
