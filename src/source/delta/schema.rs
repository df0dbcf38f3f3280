//! A Delta table's schema (`metaData.schemaString`) as Arrow, its column mapping (physical
//! names and ids of `delta.columnMapping.mode` = `name` / `id`), and the protocol check: a table
//! needing a reader feature this reader lacks fails at open, naming the feature.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use serde_json::Value;

use super::log::{Metadata, Protocol};
use crate::source::SourceError;

/// Reader features whose data this reader reads correctly.
const SUPPORTED_READER_FEATURES: &[&str] = &[
    "columnMapping",
    "deletionVectors",
    "timestampNtz",
    "v2Checkpoint",
    "vacuumProtocolCheck",
    "typeWidening",
    "typeWidening-preview",
];

/// Fail on a protocol this reader cannot honour.
pub fn check_protocol(p: &Protocol, at: &str) -> Result<(), SourceError> {
    if p.min_reader_version > 3 {
        return Err(SourceError::Unsupported {
            message: format!(
                "{at}: Delta reader version {} (this reader knows versions 1 to 3)",
                p.min_reader_version
            ),
        });
    }
    let missing: Vec<&String> = p
        .reader_features
        .iter()
        .flatten()
        .filter(|f| !SUPPORTED_READER_FEATURES.contains(&f.as_str()))
        .collect();
    if let Some(f) = missing.first() {
        return Err(SourceError::Unsupported {
            message: format!(
                "{at}: the table needs the Delta reader feature `{f}`, which lakestream does not read (it reads: {}); \
                 its rows would be read wrong, so nothing is emitted",
                SUPPORTED_READER_FEATURES.join(", ")
            ),
        });
    }
    Ok(())
}

/// The table's columns as Arrow (logical names), with each column's physical name where the
/// table maps columns.
#[derive(Debug, Clone)]
pub struct DeltaSchema {
    pub arrow: SchemaRef,
    /// Top-level column → (physical name, field id) under column mapping.
    pub physical: HashMap<String, (String, Option<i32>)>,
    pub partition_columns: Vec<String>,
    pub mapped: bool,
}

impl DeltaSchema {
    pub fn parse(md: &Metadata, at: &str) -> Result<Self, SourceError> {
        let bad = |m: String| SourceError::Unreadable {
            why: crate::source::Unreadable::Damaged,
            message: format!("{at}: metaData.schemaString: {m}"),
        };
        let v: Value = serde_json::from_str(&md.schema_string).map_err(|e| bad(e.to_string()))?;
        let mode = md.setting("delta.columnMapping.mode").unwrap_or("none");
        let mapped = matches!(mode, "name" | "id");
        let fields = v
            .get("fields")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no fields".into()))?;
        let mut out = Vec::new();
        let mut physical = HashMap::new();
        for f in fields {
            let field = field(f).map_err(bad)?;
            if mapped {
                let meta = f.get("metadata");
                let name = meta
                    .and_then(|m| m.get("delta.columnMapping.physicalName"))
                    .and_then(Value::as_str)
                    .unwrap_or(field.name())
                    .to_string();
                let id = meta
                    .and_then(|m| m.get("delta.columnMapping.id"))
                    .and_then(Value::as_i64)
                    .map(|i| i as i32);
                physical.insert(field.name().clone(), (name, id));
            }
            out.push(field);
        }
        for p in &md.partition_columns {
            if !out.iter().any(|f| f.name() == p) {
                return Err(bad(format!("partition column `{p}` is not a column")));
            }
        }
        Ok(Self {
            arrow: Arc::new(Schema::new(out)),
            physical,
            partition_columns: md.partition_columns.clone(),
            mapped,
        })
    }

    /// The name of a column in data files and partition values.
    pub fn physical_name<'a>(&'a self, logical: &'a str) -> &'a str {
        self.physical.get(logical).map_or(logical, |(p, _)| p.as_str())
    }
}

fn field(f: &Value) -> Result<Field, String> {
    let name = f.get("name").and_then(Value::as_str).ok_or("a field without a name")?;
    let nullable = f.get("nullable").and_then(Value::as_bool).unwrap_or(true);
    let t = f.get("type").ok_or_else(|| format!("field `{name}` has no type"))?;
    Ok(Field::new(
        name,
        data_type(t).map_err(|e| format!("field `{name}`: {e}"))?,
        nullable,
    ))
}

