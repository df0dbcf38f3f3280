//! Delete files: position deletes (Parquet `file_path`, `pos`), deletion vectors (Puffin
//! `deletion-vector-v1` blobs), equality deletes; which apply to a data file by Iceberg's
//! sequence-number rules, and the live-row mask they leave.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow_schema::{Schema, SchemaRef};
use parquet::arrow::ProjectionMask;
use roaring::RoaringTreemap;

use super::manifest::{DataFile, Entry, CONTENT_EQUALITY_DELETES};
use super::metadata::{field_id, local, TableMetadata};
use super::reader::conform_by_id;
use crate::source::rows::RowKeys;
use crate::source::SourceError;
use crate::storage::Storage;

const DV_MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// Whether delete file `d` applies to data file `f` (sequence numbers, scope, partition).
pub fn applies(md: &TableMetadata, d: &Entry, f: &Entry) -> bool {
    let (df, ff) = (&d.file, &f.file);
    if df.content == CONTENT_EQUALITY_DELETES {
        d.data_seq > f.data_seq
            && (md.spec_unpartitioned(df.spec_id) || (df.spec_id == ff.spec_id && df.partition == ff.partition))
    } else {
        d.data_seq >= f.data_seq
            && df.referenced_data_file.as_ref().is_none_or(|r| *r == ff.path)
            && (df.referenced_data_file.is_some() || (df.spec_id == ff.spec_id && df.partition == ff.partition))
    }
}

/// Rows of one data file removed by a set of delete files.
#[derive(Default)]
pub struct DeleteSet {
    positions: RoaringTreemap,
    /// (target column indexes, deleted key rows) per equality-id set.
    equality: Vec<(Vec<usize>, Arc<EqualitySet>)>,
}

pub struct EqualitySet {
    keys: RowKeys,
    schema: SchemaRef,
    rows: HashSet<Vec<u8>>,
}

impl DeleteSet {
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty() && self.equality.is_empty()
    }

    /// Live rows of `batch`, whose first row is at position `first` of its file.
    pub fn live(&self, batch: &RecordBatch, first: u64) -> Result<BooleanArray, SourceError> {
        let n = batch.num_rows();
        let mut live: Vec<bool> = (0..n as u64).map(|i| !self.positions.contains(first + i)).collect();
        for (cols, set) in &self.equality {
            let proj = RecordBatch::try_new(
                set.schema.clone(),
                cols.iter().map(|c| batch.column(*c).clone()).collect(),
            )
            .map_err(crate::source::SourceError::arrow("equality delete columns"))?;
            let rows = set.keys.rows(&proj)?;
            for (i, l) in live.iter_mut().enumerate() {
                if *l && set.rows.contains(rows.row(i).as_ref()) {
                    *l = false;
                }
            }
        }
        Ok(BooleanArray::from(live))
    }
}

/// Equality-delete sets by (file, equality field ids).
type EqualityCache = HashMap<(String, Vec<i32>), Arc<EqualitySet>>;

/// Reads delete files once per unit (a position-delete file may cover many data files).
pub struct DeleteReader {
    storage: Storage,
    positions: Mutex<HashMap<String, Arc<HashMap<String, RoaringTreemap>>>>,
    equality: Mutex<EqualityCache>,
}

impl DeleteReader {
    pub fn new(storage: Storage) -> Self {
        DeleteReader {
            storage,
            positions: Default::default(),
            equality: Default::default(),
        }
    }

    /// The rows of data file `f` that `deletes` remove (they must already apply to it).
    pub fn for_file(&self, f: &DataFile, deletes: &[&Entry], target: &SchemaRef) -> Result<DeleteSet, SourceError> {
        let mut set = DeleteSet::default();
        for d in deletes {
            if d.file.content == CONTENT_EQUALITY_DELETES {
                let eq = self.equality_set(&d.file, target)?;
                let cols = d
                    .file
                    .equality_ids
                    .iter()
                    .map(|id| {
                        target
                            .fields()
                            .iter()
                            .position(|t| field_id(t) == Some(*id))
                            .expect("checked in equality_set")
                    })
                    .collect();
                set.equality.push((cols, eq));
            } else if d.file.is_dv() {
                set.positions |= read_dv(&self.storage, &d.file)?;
            } else if let Some(p) = self.position_file(&d.file)?.get(&f.path) {
                set.positions |= p;
            }
        }
        Ok(set)
    }

