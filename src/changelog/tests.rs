use std::sync::Arc;

use apache_avro::types::Value as AV;
use arrow_array::builder::{Int32Builder, MapBuilder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Int64Array, ListArray,
    RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema};

use super::avro::{record, RowEncoder};

fn batch() -> RecordBatch {
    let mut mb = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    mb.keys().append_value("a");
    mb.values().append_value(1);
    mb.append(true).unwrap();
    mb.append(false).unwrap();
    let map: ArrayRef = Arc::new(mb.finish());
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None, Some(3)]),
        Some(vec![]),
    ]));
    let inner: ArrayRef = Arc::new(StringArray::from(vec![Some("x"), None]));
    let st: ArrayRef = Arc::new(StructArray::from(vec![(
        Arc::new(Field::new("f", DataType::Utf8, true)),
        inner,
    )]));
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int64Array::from(vec![1, -70000000000]))),
        ("name", Arc::new(StringArray::from(vec![Some("alice"), None]))),
        ("ok", Arc::new(BooleanArray::from(vec![true, false]))),
        ("f", Arc::new(Float32Array::from(vec![1.1f32, -0.5]))),
        (
            "amount",
            Arc::new(
                Decimal128Array::from(vec![1234567, -1])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
        ),
        ("day", Arc::new(Date32Array::from(vec![19000, -1]))),
        (
            "ts",
            Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_123_456, 0]).with_timezone("UTC")),
        ),
        ("bin", Arc::new(BinaryArray::from(vec![b"\x00\xff" as &[u8], b""]))),
        ("m", map),
        ("l", list),
        ("s", st),
    ];
    batch_of(cols, true)
}

/// A batch of named columns, all nullable or all required.
fn batch_of(cols: Vec<(&str, ArrayRef)>, nullable: bool) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), nullable))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap()
}

#[test]
fn nullable_fields_default_to_null_so_added_columns_stay_compatible() {
    let b = batch();
    let schema_json = record("Value", b.schema().fields(), "Value", Default::default()).unwrap();
    for f in schema_json["fields"].as_array().unwrap() {
        assert_eq!(f["default"], serde_json::Value::Null, "{f}");
        assert!(f.get("default").is_some(), "{f}");
    }
}

#[test]
fn encoded_rows_decode_with_an_independent_avro_reader() {
    let (_, rows) = round_trip(&batch(), &Default::default());
    let (r0, r1) = (&rows[0], &rows[1]);
    let get = |r: &Vec<(String, AV)>, k: &str| r.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(get(r0, "id"), AV::Union(1, Box::new(AV::Long(1))));
    assert_eq!(get(r0, "name"), AV::Union(1, Box::new(AV::String("alice".into()))));
    assert_eq!(
        get(r0, "ts"),
        AV::Union(1, Box::new(AV::TimestampMicros(1_700_000_000_123_456)))
    );
    assert_eq!(get(r0, "day"), AV::Union(1, Box::new(AV::Date(19000))));
    match get(r0, "amount") {
        AV::Union(1, d) => match *d {
            AV::Decimal(d) => assert_eq!(Vec::<u8>::try_from(d).unwrap(), 1234567i32.to_be_bytes()[1..].to_vec()),
            o => panic!("{o:?}"),
        },
        o => panic!("{o:?}"),
    }
    assert_eq!(get(r1, "id"), AV::Union(1, Box::new(AV::Long(-70000000000))));
    assert_eq!(get(r1, "name"), AV::Union(0, Box::new(AV::Null)));
    assert_eq!(get(r1, "m"), AV::Union(0, Box::new(AV::Null)));
    match get(r0, "l") {
        AV::Union(1, l) => assert_eq!(
            *l,
            AV::Array(vec![
                AV::Union(1, Box::new(AV::Int(1))),
                AV::Union(0, Box::new(AV::Null)),
                AV::Union(1, Box::new(AV::Int(3)))
            ])
        ),
        o => panic!("{o:?}"),
    }
    match get(r1, "amount") {
        AV::Union(1, d) => match *d {
            AV::Decimal(d) => assert_eq!(Vec::<u8>::try_from(d).unwrap(), vec![0xff]),
            o => panic!("{o:?}"),
        },
        o => panic!("{o:?}"),
    }
}

