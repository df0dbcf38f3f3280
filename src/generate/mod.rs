//! Demo and benchmark tables: a Hudi copy-on-write table (table version 6, timeline layout 1),
//! written the way Hudi's bulk-insert and upsert paths leave it: `hoodie.properties`, requested /
//! inflight / completed instant files with JSON commit metadata, `_hoodie_*` meta columns, one
//! file group per partition rewritten by every commit that touches it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableType {
    Cow,
    Mor,
}

pub struct GenerateOptions {
    pub table_type: TableType,
    pub path: PathBuf,
    pub rows: usize,
    pub partitions: usize,
    pub commits: usize,
    pub interval: Duration,
    pub update_fraction: f64,
    pub delete_fraction: f64,
    pub insert_fraction: f64,
    pub seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("{0}")]
    Input(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("writing parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
}

impl GenerateError {
    pub fn exit_code(&self) -> u8 {
        if matches!(self, GenerateError::Input(_)) { 2 } else { 1 }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GenerateError + '_ {
    move |source| GenerateError::Io { path: path.into(), source }
}

#[derive(Clone)]
struct Row {
    commit_time: String,
    ts: i64,
    round: i32,
    v1: i64,
    v2: f64,
    tag: String,
}

struct Partition {
    name: String,
    file_id: String,
    last_commit: Option<String>,
    rows: BTreeMap<String, Row>,
}

fn schema() -> Arc<Schema> {
    let s = |n: &str| Field::new(n, DataType::Utf8, true);
    Arc::new(Schema::new(vec![
        s("_hoodie_commit_time"),
        s("_hoodie_commit_seqno"),
        s("_hoodie_record_key"),
        s("_hoodie_partition_path"),
        s("_hoodie_file_name"),
        s("id"),
        s("part"),
        Field::new("ts", DataType::Int64, true),
        Field::new("round", DataType::Int32, true),
        Field::new("v1", DataType::Int64, true),
        Field::new("v2", DataType::Float64, true),
        s("tag"),
    ]))
}

const AVRO_SCHEMA: &str = r#"{"type":"record","name":"demo_record","namespace":"hoodie.demo","fields":[{"name":"id","type":["null","string"],"default":null},{"name":"part","type":["null","string"],"default":null},{"name":"ts","type":["null","long"],"default":null},{"name":"round","type":["null","int"],"default":null},{"name":"v1","type":["null","long"],"default":null},{"name":"v2","type":["null","double"],"default":null},{"name":"tag","type":["null","string"],"default":null}]}"#;

struct Writer {
    path: PathBuf,
    last_instant: String,
}

impl Writer {
    fn next_instant(&mut self) -> String {
        loop {
            let t = chrono::Utc::now().format("%Y%m%d%H%M%S%3f").to_string();
            if t > self.last_instant {
                self.last_instant = t.clone();
                return t;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn hoodie(&self) -> PathBuf {
        self.path.join(".hoodie")
    }

    fn write_file(&self, rel: &Path, body: &[u8]) -> Result<(), GenerateError> {
        let p = self.hoodie().join(rel);
        fs::write(&p, body).map_err(io(&p))
    }

    fn write_slice(&self, p: &Partition, instant: &str, seq: usize) -> Result<(String, u64, usize), GenerateError> {
        let name = format!("{}_0-{seq}-{seq}_{instant}.parquet", p.file_id);
        let rel = format!("{}/{name}", p.name);
        let n = p.rows.len();
        let key_col: Vec<&str> = p.rows.keys().map(String::as_str).collect();
        let rows: Vec<&Row> = p.rows.values().collect();
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.commit_time.as_str()))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().enumerate().map(|(i, r)| format!("{}_{seq}_{i}", r.commit_time)),
            )),
            Arc::new(StringArray::from_iter_values(key_col.iter().copied())),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(p.name.as_str(), n))),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(name.as_str(), n))),
            Arc::new(StringArray::from_iter_values(key_col.iter().copied())),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(&p.name["part=".len()..], n))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.ts))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.round))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.v1))),
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.v2))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.tag.as_str()))),
        ];
        let batch = RecordBatch::try_new(schema(), cols)?;
        let path = self.path.join(&rel);
        let file = fs::File::create(&path).map_err(io(&path))?;
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut w = ArrowWriter::try_new(file, schema(), Some(props))?;
        w.write(&batch)?;
        w.close()?;
        let size = fs::metadata(&path).map_err(io(&path))?.len();
        Ok((rel, size, n))
    }

    /// Write the touched partitions' new file slices and complete the instant.
    fn commit(&mut self, parts: &mut [Partition], touched: &[usize], op: &str, seq: usize, stats: &[(usize, usize, usize)]) -> Result<String, GenerateError> {
        let instant = self.next_instant();
        self.write_file(Path::new(&format!("{instant}.commit.requested")), b"")?;
        self.write_file(Path::new(&format!("{instant}.inflight")), b"")?;
        let mut by_part = serde_json::Map::new();
        for (k, &pi) in touched.iter().enumerate() {
            let p = &mut parts[pi];
            for r in p.rows.values_mut().filter(|r| r.commit_time.is_empty()) {
                r.commit_time = instant.clone();
            }
            let (rel, size, n) = self.write_slice(p, &instant, seq)?;
            let (ins, upd, del) = stats.get(k).copied().unwrap_or((n, 0, 0));
            by_part.insert(
                p.name.clone(),
                json!([{
                    "fileId": p.file_id, "path": rel, "prevCommit": p.last_commit.clone().unwrap_or_else(|| "null".into()),
                    "numWrites": n, "numDeletes": del, "numUpdateWrites": upd, "numInserts": ins,
                    "totalWriteBytes": size, "totalWriteErrors": 0, "partitionPath": p.name, "fileSizeInBytes": size,
                }]),
            );
            p.last_commit = Some(instant.clone());
        }
        let md = json!({
            "partitionToWriteStats": by_part, "compacted": false,
            "extraMetadata": {"schema": AVRO_SCHEMA}, "operationType": op,
        });
        // the completed instant file appears last: readers never see a half-written commit
        let tmp = self.hoodie().join(format!(".{instant}.commit.tmp"));
        fs::write(&tmp, serde_json::to_vec_pretty(&md).unwrap_or_default()).map_err(io(&tmp))?;
        let done = self.hoodie().join(format!("{instant}.commit"));
        fs::rename(&tmp, &done).map_err(io(&done))?;
        Ok(instant)
    }
}

