//! The table side of a verify: the table read whole at the verified commit through the source's
//! own snapshot path (the read an initial snapshot or a resumed one does, bounded by
//! `read.memory.budget`), each row encoded by the connector's own encoder as an `r` event and
//! decoded again like the topic's events, so both sides are digested by the same code.

use std::time::Instant;

use tokio::runtime::Handle;

use super::runs::{Partitions, Rec, RunWriter, NO_PAYLOAD};
use super::topic::Mine;
use super::VerifyError;
use crate::changelog::decode::EventDecoder;
use crate::changelog::{ChangelogEncoder, KafkaRecord};
use crate::metrics;
use crate::source::{Resume, Source, SourceError, Unit};

#[derive(Debug, Default)]
pub struct TableSide {
    pub rows: u64,
    /// Bytes the source read from storage.
    pub bytes: u64,
    pub partitions: Partitions,
    pub paths: Vec<std::path::PathBuf>,
    /// The Arrow schema of the rows read (a resync encodes its events with it).
    pub schema: Option<arrow_schema::SchemaRef>,
}

pub struct TableReader<'a> {
    pub connector: &'a str,
    pub source: &'a dyn Source,
    pub unit: &'a Unit,
    pub encoder: ChangelogEncoder,
    pub decoder: EventDecoder,
    pub handle: Handle,
    pub keyless: bool,
    /// Where the image columns of the table at the commit go (once, for the topic side).
    pub columns: std::sync::mpsc::Sender<Vec<String>>,
    /// Only the rows this task owns (`None`: all).
    pub mine: Option<&'a Mine<'a>>,
}

struct State<'a> {
    r: TableReader<'a>,
    side: TableSide,
    out: RunWriter,
    records: Vec<KafkaRecord>,
    after: Vec<u8>,
}

impl State<'_> {
    fn split(&mut self, split: &crate::source::SplitChanges) -> Result<(), VerifyError> {
        let enc = self.r.handle.block_on(self.r.encoder.split(self.r.unit, split))?;
        if let (None, Some(b)) = (&self.side.schema, split.batches.first()) {
            self.side.schema = Some(b.schema());
        }
        for row in &split.rows {
            self.records.clear();
            enc.encode(row, self.r.unit.ts_ms, None, &mut self.records);
            let record = self.records.swap_remove(0);
            let Some(value) = record.value.as_deref() else { continue };
            self.r.decoder.load_for(value, &self.r.handle)?;
            if self.side.rows == 0 {
                let _ = self.r.columns.send(self.r.decoder.image_columns(value)?);
            }
            let e = self.r.decoder.value(value)?;
            let Some(after) = e.after else { continue };
            if let Some(mine) = self.r.mine {
                if !mine(&record.key, &e.partition) {
                    continue;
                }
            }
            let partition = self.side.partitions.id(&e.partition);
            let mut rec = if self.r.keyless {
                Rec {
                    key: after,
                    image: 0,
                    delta: 1,
                    commit: 0,
                    op: b'r',
                    partition,
                    text: String::new(),
                    loc: NO_PAYLOAD,
                }
            } else {
                self.r.decoder.load_for(&record.key, &self.r.handle)?;
                let k = self.r.decoder.key(&record.key)?;
                Rec {
                    key: k.digest,
                    image: after,
                    delta: 1,
                    commit: 0,
                    op: b'r',
                    partition,
                    text: k.text,
                    loc: NO_PAYLOAD,
                }
            };
            if self.out.keeps_payloads() {
                // the framed key, the image as a datum, and where it was read
                self.after.clear();
                enc.write_after(row, &mut self.after);
                let file = match (row.after(), split.batch_files.is_empty()) {
                    (Some(r), false) => split.batch_files[r.batch as usize].1.as_str(),
                    _ => split.file.as_str(),
                };
                let key = record.key.as_slice();
                let parts: [&[u8]; 4] = [key, &self.after, e.partition.as_bytes(), file.as_bytes()];
                self.out.payload(&mut rec, &parts).map_err(VerifyError::spill)?;
            }
            self.out.push(&rec).map_err(VerifyError::spill)?;
            self.side.rows += 1;
        }
        Ok(())
    }
}

/// Read the table at `r.unit` into `out` (blocking).
pub fn read(r: TableReader<'_>, out: RunWriter) -> Result<TableSide, VerifyError> {
    let (source, unit, connector) = (r.source, r.unit, r.connector.to_string());
    let mut st = State {
        r,
        side: TableSide::default(),
        out,
        records: Vec::with_capacity(2),
        after: Vec::new(),
    };
    let started = Instant::now();
    let mut last_log = Instant::now();
    let gauge = metrics::VERIFY_PROGRESS.with_label_values(&[&connector, metrics::VerifySide::Table.label()]);
    let mut failed: Option<VerifyError> = None;
    let res = source.read_unit(unit, &Resume::default(), &mut |split| {
        if let Err(e) = st.split(&split) {
            failed = Some(e);
            return Err(SourceError::Stopped);
        }
        st.side.bytes += split.bytes_read;
        gauge.set(st.side.rows as f64);
        if last_log.elapsed().as_secs() >= 10 {
            tracing::info!(connector = %connector, rows = st.side.rows, seconds = started.elapsed().as_secs(), "verify: reading the table");
            last_log = Instant::now();
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    res?;
    let mut side = st.side;
    side.paths = st.out.finish().map_err(VerifyError::spill)?;
    tracing::info!(connector = %connector, rows = side.rows, bytes = side.bytes, seconds = started.elapsed().as_secs_f64(), "verify: table read");
    Ok(side)
}
