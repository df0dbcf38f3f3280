//! Change events read back (for `verify`): a Confluent-framed key or envelope decoded with its
//! writer schema (fetched by id from the registry) and reduced to what replaying by key needs:
//! the op, digests of the row images, and the lake commit and partition from `source`.
//!
//! A digest is a 128-bit hash (xxh3) of an image's canonical form: fields by name, null fields
//! left out, `int`/`long` and `float`/`double` alike, decimals by value. So an event written
//! under an older schema version (before a nullable column was added) and the same row encoded
//! now compare equal, and any difference in a value does not. 128 bits: among the 10^10 rows of
//! a large table the chance of two different images sharing a digest is below 10^-18.

use std::collections::HashMap;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;

use super::registry::RegistryClient;
use super::ChangelogError;

/// What one change event says, as replay needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `c`, `u`, `d` or `r`.
    pub op: String,
    pub before: Option<u128>,
    pub after: Option<u128>,
    /// The lake commit (`source.instant`, `source.commit_time`).
    pub instant: String,
    pub completed: Option<String>,
    pub partition: String,
}

/// A decoded key: its digest and its text (`{"id": 7}`) for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub digest: u128,
    pub text: String,
}

pub struct EventDecoder {
    registry: RegistryClient,
    readers: HashMap<u32, GenericDatumReader<'static>>,
    columns: Columns,
}

/// Which top-level columns of an image its digest covers.
#[derive(Debug, Clone, Default)]
pub struct Columns {
    /// Only these (the table's columns at the verified commit); `None`: all.
    pub keep: Option<std::collections::HashSet<String>>,
    /// Never these (columns renamed or re-added in the table's history).
    pub skip: std::collections::HashSet<String>,
}

impl Columns {
    fn covers(&self, name: &str) -> bool {
        !self.skip.contains(name) && self.keep.as_ref().is_none_or(|k| k.contains(name))
    }
}

/// Parsed schemas by their text, kept for the process's life so their resolved readers can be
/// kept too (a reader borrows its schema; resolving one per record costs more than decoding it).
/// Keyed by content, so shared safely by every connector and registry; as many as distinct
/// schemas were ever read.
fn parsed(text: &str) -> Result<&'static Schema, ChangelogError> {
    static PARSED: parking_lot::Mutex<Option<HashMap<String, &'static Schema>>> = parking_lot::Mutex::new(None);
    let mut guard = PARSED.lock();
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(s) = map.get(text) {
        return Ok(s);
    }
    let schema = Schema::parse_str(text).map_err(|e| bad(format!("a registered schema does not parse: {e}")))?;
    let leaked: &'static Schema = Box::leak(Box::new(schema));
    map.insert(text.to_string(), leaked);
    Ok(leaked)
}

fn bad(m: impl Into<String>) -> ChangelogError {
    ChangelogError::Undecodable(m.into())
}

