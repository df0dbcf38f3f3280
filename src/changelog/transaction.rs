//! Debezium transaction metadata (`provide.transaction.metadata`): each event carries the lake
//! commit it belongs to (`transaction {id, total_order, data_collection_order}`; the id is the
//! Hudi instant or Iceberg snapshot), and a BEGIN and an END record per commit (`status`, `id`,
//! `event_count`, `data_collections`) go to `<topic>.transaction`, keyed by the id, so a
//! consumer can apply whole commits. The runtime publishes them in the same Kafka transactions as
//! the events; their schemas follow Debezium's field names.

use serde_json::{json, Value};

use super::avro::{write_bytes, write_long};
use super::KafkaRecord;

/// The envelope's `transaction` field: null, or the event's place in its commit.
pub fn block_field(namespace: &str) -> Value {
    json!({"name": "transaction", "default": null, "type": ["null", {
    "type": "record", "name": "TransactionBlock", "namespace": namespace, "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ]}]})
}

/// The `transaction` field's value: `order` counts the commit's events from 1 (one table: the
/// order within the data collection is the same).
pub fn write_block(out: &mut Vec<u8>, id: &str, order: u64) {
    out.push(2);
    write_bytes(out, id.as_bytes());
    write_long(out, order as i64);
    write_long(out, order as i64);
}

pub fn key_schema(namespace: &str) -> Value {
    json!({"type": "record", "name": "TransactionKey", "namespace": namespace, "fields": [{"name": "id", "type": "string"}]})
}

pub fn value_schema(namespace: &str) -> Value {
    json!({"type": "record", "name": "TransactionValue", "namespace": namespace, "fields": [
        {"name": "status", "type": "string"},
        {"name": "id", "type": "string"},
        {"name": "event_count", "type": ["null", "long"], "default": null},
        {"name": "data_collections", "default": null, "type": ["null", {"type": "array", "items": {
            "type": "record", "name": "DataCollection", "fields": [
                {"name": "data_collection", "type": "string"},
                {"name": "event_count", "type": "long"},
            ]}}]},
        {"name": "ts_ms", "type": "long"},
    ]})
}

/// Encodes BEGIN and END records under registered schema ids.
pub struct Markers {
    pub key_id: u32,
    pub value_id: u32,
    /// The table's name (`data_collection`).
    pub collection: String,
}

fn framed(id: u32) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v
}

impl Markers {
    fn record(&self, status: &str, id: &str, count: Option<u64>, ts_ms: i64) -> KafkaRecord {
        let mut key = framed(self.key_id);
        write_bytes(&mut key, id.as_bytes());
        let mut value = framed(self.value_id);
        write_bytes(&mut value, status.as_bytes());
        write_bytes(&mut value, id.as_bytes());
        match count {
            Some(n) => {
                value.push(2);
                write_long(&mut value, n as i64);
                // one data collection: (block count 1, the item, end of array)
                value.push(2);
                write_long(&mut value, 1);
                write_bytes(&mut value, self.collection.as_bytes());
                write_long(&mut value, n as i64);
                write_long(&mut value, 0);
            }
            None => value.extend_from_slice(&[0, 0]),
        }
        write_long(&mut value, ts_ms);
        KafkaRecord {
            key,
            value: Some(value),
        }
    }

    pub fn begin(&self, id: &str, ts_ms: i64) -> KafkaRecord {
        self.record("BEGIN", id, None, ts_ms)
    }

    pub fn end(&self, id: &str, events: u64, ts_ms: i64) -> KafkaRecord {
        self.record("END", id, Some(events), ts_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_decode_with_their_schemas() {
        let m = Markers {
            key_id: 7,
            value_id: 8,
            collection: "orders".into(),
        };
        let schema = apache_avro::Schema::parse(&value_schema("lakestream.orders")).unwrap();
        for (rec, want) in [
            (m.begin("42", 5), (None, None)),
            (m.end("42", 3, 6), (Some(3), Some(1))),
        ] {
            let value = rec.value.unwrap();
            assert_eq!(&value[..5], &[0, 0, 0, 0, 8]);
            let v = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
                .build()
                .and_then(|r| r.read_value(&mut &value[5..]))
                .unwrap();
            let apache_avro::types::Value::Record(fields) = v else {
                panic!("record")
            };
            let count = match &fields[2].1 {
                apache_avro::types::Value::Union(_, b) => match b.as_ref() {
                    apache_avro::types::Value::Long(n) => Some(*n),
                    _ => None,
                },
                _ => panic!("union"),
            };
            let collections = match &fields[3].1 {
                apache_avro::types::Value::Union(_, b) => match b.as_ref() {
                    apache_avro::types::Value::Array(a) => Some(a.len()),
                    _ => None,
                },
                _ => panic!("union"),
            };
            assert_eq!((count, collections), want);
        }
        let key_schema = apache_avro::Schema::parse(&key_schema("lakestream.orders")).unwrap();
        let key = m.begin("42", 5).key;
        assert!(apache_avro::reader::datum::GenericDatumReader::builder(&key_schema)
            .build()
            .and_then(|r| r.read_value(&mut &key[5..]))
            .is_ok());
    }
}
