//! A full scan's duplicate-key pre-pass: a key held by several file groups (or twice in one)
//! must be emitted once, from its newest commit. The pass reads the key columns only, keeps
//! 64-bit key hashes (8 bytes a row; beyond the budget spilled to hash-partitioned runs on disk,
//! each sorted alone), then confirms the candidates by their exact key.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};

use super::super::reader::UnitRead;
use super::super::slice::FileCache;
use super::super::HudiSource;
use crate::metrics;
use crate::source::buckets::KeyText;
use crate::source::parallel;
use crate::source::SourceError;

/// Keys held more than once in a full scan, and the (split, row) that wins each.
#[derive(Default)]
pub(super) struct Duplicates {
    candidates: HashSet<u64>,
    winners: HashMap<Vec<u8>, (usize, u64)>,
}

impl Duplicates {
    /// Which rows of a batch (rows `seq..` of split `s`) to emit; `None`: all of them.
    pub(super) fn keep(
        &self,
        s: usize,
        seq: u64,
        batch: &RecordBatch,
        keys: &[usize],
    ) -> Result<Option<BooleanArray>, SourceError> {
        if self.winners.is_empty() {
            return Ok(None);
        }
        let text = KeyText::new(batch, keys)?;
        let mut dropped = false;
        let keep: BooleanArray = (0..batch.num_rows())
            .map(|r| {
                let lost = self.candidates.contains(&text.hash(r))
                    && self
                        .winners
                        .get(&text.bytes(r))
                        .is_some_and(|w| *w != (s, seq + r as u64));
                dropped |= lost;
                Some(!lost)
            })
            .collect();
        Ok(dropped.then_some(keep))
    }
}

/// Runs of key hashes on disk beyond 1 Mi hashes (one read of the table whatever its size; a run
/// holds 1/512 of the table's hashes: 156 MB at 10 billion rows). Each run is written through a
/// 4 KiB buffer: 2 MiB for all of them (16 KiB buffers were 8 MiB, a quarter of what a 16M-row
/// COW full scan held above a 1M-row one).
const HASH_RUNS: usize = 512;

/// Key hashes of a full scan: in memory up to `cap`, then partitioned by hash into [`HASH_RUNS`]
/// files, each sorted alone to find the hashes seen more than once.
struct HashRuns {
    dir: std::path::PathBuf,
    cap: usize,
    mem: Vec<u64>,
    runs: Option<(tempfile::TempDir, Vec<std::io::BufWriter<std::fs::File>>)>,
    total: u64,
}

impl HashRuns {
    fn new(dir: &std::path::Path, cap: usize) -> Self {
        Self {
            dir: dir.into(),
            cap,
            mem: Vec::new(),
            runs: None,
            total: 0,
        }
    }

    fn spilled(&self) -> bool {
        self.runs.is_some()
    }

    fn push(&mut self, h: u64) -> Result<(), SourceError> {
        self.total += 1;
        if self.runs.is_none() {
            self.mem.push(h);
            if self.mem.len() <= self.cap {
                return Ok(());
            }
            std::fs::create_dir_all(&self.dir).map_err(SourceError::io(&self.dir))?;
            let tmp = tempfile::Builder::new()
                .prefix("lakestream-keys-")
                .tempdir_in(&self.dir)
                .map_err(SourceError::io(&self.dir))?;
            let files = (0..HASH_RUNS)
                .map(|i| {
                    let p = tmp.path().join(format!("{i}.u64"));
                    std::fs::File::create(&p)
                        .map(|f| std::io::BufWriter::with_capacity(4 << 10, f))
                        .map_err(SourceError::io(&p))
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.runs = Some((tmp, files));
            for h in std::mem::take(&mut self.mem) {
                self.write(h)?;
            }
            return Ok(());
        }
        self.write(h)
    }

    fn write(&mut self, h: u64) -> Result<(), SourceError> {
        use std::io::Write;
        let (tmp, files) = self.runs.as_mut().expect("runs open");
        let i = (h % HASH_RUNS as u64) as usize;
        files[i]
            .write_all(&h.to_le_bytes())
            .map_err(SourceError::io(tmp.path()))
    }

    /// Hashes pushed more than once.
    fn repeated(self) -> Result<HashSet<u64>, SourceError> {
        let mut out = HashSet::new();
        let mut dups = |mut v: Vec<u64>| {
            v.sort_unstable();
            out.extend(v.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]));
        };
        let Some((tmp, files)) = self.runs else {
            dups(self.mem);
            return Ok(out);
        };
        for (i, f) in files.into_iter().enumerate() {
            let path = tmp.path().join(format!("{i}.u64"));
            drop(f.into_inner().map_err(|e| SourceError::Io {
                path: path.clone(),
                source: e.into_error(),
            })?);
            let bytes = std::fs::read(&path).map_err(SourceError::io(&path))?;
            dups(
                bytes
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            );
        }
        Ok(out)
    }
}

