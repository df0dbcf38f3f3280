//! What log blocks hold: Avro data blocks (streamed, 8,192 records a batch), Parquet data blocks,
//! delete blocks (keys and ordering values), and the writers' side of the format (block and
//! Avro data encoding, for the generator and the tests).

use std::io::{Cursor, Read};
use std::path::Path;

use arrow_array::RecordBatch;

use super::{Content, Cur, LogBlock, MAGIC, SCHEMA};
use crate::source::SourceError;

/// An Avro data block's error, naming the file and the block.
fn avro_bad(block: &LogBlock, path: &Path, m: String) -> SourceError {
    SourceError::format(path, format!("Avro data block at offset {}: {m}", block.offset))
}

/// An Avro data block's writer schema (its SCHEMA header).
fn avro_block_schema<'b>(block: &'b LogBlock, path: &Path) -> Result<&'b str, SourceError> {
    block
        .header
        .get(&SCHEMA)
        .map(String::as_str)
        .ok_or_else(|| avro_bad(block, path, "no SCHEMA header".into()))
}

/// The record datums of an Avro data block, streamed from its content and handed to `f` one at
/// a time until it returns false.
fn avro_block_each(
    block: &LogBlock,
    path: &Path,
    f: &mut dyn FnMut(&[u8]) -> Result<bool, SourceError>,
) -> Result<(), SourceError> {
    let bad = |m: String| avro_bad(block, path, m);
    let content_len = match &block.content {
        Content::Mem { bytes, .. } => bytes.len() as u64,
        Content::At { len, .. } => *len,
    };
    let mut r = block.reader(path)?;
    let be = |r: &mut Box<dyn Read + Send>, what: &str| -> Result<i32, SourceError> {
        let mut b = [0u8; 4];
        r.read_exact(&mut b).map_err(|e| bad(format!("{what}: {e}")))?;
        Ok(i32::from_be_bytes(b))
    };
    let version = be(&mut r, "truncated")?;
    let mut consumed = 4u64;
    let count = if version >= 2 {
        consumed += 4;
        usize::try_from(be(&mut r, "truncated")?).map_err(|_| bad("negative record count".into()))?
    } else {
        usize::MAX
    };
    let mut datum = Vec::new();
    let mut done = 0usize;
    while done < count && consumed < content_len {
        let len = usize::try_from(be(&mut r, "bad record length")?).map_err(|_| bad("bad record length".into()))?;
        consumed += 4 + len as u64;
        if consumed > content_len {
            return Err(bad("record past the block end".into()));
        }
        datum.resize(len, 0);
        r.read_exact(&mut datum)
            .map_err(|e| bad(format!("record past the block end: {e}")))?;
        done += 1;
        if !f(&datum)? {
            break;
        }
    }
    Ok(())
}

/// Records of an Avro data block as JSON values (small metadata blocks: the archived timeline).
pub fn avro_block_json(block: &LogBlock, path: &Path) -> Result<Vec<serde_json::Value>, SourceError> {
    let bad = |m: String| avro_bad(block, path, m);
    let schema =
        apache_avro::Schema::parse_str(avro_block_schema(block, path)?).map_err(|e| bad(format!("schema: {e}")))?;
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
        .build()
        .map_err(|e| bad(format!("schema: {e}")))?;
    let mut out = Vec::new();
    avro_block_each(block, path, &mut |d| {
        let v = reader.read_value(&mut &d[..]).map_err(|e| bad(e.to_string()))?;
        out.push(serde_json::Value::try_from(v).map_err(|e| bad(e.to_string()))?);
        Ok(true)
    })?;
    Ok(out)
}

