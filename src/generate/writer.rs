//! The file-level side of the generator: instants, base file slices, log files with Avro data
//! blocks and delete blocks, and commit metadata, in Hudi's table-version-6 layout.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_json::json;

use super::cdc::Change;
use super::{io, schema, GenerateError, Partition, Row, AVRO_SCHEMA};
use crate::avro_binary::{write_bytes, write_long};
use crate::changelog::avro::{record, RowEncoder};
use crate::source::hudi::log::{avro_data_content, encode_block, INSTANT_TIME, SCHEMA};

pub struct Writer {
    pub path: PathBuf,
    pub mor: bool,
    /// Write `_hoodie_operation` (changelog tables).
    operation: bool,
    /// Write CDC log files in this supplemental logging mode.
    pub cdc: Option<super::cdc::CdcMode>,
    last_instant: String,
}

/// What one instant did to one partition's file group.
#[derive(Default)]
pub struct GroupWrite {
    pub partition: usize,
    pub inserts: usize,
    /// Keys inserted or updated (their rows are in the partition's state).
    pub upserts: Vec<String>,
    pub deletes: Vec<String>,
    /// Rows of updated and deleted keys before the instant (`-U` and CDC images).
    pub before: std::collections::HashMap<String, Row>,
    /// Versions written (and overwritten) within the instant before the final one.
    pub intermediate: std::collections::HashMap<String, Row>,
}

/// How long after its instant time an instant completes, at least (two file-system clock ticks).
const COMPLETION_AFTER_MS: i64 = 8;

impl Writer {
    pub fn new(path: PathBuf, mor: bool, operation: bool) -> Self {
        Self {
            path,
            mor,
            operation,
            cdc: None,
            last_instant: String::new(),
        }
    }

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

    pub fn hoodie(&self) -> PathBuf {
        self.path.join(".hoodie")
    }

    pub fn write_file(&self, rel: &Path, body: &[u8]) -> Result<(), GenerateError> {
        let p = self.hoodie().join(rel);
        fs::write(&p, body).map_err(io(&p))
    }

