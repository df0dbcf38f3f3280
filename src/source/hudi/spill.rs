//! Record sources of one file-slice merge, bounded in memory (Hudi's ExternalSpillableMap, in
//! Arrow): once decoded log records pass `read.memory.budget`, further log batches go to an Arrow
//! IPC file on local disk. Only the merge columns (record key, ordering fields, soft-delete flag)
//! stay in memory; winning rows are read back one spilled batch at a time.

use std::fs::File;
use std::path::PathBuf;

use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use arrow_array::RecordBatch;

use crate::metrics;
use crate::source::SourceError;

#[derive(Debug, Clone)]
pub struct SpillConfig {
    /// Bytes of decoded log records kept in memory per merge.
    pub budget: usize,
    pub dir: PathBuf,
    pub connector: String,
}

enum Stored {
    Mem(RecordBatch),
    Spilled(usize),
}

struct SpillFile {
    file: tempfile::NamedTempFile,
    writer: Option<FileWriter<File>>,
    written: usize,
    reader: Option<FileReader<File>>,
}

pub struct Sources {
    cfg: SpillConfig,
    merge_cols: Vec<usize>,
    full: Vec<Stored>,
    projected: Vec<RecordBatch>,
    rows: u64,
    log_bytes: usize,
    spill: Option<SpillFile>,
}

fn spill_err(what: &str, e: impl std::fmt::Display, path: &std::path::Path) -> SourceError {
    SourceError::format(path, format!("spilling log records ({what}): {e}"))
}

impl Sources {
    pub fn new(cfg: SpillConfig, merge_cols: Vec<usize>) -> Self {
        Self { cfg, merge_cols, full: Vec::new(), projected: Vec::new(), rows: 0, log_bytes: 0, spill: None }
    }

    pub fn len(&self) -> usize {
        self.full.len()
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Add a batch (already conformed to the slice schema). Log batches count against the budget.
    pub fn push(&mut self, batch: RecordBatch, is_log: bool) -> Result<(), SourceError> {
        self.rows += batch.num_rows() as u64;
        let projected = batch
            .project(&self.merge_cols)
            .map_err(crate::source::SourceError::arrow("merge columns"))?;
        self.projected.push(projected);
        let size = batch.get_array_memory_size();
        if !is_log || self.log_bytes + size <= self.cfg.budget {
            if is_log {
                self.log_bytes += size;
            }
            self.full.push(Stored::Mem(batch));
            return Ok(());
        }
        if self.spill.is_none() {
            std::fs::create_dir_all(&self.cfg.dir).map_err(SourceError::io(&self.cfg.dir))?;
            let file = tempfile::Builder::new()
                .prefix("lakestream-spill-")
                .suffix(".arrow")
                .tempfile_in(&self.cfg.dir)
                .map_err(SourceError::io(&self.cfg.dir))?;
            let handle = file.reopen().map_err(SourceError::io(file.path()))?;
            let writer = FileWriter::try_new(handle, &batch.schema()).map_err(|e| spill_err("open", e, file.path()))?;
            tracing::info!(connector = %self.cfg.connector, file = %file.path().display(), budget = self.cfg.budget,
                "log records exceed read.memory.budget; spilling to disk");
            self.spill = Some(SpillFile { file, writer: Some(writer), written: 0, reader: None });
        }
        let sp = self.spill.as_mut().expect("spill file open");
        let w = sp.writer.as_mut().expect("spill writer open until read");
        w.write(&batch).map_err(|e| spill_err("write", e, sp.file.path()))?;
        metrics::SPILLED_BYTES.with_label_values(&[&self.cfg.connector]).inc_by(size as u64);
        self.full.push(Stored::Spilled(sp.written));
        sp.written += 1;
        Ok(())
    }

    /// The merge columns of every source, in source order.
    pub fn merge_batches(&self) -> &[RecordBatch] {
        &self.projected
    }

    fn load(&mut self, i: usize) -> Result<RecordBatch, SourceError> {
        match &self.full[i] {
            Stored::Mem(b) => Ok(b.clone()),
            Stored::Spilled(idx) => {
                let sp = self.spill.as_mut().expect("spilled batches have a file");
                if let Some(mut w) = sp.writer.take() {
                    w.finish().map_err(|e| spill_err("finish", e, sp.file.path()))?;
                }
                if sp.reader.is_none() {
                    let f = sp.file.reopen().map_err(SourceError::io(sp.file.path()))?;
                    sp.reader = Some(FileReader::try_new(f, None).map_err(|e| spill_err("reopen", e, sp.file.path()))?);
                }
                let r = sp.reader.as_mut().expect("reader just opened");
                r.set_index(*idx).map_err(|e| spill_err("seek", e, sp.file.path()))?;
                match r.next() {
                    Some(Ok(b)) => Ok(b),
                    Some(Err(e)) => Err(spill_err("read", e, sp.file.path())),
                    None => Err(spill_err("read", "batch missing", sp.file.path())),
                }
            }
        }
    }

    /// Rows `picks` (sorted by source, then row) gathered into batches, one source at a time.
    pub fn take(&mut self, picks: &[(usize, usize)]) -> Result<Vec<RecordBatch>, SourceError> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < picks.len() {
            let src = picks[i].0;
            let mut j = i;
            while j < picks.len() && picks[j].0 == src {
                j += 1;
            }
            let batch = self.load(src)?;
            let idx = arrow_array::UInt32Array::from_iter_values(picks[i..j].iter().map(|(_, r)| *r as u32));
            if j - i == batch.num_rows() {
                out.push(batch);
            } else {
                out.push(
                    arrow::compute::take_record_batch(&batch, &idx).map_err(SourceError::arrow("gathering merged rows"))?,
                );
            }
            i = j;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(keys: &[&str], v: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_hoodie_record_key", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let vals = Int64Array::from(vec![v; keys.len()]);
        RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(keys.to_vec())), Arc::new(vals)]).unwrap()
    }

    #[test]
    fn log_batches_beyond_the_budget_spill_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SpillConfig { budget: 1, dir: dir.path().into(), connector: "spill-test".into() };
        let mut s = Sources::new(cfg, vec![0]);
        s.push(batch(&["a", "b"], 1), false).unwrap(); // base: never spilled
        s.push(batch(&["c", "d"], 2), true).unwrap();
        s.push(batch(&["e"], 3), true).unwrap();
        assert!(matches!(s.full[0], Stored::Mem(_)));
        assert!(matches!(s.full[1], Stored::Spilled(0)) && matches!(s.full[2], Stored::Spilled(1)));
        assert_eq!(s.merge_batches()[1].num_columns(), 1, "only merge columns stay in memory");
        let out = s.take(&[(0, 1), (1, 0), (1, 1), (2, 0)]).unwrap();
        let keys: Vec<String> = out
            .iter()
            .flat_map(|b| {
                let k = b.column(0).as_any().downcast_ref::<StringArray>().unwrap().clone();
                (0..k.len()).map(move |i| k.value(i).to_string())
            })
            .collect();
        assert_eq!(keys, ["b", "c", "d", "e"]);
        assert!(metrics::SPILLED_BYTES.with_label_values(&["spill-test"]).get() > 0);
    }
}
