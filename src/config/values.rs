//! A connector file's values: the Java-properties parser with `${env:...}`/`${file:...}`
//! placeholders resolved and duplicate keys refused ([`Properties`]), typed access to the values
//! with errors that name the file, line and key ([`Validator`]), and the size and duration
//! notations the keys use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ConfigError;

/// A parsed, placeholder-resolved properties file: key → (value, line).
#[derive(Clone)]
pub struct Properties {
    pub file: PathBuf,
    pub entries: BTreeMap<String, (String, usize)>,
}

impl Properties {
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let f = std::fs::File::open(file).map_err(|source| ConfigError::Io {
            file: file.into(),
            source,
        })?;
        let mut entries = BTreeMap::new();
        for line in java_properties::PropertiesIter::new(std::io::BufReader::new(f)) {
            let line = line.map_err(|e| ConfigError::Syntax {
                file: file.into(),
                line: e.line_number().unwrap_or(0),
                message: e.to_string(),
            })?;
            let n = line.line_number();
            if let java_properties::LineContent::KVPair(k, v) = line.consume_content() {
                let v = resolve_placeholders(&v).map_err(|message| ConfigError::Invalid {
                    file: file.into(),
                    line: n,
                    key: k.clone(),
                    message,
                })?;
                if let Some((_, first)) = entries.get(&k) {
                    return Err(ConfigError::Invalid {
                        file: file.into(),
                        line: n,
                        key: k.clone(),
                        message: format!("set twice (first on line {first}); remove one"),
                    });
                }
                entries.insert(k, (v.trim().to_string(), n));
            }
        }
        Ok(Self {
            file: file.into(),
            entries,
        })
    }
}

/// `${env:VAR}` and `${file:PATH}` (Kafka Connect config providers, simplified).
fn resolve_placeholders(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated placeholder in `{v}`"))?;
        let inner = &after[..end];
        let (provider, arg) = inner
            .split_once(':')
            .ok_or_else(|| format!("placeholder `${{{inner}}}` must be `${{env:VAR}}` or `${{file:PATH}}`"))?;
        match provider {
            "env" => out.push_str(&std::env::var(arg).map_err(|_| format!("environment variable `{arg}` is not set"))?),
            "file" => out.push_str(
                std::fs::read_to_string(arg)
                    .map_err(|e| format!("cannot read `{arg}` for `${{file:...}}`: {e}"))?
                    .trim_end_matches(['\n', '\r']),
            ),
            other => return Err(format!("unknown config provider `{other}` (known: env, file)")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Typed access to a connector file's values; every error names the file, line and key.
pub(super) struct Validator<'a> {
    pub(super) props: &'a Properties,
}

impl Validator<'_> {
    pub(super) fn get(&self, key: &str) -> Option<String> {
        self.props.entries.get(key).map(|(v, _)| v.clone())
    }
    pub(super) fn line(&self, key: &str) -> usize {
        self.props.entries.get(key).map(|(_, l)| *l).unwrap_or(0)
    }
    pub(super) fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid {
            file: self.props.file.clone(),
            line: self.line(key),
            key: key.into(),
            message,
        }
    }
    pub(super) fn required(&self, key: &str, help: &'static str) -> Result<String, ConfigError> {
        match self.get(key) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(ConfigError::Missing {
                file: self.props.file.clone(),
                key: key.into(),
                help,
            }),
        }
    }
    pub(super) fn bool_or(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(key).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(s) => Err(self.invalid(key, format!("`{s}` is not one of: true, false"))),
        }
    }
    /// One of `choices` (`(value, meaning)`), `default` when the key is absent.
    pub(super) fn one_of<T: Copy>(&self, key: &str, default: T, choices: &[(&str, T)]) -> Result<T, ConfigError> {
        let Some(s) = self.get(key) else { return Ok(default) };
        choices
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                self.invalid(key, format!("`{s}` is not one of: {}", names.join(", ")))
            })
    }
    /// An optional positive count (absent or 0: no limit).
    pub(super) fn limit(&self, key: &str) -> Result<Option<usize>, ConfigError> {
        Ok(Some(self.u64_or(key, 0)? as usize).filter(|n| *n > 0))
    }
    pub(super) fn u64_or(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(s) => s
                .parse()
                .map_err(|_| self.invalid(key, format!("`{s}` is not a non-negative integer"))),
        }
    }
    /// An integer within `range` (a value outside it would misbehave, not fail: a port that
    /// wraps, a transaction per record).
    pub(super) fn u64_in(
        &self,
        key: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let n = self.u64_or(key, default)?;
        if !range.contains(&n) {
            return Err(self.invalid(key, format!("{n} is not between {} and {}", range.start(), range.end())));
        }
        Ok(n)
    }
    pub(super) fn duration_or(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(s) => parse_duration(&s).ok_or_else(|| {
                self.invalid(
                    key,
                    format!("`{s}` is not a duration (seconds, or a number with ms/s/m/h)"),
                )
            }),
        }
    }
}

/// `1048576`, `512KiB`, `64MiB`, `1GiB` (also `k`/`m`/`g`, `KB`/`MB`/`GB` as binary units).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().ok()?;
    let mul: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mul)
}

/// `60` (seconds, as Flink's option), `500ms`, `10s`, `2m`, `1h`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    Some(match unit.trim() {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" | "min" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return None,
    })
}
