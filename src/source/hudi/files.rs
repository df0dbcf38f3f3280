//! File groups on storage: listing partitions, naming base and log files, choosing the file slice
//! of a file group as of a point on the timeline, and reading base files into Arrow.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ProjectionMask;

use super::timeline::Timeline;
use crate::source::SourceError;
use crate::storage::Storage;

/// Meta columns left out of change events: they describe file layout, not the row, and change
/// under compaction and clustering.
pub const LAYOUT_META_COLUMNS: &[&str] = &["_hoodie_commit_seqno", "_hoodie_file_name", "_hoodie_operation"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseFile {
    pub file_id: String,
    pub instant: String,
    pub name: String,
    /// Bytes, from the listing (0 when parsed from a bare name).
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    pub file_id: String,
    pub instant: String,
    pub name: String,
    /// Bytes, from the listing (0 when parsed from a bare name).
    pub size: u64,
}

/// `<fileId>_<writeToken>_<instant>.parquet`
pub fn parse_base_name(name: &str) -> Option<BaseFile> {
    if name.starts_with('.') {
        return None;
    }
    let stem = name.strip_suffix(".parquet")?;
    let (rest, instant) = stem.rsplit_once('_')?;
    let (file_id, _token) = rest.rsplit_once('_')?;
    Some(BaseFile {
        file_id: file_id.into(),
        instant: instant.into(),
        name: name.into(),
        size: 0,
    })
}

/// `.<fileId>_<instant>.log.<version>_<writeToken>`
/// A CDC log file (`<log file name>.cdc`, `-cdc` before Hudi 0.14): change records for readers
/// of the changelog, never data of a file slice.
pub fn is_cdc_log(name: &str) -> bool {
    name.ends_with(".cdc") || name.ends_with("-cdc")
}

/// A data log file's name (CDC log files are not data logs: `None`).
pub fn parse_log_name(name: &str) -> Option<LogFile> {
    if is_cdc_log(name) {
        return None;
    }
    let rest = name.strip_prefix('.')?;
    let (head, _) = rest.split_once(".log.")?;
    let (file_id, instant) = head.rsplit_once('_')?;
    Some(LogFile {
        file_id: file_id.into(),
        instant: instant.into(),
        name: name.into(),
        size: 0,
    })
}

/// The files of one partition, by file group id.
#[derive(Debug, Default)]
pub struct PartitionFiles {
    pub base: BTreeMap<String, Vec<BaseFile>>,
    pub logs: BTreeMap<String, Vec<LogFile>>,
}

pub fn list_partition(storage: &Storage, table: &Path, partition: &str) -> Result<PartitionFiles, SourceError> {
    let dir = partition_dir(table, partition);
    let mut out = PartitionFiles::default();
    let entries = match storage.list(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(SourceError::Io { path: dir, source: e }),
    };
    for e in entries {
        let name = e.name;
        if let Some(b) = parse_base_name(&name) {
            out.base
                .entry(b.file_id.clone())
                .or_default()
                .push(BaseFile { size: e.size, ..b });
        } else if let Some(l) = parse_log_name(&name) {
            out.logs
                .entry(l.file_id.clone())
                .or_default()
                .push(LogFile { size: e.size, ..l });
        }
    }
    Ok(out)
}

/// Partition listings of one unit: each partition is listed once, however many of its file
/// groups (splits) the unit reads.
pub struct Listings {
    storage: Storage,
    table: PathBuf,
    map: parking_lot::Mutex<BTreeMap<String, Arc<PartitionFiles>>>,
}

impl Listings {
    pub fn new(storage: &Storage, table: &Path) -> Self {
        Self {
            storage: storage.clone(),
            table: table.into(),
            map: Default::default(),
        }
    }

    pub fn partition(&self, partition: &str) -> Result<Arc<PartitionFiles>, SourceError> {
        if let Some(f) = self.map.lock().get(partition) {
            return Ok(f.clone());
        }
        let f = Arc::new(list_partition(&self.storage, &self.table, partition)?);
        self.map.lock().insert(partition.into(), f.clone());
        Ok(f)
    }
}

impl PartitionFiles {
    /// The base and log files of one file group.
    pub fn group(&self, file_group: &str) -> (&[BaseFile], &[LogFile]) {
        (
            self.base.get(file_group).map(Vec::as_slice).unwrap_or(&[]),
            self.logs.get(file_group).map(Vec::as_slice).unwrap_or(&[]),
        )
    }
}

pub fn partition_dir(table: &Path, partition: &str) -> PathBuf {
    if partition.is_empty() {
        table.to_path_buf()
    } else {
        table.join(partition)
    }
}

/// Every partition path of the table (relative, `/`-separated; "" for a non-partitioned table).
pub fn list_partitions(storage: &Storage, table: &Path) -> Result<Vec<String>, SourceError> {
    let mut out = Vec::new();
    let mut stack = vec![(table.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let mut has_files = false;
        for e in storage.list(&dir).map_err(SourceError::io(&dir))? {
            let name = e.name.clone();
            if name.starts_with('.') && name != ".hoodie_partition_metadata" && parse_log_name(&name).is_none() {
                continue;
            }
            if name == "__MACOSX" {
                continue;
            }
            if e.is_dir {
                let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                stack.push((e.path, child));
            } else if name == ".hoodie_partition_metadata" || parse_base_name(&name).is_some() {
                has_files = true;
            }
        }
        if has_files {
            out.push(rel);
        }
    }
    out.sort();
    Ok(out)
}

/// The base file of a file group as of timeline order `at` (inclusive when `inclusive`): the one
/// with the greatest instant among those whose instant is completed by then.
pub fn base_as_of<'a>(files: &'a [BaseFile], timeline: &Timeline, at: &str, inclusive: bool) -> Option<&'a BaseFile> {
    files
        .iter()
        .filter(|f| match timeline.completed_order(&f.instant) {
            Some(o) => {
                if inclusive {
                    o.as_str() <= at
                } else {
                    o.as_str() < at
                }
            }
            None => false,
        })
        .max_by(|a, b| a.instant.cmp(&b.instant))
}

