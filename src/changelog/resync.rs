//! Resync events: the net change from the topic's state to a table commit, built from images
//! already encoded rather than from Arrow rows — the table's rows as the connector's own encoder
//! wrote them, and the topic's last images (written under any earlier schema) resolved into the
//! current `Value` schema by Avro's own rules. Their `source.snapshot` is `resync` and their
//! `source.instant` the commit they converge to.

use apache_avro::types::Value;
use apache_avro::Schema;
use arrow_schema::SchemaRef;

use super::avro::{write_bytes, write_long};
use super::{framed, ChangelogEncoder, ChangelogError, KafkaRecord};
use crate::source::{Op, Unit};

/// `source.snapshot` of resync events.
pub const MARKER: &str = "resync";

pub struct ResyncEncoder {
    value_id: u32,
    /// `source` up to its `partition` field.
    source: Vec<u8>,
    /// The events' `Value` schema (topic images are resolved into it).
    value: Schema,
    tombstones: bool,
    txn_field: bool,
}

/// One resync event's parts: the framed key (empty: keyless), and the images as `Value` datums.
pub struct RawChange<'a> {
    pub key: &'a [u8],
    pub op: Op,
    pub before: Option<&'a [u8]>,
    pub after: Option<&'a [u8]>,
    pub partition: &'a str,
    pub file: &'a str,
}

impl ChangelogEncoder {
    /// The encoder of resync events converging to `unit` (a snapshot of the target commit) whose
    /// rows have `schema` (registered on first sight, as for a split).
    pub async fn resync(&mut self, unit: &Unit, schema: &SchemaRef) -> Result<ResyncEncoder, ChangelogError> {
        let reg = self.register(schema).await?;
        let (_, envelope, _) = self.schemas(schema)?;
        let value_json = &envelope["fields"][0]["type"][1];
        let value = Schema::parse(value_json)
            .map_err(|e| ChangelogError::Schema(format!("generated value schema invalid: {e}: {value_json}")))?;
        let source = self.source_prefix(unit, MARKER);
        Ok(ResyncEncoder {
            value_id: reg.value_id,
            source,
            value,
            tombstones: self.tombstones && !self.keyless(),
            txn_field: self.txn_topic.is_some(),
        })
    }
}

impl ResyncEncoder {
    /// An image read back from the topic (a decoded `Value` record of any earlier schema) as a
    /// datum of the current `Value` schema: as it is where the schema is the same; else fields by
    /// name, a column the image lacks null; else with types promoted by Avro's resolution rules.
    /// An image that fits none (a column now required that it lacks) is an error naming why.
    pub fn image(&self, image: &Value) -> Result<Vec<u8>, ChangelogError> {
        let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&self.value)
            .build()
            .map_err(|e| ChangelogError::Schema(format!("the value schema: {e}")))?;
        if let Ok(d) = writer.write_value_to_vec(image.clone()) {
            return Ok(d);
        }
        let (Value::Record(old), Schema::Record(rs)) = (image, &self.value) else {
            return Err(ChangelogError::Undecodable("a topic image that is not a record".into()));
        };
        let fields: Vec<(String, Value)> = rs
            .fields
            .iter()
            .map(|f| {
                let v = old.iter().find(|(n, _)| *n == f.name).map(|(_, v)| v.clone());
                (f.name.clone(), v.unwrap_or_else(|| null_of(&f.schema)))
            })
            .collect();
        if let Ok(d) = writer.write_value_to_vec(Value::Record(fields.clone())) {
            return Ok(d);
        }
        let unwrapped = fields.into_iter().map(|(n, v)| (n, unwrap(&v).clone())).collect();
        let resolved = Value::Record(unwrapped)
            .resolve(&self.value)
            .map_err(|e| ChangelogError::Value(format!("a topic image does not fit the current schema: {e}")))?;
        writer
            .write_value_to_vec(resolved)
            .map_err(|e| ChangelogError::Value(format!("a topic image does not encode in the current schema: {e}")))
    }

    /// The Kafka records of one change: its event, and a tombstone after a keyed delete.
    pub fn encode(&self, c: &RawChange<'_>, ts_ms: i64, out: &mut Vec<KafkaRecord>) {
        let mut value = framed(
            self.value_id,
            64 + c.before.map_or(0, <[u8]>::len) + c.after.map_or(0, <[u8]>::len),
        );
        for side in [c.before, c.after] {
            match side {
                Some(d) => {
                    value.push(2);
                    value.extend_from_slice(d);
                }
                None => value.push(0),
            }
        }
        value.extend_from_slice(&self.source);
        write_bytes(&mut value, c.partition.as_bytes());
        write_bytes(&mut value, c.file.as_bytes());
        value.push(0); // row_id
        write_bytes(&mut value, c.op.code().as_bytes());
        value.push(2);
        write_long(&mut value, ts_ms);
        if self.txn_field {
            value.push(0); // no lake transaction: a resync spans none
        }
        out.push(KafkaRecord {
            key: c.key.to_vec(),
            value: Some(value),
        });
        if self.tombstones && c.op == Op::Delete {
            out.push(KafkaRecord {
                key: c.key.to_vec(),
                value: None,
            });
        }
    }
}

/// A null of a field's schema (its union's null branch).
fn null_of(schema: &Schema) -> Value {
    match schema {
        Schema::Union(u) => match u.variants().iter().position(|v| matches!(v, Schema::Null)) {
            Some(i) => Value::Union(i as u32, Box::new(Value::Null)),
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

fn unwrap(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => unwrap(inner),
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoder(value: &str) -> ResyncEncoder {
        ResyncEncoder {
            value_id: 1,
            source: Vec::new(),
            value: Schema::parse_str(value).unwrap(),
            tombstones: true,
            txn_field: false,
        }
    }

    const NOW: &str = r#"{"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
        {"name": "note", "type": ["null", "string"], "default": null}]}"#;

    fn read(bytes: &[u8]) -> Value {
        let schema = Schema::parse_str(NOW).unwrap();
        let reader = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
            .build()
            .unwrap();
        reader.read_value(&mut &bytes[..]).unwrap()
    }

    #[test]
    fn an_image_of_the_same_schema_is_written_as_it_is() {
        let amount = Value::Decimal(apache_avro::Decimal::from(vec![0x01, 0x86, 0xa0]));
        let img = Value::Record(vec![
            ("id".into(), Value::Long(7)),
            ("amount".into(), Value::Union(1, Box::new(amount.clone()))),
            ("note".into(), Value::Union(1, Box::new(Value::String("x".into())))),
        ]);
        let out = read(&encoder(NOW).image(&img).unwrap());
        assert_eq!(
            out, img,
            "a decimal in bytes is kept (Avro's own resolution refuses it)"
        );
    }

    #[test]
    fn an_older_image_gets_the_new_columns_null_and_promoted_types() {
        // written before `note` was added, with `id` an int
        let img = Value::Record(vec![
            ("id".into(), Value::Int(7)),
            ("amount".into(), Value::Union(0, Box::new(Value::Null))),
        ]);
        let out = read(&encoder(NOW).image(&img).unwrap());
        let Value::Record(f) = out else { panic!() };
        assert_eq!(f[0], ("id".into(), Value::Long(7)));
        assert_eq!(f[2], ("note".into(), Value::Union(0, Box::new(Value::Null))));
    }

    #[test]
    fn an_image_missing_a_required_column_is_refused() {
        let img = Value::Record(vec![("note".into(), Value::String("x".into()))]);
        assert!(encoder(NOW).image(&img).is_err());
    }
}
