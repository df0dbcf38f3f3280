//! CDC log files (`hoodie.table.cdc.enabled=true`), written from Hudi's published format: a log
//! file named like a data log with a `.cdc` suffix, holding one CDC data block (block type 6, an
//! Avro data block) whose records follow the table's supplemental logging mode (`HoodieCDCUtils`):
//! `OP_KEY_ONLY` `{op, record_key}`, `DATA_BEFORE` `{op, record_key, before}`, `DATA_BEFORE_AFTER`
//! `{op, ts_ms, before, after}`; `op` is `i`/`u`/`d`, `ts_ms` the instant, and the images carry
//! the data columns only (no `_hoodie_*` meta fields). The commit's write stat lists the file in
//! `cdcStats` (relative path → size). Like Hudi's merge handle, a file group gets a CDC file when
//! an instant changes an existing slice; a new file group's rows are all inserts and need none.

use std::collections::HashMap;
use std::fs;

use super::{io, GenerateError, Partition, Row, AVRO_SCHEMA};
use crate::avro_binary::{write_bytes, write_long};
use crate::source::hudi::log::{avro_data_content, encode_block, INSTANT_TIME, SCHEMA};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CdcMode {
    OpKeyOnly,
    DataBefore,
    DataBeforeAfter,
}

impl CdcMode {
    /// `hoodie.table.cdc.supplemental.logging.mode` as Hudi 0.14+ writes it.
    pub fn property(self) -> &'static str {
        match self {
            CdcMode::OpKeyOnly => "OP_KEY_ONLY",
            CdcMode::DataBefore => "DATA_BEFORE",
            CdcMode::DataBeforeAfter => "DATA_BEFORE_AFTER",
        }
    }

    fn schema(self) -> String {
        let s = |n: &str| format!(r#"{{"name":"{n}","type":["null","string"],"default":null}}"#);
        let image = |n: &str, first: bool| {
            let t = if first {
                AVRO_SCHEMA.to_string()
            } else {
                "\"hoodie.demo.demo_record\"".to_string()
            };
            format!(r#"{{"name":"{n}","type":["null",{t}],"default":null}}"#)
        };
        let fields = match self {
            CdcMode::OpKeyOnly => {
                return r#"{"type":"record","name":"Record","fields":[{"name":"op","type":["string","null"]},{"name":"record_key","type":["string","null"]}]}"#.into()
            }
            CdcMode::DataBefore => [s("op"), s("record_key"), image("before", true)].join(","),
            CdcMode::DataBeforeAfter => [s("op"), s("ts_ms"), image("before", true), image("after", false)].join(","),
        };
        format!(r#"{{"type":"record","name":"CDC","namespace":"hoodie.demo","fields":[{fields}]}}"#)
    }
}

/// One data-column image (`demo_record`: every field a `["null", T]` union, present).
fn image(out: &mut Vec<u8>, key: &str, part: &str, r: &Row) {
    let present = |out: &mut Vec<u8>| write_long(out, 1);
    present(out);
    write_bytes(out, key.as_bytes());
    present(out);
    write_bytes(out, part.as_bytes());
    present(out);
    write_long(out, r.ts);
    present(out);
    write_long(out, r.round as i64);
    present(out);
    write_long(out, r.v1);
    present(out);
    out.extend_from_slice(&r.v2.to_le_bytes());
    present(out);
    write_bytes(out, r.tag.as_bytes());
}

/// `["null", T]` with a value (`Some`) or null.
fn opt_image(out: &mut Vec<u8>, key: &str, part: &str, r: Option<&Row>) {
    match r {
        Some(r) => {
            write_long(out, 1);
            image(out, key, part, r);
        }
        None => write_long(out, 0),
    }
}

/// What one instant wrote to a file group: keys upserted and deleted, and the old rows of the
/// updated and deleted ones (the partition's rows are already the new ones).
pub struct Change<'a> {
    pub upserts: &'a [String],
    pub deletes: &'a [String],
    pub before: &'a HashMap<String, Row>,
}

/// The CDC file of one file group's write in `instant`. Returns (relative path, size).
pub fn write(
    root: &std::path::Path,
    mode: CdcMode,
    p: &Partition,
    w: Change<'_>,
    instant: &str,
    seq: usize,
) -> Result<(String, u64), GenerateError> {
    let part = &p.name["part=".len()..];
    let mut records: Vec<(&str, &str, Option<&Row>, Option<&Row>)> = Vec::new();
    for k in w.upserts {
        let after = p.rows.get(k);
        match w.before.get(k) {
            Some(b) => records.push(("u", k, Some(b), after)),
            None => records.push(("i", k, None, after)),
        }
    }
    for k in w.deletes {
        records.push(("d", k, w.before.get(k), None));
    }
    let string = |out: &mut Vec<u8>, union_index: i64, s: &str| {
        write_long(out, union_index);
        write_bytes(out, s.as_bytes());
    };
    let content = avro_data_content(records.len(), |i, datum| {
        let (op, key, before, after) = records[i];
        match mode {
            CdcMode::OpKeyOnly => {
                string(datum, 0, op);
                string(datum, 0, key);
            }
            CdcMode::DataBefore => {
                string(datum, 1, op);
                string(datum, 1, key);
                opt_image(datum, key, part, before);
            }
            CdcMode::DataBeforeAfter => {
                string(datum, 1, op);
                string(datum, 1, instant);
                opt_image(datum, key, part, before);
                opt_image(datum, key, part, after);
            }
        }
    });
    let block = encode_block(6, &[(INSTANT_TIME, instant), (SCHEMA, &mode.schema())], &content);
    // named as the file slice's log file it accompanies (Hudi groups a `.cdc` file into the slice
    // its name says, then leaves it out of the read; named after the instant on merge-on-read, it
    // was a slice of its own, with no rows, and Hudi's time travel read the table as empty)
    let base = p.last_commit.as_deref().unwrap_or(instant);
    let rel = format!(
        "{}/.{}_{base}.log.{}_0-{seq}-{seq}.cdc",
        p.name,
        p.file_id,
        p.log_version.max(1)
    );
    let path = root.join(&rel);
    fs::write(&path, &block).map_err(io(&path))?;
    Ok((rel, block.len() as u64))
}
