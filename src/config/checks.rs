//! Checks of settings that would otherwise be accepted and then misbehave: illegal topic names,
//! converters lakestream does not implement, and producer overrides that break exactly-once.

use super::{ConfigError, Validator};

/// The only converter lakestream writes (keys and values are always Confluent-framed Avro).
const AVRO_CONVERTER: &str = "io.confluent.connect.avro.AvroConverter";

/// A legal Kafka topic name: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(super) fn topic_name(v: &Validator<'_>, key: &str, name: String) -> Result<String, ConfigError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let problem = if name.is_empty() || name.len() > 249 {
        Some(format!("`{name}` is not a legal topic name: 1 to 249 characters"))
    } else if name == "." || name == ".." {
        Some(format!("`{name}` is not a legal topic name"))
    } else {
        name.chars()
            .find(|c| !legal(*c))
            .map(|c| format!("`{name}` is not a legal topic name: `{c}` is not one of a-z, A-Z, 0-9, `.`, `_`, `-`"))
    };
    match problem {
        Some(m) => Err(v.invalid(key, m)),
        None => Ok(name),
    }
}

/// `key.converter` / `value.converter`: accepted for Kafka Connect files, but only Avro.
pub(super) fn converters(v: &Validator<'_>) -> Result<(), ConfigError> {
    for key in ["key.converter", "value.converter"] {
        if let Some(c) = v.get(key) {
            if c != AVRO_CONVERTER {
                return Err(v.invalid(
                    key,
                    format!("`{c}` is not supported: lakestream writes Confluent-framed Avro only ({AVRO_CONVERTER}); remove the key or set it to that"),
                ));
            }
        }
    }
    Ok(())
}

/// `producer.override.*` settings that would silently give up exactly-once, or that lakestream
/// sets from its own keys.
pub(super) fn producer_overrides(v: &Validator<'_>) -> Result<(), ConfigError> {
    for (k, (val, _)) in &v.props.entries {
        let Some(setting) = k.strip_prefix("producer.override.") else {
            continue;
        };
        let problem = match setting {
            "transactional.id" => {
                Some("is derived from `name` and the task id (one per task, stable across restarts)".to_string())
            }
            "transaction.timeout.ms" => Some("set the connector's `transaction.timeout.ms` instead".to_string()),
            "enable.idempotence" if val != "true" => {
                Some("must stay true: transactions need the idempotent producer".to_string())
            }
            "acks" if !matches!(val.as_str(), "all" | "-1") => {
                Some("must be `all` (-1): exactly-once needs every in-sync replica".to_string())
            }
            "max.in.flight.requests.per.connection" | "max.in.flight" => match val.parse::<u32>() {
                Ok(n) if (1..=5).contains(&n) => None,
                _ => Some(format!(
                    "`{val}`: the idempotent producer keeps order only with 1 to 5 requests in flight"
                )),
            },
            _ => None,
        };
        if let Some(m) = problem {
            return Err(v.invalid(k, m));
        }
    }
    Ok(())
}
