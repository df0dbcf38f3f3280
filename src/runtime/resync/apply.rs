//! A resync's buckets applied: each bucket's diff of the topic's and the table's runs, and each
//! change published from the payloads, with transactions committed as they fill.

use std::time::Duration;

use super::diff::{self, Change};
use super::{Sides, VerifyError};
use crate::changelog::resync::RawChange;
use crate::changelog::KafkaRecord;
use crate::runtime::state::ResyncProgress;
use crate::runtime::verify::runs::Payloads;
use crate::runtime::{metrics, now_ms, RuntimeError, Task};
use crate::source::{Op, SourceError};

impl Task {
    /// Bucket `b` of a resync: its diff (on the blocking pool), then each change published into
    /// the open transaction, committed whenever it holds `max.txn.records` or is `limit` old.
    /// Returns the keys the table holds more than once in the bucket.
    pub(super) async fn apply_bucket(
        &mut self,
        sides: &mut Sides,
        b: u32,
        progress: &mut ResyncProgress,
        limit: Duration,
    ) -> Result<u64, RuntimeError> {
        let b = b as usize;
        let (tp, rp, keyless) = (sides.topic[b].clone(), sides.table[b].clone(), sides.keyless);
        let (changes, dups) = tokio::task::spawn_blocking(move || {
            let mut dups = 0;
            let c = match keyless {
                true => diff::keyless(&tp, &rp),
                false => diff::keyed(&tp, &rp, &mut dups),
            };
            c.map(|c| (c, dups))
        })
        .await
        .map_err(|e| VerifyError::Spill(format!("resync diff: {e}")))?
        .map_err(|e| VerifyError::Spill(format!("resync diff: {e}")))?;
        let payloads = (
            Payloads::open(&sides.topic[b]).map_err(|e| VerifyError::Spill(e.to_string()))?,
            Payloads::open(&sides.table[b]).map_err(|e| VerifyError::Spill(e.to_string()))?,
        );
        let mut records = Vec::with_capacity(2);
        for c in &changes {
            records.clear();
            let op = publish(sides, &payloads, c, &mut records).await?;
            self.sink.send(&records)?;
            self.state.records += records.len() as u64;
            *self.written.entry(metrics::RecordOp::from(op)).or_default() += 1;
            progress.events[op as usize - 1] += 1;
            metrics::RESYNC_KEYS
                .with_label_values(&[&self.cfg.name, metrics::RecordOp::from(op).label()])
                .inc();
            if self.sink.txn_records() >= self.cfg.runtime.max_txn_records as u64
                || self.sink.txn_age().is_some_and(|a| a >= limit)
            {
                self.state.resync = Some(progress.clone());
                self.commit().await?;
            }
        }
        Ok(dups)
    }
}

/// The records of one change: its images read back from the payloads (the topic's resolved into
/// the current schema), encoded. Its op.
async fn publish(
    sides: &mut Sides,
    (topic, table): &(Payloads, Payloads),
    change: &Change,
    out: &mut Vec<KafkaRecord>,
) -> Result<Op, RuntimeError> {
    let spill = |e: std::io::Error| VerifyError::Spill(format!("resync payload: {e}"));
    let row = match change {
        Change::Create { table: loc } | Change::Update { table: loc, .. } => Some(table.get(*loc).map_err(spill)?),
        Change::Delete { .. } => None,
    };
    let before = match change {
        Change::Update { topic: loc, .. } | Change::Delete { topic: loc } => Some(topic.get(*loc).map_err(spill)?),
        Change::Create { .. } => None,
    };
    // the topic's last image, as a datum of the current schema
    let mut partition = String::new();
    let before_datum = match &before {
        Some(parts) => {
            let value = &parts[1];
            if let Some(id) = sides.decoder.unknown(value)? {
                sides.decoder.fetch(id).await?;
            }
            if row.is_none() {
                partition = sides.decoder.value(value)?.partition;
            }
            match (sides.decoder.after_image(value)?, &sides.encoder) {
                (Some(image), Some(enc)) => match enc.image(&image) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        tracing::warn!(error = %e, "resync: an event's before image left null");
                        None
                    }
                },
                _ => None,
            }
        }
        None => None,
    };
    let op = match change {
        Change::Create { .. } => Op::Create,
        Change::Update { .. } => Op::Update,
        Change::Delete { .. } => Op::Delete,
    };
    let Some(enc) = &sides.encoder else {
        // no row read and a format that tells no schema without one (Hudi): nothing to encode
        // the deletes with
        return Err(SourceError::HistoryGone {
            message: "history gap: the table at the target commit holds no row of this task's and its format \
                      gives no schema without one, so the resync's deletes cannot be encoded. Ways out: restart \
                      when the table holds rows again, or under a new connector name"
                .into(),
        }
        .into());
    };
    let (key, after, partition, file) = match &row {
        Some(parts) => (
            parts[0].as_slice(),
            Some(parts[1].as_slice()),
            String::from_utf8_lossy(&parts[2]).into_owned(),
            String::from_utf8_lossy(&parts[3]).into_owned(),
        ),
        None => (
            before.as_ref().map_or(&[][..], |p| p[0].as_slice()),
            None,
            partition,
            String::new(),
        ),
    };
    let change = RawChange {
        key,
        op,
        before: before_datum.as_deref(),
        after,
        partition: &partition,
        file: &file,
    };
    enc.encode(&change, now_ms(), out);
    Ok(op)
}