/// Temporal columns of every precision, with and without a zone, row 0 a value and row 1 the
/// epoch's neighbourhood (negative: before 1970).
fn temporal_batch() -> RecordBatch {
    use arrow_array::{
        Time32SecondArray, Time64MicrosecondArray, Time64NanosecondArray, TimestampMillisecondArray,
        TimestampNanosecondArray,
    };
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("day", Arc::new(Date32Array::from(vec![19000, -1]))),
        ("t_s", Arc::new(Time32SecondArray::from(vec![3_661, 0]))),
        ("t_us", Arc::new(Time64MicrosecondArray::from(vec![3_661_000_123, 1]))),
        (
            "t_ns",
            Arc::new(Time64NanosecondArray::from(vec![3_661_000_123_456, 1])),
        ),
        (
            "utc_us",
            Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_123_456, -1]).with_timezone("UTC")),
        ),
        (
            "local_us",
            Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_123_456, -1])),
        ),
        (
            "local_ms",
            Arc::new(TimestampMillisecondArray::from(vec![1_700_000_000_123, -1])),
        ),
        (
            "utc_ns",
            Arc::new(TimestampNanosecondArray::from(vec![1_700_000_000_123_456_789, 0]).with_timezone("+00:00")),
        ),
    ];
    batch_of(cols, false)
}

/// (schema JSON, decoded rows as (column, value) lists) of `b` under `shape`.
fn round_trip(b: &RecordBatch, shape: &super::avro::Shape) -> (serde_json::Value, Vec<Vec<(String, AV)>>) {
    let fields: Vec<Field> = b.schema().fields().iter().map(|f| shape.field(f)).collect();
    let schema_json = record("Value", &fields, "Value", shape.time).unwrap();
    let schema = apache_avro::Schema::parse(&schema_json).unwrap();
    let enc = RowEncoder::new(b, &(0..b.num_columns()).collect::<Vec<_>>(), shape).unwrap();
    let rows = (0..b.num_rows())
        .map(|i| {
            let mut buf = Vec::new();
            enc.write(i, &mut buf);
            let v = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
                .build()
                .and_then(|r| r.read_value(&mut &buf[..]))
                .unwrap();
            let AV::Record(r) = v else { panic!("{v:?}") };
            r
        })
        .collect();
    (schema_json, rows)
}

fn column<'a>(schema: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    &schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap()["type"]
}

/// Every column optional, temporal columns as `time` says.
fn mode(time: crate::config::TimeMode) -> super::avro::Shape {
    super::avro::Shape { time, required: vec![] }
}

fn value(rows: &[Vec<(String, AV)>], row: usize, name: &str) -> AV {
    rows[row].iter().find(|(n, _)| n == name).unwrap().1.clone()
}

#[test]
fn adaptive_time_mode_writes_debezium_semantic_types() {
    use crate::config::TimeMode;
    let b = temporal_batch();
    let (schema, rows) = round_trip(&b, &mode(TimeMode::Adaptive));
    let name = |c: &str| column(&schema, c)["connect.name"].as_str().unwrap().to_string();
    assert_eq!(name("day"), "io.debezium.time.Date");
    assert_eq!(name("t_s"), "io.debezium.time.Time");
    assert_eq!(name("t_us"), "io.debezium.time.MicroTime");
    assert_eq!(name("t_ns"), "io.debezium.time.NanoTime");
    assert_eq!(name("utc_us"), "io.debezium.time.ZonedTimestamp");
    assert_eq!(name("local_us"), "io.debezium.time.MicroTimestamp");
    assert_eq!(name("local_ms"), "io.debezium.time.Timestamp");
    assert_eq!(column(&schema, "utc_us")["type"], "string");
    assert!(
        column(&schema, "local_us").get("logicalType").is_none(),
        "Debezium types carry no Avro logical type"
    );
    assert_eq!(value(&rows, 0, "day"), AV::Int(19000));
    assert_eq!(value(&rows, 0, "t_s"), AV::Int(3_661_000));
    assert_eq!(value(&rows, 0, "t_us"), AV::Long(3_661_000_123));
    assert_eq!(value(&rows, 0, "t_ns"), AV::Long(3_661_000_123_456));
    assert_eq!(
        value(&rows, 0, "utc_us"),
        AV::String("2023-11-14T22:13:20.123456Z".into())
    );
    assert_eq!(
        value(&rows, 1, "utc_us"),
        AV::String("1969-12-31T23:59:59.999999Z".into())
    );
    assert_eq!(
        value(&rows, 0, "utc_ns"),
        AV::String("2023-11-14T22:13:20.123456789Z".into())
    );
    assert_eq!(value(&rows, 0, "local_us"), AV::Long(1_700_000_000_123_456));
    assert_eq!(value(&rows, 0, "local_ms"), AV::Long(1_700_000_000_123));

    let (schema, rows) = round_trip(&b, &mode(TimeMode::AdaptiveTimeMicroseconds));
    assert_eq!(column(&schema, "t_s")["connect.name"], "io.debezium.time.MicroTime");
    assert_eq!(value(&rows, 0, "t_s"), AV::Long(3_661_000_000));
}