fn value(rng: &mut StdRng, round: i32) -> Row {
    Row {
        commit_time: String::new(),
        ts: rng.random_range(0..1_000_000_000),
        round,
        v1: rng.random_range(-1_000_000..1_000_000),
        v2: (rng.random_range(0..10_000_000) as f64) / 100.0,
        tag: format!("t{}", rng.random_range(0..100)),
    }
}

pub fn hudi(o: &GenerateOptions) -> Result<(), GenerateError> {
    if o.table_type == TableType::Mor {
        return Err(GenerateError::Input("--type mor is not available yet; use --type cow".into()));
    }
    if o.partitions == 0 || o.rows == 0 {
        return Err(GenerateError::Input("--rows and --partitions must be at least 1".into()));
    }
    if o.path.exists() && fs::read_dir(&o.path).map_err(io(&o.path))?.next().is_some() {
        return Err(GenerateError::Input(format!("{}: exists and is not empty", o.path.display())));
    }
    let name = o.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "demo".into());
    let mut w = Writer { path: o.path.clone(), last_instant: String::new() };
    fs::create_dir_all(w.hoodie().join("archived")).map_err(io(&o.path))?;
    let props = format!(
        "hoodie.table.name={name}\nhoodie.table.type=COPY_ON_WRITE\nhoodie.table.version=6\n\
         hoodie.timeline.layout.version=1\nhoodie.table.recordkey.fields=id\nhoodie.table.partition.fields=part\n\
         hoodie.table.precombine.field=ts\nhoodie.datasource.write.hive_style_partitioning=true\n\
         hoodie.table.keygenerator.class=org.apache.hudi.keygen.SimpleKeyGenerator\n\
         hoodie.table.base.file.format=PARQUET\nhoodie.archivelog.folder=archived\nhoodie.populate.meta.fields=true\n\
         hoodie.table.create.schema={}\n",
        AVRO_SCHEMA.replace(':', "\\:")
    );
    w.write_file(Path::new("hoodie.properties"), props.as_bytes())?;
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut parts: Vec<Partition> = (0..o.partitions)
        .map(|i| Partition {
            name: format!("part=p{i}"),
            file_id: format!("{:08x}-0000-4000-8000-{:012x}-0", rng.random::<u32>(), i),
            last_commit: None,
            rows: BTreeMap::new(),
        })
        .collect();
    for p in &parts {
        let dir = o.path.join(&p.name);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        fs::write(dir.join(".hoodie_partition_metadata"), "#partition metadata\npartitionDepth=1\n").map_err(io(&dir))?;
    }
    let mut next_key = 0usize;
    for _ in 0..o.rows {
        let row = value(&mut rng, 0);
        parts[next_key % o.partitions].rows.insert(format!("k{next_key:09}"), row);
        next_key += 1;
    }
    let all: Vec<usize> = (0..o.partitions).collect();
    let instant = w.commit(&mut parts, &all, "BULK_INSERT", 0, &[])?;
    tracing::info!(%instant, rows = o.rows, "bulk insert committed");
    for round in 1..=o.commits {
        std::thread::sleep(o.interval);
        let mut stats = vec![(0usize, 0usize, 0usize); o.partitions];
        for (pi, p) in parts.iter_mut().enumerate() {
            let keys: Vec<String> = p.rows.keys().cloned().collect();
            for k in keys {
                let x: f64 = rng.random();
                if x < o.delete_fraction {
                    p.rows.remove(&k);
                    stats[pi].2 += 1;
                } else if x < o.delete_fraction + o.update_fraction {
                    p.rows.insert(k, value(&mut rng, round as i32));
                    stats[pi].1 += 1;
                }
            }
        }
        for _ in 0..((o.rows as f64 * o.insert_fraction) as usize) {
            let pi = next_key % o.partitions;
            parts[pi].rows.insert(format!("k{next_key:09}"), value(&mut rng, round as i32));
            stats[pi].0 += 1;
            next_key += 1;
        }
        let touched: Vec<usize> = (0..o.partitions).filter(|i| stats[*i] != (0, 0, 0)).collect();
        let st: Vec<_> = touched.iter().map(|i| stats[*i]).collect();
        let instant = w.commit(&mut parts, &touched, "UPSERT", round, &st)?;
        tracing::info!(%instant, round, "upsert committed");
    }
    Ok(())
}