/// The schema id of a Confluent-framed record.
pub fn schema_id(framed: &[u8]) -> Result<u32, ChangelogError> {
    match framed {
        [0, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err(bad(format!(
            "not a Confluent-framed Avro record ({} bytes, first byte {:?})",
            framed.len(),
            framed.first()
        ))),
    }
}

impl EventDecoder {
    pub fn new(registry: RegistryClient) -> Self {
        Self {
            registry,
            readers: HashMap::new(),
            columns: Columns::default(),
        }
    }

    /// Digest only `columns` of each image from now on.
    pub fn set_columns(&mut self, columns: Columns) {
        self.columns = columns;
    }

    /// The column names of a framed envelope's images (its `after`, else `before`).
    pub fn image_columns(&self, framed: &[u8]) -> Result<Vec<String>, ChangelogError> {
        let Value::Record(fields) = self.datum(framed)? else {
            return Err(bad("the value is not a record"));
        };
        for want in ["after", "before"] {
            if let Some((_, Value::Record(f))) = fields.iter().find(|(n, _)| n == want).map(|(n, v)| (n, unwrap(v))) {
                return Ok(f.iter().map(|(n, _)| n.clone()).collect());
            }
        }
        Ok(Vec::new())
    }

    /// The schema id of `framed` when its schema is not loaded yet ([`Self::fetch`] it first).
    pub fn unknown(&self, framed: &[u8]) -> Result<Option<u32>, ChangelogError> {
        let id = schema_id(framed)?;
        Ok((!self.readers.contains_key(&id)).then_some(id))
    }

    /// From a blocking thread: make sure the schema of `framed` is loaded (fetched through
    /// `handle` on first sight).
    pub fn load_for(&mut self, framed: &[u8], handle: &tokio::runtime::Handle) -> Result<(), ChangelogError> {
        match self.unknown(framed)? {
            Some(id) => handle.block_on(self.fetch(id)),
            None => Ok(()),
        }
    }

    pub async fn fetch(&mut self, id: u32) -> Result<(), ChangelogError> {
        let text = self.registry.schema(id).await?;
        let reader = GenericDatumReader::builder(parsed(&text)?)
            .build()
            .map_err(|e| bad(format!("schema id {id}: {e}")))?;
        self.readers.insert(id, reader);
        Ok(())
    }

    fn datum(&self, framed: &[u8]) -> Result<Value, ChangelogError> {
        let id = schema_id(framed)?;
        let reader = self
            .readers
            .get(&id)
            .ok_or_else(|| bad(format!("schema id {id} not fetched")))?;
        let mut body = &framed[5..];
        let v = reader
            .read_value(&mut body)
            .map_err(|e| bad(format!("does not decode with its schema (id {id}): {e}")))?;
        if !body.is_empty() {
            return Err(bad(format!(
                "{} bytes left after the record (schema id {id})",
                body.len()
            )));
        }
        Ok(v)
    }

    /// The `after` image of a framed envelope, as decoded with its writer schema (`None`: a
    /// delete's null).
    pub fn after_image(&self, framed: &[u8]) -> Result<Option<Value>, ChangelogError> {
        let Value::Record(fields) = self.datum(framed)? else {
            return Err(bad("the value is not a record"));
        };
        Ok(fields
            .into_iter()
            .find(|(n, _)| n == "after")
            .map(|(_, v)| match v {
                Value::Union(_, inner) => *inner,
                v => v,
            })
            .filter(|v| !matches!(v, Value::Null)))
    }

    /// A framed key record.
    pub fn key(&self, framed: &[u8]) -> Result<Key, ChangelogError> {
        let v = self.datum(framed)?;
        let mut canon = Vec::with_capacity(32);
        write_canonical(&v, &mut canon);
        let text = serde_json::Value::try_from(v).map_or_else(|e| format!("<{e}>"), |j| j.to_string());
        Ok(Key {
            digest: digest(&canon),
            text,
        })
    }

    /// A framed envelope.
    pub fn value(&self, framed: &[u8]) -> Result<Event, ChangelogError> {
        let Value::Record(fields) = self.datum(framed)? else {
            return Err(bad("the value is not a record"));
        };
        let mut e = Event {
            op: String::new(),
            before: None,
            after: None,
            instant: String::new(),
            completed: None,
            partition: String::new(),
        };
        let mut canon = Vec::with_capacity(256);
        for (name, v) in &fields {
            match name.as_str() {
                "before" | "after" => {
                    let image = match unwrap(v) {
                        Value::Null => None,
                        Value::Record(cols) => {
                            canon.clear();
                            write_record(cols, &|n| self.columns.covers(n), &mut canon);
                            Some(digest(&canon))
                        }
                        img => {
                            canon.clear();
                            write_canonical(img, &mut canon);
                            Some(digest(&canon))
                        }
                    };
                    if name == "before" {
                        e.before = image
                    } else {
                        e.after = image
                    }
                }
                "op" => e.op = text(v).unwrap_or_default(),
                "source" => read_source(v, &mut e),
                _ => {}
            }
        }
        if e.op.is_empty() {
            return Err(bad("the envelope has no `op` (not a change event)"));
        }
        Ok(e)
    }
}

fn read_source(v: &Value, e: &mut Event) {
    if let Value::Record(fields) = unwrap(v) {
        for (name, v) in fields {
            match name.as_str() {
                "instant" => e.instant = text(v).unwrap_or_default(),
                "commit_time" => e.completed = text(v),
                "partition" => e.partition = text(v).unwrap_or_default(),
                _ => {}
            }
        }
    }
}

fn unwrap(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => unwrap(inner),
        v => v,
    }
}