    /// Rows (key, row, `_hoodie_operation`) as an Arrow batch with Hudi's meta columns.
    fn batch(
        &self,
        p: &Partition,
        rows: &[(&str, &Row, &str)],
        file_name: &str,
        seq: usize,
    ) -> Result<RecordBatch, GenerateError> {
        let n = rows.len();
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, r, _)| r.commit_time.as_str()),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter()
                    .enumerate()
                    .map(|(i, (_, r, _))| format!("{}_{seq}_{i}", r.commit_time)),
            )),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(k, _, _)| *k))),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(p.name.as_str(), n))),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(file_name, n))),
        ];
        if self.operation {
            cols.push(Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, _, op)| *op),
            )));
        }
        cols.extend::<Vec<ArrayRef>>(vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(k, _, _)| *k))),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                &p.name["part=".len()..],
                n,
            ))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|(_, r, _)| r.ts))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, r, _)| r.round))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|(_, r, _)| r.v1))),
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|(_, r, _)| r.v2))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|(_, r, _)| r.tag.as_str()),
            )),
        ]);
        Ok(RecordBatch::try_new(schema(self.operation), cols)?)
    }

    /// A new base file with the partition's current rows.
    fn write_base(&self, p: &Partition, instant: &str, seq: usize) -> Result<(String, u64, usize), GenerateError> {
        let name = format!("{}_0-{seq}-{seq}_{instant}.parquet", p.file_id);
        let rel = format!("{}/{name}", p.name);
        let rows: Vec<(&str, &Row, &str)> = p.rows.iter().map(|(k, r)| (k.as_str(), r, "I")).collect();
        let batch = self.batch(p, &rows, &name, seq)?;
        let path = self.path.join(&rel);
        let file = fs::File::create(&path).map_err(io(&path))?;
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let mut w = ArrowWriter::try_new(file, schema(self.operation), Some(props))?;
        w.write(&batch)?;
        w.close()?;
        let size = fs::metadata(&path).map_err(io(&path))?.len();
        Ok((rel, size, rows.len()))
    }

    /// A log file with an Avro data block of the changed rows and a delete block of the deleted keys.
    fn write_log(
        &self,
        p: &mut Partition,
        w: &GroupWrite,
        instant: &str,
        seq: usize,
    ) -> Result<(String, u64), GenerateError> {
        let base = p.last_commit.clone().unwrap_or_default();
        p.log_version += 1;
        let name = format!(".{}_{base}.log.{}_0-{seq}-{seq}", p.file_id, p.log_version);
        let rel = format!("{}/{name}", p.name);
        let mut out = Vec::new();
        // with the operation column: updates as `-U` (before) / `U` (after) pairs, inserts as `I`
        let mids: std::collections::HashMap<&String, Row> = w
            .intermediate
            .iter()
            .map(|(k, r)| {
                (
                    k,
                    Row {
                        commit_time: instant.to_string(),
                        ..r.clone()
                    },
                )
            })
            .collect();
        let mut changed: Vec<(&str, &Row, &str)> = Vec::new();
        for (k, r) in w.upserts.iter().filter_map(|k| p.rows.get_key_value(k)) {
            match w.before.get(k).filter(|_| self.operation) {
                Some(before) => {
                    changed.push((k, before, "-U"));
                    if let Some(mid) = mids.get(k) {
                        changed.push((k, mid, "U"));
                        changed.push((k, mid, "-U"));
                    }
                    changed.push((k, r, "U"));
                }
                None => changed.push((k, r, if w.before.contains_key(k) { "U" } else { "I" })),
            }
        }
        if !changed.is_empty() {
            let batch = self.batch(p, &changed, &name, seq)?;
            let schema = record(
                "demo_record",
                batch.schema().fields(),
                "demo_record",
                Default::default(),
            )
            .map_err(|e| GenerateError::Input(e.to_string()))?
            .to_string();
            let enc = RowEncoder::new(
                &batch,
                &(0..batch.num_columns()).collect::<Vec<_>>(),
                &Default::default(),
            )
            .map_err(|e| GenerateError::Input(e.to_string()))?;
            let content = avro_data_content(batch.num_rows(), |i, datum| enc.write(i, datum));
            out.extend(encode_block(3, &[(INSTANT_TIME, instant), (SCHEMA, &schema)], &content));
        }
        if !w.deletes.is_empty() {
            out.extend(delete_block(&w.deletes, &p.name, instant));
        }
        let path = self.path.join(&rel);
        fs::write(&path, &out).map_err(io(&path))?;
        Ok((rel, out.len() as u64))
    }

    /// One write instant: COW rewrites the touched file groups; MOR appends log files (or, on its
    /// first write, base files).
    pub fn write(
        &mut self,
        parts: &mut [Partition],
        writes: &[GroupWrite],
        op: &str,
        seq: usize,
    ) -> Result<String, GenerateError> {
        let instant = self.next_instant();
        let action = if self.mor { "deltacommit" } else { "commit" };
        self.write_file(Path::new(&format!("{instant}.{action}.requested")), b"")?;
        self.write_file(Path::new(&format!("{instant}.{action}.inflight")), b"")?;
        let mut by_part = serde_json::Map::new();
        for w in writes {
            let p = &mut parts[w.partition];
            for r in p.rows.values_mut().filter(|r| r.commit_time.is_empty()) {
                r.commit_time = instant.clone();
            }
            let prev = p.last_commit.clone().unwrap_or_else(|| "null".into());
            let existing = p.last_commit.is_some();
            let (rel, size) = if self.mor && existing {
                self.write_log(p, w, &instant, seq)?
            } else {
                let (rel, size, _) = self.write_base(p, &instant, seq)?;
                p.last_commit = Some(instant.clone());
                p.log_version = 0;
                (rel, size)
            };
            let mut stat = json!({
                "fileId": p.file_id, "path": rel, "prevCommit": prev,
                "numWrites": w.upserts.len(), "numDeletes": w.deletes.len(),
                "numUpdateWrites": w.upserts.len().saturating_sub(w.inserts), "numInserts": w.inserts,
                "totalWriteBytes": size, "totalWriteErrors": 0, "partitionPath": p.name, "fileSizeInBytes": size,
            });
            if let (Some(mode), true) = (self.cdc, existing) {
                let (cdc, cdc_size) = super::cdc::write(
                    &self.path,
                    mode,
                    p,
                    Change {
                        upserts: &w.upserts,
                        deletes: &w.deletes,
                        before: &w.before,
                    },
                    &instant,
                    seq,
                )?;
                stat["cdcStats"] = json!({ cdc: cdc_size });
            }
            by_part.insert(p.name.clone(), json!([stat]));
        }
        self.complete(&instant, action, &by_part, op)?;
        Ok(instant)
    }

    /// MOR compaction: new base files with the merged rows (commit times kept).
    pub fn compact(&mut self, parts: &mut [Partition], seq: usize) -> Result<Option<String>, GenerateError> {
        let due: Vec<usize> = (0..parts.len()).filter(|i| parts[*i].log_version > 0).collect();
        if due.is_empty() {
            return Ok(None);
        }
        let instant = self.next_instant();
        let plan = super::plan::compaction_plan(&self.path, &due.iter().map(|&i| &parts[i]).collect::<Vec<_>>())?;
        self.write_file(Path::new(&format!("{instant}.compaction.requested")), &plan)?;
        self.write_file(Path::new(&format!("{instant}.compaction.inflight")), b"")?;
        let mut by_part = serde_json::Map::new();
        for i in due {
            let p = &mut parts[i];
            let prev = p.last_commit.clone().unwrap_or_else(|| "null".into());
            let (rel, size, n) = self.write_base(p, &instant, seq)?;
            p.last_commit = Some(instant.clone());
            p.log_version = 0;
            by_part.insert(
                p.name.clone(),
                json!([{"fileId": p.file_id, "path": rel, "prevCommit": prev, "numWrites": n, "numDeletes": 0,
                        "numUpdateWrites": 0, "numInserts": 0, "totalWriteBytes": size, "totalWriteErrors": 0,
                        "partitionPath": p.name, "fileSizeInBytes": size}]),
            );
        }
        self.complete(&instant, "commit", &by_part, "COMPACT")?;
        Ok(Some(instant))
    }

    fn complete(
        &mut self,
        instant: &str,
        action: &str,
        by_part: &serde_json::Map<String, serde_json::Value>,
        op: &str,
    ) -> Result<(), GenerateError> {
        let md = json!({
            "partitionToWriteStats": by_part, "compacted": op == "COMPACT",
            "extraMetadata": {"schema": AVRO_SCHEMA}, "operationType": op,
        });
        // completed after the instant's own time, as a writer's commit is: Hudi 1.x reads a
        // table-version-6 instant's completion time from the file's mtime, which the file
        // system keeps at its clock tick (4 ms here); a compaction whose mtime fell at or before
        // its instant time made Spark's time travel to the delta commits after it read the
        // compacted state alone (4 of 8 tables written without this wait)
        let at = crate::source::hudi::timeline::instant_millis(instant).unwrap_or(0);
        while chrono::Utc::now().timestamp_millis() < at + COMPLETION_AFTER_MS {
            std::thread::sleep(Duration::from_millis(1));
        }
        // the completed instant file appears last: readers never see a half-written commit
        let tmp = self.hoodie().join(format!(".{instant}.{action}.tmp"));
        fs::write(&tmp, serde_json::to_vec_pretty(&md).unwrap_or_default()).map_err(io(&tmp))?;
        let done = self.hoodie().join(format!("{instant}.{action}"));
        fs::rename(&tmp, &done).map_err(io(&done))?;
        // the next instant is requested after this one completed
        self.last_instant = chrono::Utc::now().format("%Y%m%d%H%M%S%3f").to_string();
        Ok(())
    }
}

/// A delete block of `deletes` (record keys) in `partition` at `instant`: Hudi's
/// `HoodieDeleteRecordList` (version 3) of key, partition and ordering value.
fn delete_block(deletes: &[String], partition: &str, instant: &str) -> Vec<u8> {
    let mut datum = Vec::new();
    write_long(&mut datum, deletes.len() as i64);
    for k in deletes {
        datum.push(2);
        write_bytes(&mut datum, k.as_bytes());
        datum.push(2);
        write_bytes(&mut datum, partition.as_bytes());
        // orderingVal: what Hudi writes for a delete by key, Integer 0 (its default:
        // ordered by commit time); Hudi 0.14's readers refuse a null one
        write_long(&mut datum, 2); // the union's OrderingIntWrapper
        write_long(&mut datum, 0);
    }
    datum.push(0);
    let mut content = Vec::new();
    content.extend_from_slice(&3i32.to_be_bytes());
    content.extend_from_slice(&(datum.len() as i32).to_be_bytes());
    content.extend_from_slice(&datum);
    encode_block(1, &[(INSTANT_TIME, instant)], &content)
}