/// Records of an Avro data block as Arrow, decoded with the block's writer schema, handed to `f`
/// batch by batch until it returns false: the content is read as a stream and only one batch of
/// records is held (raw and decoded) at a time.
pub fn avro_block_batches(
    block: &LogBlock,
    path: &Path,
    f: &mut dyn FnMut(RecordBatch) -> Result<bool, SourceError>,
) -> Result<(), SourceError> {
    let bad = |m: String| avro_bad(block, path, m);
    let schema = avro_block_schema(block, path)?;
    // the datums of one batch wrapped in an in-memory Avro object container file for arrow-avro
    let decode = |n: usize,
                  data: &[u8],
                  f: &mut dyn FnMut(RecordBatch) -> Result<bool, SourceError>|
     -> Result<bool, SourceError> {
        let mut ocf = Vec::with_capacity(data.len() + schema.len() + 64);
        ocf.extend_from_slice(b"Obj\x01");
        crate::avro_binary::write_long(&mut ocf, 2);
        for (k, v) in [("avro.schema", schema.as_bytes()), ("avro.codec", b"null".as_slice())] {
            crate::avro_binary::write_bytes(&mut ocf, k.as_bytes());
            crate::avro_binary::write_bytes(&mut ocf, v);
        }
        ocf.push(0);
        let sync = [0x5au8; 16];
        ocf.extend_from_slice(&sync);
        crate::avro_binary::write_long(&mut ocf, n as i64);
        crate::avro_binary::write_long(&mut ocf, data.len() as i64);
        ocf.extend_from_slice(data);
        ocf.extend_from_slice(&sync);
        let reader = arrow_avro::reader::ReaderBuilder::new()
            .with_batch_size(BATCH_RECORDS)
            .build(Cursor::new(ocf))
            .map_err(|e| bad(format!("schema not readable: {e}")))?;
        for b in reader {
            if !f(b.map_err(|e| bad(format!("records not readable: {e}")))?)? {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let (mut n, mut data, mut more) = (0usize, Vec::new(), true);
    avro_block_each(block, path, &mut |d| {
        data.extend_from_slice(d);
        n += 1;
        if n == BATCH_RECORDS {
            more = decode(n, &data, f)?;
            n = 0;
            data.clear();
        }
        Ok(more)
    })?;
    if more && n > 0 {
        decode(n, &data, f)?;
    }
    Ok(())
}

/// Records decoded at a time from a data block.
pub(super) const BATCH_RECORDS: usize = 8192;

/// Records of a Parquet data block (the content is a whole Parquet file), batch by batch until
/// `f` returns false.
pub fn parquet_block_batches(
    block: &LogBlock,
    path: &Path,
    f: &mut dyn FnMut(RecordBatch) -> Result<bool, SourceError>,
) -> Result<(), SourceError> {
    let perr = |source| SourceError::parquet(path)(source);
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(block.bytes(path)?)
        .map_err(perr)?
        .with_batch_size(BATCH_RECORDS)
        .build()
        .map_err(perr)?;
    for b in reader {
        if !f(b.map_err(|e| SourceError::format(path, format!("Parquet data block at offset {}: {e}", block.offset)))?)?
        {
            break;
        }
    }
    Ok(())
}

/// The content of an Avro data block (also a CDC block): content version 3, the record count,
/// then each record's length and Avro datum, as `write(i, datum)` writes record `i`.
pub fn avro_data_content(count: usize, mut write: impl FnMut(usize, &mut Vec<u8>)) -> Vec<u8> {
    let mut content = Vec::new();
    content.extend_from_slice(&3i32.to_be_bytes());
    content.extend_from_slice(&(count as i32).to_be_bytes());
    let mut datum = Vec::new();
    for i in 0..count {
        datum.clear();
        write(i, &mut datum);
        content.extend_from_slice(&(datum.len() as i32).to_be_bytes());
        content.extend_from_slice(&datum);
    }
    content
}

/// Encode one block (format version 1, empty footer), as Hudi's writer lays it out.
pub fn encode_block(block_type: i32, header: &[(i32, &str)], content: &[u8]) -> Vec<u8> {
    let mut inner = Vec::with_capacity(content.len() + 256);
    inner.extend_from_slice(&1i32.to_be_bytes());
    inner.extend_from_slice(&block_type.to_be_bytes());
    inner.extend_from_slice(&(header.len() as i32).to_be_bytes());
    for (k, v) in header {
        inner.extend_from_slice(&k.to_be_bytes());
        inner.extend_from_slice(&(v.len() as i32).to_be_bytes());
        inner.extend_from_slice(v.as_bytes());
    }
    inner.extend_from_slice(&(content.len() as i64).to_be_bytes());
    inner.extend_from_slice(content);
    inner.extend_from_slice(&0i32.to_be_bytes());
    // the size field counts what follows it; the trailing length, what precedes the trailer
    let size = inner.len() + 8;
    inner.extend_from_slice(&((size + MAGIC.len()) as i64).to_be_bytes());
    let mut out = Vec::with_capacity(size + 14);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(size as i64).to_be_bytes());
    out.extend_from_slice(&inner);
    out
}

/// A key deleted by a delete block.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletedKey {
    pub record_key: String,
    pub partition_path: Option<String>,
    /// The ordering value the writer gave the delete (`None`: none, a delete that wins by commit
    /// time; see [`crate::source::hudi::rule`]).
    pub ordering: Option<OrderingValue>,
}

/// A delete record's ordering value as Hudi wraps it (`HoodieDeleteRecord.orderingVal`: one
/// wrapper record per Java type, which decides how it compares).
#[derive(Debug, Clone, PartialEq)]
pub enum OrderingValue {
    Bool(bool),
    Int(i32),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(Vec<u8>),
    String(String),
    /// Days since the epoch.
    Date(i32),
    /// Unscaled big-endian two's complement, scale 15 (the wrapper's schema).
    Decimal(Vec<u8>),
    TimeMicros(i64),
    TimestampMicros(i64),
    /// Several ordering fields (`ArrayComparable`), each wrapped (`None`: null).
    Array(Vec<Option<OrderingValue>>),
}

impl OrderingValue {
    /// Hudi's "no ordering value" marker: an `Integer` 0 (`OrderingValues.isDefault`, the value a
    /// delete gets when its record had none), which orders by commit time, not event time.
    pub fn is_default(&self) -> bool {
        matches!(self, OrderingValue::Int(0))
    }

    /// The value of a wrapper record (the union's branch `i`; `item`: an element of an array).
    fn of(v: &apache_avro::types::Value, item: bool) -> Option<Self> {
        use apache_avro::types::Value as V;
        let V::Union(i, inner) = v else { return None };
        let V::Record(f) = inner.as_ref() else { return None };
        let value = &f.first()?.1;
        Some(match (i, value) {
            (12, V::Int(x) | V::Date(x)) if item => OrderingValue::Date(*x),
            (12, V::Union(_, items)) if !item => match items.as_ref() {
                V::Array(items) => OrderingValue::Array(
                    items
                        .iter()
                        .map(|x| match x {
                            V::Union(0, _) => Some(None),
                            x => OrderingValue::of(x, true).map(Some),
                        })
                        .collect::<Option<_>>()?,
                ),
                _ => return None,
            },
            (1, V::Boolean(b)) => OrderingValue::Bool(*b),
            (2, V::Int(x)) => OrderingValue::Int(*x),
            (3, V::Long(x)) => OrderingValue::Long(*x),
            (4, V::Float(x)) => OrderingValue::Float(*x),
            (5, V::Double(x)) => OrderingValue::Double(*x),
            (6, V::Bytes(b)) => OrderingValue::Bytes(b.clone()),
            (7, V::String(s)) => OrderingValue::String(s.clone()),
            (8, V::Int(x) | V::Date(x)) => OrderingValue::Date(*x),
            (9, V::Decimal(d)) => OrderingValue::Decimal(Vec::<u8>::try_from(d).ok()?),
            (9, V::Bytes(b)) => OrderingValue::Decimal(b.clone()),
            (10, V::TimeMicros(x) | V::Long(x)) => OrderingValue::TimeMicros(*x),
            (11, V::Long(x) | V::TimestampMicros(x)) => OrderingValue::TimestampMicros(*x),
            _ => return None,
        })
    }
}

/// Keys of a delete block (content version 3: Avro `HoodieDeleteRecordList`).
pub fn delete_block_keys(block: &LogBlock, path: &Path) -> Result<Vec<DeletedKey>, SourceError> {
    let bad = |m: String| SourceError::format(path, format!("delete block at offset {}: {m}", block.offset));
    let content = block.bytes(path)?;
    let mut c = Cur { b: &content, pos: 0 };
    let version = c.i32().ok_or_else(|| bad("truncated".into()))?;
    if version < 3 {
        return Err(bad(format!(
            "content version {version} is Kryo-serialized Java (Hudi < 0.13); rewrite the table with a newer Hudi"
        )));
    }
    let len = c
        .i32()
        .and_then(|l| usize::try_from(l).ok())
        .ok_or_else(|| bad("bad length".into()))?;
    let data = c.take(len).ok_or_else(|| bad("truncated".into()))?;
    let schema = apache_avro::Schema::parse_str(DELETE_RECORD_LIST_SCHEMA).expect("static schema");
    let value = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
        .build()
        .and_then(|r| r.read_value(&mut &data[..]))
        .map_err(|e| bad(e.to_string()))?;
    use apache_avro::types::Value as V;
    let unwrap = |v: &V| -> Option<String> {
        match v {
            V::Union(_, inner) => match inner.as_ref() {
                V::String(s) => Some(s.clone()),
                _ => None,
            },
            V::String(s) => Some(s.clone()),
            _ => None,
        }
    };
    let mut out = Vec::new();
    if let V::Record(fields) = value {
        if let Some((_, V::Array(items))) = fields.first() {
            for item in items {
                if let V::Record(f) = item {
                    let key = f.iter().find(|(n, _)| n == "recordKey").and_then(|(_, v)| unwrap(v));
                    let part = f
                        .iter()
                        .find(|(n, _)| n == "partitionPath")
                        .and_then(|(_, v)| unwrap(v));
                    let ordering = match f.iter().find(|(n, _)| n == "orderingVal").map(|(_, v)| v) {
                        None | Some(V::Union(0, _)) => None,
                        Some(v) => Some(OrderingValue::of(v, false).ok_or_else(|| {
                            bad(format!("delete record with an ordering value of no known type: {v:?}"))
                        })?),
                    };
                    match key {
                        Some(record_key) => out.push(DeletedKey {
                            record_key,
                            partition_path: part,
                            ordering,
                        }),
                        None => return Err(bad("delete record without a record key".into())),
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `HoodieDeleteRecordList` (Hudi 0.13+): each delete's key, partition and ordering value; the
/// wrapper union as Hudi 1.1 has it (0.13–1.0 wrote the first twelve branches, at the same indexes).
const DELETE_RECORD_LIST_SCHEMA: &str = r#"{"type":"record","name":"HoodieDeleteRecordList","namespace":"org.apache.hudi.avro.model","fields":[{"name":"deleteRecordList","type":{"type":"array","items":{"type":"record","name":"HoodieDeleteRecord","fields":[
{"name":"recordKey","type":["null","string"],"default":null},
{"name":"partitionPath","type":["null","string"],"default":null},
{"name":"orderingVal","type":["null",
 {"type":"record","name":"BooleanWrapper","fields":[{"name":"value","type":"boolean"}]},
 {"type":"record","name":"IntWrapper","fields":[{"name":"value","type":"int"}]},
 {"type":"record","name":"LongWrapper","fields":[{"name":"value","type":"long"}]},
 {"type":"record","name":"FloatWrapper","fields":[{"name":"value","type":"float"}]},
 {"type":"record","name":"DoubleWrapper","fields":[{"name":"value","type":"double"}]},
 {"type":"record","name":"BytesWrapper","fields":[{"name":"value","type":"bytes"}]},
 {"type":"record","name":"StringWrapper","fields":[{"name":"value","type":"string"}]},
 {"type":"record","name":"DateWrapper","fields":[{"name":"value","type":"int"}]},
 {"type":"record","name":"DecimalWrapper","fields":[{"name":"value","type":{"type":"bytes","logicalType":"decimal","precision":30,"scale":15}}]},
 {"type":"record","name":"TimeMicrosWrapper","fields":[{"name":"value","type":{"type":"long","logicalType":"time-micros"}}]},
 {"type":"record","name":"TimestampMicrosWrapper","fields":[{"name":"value","type":"long"}]},
 {"type":"record","name":"ArrayWrapper","fields":[{"name":"wrappedValues","type":["null",{"type":"array","items":["null",
  "BooleanWrapper","IntWrapper","LongWrapper","FloatWrapper","DoubleWrapper","BytesWrapper","StringWrapper","DateWrapper",
  "DecimalWrapper","TimeMicrosWrapper","TimestampMicrosWrapper",
  {"type":"record","name":"LocalDateWrapper","fields":[{"name":"value","type":"int"}]}]}],"default":null}]}
],"default":null}]}}}]}"#;