fn text(v: &Value) -> Option<String> {
    match unwrap(v) {
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

pub fn digest(canonical: &[u8]) -> u128 {
    twox_hash::XxHash3_128::oneshot(canonical)
}

fn put(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Big-endian two's complement without redundant sign bytes (a decimal's value, whatever the
/// width it was written with).
fn minimal(bytes: &[u8]) -> &[u8] {
    let mut b = bytes;
    while b.len() > 1 && ((b[0] == 0 && b[1] & 0x80 == 0) || (b[0] == 0xff && b[1] & 0x80 != 0)) {
        b = &b[1..];
    }
    b
}

/// The canonical form digests are taken of (see the module doc).
pub fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    let int = |out: &mut Vec<u8>, i: i64| put(out, b'i', &i.to_le_bytes());
    match v {
        Value::Null => out.push(b'n'),
        Value::Boolean(b) => put(out, b'z', &[*b as u8]),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => int(out, *i as i64),
        Value::Long(i)
        | Value::TimeMicros(i)
        | Value::TimestampMillis(i)
        | Value::TimestampMicros(i)
        | Value::TimestampNanos(i)
        | Value::LocalTimestampMillis(i)
        | Value::LocalTimestampMicros(i)
        | Value::LocalTimestampNanos(i) => int(out, *i),
        Value::Float(f) => put(out, b'f', &(*f as f64).to_bits().to_le_bytes()),
        Value::Double(f) => put(out, b'f', &f.to_bits().to_le_bytes()),
        Value::String(s) | Value::Enum(_, s) => put(out, b's', s.as_bytes()),
        Value::Bytes(b) | Value::Fixed(_, b) => put(out, b'b', b),
        Value::Decimal(d) => match Vec::<u8>::try_from(d) {
            Ok(b) => put(out, b'd', minimal(&b)),
            Err(_) => put(out, b'?', format!("{d:?}").as_bytes()),
        },
        Value::Uuid(u) => put(out, b's', u.to_string().as_bytes()),
        Value::Union(_, inner) => write_canonical(inner, out),
        Value::Array(items) => {
            put(out, b'a', &(items.len() as u32).to_le_bytes());
            items.iter().for_each(|i| write_canonical(i, out));
        }
        Value::Map(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            put(out, b'm', &(keys.len() as u32).to_le_bytes());
            for k in keys {
                put(out, b'k', k.as_bytes());
                write_canonical(&m[k], out);
            }
        }
        Value::Record(fields) => write_record(fields, &|_| true, out),
        other => put(out, b'?', format!("{other:?}").as_bytes()),
    }
}

/// A record's canonical form: its non-null fields that `covers` names, by name.
fn write_record(fields: &[(String, Value)], covers: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
    let mut present: Vec<&(String, Value)> = fields
        .iter()
        .filter(|(n, v)| !matches!(unwrap(v), Value::Null) && covers(n))
        .collect();
    present.sort_by(|a, b| a.0.cmp(&b.0));
    put(out, b'r', &(present.len() as u32).to_le_bytes());
    for (name, v) in present {
        put(out, b'k', name.as_bytes());
        write_canonical(v, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(v: &Value) -> u128 {
        let mut out = Vec::new();
        write_canonical(v, &mut out);
        digest(&out)
    }

    #[test]
    fn digests_ignore_null_fields_order_and_int_width() {
        let a = Value::Record(vec![
            ("id".into(), Value::Int(7)),
            ("name".into(), Value::Union(1, Box::new(Value::String("x".into())))),
        ]);
        let b = Value::Record(vec![
            ("name".into(), Value::String("x".into())),
            ("added".into(), Value::Union(0, Box::new(Value::Null))),
            ("id".into(), Value::Long(7)),
        ]);
        assert_eq!(canon(&a), canon(&b));
        let c = Value::Record(vec![
            ("id".into(), Value::Long(7)),
            ("name".into(), Value::String("y".into())),
        ]);
        assert_ne!(canon(&a), canon(&c));
        // a value moved to another field is a different image
        let d = Value::Record(vec![
            ("id".into(), Value::Long(7)),
            ("nick".into(), Value::String("x".into())),
        ]);
        assert_ne!(canon(&a), canon(&d));
    }

    #[test]
    fn decimals_compare_by_value_whatever_their_width() {
        assert_eq!(minimal(&[0, 0, 0x12]), &[0x12]);
        assert_eq!(minimal(&[0xff, 0xff, 0x80]), &[0x80]);
        assert_eq!(minimal(&[0, 0x80]), &[0, 0x80]);
        assert_eq!(minimal(&[0xff, 0x7f]), &[0xff, 0x7f]);
    }

    #[test]
    fn a_record_not_framed_is_refused() {
        assert!(schema_id(&[1, 0, 0, 0, 1]).is_err());
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 9]).unwrap(), 258);
    }
}
