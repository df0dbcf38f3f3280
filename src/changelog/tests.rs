use std::sync::Arc;

use apache_avro::types::Value as AV;
use arrow_array::builder::{MapBuilder, StringBuilder, Int32Builder};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Int64Array, ListArray,
    RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_array::types::Int32Type;
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
    let st: ArrayRef = Arc::new(StructArray::from(vec![(Arc::new(Field::new("f", DataType::Utf8, true)), inner)]));
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int64Array::from(vec![1, -70000000000]))),
        ("name", Arc::new(StringArray::from(vec![Some("alice"), None]))),
        ("ok", Arc::new(BooleanArray::from(vec![true, false]))),
        ("f", Arc::new(Float32Array::from(vec![1.1f32, -0.5]))),
        ("amount", Arc::new(Decimal128Array::from(vec![1234567, -1]).with_precision_and_scale(10, 2).unwrap())),
        ("day", Arc::new(Date32Array::from(vec![19000, -1]))),
        ("ts", Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_123_456, 0]).with_timezone("UTC"))),
        ("bin", Arc::new(BinaryArray::from(vec![b"\x00\xff" as &[u8], b""]))),
        ("m", map),
        ("l", list),
        ("s", st),
    ];
    let fields: Vec<Field> = cols.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols.into_iter().map(|(_, a)| a).collect()).unwrap()
}

#[test]
fn nullable_fields_default_to_null_so_added_columns_stay_compatible() {
    let b = batch();
    let schema_json = record("Value", b.schema().fields(), "Value").unwrap();
    for f in schema_json["fields"].as_array().unwrap() {
        assert_eq!(f["default"], serde_json::Value::Null, "{f}");
        assert!(f.get("default").is_some(), "{f}");
    }
}

#[test]
fn encoded_rows_decode_with_an_independent_avro_reader() {
    let b = batch();
    let schema_json = record("Value", b.schema().fields(), "Value").unwrap();
    let schema = apache_avro::Schema::parse(&schema_json).unwrap();
    let enc = RowEncoder::new(&b, &(0..b.num_columns()).collect::<Vec<_>>()).unwrap();
    let mut rows = Vec::new();
    for i in 0..b.num_rows() {
        let mut buf = Vec::new();
        enc.write(i, &mut buf);
        let v = apache_avro::from_avro_datum(&schema, &mut &buf[..], None).unwrap();
        rows.push(v);
    }
    let AV::Record(r0) = &rows[0] else { panic!() };
    let get = |r: &Vec<(String, AV)>, k: &str| r.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(get(r0, "id"), AV::Union(1, Box::new(AV::Long(1))));
    assert_eq!(get(r0, "name"), AV::Union(1, Box::new(AV::String("alice".into()))));
    assert_eq!(get(r0, "ts"), AV::Union(1, Box::new(AV::TimestampMicros(1_700_000_000_123_456))));
    assert_eq!(get(r0, "day"), AV::Union(1, Box::new(AV::Date(19000))));
    match get(r0, "amount") {
        AV::Union(1, d) => match *d {
            AV::Decimal(d) => assert_eq!(Vec::<u8>::try_from(d).unwrap(), 1234567i32.to_be_bytes()[1..].to_vec()),
            o => panic!("{o:?}"),
        },
        o => panic!("{o:?}"),
    }
    let AV::Record(r1) = &rows[1] else { panic!() };
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
