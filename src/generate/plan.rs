//! The compaction plan the generator writes to `<instant>.compaction.requested`, as Hudi writes
//! it: an Avro data file holding one `HoodieCompactionPlan` (version 2: file names relative to
//! their partition), one operation a file slice. Hudi's own readers refuse an empty one ("Not an
//! Avro data file"); lakestream reads the completed `commit` only.

use std::fs;
use std::path::Path;

use apache_avro::types::Value;

use super::{GenerateError, Partition};

/// `HoodieCompactionPlan` as Hudi 0.14 declares it (later versions add fields with defaults).
const PLAN_SCHEMA: &str = r#"{"type":"record","name":"HoodieCompactionPlan","namespace":"org.apache.hudi.avro.model","fields":[
{"name":"operations","type":["null",{"type":"array","items":{"type":"record","name":"HoodieCompactionOperation","fields":[
 {"name":"baseInstantTime","type":["null","string"]},
 {"name":"deltaFilePaths","type":["null",{"type":"array","items":"string"}],"default":null},
 {"name":"dataFilePath","type":["null","string"],"default":null},
 {"name":"fileId","type":["null","string"]},
 {"name":"partitionPath","type":["null","string"],"default":null},
 {"name":"metrics","type":["null",{"type":"map","values":"double"}],"default":null},
 {"name":"bootstrapFilePath","type":["null","string"],"default":null}]}}],"default":null},
{"name":"extraMetadata","type":["null",{"type":"map","values":"string"}],"default":null},
{"name":"version","type":["int","null"],"default":1}]}"#;

/// The plan compacting `parts`' current slices (under `table`), as Avro data file bytes.
pub(super) fn compaction_plan(table: &Path, parts: &[&Partition]) -> Result<Vec<u8>, GenerateError> {
    let bad = |e: apache_avro::Error| GenerateError::Input(format!("compaction plan: {e}"));
    let schema = apache_avro::Schema::parse_str(PLAN_SCHEMA).map_err(bad)?;
    let text = |s: &str| Value::Union(1, Box::new(Value::String(s.to_string())));
    let null = || Value::Union(0, Box::new(Value::Null));
    let mut ops = Vec::new();
    for p in parts {
        let base = p.last_commit.clone().unwrap_or_default();
        let dir = table.join(&p.name);
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map_err(|source| GenerateError::Io {
                path: dir.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        names.sort();
        let logs: Vec<Value> = names
            .iter()
            .filter(|n| n.starts_with(&format!(".{}_{base}.log.", p.file_id)))
            .map(|n| Value::String(n.clone()))
            .collect();
        let data = names
            .iter()
            .find(|n| n.starts_with(&format!("{}_", p.file_id)) && n.ends_with(&format!("_{base}.parquet")));
        ops.push(Value::Record(vec![
            ("baseInstantTime".into(), text(&base)),
            ("deltaFilePaths".into(), Value::Union(1, Box::new(Value::Array(logs)))),
            ("dataFilePath".into(), data.map_or_else(null, |d| text(d))),
            ("fileId".into(), text(&p.file_id)),
            ("partitionPath".into(), text(&p.name)),
            ("metrics".into(), null()),
            ("bootstrapFilePath".into(), null()),
        ]));
    }
    let plan = Value::Record(vec![
        ("operations".into(), Value::Union(1, Box::new(Value::Array(ops)))),
        ("extraMetadata".into(), null()),
        ("version".into(), Value::Union(0, Box::new(Value::Int(2)))),
    ]);
    let mut w = apache_avro::Writer::new(&schema, Vec::new()).map_err(bad)?;
    w.append_value(plan).map_err(bad)?;
    w.into_inner().map_err(bad)
}