impl HudiSource {
    /// Columns the key pre-pass reads.
    fn key_pass_columns(&self) -> Vec<String> {
        let mut only: Vec<String> = vec!["_hoodie_record_key".into(), "_hoodie_commit_time".into()];
        only.extend(self.info.key_fields.iter().cloned());
        only.extend(self.merge.ordering.iter().cloned());
        only.extend(self.merge.delete_columns());
        only
    }

    /// Stream the key columns of every split's merged slice as of the unit, splits read in
    /// parallel: `f(split, first row index, batch, key columns, commit-time column)`.
    #[allow(clippy::type_complexity)]
    fn key_pass(
        &self,
        r: &UnitRead<'_>,
        f: &(dyn Fn(usize, u64, &RecordBatch, &[usize], Option<usize>) -> Result<(), SourceError> + Sync),
    ) -> Result<(), SourceError> {
        let unit = r.unit;
        let read = |s: usize| -> Result<(), SourceError> {
            let sp = &unit.splits[s];
            if r.is_replaced(sp) {
                return Ok(());
            }
            let cache = FileCache::single_pass(Some(self.key_pass_columns()));
            let reader = self.shared_slice_reader(r.tl, &cache);
            let Some(merge) = self.open_slice(r, &reader, sp, true)? else {
                return Ok(());
            };
            let Some(schema) = merge.schema().cloned() else {
                return Ok(());
            };
            let (keys, order) = self.key_columns(&schema)?;
            let mut seq = 0u64;
            merge.run(&mut |b| {
                f(s, seq, &b, &keys, order)?;
                seq += b.num_rows() as u64;
                Ok(())
            })?;
            Ok(())
        };
        parallel::ordered(unit.splits.len(), self.threads, &read, &mut |_| Ok(()))
    }

    /// The pre-pass of a full scan: keys held by more than one row of the latest slices.
    pub(super) fn duplicates(&self, r: &UnitRead<'_>) -> Result<Duplicates, SourceError> {
        // a few MiB of hashes in memory; beyond that runs on disk are cheap (8 bytes a row, once)
        let started = std::time::Instant::now();
        tracing::info!(connector = %self.connector, splits = r.unit.splits.len(),
            "full scan: key pre-pass (a key held by two rows is emitted once)");
        let runs = Mutex::new(HashRuns::new(
            &self.spill.dir,
            (self.budget.get() / 32).clamp(4, 1 << 20),
        ));
        self.key_pass(r, &|_, _, b, keys, _| {
            let text = KeyText::new(b, keys)?;
            let hashes: Vec<u64> = (0..b.num_rows()).map(|r| text.hash(r)).collect();
            let mut runs = runs.lock();
            hashes.into_iter().try_for_each(|h| runs.push(h))
        })?;
        let runs = runs.into_inner();
        if runs.spilled() {
            metrics::SPILLED_BYTES
                .with_label_values(&[&self.connector])
                .inc_by(runs.total * 8);
            tracing::info!(connector = %self.connector, rows = runs.total, runs = HASH_RUNS, budget = self.budget.get(),
                "full scan: the table's keys exceed read.memory.budget; key hashes spilled to runs on disk");
        }
        let keys = runs.total;
        let candidates = runs.repeated()?;
        tracing::info!(connector = %self.connector, keys, candidates = candidates.len(),
            seconds = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0, "full scan: key pre-pass done");
        if candidates.is_empty() {
            return Ok(Duplicates::default());
        }
        // confirm by the exact key; the winner is the newest commit, later rows winning ties
        // exact key -> (commit time, split, row) of each row holding it
        type Seen = HashMap<Vec<u8>, Vec<(Option<String>, usize, u64)>>;
        let seen: Mutex<Seen> = Mutex::default();
        self.key_pass(r, &|s, seq, b, keys, order| {
            let text = KeyText::new(b, keys)?;
            let commits = order.and_then(|o| b.column(o).as_any().downcast_ref::<StringArray>());
            for r in 0..b.num_rows() {
                if candidates.contains(&text.hash(r)) {
                    let commit = commits.and_then(|c| c.is_valid(r).then(|| c.value(r).to_string()));
                    seen.lock()
                        .entry(text.bytes(r))
                        .or_default()
                        .push((commit, s, seq + r as u64));
                }
            }
            Ok(())
        })?;
        let seen = seen.into_inner();
        let winners: HashMap<Vec<u8>, (usize, u64)> = seen
            .into_iter()
            .filter(|(_, v)| v.len() > 1)
            .map(|(k, v)| {
                let w = v.into_iter().max().expect("two or more rows");
                (k, (w.1, w.2))
            })
            .collect();
        if !winners.is_empty() {
            tracing::info!(connector = %self.connector, keys = winners.len(), "full scan: keys held by several rows are emitted once (newest commit)");
        }
        Ok(Duplicates { candidates, winners })
    }
}
