//! The sink's errors, in kinds the runtime acts on (ride out, stop, fence), and how librdkafka's
//! errors map to them.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("kafka: {context}: {source}")]
    Kafka { context: String, source: KafkaError },
    /// The open transaction was aborted; replay from the last committed offsets.
    #[error("transaction aborted: {0}")]
    Aborted(String),
    /// Another instance with the same transactional.id took over: this one must stop.
    #[error("fenced: a newer instance of this connector task took over ({0}); run one instance per task")]
    Fenced(String),
    /// The broker's transaction coordinator aborted the open transaction once it outlived
    /// `transaction.timeout.ms` (a broker down or stalled that long) and bumped the producer's
    /// epoch: librdkafka reports that as fenced, though no other instance took over. A new
    /// producer and the committed position recover.
    #[error("transaction expired on the broker: {0}")]
    Expired(String),
    /// The producer is unusable (librdkafka fatal error, e.g. sequence numbers a restarted
    /// broker no longer knows); a new producer and the committed position recover.
    #[error("fatal producer error: {0}")]
    Fatal(String),
    /// The offsets topic could not be read to its end.
    #[error("offsets: {0}")]
    Offsets(String),
    /// A topic could not be created or described, or is not fit for its use (an offsets topic
    /// that is not compacted).
    #[error("topic: {0}")]
    Topic(String),
    /// `bootstrap.servers` did not answer at start within `bootstrap.timeout.ms`.
    #[error("{0}")]
    Unreachable(String),
    /// The cluster refused the connector's credentials (SASL) or its TLS handshake at start.
    #[error("{0}")]
    Authentication(String),
}

impl SinkError {
    pub fn kafka(context: impl Into<String>, source: KafkaError) -> Self {
        SinkError::Kafka {
            context: context.into(),
            source,
        }
    }
}

pub(super) fn classify(context: &str, e: KafkaError) -> SinkError {
    if matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::Fenced)
    ) {
        return SinkError::Fenced(format!("{context}: {e}"));
    }
    if let KafkaError::Transaction(ref t) = e {
        if t.is_fatal() {
            return SinkError::Fatal(format!("{context}: {t}"));
        }
        if t.txn_requires_abort() {
            return SinkError::Aborted(format!("{context}: {t}"));
        }
    }
    SinkError::kafka(context, e)
}

/// A fence that met a transaction older than `transaction.timeout.ms` is the broker's own
/// timeout abort (which bumps the epoch), not a newer instance: a newer instance fences a
/// transaction of any age, the coordinator only one that outlived the timeout (counted on the
/// broker from the transaction's first partition, after it began here). A stalled zombie whose
/// transaction expired is taken for an outage too: its new producer fences the newer instance,
/// whose young transaction then stops it as fenced. They alternate only while both keep
/// transactions open past the timeout; fencing keeps every commit exactly-once meanwhile.
pub(super) fn expired_or(err: SinkError, age: Option<Duration>, timeout: Duration) -> SinkError {
    match (err, age) {
        (SinkError::Fenced(m), Some(age)) if age >= timeout => SinkError::Expired(format!(
            "{m}; the transaction was {} ms old, past transaction.timeout.ms={} ms",
            age.as_millis(),
            timeout.as_millis()
        )),
        (e, _) => e,
    }
}

impl SinkError {
    /// Whether a new producer and the committed position can recover from this (a broker
    /// outage, restart or stall), as opposed to fencing or a problem with the offsets data.
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }

    pub fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind as K;
        match self {
            // what a new producer and the committed position recover from
            SinkError::Kafka { .. } | SinkError::Aborted(_) | SinkError::Expired(_) | SinkError::Fatal(_) => {
                K::Unavailable
            }
            SinkError::Fenced(_) => K::Fenced,
            SinkError::Offsets(_) => K::Position,
            SinkError::Topic(_) => K::Rejected,
            SinkError::Unreachable(_) => K::Unreachable,
            SinkError::Authentication(_) => K::Rejected,
        }
    }
}

pub(super) fn retriable(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Transaction(t) if t.is_retriable())
}