/// Open a base file for streaming, leaving out layout meta columns (and, with `only`, every other
/// column): its Arrow schema, a batch reader, and its size in bytes.
pub fn open_base(
    storage: &Storage,
    path: &Path,
    only: Option<&[String]>,
) -> Result<(SchemaRef, parquet::arrow::arrow_reader::ParquetRecordBatchReader, u64), SourceError> {
    let (builder, size) = crate::source::parquet_sized(storage, path)?;
    let mask = columns_mask(&builder, |name| {
        !LAYOUT_META_COLUMNS.contains(&name) && only.is_none_or(|o| o.iter().any(|c| c == name))
    });
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BASE_BATCH_ROWS)
        .build()
        .map_err(SourceError::parquet(path))?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    Ok((schema, reader, size))
}

/// The projection of a Parquet file's top-level columns whose names `keep` accepts.
pub fn columns_mask<T>(
    builder: &parquet::arrow::arrow_reader::ArrowReaderBuilder<T>,
    keep: impl Fn(&str) -> bool,
) -> ProjectionMask {
    let roots = builder
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| keep(f.name()))
        .map(|(i, _)| i);
    ProjectionMask::roots(builder.parquet_schema(), roots)
}

/// Rows per batch read from a base file.
pub const BASE_BATCH_ROWS: usize = 8192;

/// Read a whole base file (see [`open_base`]).
pub fn read_base(
    storage: &Storage,
    path: &Path,
    only: Option<&[String]>,
) -> Result<(SchemaRef, Vec<RecordBatch>, u64), SourceError> {
    let (schema, reader, size) = open_base(storage, path, only)?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(SourceError::arrow(format!("reading {}", path.display())))?;
    Ok((schema, batches, size))
}

/// Fill `_hoodie_record_key` / `_hoodie_partition_path` of a virtual-key table (meta fields not
/// populated) the way its key generator would: `value` for one key field, `f1:v1,f2:v2` for
/// several; the partition path of the file.
pub fn with_virtual_keys(
    batch: &RecordBatch,
    key_fields: &[String],
    partition: &str,
) -> Result<RecordBatch, SourceError> {
    use arrow_array::{Array, ArrayRef, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    let n = batch.num_rows();
    let mut parts: Vec<StringArray> = Vec::new();
    for k in key_fields {
        let col = batch.column_by_name(k).ok_or_else(|| SourceError::Unreadable {
            why: crate::source::Unreadable::Damaged,
            message: format!("record key field `{k}` is not a column of the data files"),
        })?;
        let s = arrow::compute::cast(col, &DataType::Utf8)
            .map_err(SourceError::arrow(format!("key field `{k}` as string")))?;
        parts.push(
            s.as_any()
                .downcast_ref::<StringArray>()
                .expect("utf8 after cast")
                .clone(),
        );
    }
    let keys: StringArray = (0..n)
        .map(|i| {
            if parts.len() == 1 {
                parts[0].is_valid(i).then(|| parts[0].value(i).to_string())
            } else {
                Some(
                    key_fields
                        .iter()
                        .zip(&parts)
                        .map(|(f, p)| format!("{f}:{}", if p.is_valid(i) { p.value(i) } else { "__null__" }))
                        .collect::<Vec<_>>()
                        .join(","),
                )
            }
        })
        .collect();
    let derived: [(&str, ArrayRef); 2] = [
        ("_hoodie_record_key", Arc::new(keys)),
        (
            "_hoodie_partition_path",
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(partition, n))),
        ),
    ];
    let schema = batch.schema();
    let mut fields: Vec<Field> = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (name, col) in &derived {
        fields.push(Field::new(*name, DataType::Utf8, true));
        cols.push(col.clone());
    }
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        if derived.iter().any(|(n, _)| n == f.name()) {
            continue;
        }
        fields.push(f.as_ref().clone());
        cols.push(c.clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(SourceError::arrow("virtual keys"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let b = parse_base_name("c7bbe63e-fa43-40ba-94a9-03158165edc6-0_0-52-126_20260307162440672.parquet").unwrap();
        assert_eq!(b.file_id, "c7bbe63e-fa43-40ba-94a9-03158165edc6-0");
        assert_eq!(b.instant, "20260307162440672");
        let l = parse_log_name(".abc-0_20240101000000000.log.1_0-1-2").unwrap();
        assert_eq!((l.file_id.as_str(), l.instant.as_str()), ("abc-0", "20240101000000000"));
        assert!(parse_base_name(".hoodie_partition_metadata").is_none());
        assert!(parse_log_name(".abc-0_20240101000000000.log.1_0-1-2.cdc").is_none());
        assert!(parse_log_name(".abc-0_20240101000000000.log.1_0-1-2-cdc").is_none());
    }
}
