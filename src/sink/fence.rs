//! Short-lived transactional producers under another transactional id than the task's: fencing
//! a previous generation's ids, and writing offsets records for `offsets reset` / `set` (whose
//! `init_transactions` fences a running task first).

use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use super::client::{close_detached, producer_config, txn_call_timeout};
use super::{blocking, classify, QuietContext, SinkError};
use crate::config::SinkSettings;

/// Write offsets records (`None`: a tombstone) in one transaction under `transactional_id`,
/// whose `init_transactions` fences any producer still holding it (`offsets reset` / `set`).
pub async fn write_offsets_records(
    cfg: &SinkSettings,
    transactional_id: &str,
    records: Vec<(String, Option<Vec<u8>>)>,
) -> Result<(), SinkError> {
    let p: ThreadedProducer<QuietContext> = producer_config(cfg, transactional_id, &[])
        .create_with_context(QuietContext::new(cfg, "offsets writer"))
        .map_err(|e| SinkError::kafka("creating offsets producer", e))?;
    super::oauth::seeded(p.client(), cfg)?;
    let timeout = txn_call_timeout(cfg);
    let topic = cfg.kafka.offsets_topic.clone();
    blocking(move || -> Result<(), SinkError> {
        p.init_transactions(timeout)
            .map_err(|e| classify("init_transactions", e))?;
        p.begin_transaction().map_err(|e| classify("begin_transaction", e))?;
        for (key, value) in &records {
            let mut r = BaseRecord::<[u8], [u8]>::to(&topic).key(key.as_bytes());
            if let Some(v) = value {
                r = r.payload(v.as_slice());
            }
            p.send(r)
                .map_err(|(e, _)| SinkError::kafka("writing an offsets record", e))?;
        }
        p.commit_transaction(timeout)
            .map_err(|e| classify("commit_transaction", e))
    })
    .await
}

/// Fence a transactional id (of a previous generation of tasks): `init_transactions` under it
/// bumps its epoch, so a zombie producer with that id can no longer commit, and aborts its open
/// transaction.
pub async fn fence(cfg: &SinkSettings, transactional_id: &str) -> Result<(), SinkError> {
    let pc = producer_config(cfg, transactional_id, &[]);
    let timeout = txn_call_timeout(cfg);
    let mut attempt = 0;
    loop {
        let producer: ThreadedProducer<QuietContext> = pc
            .create_with_context(QuietContext::new(cfg, "fencing producer"))
            .map_err(|e| SinkError::kafka("creating fencing producer", e))?;
        super::oauth::seeded(producer.client(), cfg)?;
        let init = move || {
            let res = producer.init_transactions(timeout);
            close_detached(producer);
            res
        };
        match blocking(init).await {
            Ok(()) => break,
            // another task of the new generation fenced the same id at the same moment: done
            Err(e)
                if matches!(
                    e.rdkafka_error_code(),
                    Some(RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::Fenced)
                ) =>
            {
                break
            }
            Err(e) if attempt < 10 => {
                attempt += 1;
                tracing::debug!(transactional_id, error = %e, attempt, "fencing: retrying");
                tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
            }
            Err(e) => return Err(classify("fencing init_transactions", e)),
        }
    }
    tracing::info!(transactional_id, "previous generation's producer fenced");
    Ok(())
}