    /// The data files a position-delete file names, with their deleted positions.
    pub fn position_file(&self, d: &DataFile) -> Result<Arc<HashMap<String, RoaringTreemap>>, SourceError> {
        if let Some(hit) = self.positions.lock().get(&d.path) {
            return Ok(hit.clone());
        }
        let path = local(&d.path)?;
        let builder = crate::source::parquet(&self.storage, &path)?;
        let schema = builder.schema().clone();
        let idx: Vec<usize> = ["file_path", "pos"]
            .iter()
            .map(|n| {
                schema
                    .index_of(n)
                    .map_err(|_| SourceError::format(&path, format!("position delete file without `{n}`")))
            })
            .collect::<Result<_, _>>()?;
        let mask = ProjectionMask::roots(builder.parquet_schema(), idx);
        let mut out: HashMap<String, RoaringTreemap> = HashMap::new();
        for b in builder
            .with_projection(mask)
            .build()
            .map_err(SourceError::parquet(&path))?
        {
            let b = b.map_err(SourceError::arrow(format!("reading {}", path.display())))?;
            let paths = arrow::compute::cast(b.column(0), &arrow_schema::DataType::Utf8)
                .map_err(SourceError::arrow("file_path"))?;
            let paths = paths.as_any().downcast_ref::<StringArray>().expect("cast to utf8");
            let pos = b
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| SourceError::format(&path, "`pos` is not a long"))?;
            for i in 0..b.num_rows() {
                if paths.is_valid(i) && pos.is_valid(i) {
                    out.entry(paths.value(i).to_string())
                        .or_default()
                        .insert(pos.value(i) as u64);
                }
            }
        }
        let out = Arc::new(out);
        self.positions.lock().insert(d.path.clone(), out.clone());
        Ok(out)
    }

    fn equality_set(&self, d: &DataFile, target: &SchemaRef) -> Result<Arc<EqualitySet>, SourceError> {
        let cache_key = (d.path.clone(), d.equality_ids.clone());
        if let Some(hit) = self.equality.lock().get(&cache_key) {
            return Ok(hit.clone());
        }
        let path = local(&d.path)?;
        let fields = d
            .equality_ids
            .iter()
            .map(|id| {
                target
                    .fields()
                    .iter()
                    .find(|t| field_id(t) == Some(*id))
                    .cloned()
                    .ok_or_else(|| SourceError::Unsupported {
                        message: format!(
                            "{}: equality field id {id} is not a column of the snapshot's schema",
                            path.display()
                        ),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let schema = Arc::new(Schema::new(fields));
        let keys = RowKeys::new(&schema, None)?;
        let mut rows = HashSet::new();
        for b in crate::source::parquet(&self.storage, &path)?
            .build()
            .map_err(SourceError::parquet(&path))?
        {
            let b = b.map_err(SourceError::arrow(format!("reading {}", path.display())))?;
            let b = conform_by_id(&b, &schema)?;
            let r = keys.rows(&b)?;
            for i in 0..b.num_rows() {
                rows.insert(r.row(i).as_ref().to_vec());
            }
        }
        let set = Arc::new(EqualitySet { keys, schema, rows });
        self.equality.lock().insert(cache_key, set.clone());
        Ok(set)
    }
}

/// A deletion vector: `[len u32 BE][magic][portable Roaring64][crc32 BE]` at the blob's offset.
pub fn read_dv(storage: &Storage, d: &DataFile) -> Result<RoaringTreemap, SourceError> {
    let path = local(&d.path)?;
    let (Some(off), Some(size)) = (d.content_offset, d.content_size) else {
        return Err(SourceError::format(
            &path,
            "deletion vector entry without content_offset / content_size_in_bytes",
        ));
    };
    let blob = storage
        .read_range(&path, off as u64, size as u64)
        .map_err(SourceError::io(&path))?;
    let bad = |m: &str| SourceError::format(&path, format!("deletion vector at offset {off}: {m}"));
    if blob.len() < 12 {
        return Err(bad("blob too short"));
    }
    let len = u32::from_be_bytes(blob[0..4].try_into().expect("4 bytes")) as usize;
    if len + 8 != blob.len() || blob[4..8] != DV_MAGIC {
        return Err(bad("bad length or magic"));
    }
    let crc = u32::from_be_bytes(blob[4 + len..8 + len].try_into().expect("4 bytes"));
    if crc32fast::hash(&blob[4..4 + len]) != crc {
        return Err(bad("checksum mismatch (corrupt deletion vector)"));
    }
    RoaringTreemap::deserialize_from(&blob[8..4 + len]).map_err(|e| bad(&format!("bad bitmap: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry of `content` (0 data, 1 position deletes, 2 equality deletes) at `seq`.
    fn entry(content: i32, seq: i64, spec: i32, partition: &str, path: &str, refers: Option<&str>) -> Entry {
        Entry {
            status: 1,
            snapshot_id: seq,
            data_seq: seq,
            file: Arc::new(DataFile {
                content,
                path: path.into(),
                format: "PARQUET".into(),
                partition: partition.into(),
                spec_id: spec,
                record_count: 1,
                size: 1,
                split_offsets: vec![],
                equality_ids: vec![],
                referenced_data_file: refers.map(String::from),
                content_offset: None,
                content_size: None,
                first_row_id: None,
            }),
        }
    }

    /// Spec 0 partitioned by a field, spec 1 unpartitioned (a table whose spec evolved).
    fn metadata() -> TableMetadata {
        serde_json::from_value(serde_json::json!({
            "format-version": 2,
            "partition-specs": [
                {"spec-id": 0, "fields": [{"name": "cat", "transform": "identity", "source-id": 2, "field-id": 1000}]},
                {"spec-id": 1, "fields": []}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn delete_files_apply_by_the_spec_sequence_number_rules() {
        let md = metadata();
        let data = entry(0, 5, 0, "cat=a", "d1.parquet", None);
        // position deletes: same or later sequence number, same partition (or the file they name)
        assert!(
            applies(&md, &entry(1, 5, 0, "cat=a", "p.parquet", None), &data),
            "a position delete of the same commit applies"
        );
        assert!(
            !applies(&md, &entry(1, 4, 0, "cat=a", "p.parquet", None), &data),
            "an older position delete does not"
        );
        assert!(
            !applies(&md, &entry(1, 6, 0, "cat=b", "p.parquet", None), &data),
            "another partition's does not"
        );
        assert!(
            applies(&md, &entry(1, 6, 0, "cat=b", "dv.puffin", Some("d1.parquet")), &data),
            "a delete naming the file does"
        );
        assert!(
            !applies(&md, &entry(1, 6, 0, "cat=a", "dv.puffin", Some("d2.parquet")), &data),
            "one naming another file does not"
        );
        // equality deletes: strictly later, same partition, or table-wide from an unpartitioned spec
        assert!(
            !applies(&md, &entry(2, 5, 0, "cat=a", "e.parquet", None), &data),
            "an equality delete of the same commit does not"
        );
        assert!(applies(&md, &entry(2, 6, 0, "cat=a", "e.parquet", None), &data));
        assert!(!applies(&md, &entry(2, 6, 0, "cat=b", "e.parquet", None), &data));
        assert!(
            applies(&md, &entry(2, 6, 1, "", "e.parquet", None), &data),
            "an unpartitioned equality delete is global"
        );
    }

    #[test]
    fn deletion_vector_blob_round_trip_and_checksum() {
        let mut bm = RoaringTreemap::new();
        bm.insert(1);
        bm.insert(5_000_000_000);
        let mut bitmap = Vec::new();
        bm.serialize_into(&mut bitmap).unwrap();
        let mut body = DV_MAGIC.to_vec();
        body.extend_from_slice(&bitmap);
        let mut blob = (body.len() as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(&body);
        blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.puffin");
        let mut file = b"PFA1".to_vec();
        file.extend_from_slice(&blob);
        std::fs::write(&p, &file).unwrap();
        let mut df = DataFile {
            content: 1,
            path: p.display().to_string(),
            format: "PUFFIN".into(),
            partition: String::new(),
            spec_id: 0,
            record_count: 2,
            size: file.len() as i64,
            split_offsets: vec![],
            equality_ids: vec![],
            referenced_data_file: None,
            content_offset: Some(4),
            content_size: Some(blob.len() as i64),
            first_row_id: None,
        };
        assert_eq!(read_dv(&Storage::default(), &df).unwrap(), bm);
        let last = file.len() - 1;
        file[last] ^= 1;
        std::fs::write(&p, &file).unwrap();
        df.size = file.len() as i64;
        assert!(read_dv(&Storage::default(), &df)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
    }
}
