//! Demo and benchmark tables: Hudi copy-on-write or merge-on-read tables (table version 6,
//! timeline layout 1), written the way Hudi's bulk-insert and upsert paths leave them:
//! `hoodie.properties`, requested / inflight / completed instant files with JSON commit metadata,
//! `_hoodie_*` meta columns, one file group per partition. Copy-on-write rewrites a file group on
//! every commit that touches it; merge-on-read appends a log file (an Avro data block with the
//! upserted rows, a delete block with the deleted keys) and compacts every `--compact-every` commits.

mod cdc;
mod plan;
mod writer;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::{DataType, Field, Schema};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use writer::{GroupWrite, Writer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableType {
    Cow,
    Mor,
}

#[derive(Debug, Clone, clap::Args)]
pub struct GenerateOptions {
    #[arg(long = "type", value_enum, default_value = "cow")]
    pub table_type: TableType,
    #[arg(long)]
    pub path: PathBuf,
    /// Rows of the initial bulk insert.
    #[arg(long, default_value_t = 1000)]
    pub rows: usize,
    #[arg(long, default_value_t = 4)]
    pub partitions: usize,
    /// Upsert/delete commits after the bulk insert.
    #[arg(long, default_value_t = 0)]
    pub commits: usize,
    /// Pause between commits (e.g. 2s, 500ms).
    #[arg(long, default_value = "0s", value_parser = duration_arg)]
    pub interval: Duration,
    /// Share of live rows each commit updates.
    #[arg(long, default_value_t = 0.1)]
    pub update_fraction: f64,
    /// Share of live rows each commit deletes.
    #[arg(long, default_value_t = 0.02)]
    pub delete_fraction: f64,
    /// Share of new rows each commit inserts (of the initial row count).
    #[arg(long, default_value_t = 0.05)]
    pub insert_fraction: f64,
    /// MOR: compact after every this many upsert commits (0: never).
    #[arg(long, default_value_t = 0)]
    pub compact_every: usize,
    /// MOR: write Hudi's `_hoodie_operation` column, updates as `-U`/`U` pairs (changelog tables).
    #[arg(long)]
    pub operation_field: bool,
    /// MOR with --operation-field: write each update through an intermediate version first.
    #[arg(long)]
    pub repeat_updates: bool,
    /// Share of live rows each commit writes with another partition value (a partition move).
    #[arg(long, default_value_t = 0.0)]
    pub move_fraction: f64,
    /// The writer's index, recorded as `hoodie.index.type`: under `simple` (per partition) a moved
    /// key is a new row in its new partition and its old row stays; under `global` the old row is
    /// deleted.
    #[arg(long, value_enum, default_value = "simple")]
    pub index: IndexKind,
    /// Write CDC log files (`hoodie.table.cdc.enabled`) in this supplemental logging mode.
    #[arg(long, value_enum)]
    pub cdc: Option<cdc::CdcMode>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl GenerateOptions {
    /// A table of `table_type` at `path`, every other option at its command-line default.
    pub fn defaults(table_type: TableType, path: PathBuf) -> GenerateOptions {
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            options: GenerateOptions,
        }
        let path = path.to_string_lossy().into_owned();
        let mut options = <Args as clap::Parser>::parse_from(["generate", "--path", &path]).options;
        options.table_type = table_type;
        options
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IndexKind {
    Simple,
    Global,
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    crate::config::parse_duration(s).ok_or_else(|| format!("`{s}` is not a duration (e.g. 500ms, 2s, 1m)"))
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
        if matches!(self, GenerateError::Input(_)) {
            2
        } else {
            1
        }
    }
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GenerateError + '_ {
    move |source| GenerateError::Io {
        path: path.into(),
        source,
    }
}

#[derive(Clone)]
pub(crate) struct Row {
    commit_time: String,
    ts: i64,
    round: i32,
    v1: i64,
    v2: f64,
    tag: String,
}

pub(crate) struct Partition {
    name: String,
    file_id: String,
    /// Instant of the current base file.
    last_commit: Option<String>,
    /// Log files written on the current base file (MOR).
    log_version: u32,
    rows: BTreeMap<String, Row>,
}

/// The demo table's schema; with `operation`, Hudi's `_hoodie_operation` meta column too.
pub(crate) fn schema(operation: bool) -> Arc<Schema> {
    let s = |n: &str| Field::new(n, DataType::Utf8, true);
    let mut meta = vec![
        s("_hoodie_commit_time"),
        s("_hoodie_commit_seqno"),
        s("_hoodie_record_key"),
        s("_hoodie_partition_path"),
        s("_hoodie_file_name"),
    ];
    if operation {
        meta.push(s("_hoodie_operation"));
    }
    Arc::new(Schema::new(
        [
            meta,
            vec![
                s("id"),
                s("part"),
                Field::new("ts", DataType::Int64, true),
                Field::new("round", DataType::Int32, true),
                Field::new("v1", DataType::Int64, true),
                Field::new("v2", DataType::Float64, true),
                s("tag"),
            ],
        ]
        .concat(),
    ))
}

pub(crate) const AVRO_SCHEMA: &str = r#"{"type":"record","name":"demo_record","namespace":"hoodie.demo","fields":[{"name":"id","type":["null","string"],"default":null},{"name":"part","type":["null","string"],"default":null},{"name":"ts","type":["null","long"],"default":null},{"name":"round","type":["null","int"],"default":null},{"name":"v1","type":["null","long"],"default":null},{"name":"v2","type":["null","double"],"default":null},{"name":"tag","type":["null","string"],"default":null}]}"#;

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

/// Write the table `o` describes: a bulk insert of `o.rows` rows, then `o.commits` upsert
/// commits (with compactions where asked).
pub fn hudi(o: &GenerateOptions) -> Result<(), GenerateError> {
    if o.partitions == 0 || o.rows == 0 {
        return Err(GenerateError::Input(
            "--rows and --partitions must be at least 1".into(),
        ));
    }
    if o.path.exists() && fs::read_dir(&o.path).map_err(io(&o.path))?.next().is_some() {
        return Err(GenerateError::Input(format!(
            "{}: exists and is not empty",
            o.path.display()
        )));
    }
    let mor = o.table_type == TableType::Mor;
    let mut w = Writer::new(o.path.clone(), mor, o.operation_field);
    w.cdc = o.cdc;
    fs::create_dir_all(w.hoodie().join("archived")).map_err(io(&o.path))?;
    w.write_file(Path::new("hoodie.properties"), table_properties(o).as_bytes())?;
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut parts = partitions(o, &mut rng)?;
    let mut next_key = 0usize;
    let mut writes = no_writes(o.partitions);
    for _ in 0..o.rows {
        insert(&mut parts, &mut writes, &mut next_key, value(&mut rng, 0));
    }
    let instant = w.write(&mut parts, &writes, "BULK_INSERT", 0)?;
    tracing::info!(%instant, rows = o.rows, "bulk insert committed");
    for round in 1..=o.commits {
        std::thread::sleep(o.interval);
        let mut writes = round_writes(o, &mut parts, &mut rng, round as i32);
        for _ in 0..((o.rows as f64 * o.insert_fraction) as usize) {
            insert(&mut parts, &mut writes, &mut next_key, value(&mut rng, round as i32));
        }
        writes.retain(|w| !w.upserts.is_empty() || !w.deletes.is_empty());
        let instant = w.write(&mut parts, &writes, "UPSERT", round)?;
        tracing::info!(%instant, round, "upsert committed");
        if mor && o.compact_every > 0 && round % o.compact_every == 0 {
            if let Some(c) = w.compact(&mut parts, round)? {
                tracing::info!(instant = %c, round, "compaction committed");
            }
        }
    }
    Ok(())
}

/// `hoodie.properties` of the table (version 6, record key `id`, partition `part`, precombine `ts`).
fn table_properties(o: &GenerateOptions) -> String {
    let name = o
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "demo".into());
    // Hudi refuses a hoodie.properties without it: CRC32 of "<database>.<name>" (no database here)
    let checksum = crc32fast::hash(format!(".{name}").as_bytes());
    format!(
        "hoodie.table.name={name}\nhoodie.table.checksum={checksum}\nhoodie.table.type={}\nhoodie.table.version=6\n\
         hoodie.timeline.layout.version=1\nhoodie.table.recordkey.fields=id\nhoodie.table.partition.fields=part\n\
         hoodie.table.precombine.field=ts\nhoodie.datasource.write.hive_style_partitioning=true\n\
         hoodie.table.keygenerator.class=org.apache.hudi.keygen.SimpleKeyGenerator\n\
         hoodie.compaction.payload.class=org.apache.hudi.common.model.OverwriteWithLatestAvroPayload\n\
         hoodie.table.base.file.format=PARQUET\nhoodie.table.log.file.format=HOODIE_LOG\n\
         hoodie.archivelog.folder=archived\nhoodie.populate.meta.fields=true\nhoodie.table.create.schema={}\n\
         hoodie.allow.operation.metadata.field={}\nhoodie.index.type={}\n",
        if o.table_type == TableType::Mor {
            "MERGE_ON_READ"
        } else {
            "COPY_ON_WRITE"
        },
        AVRO_SCHEMA.replace(':', "\\:"),
        o.operation_field,
        if o.index == IndexKind::Global {
            "GLOBAL_SIMPLE"
        } else {
            "SIMPLE"
        },
    ) + &o
        .cdc
        .map(|m| {
            format!(
                "hoodie.table.cdc.enabled=true\nhoodie.table.cdc.supplemental.logging.mode={}\n",
                m.property()
            )
        })
        .unwrap_or_default()
}

/// The table's partitions (one file group each), their directories created.
fn partitions(o: &GenerateOptions, rng: &mut StdRng) -> Result<Vec<Partition>, GenerateError> {
    let parts: Vec<Partition> = (0..o.partitions)
        .map(|i| Partition {
            name: format!("part=p{i}"),
            file_id: format!("{:08x}-0000-4000-8000-{:012x}-0", rng.random::<u32>(), i),
            last_commit: None,
            log_version: 0,
            rows: BTreeMap::new(),
        })
        .collect();
    for p in &parts {
        let dir = o.path.join(&p.name);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        fs::write(
            dir.join(".hoodie_partition_metadata"),
            "#partition metadata\npartitionDepth=1\n",
        )
        .map_err(io(&dir))?;
    }
    Ok(parts)
}

/// An empty write for each of `n` file groups.
fn no_writes(n: usize) -> Vec<GroupWrite> {
    (0..n)
        .map(|i| GroupWrite {
            partition: i,
            ..Default::default()
        })
        .collect()
}

/// Insert the next key (`k000000042`) with `row`, in the file group the key number picks.
fn insert(parts: &mut [Partition], writes: &mut [GroupWrite], next_key: &mut usize, row: Row) {
    let key = format!("k{next_key:09}");
    let w = &mut writes[*next_key % writes.len()];
    parts[w.partition].rows.insert(key.clone(), row);
    w.inserts += 1;
    w.upserts.push(key);
    *next_key += 1;
}

/// One upsert round's deletes, updates and partition moves of live rows (inserts of new keys
/// follow), drawn with the fractions of `o`.
fn round_writes(o: &GenerateOptions, parts: &mut [Partition], rng: &mut StdRng, round: i32) -> Vec<GroupWrite> {
    let mut writes = no_writes(o.partitions);
    let mut moves: Vec<(usize, String)> = Vec::new();
    for (pi, p) in parts.iter_mut().enumerate() {
        let keys: Vec<String> = p.rows.keys().cloned().collect();
        for k in keys {
            let x: f64 = rng.random();
            if x < o.delete_fraction {
                writes[pi].before.extend(p.rows.remove(&k).map(|r| (k.clone(), r)));
                writes[pi].deletes.push(k);
            } else if x < o.delete_fraction + o.update_fraction {
                if o.repeat_updates {
                    writes[pi].intermediate.insert(k.clone(), value(rng, round));
                }
                let old = p.rows.insert(k.clone(), value(rng, round));
                writes[pi].before.extend(old.map(|r| (k.clone(), r)));
                writes[pi].upserts.push(k);
            } else if x < o.delete_fraction + o.update_fraction + o.move_fraction && o.partitions > 1 {
                moves.push((pi, k));
            }
        }
    }
    for (from, k) in moves {
        let to = (from + rng.random_range(1..o.partitions)) % o.partitions;
        if writes[to].deletes.contains(&k) || writes[to].upserts.contains(&k) {
            continue; // one write per key and file group in an instant
        }
        if o.index == IndexKind::Global {
            // a global index finds the key's row wherever it is and deletes it there
            writes[from]
                .before
                .extend(parts[from].rows.remove(&k).map(|r| (k.clone(), r)));
            writes[from].deletes.push(k.clone());
        }
        let old = parts[to].rows.insert(k.clone(), value(rng, round));
        match old {
            Some(r) => {
                writes[to].before.insert(k.clone(), r);
            }
            None => writes[to].inserts += 1,
        }
        writes[to].upserts.push(k);
    }
    writes
}