/// A Delta type as Arrow: timestamps in microseconds (UTC for `timestamp`, none for
/// `timestamp_ntz`), as Delta stores them.
pub fn data_type(t: &Value) -> Result<DataType, String> {
    if let Some(s) = t.as_str() {
        return Ok(match s {
            "string" => DataType::Utf8,
            "long" => DataType::Int64,
            "integer" => DataType::Int32,
            "short" => DataType::Int16,
            "byte" => DataType::Int8,
            "float" => DataType::Float32,
            "double" => DataType::Float64,
            "boolean" => DataType::Boolean,
            "binary" => DataType::Binary,
            "date" => DataType::Date32,
            "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            "timestamp_ntz" => DataType::Timestamp(TimeUnit::Microsecond, None),
            s if s.starts_with("decimal(") => {
                let inner = s.trim_start_matches("decimal(").trim_end_matches(')');
                let (p, sc) = inner.split_once(',').ok_or_else(|| format!("bad decimal `{s}`"))?;
                let p: u8 = p.trim().parse().map_err(|_| format!("bad decimal `{s}`"))?;
                let sc: i8 = sc.trim().parse().map_err(|_| format!("bad decimal `{s}`"))?;
                DataType::Decimal128(p, sc)
            }
            other => return Err(format!("type `{other}` is not supported")),
        });
    }
    match t.get("type").and_then(Value::as_str) {
        Some("struct") => {
            let fs = t
                .get("fields")
                .and_then(Value::as_array)
                .ok_or("struct without fields")?;
            let fields: Fields = fs.iter().map(field).collect::<Result<Vec<_>, _>>()?.into();
            Ok(DataType::Struct(fields))
        }
        Some("array") => {
            let e = data_type(t.get("elementType").ok_or("array without elementType")?)?;
            let null = t.get("containsNull").and_then(Value::as_bool).unwrap_or(true);
            Ok(DataType::List(Arc::new(Field::new("element", e, null))))
        }
        Some("map") => {
            let k = data_type(t.get("keyType").ok_or("map without keyType")?)?;
            let v = data_type(t.get("valueType").ok_or("map without valueType")?)?;
            let null = t.get("valueContainsNull").and_then(Value::as_bool).unwrap_or(true);
            let entries = Field::new(
                "key_value",
                DataType::Struct(vec![Field::new("key", k, false), Field::new("value", v, null)].into()),
                false,
            );
            Ok(DataType::Map(Arc::new(entries), false))
        }
        _ => Err(format!("type `{t}` is not supported")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(schema: &str, mode: Option<&str>) -> Metadata {
        Metadata {
            id: "t".into(),
            schema_string: schema.into(),
            partition_columns: vec!["p".into()],
            configuration: mode
                .map(|m| [("delta.columnMapping.mode".to_string(), Some(m.to_string()))].into())
                .unwrap_or_default(),
        }
    }

    #[test]
    fn types_and_column_mapping() {
        let s = r#"{"type":"struct","fields":[
            {"name":"id","type":"long","nullable":false,"metadata":{"delta.columnMapping.id":1,"delta.columnMapping.physicalName":"col-a1"}},
            {"name":"p","type":"string","nullable":true,"metadata":{"delta.columnMapping.id":2,"delta.columnMapping.physicalName":"col-b2"}},
            {"name":"amount","type":"decimal(10,2)","nullable":true,"metadata":{}},
            {"name":"at","type":"timestamp_ntz","nullable":true,"metadata":{}},
            {"name":"tags","type":{"type":"array","elementType":"string","containsNull":true},"nullable":true,"metadata":{}},
            {"name":"m","type":{"type":"map","keyType":"string","valueType":"integer","valueContainsNull":true},"nullable":true,"metadata":{}},
            {"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"double","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}}
        ]}"#;
        let d = DeltaSchema::parse(&md(s, Some("name")), "v0").expect("parses");
        assert!(d.mapped);
        assert_eq!(d.physical_name("id"), "col-a1");
        assert_eq!(d.physical["p"].1, Some(2));
        assert_eq!(d.physical_name("amount"), "amount");
        let f = d.arrow.fields();
        assert_eq!(f[0].data_type(), &DataType::Int64);
        assert!(!f[0].is_nullable());
        assert_eq!(f[2].data_type(), &DataType::Decimal128(10, 2));
        assert_eq!(f[3].data_type(), &DataType::Timestamp(TimeUnit::Microsecond, None));
        assert!(matches!(f[4].data_type(), DataType::List(_)));
        assert!(matches!(f[5].data_type(), DataType::Map(..)));
        let plain = DeltaSchema::parse(&md(s, None), "v0").expect("parses");
        assert_eq!(plain.physical_name("id"), "id");
        assert!(DeltaSchema::parse(
            &md(r#"{"type":"struct","fields":[{"name":"v","type":"variant"}]}"#, None),
            "v0"
        )
        .is_err());
    }

    #[test]
    fn unknown_reader_features_are_refused_by_name() {
        let p = |f: &[&str]| Protocol {
            min_reader_version: 3,
            min_writer_version: 7,
            reader_features: Some(f.iter().map(|s| s.to_string()).collect()),
            writer_features: None,
        };
        assert!(check_protocol(&p(&["deletionVectors", "columnMapping"]), "v1").is_ok());
        let e = check_protocol(&p(&["deletionVectors", "variantType"]), "v1").expect_err("refused");
        assert!(e.to_string().contains("`variantType`"), "{e}");
    }
}