#[test]
fn connect_time_mode_writes_kafka_connect_logical_types_in_milliseconds() {
    use crate::config::TimeMode;
    let b = temporal_batch();
    let (schema, rows) = round_trip(&b, &mode(TimeMode::Connect));
    for (c, n) in [
        ("day", "Date"),
        ("t_us", "Time"),
        ("utc_us", "Timestamp"),
        ("local_us", "Timestamp"),
    ] {
        assert_eq!(
            column(&schema, c)["connect.name"],
            format!("org.apache.kafka.connect.data.{n}"),
            "{c}"
        );
    }
    assert_eq!(value(&rows, 0, "t_us"), AV::TimeMillis(3_661_000));
    assert_eq!(value(&rows, 0, "t_ns"), AV::TimeMillis(3_661_000));
    assert_eq!(value(&rows, 0, "utc_us"), AV::TimestampMillis(1_700_000_000_123));
    assert_eq!(value(&rows, 0, "utc_ns"), AV::TimestampMillis(1_700_000_000_123));
    // before the epoch, sub-millisecond digits round down, as Connect's Timestamp (a Date) would
    assert_eq!(value(&rows, 1, "utc_us"), AV::TimestampMillis(-1));
    assert_eq!(value(&rows, 0, "day"), AV::Date(19000));

    // the default is Avro's own logical types, as before the option existed
    let (schema, rows) = round_trip(&b, &Default::default());
    assert_eq!(column(&schema, "utc_us")["logicalType"], "timestamp-micros");
    assert_eq!(column(&schema, "local_us")["logicalType"], "local-timestamp-micros");
    assert!(column(&schema, "utc_us").get("connect.name").is_none());
    assert_eq!(value(&rows, 0, "utc_us"), AV::TimestampMicros(1_700_000_000_123_456));
}

#[test]
fn required_columns_are_plain_types_and_a_null_in_one_is_refused() {
    let b = batch();
    let shape = super::avro::Shape {
        time: Default::default(),
        required: vec!["id".into(), "ok".into()],
    };
    let (schema, rows) = round_trip(&b, &shape);
    assert_eq!(column(&schema, "id"), &serde_json::json!("long"));
    assert_eq!(column(&schema, "ok"), &serde_json::json!("boolean"));
    assert_eq!(
        column(&schema, "name"),
        &serde_json::json!(["null", "string"]),
        "columns not declared required stay optional"
    );
    assert_eq!(value(&rows, 1, "id"), AV::Long(-70000000000));
    // `name` holds a null: declaring it required must fail naming it, not write a wrong record
    let shape = super::avro::Shape {
        time: Default::default(),
        required: vec!["name".into()],
    };
    let err = RowEncoder::new(&b, &[1], &shape)
        .err()
        .expect("a null in a required column is refused")
        .to_string();
    assert!(
        err.contains("`name`") && err.contains("schema.nullability=optional"),
        "{err}"
    );
}
