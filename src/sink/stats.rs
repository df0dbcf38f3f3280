//! The task producer's client context: librdkafka's errors and logs through the throttle, and
//! its statistics as metrics.

use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::ProducerContext;
use rdkafka::statistics::Statistics;

use crate::metrics;

/// librdkafka statistics of a task's producer: gauges, and its cumulative totals added to
/// counters (by what grew since the last report, so a new producer continues the series).
pub struct StatsContext {
    pub(super) connector: String,
    pub(super) task: String,
    /// `task <id>`: the client in log lines.
    pub(super) client: String,
    /// (txmsg_bytes, txmsgs) at the last report.
    pub(super) last: parking_lot::Mutex<(u64, u64)>,
    pub(super) quiet: super::log_throttle::Throttle,
    pub(super) offsets_topic: String,
    /// The change topic.
    pub(super) topic: String,
    /// Where the open transaction's records landed (reset when one begins).
    pub(super) trace: parking_lot::Mutex<super::TxnTrace>,
    /// The open transaction's last acknowledged offset in each partition of the change topic
    /// (reset when one begins).
    pub(super) last_offsets: parking_lot::Mutex<std::collections::HashMap<i32, i64>>,
    /// Where its OAUTHBEARER tokens come from (see `oauth`).
    pub(super) tokens: super::oauth::TokenSource,
}

impl super::oauth::WithTokens for StatsContext {
    fn tokens(&self) -> &super::oauth::TokenSource {
        &self.tokens
    }
}

impl ClientContext for StatsContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        Ok(self.tokens.token(config)?)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.quiet.error(&self.connector, &self.client, &error, reason);
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.quiet.log(&self.connector, &self.client, level, fac, log_message);
    }

    fn stats(&self, s: Statistics) {
        let labels = [self.connector.as_str(), self.task.as_str()];
        metrics::PRODUCER_QUEUE.with_label_values(&labels).set(s.msg_cnt as f64);
        {
            let mut last = self.last.lock();
            let (bytes, msgs) = (s.txmsg_bytes as u64, s.txmsgs as u64);
            metrics::PRODUCER_TX_BYTES
                .with_label_values(&labels)
                .inc_by(bytes.saturating_sub(last.0));
            metrics::PRODUCER_TX_MESSAGES
                .with_label_values(&labels)
                .inc_by(msgs.saturating_sub(last.1));
            *last = (bytes.max(last.0), msgs.max(last.1));
        }
        for b in s.brokers.values() {
            if let Some(rtt) = &b.rtt {
                metrics::BROKER_RTT
                    .with_label_values(&[&self.connector, &b.name])
                    .set(rtt.avg as f64 / 1e6);
            }
        }
    }
}

impl ProducerContext for StatsContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        use rdkafka::Message;
        let Ok(m) = result else { return };
        if m.topic() == self.topic {
            let mut last = self.last_offsets.lock();
            let o = last.entry(m.partition()).or_insert(m.offset());
            *o = (*o).max(m.offset());
        }
        let mut trace = self.trace.lock();
        if m.topic() == self.offsets_topic {
            trace.position = Some((m.partition(), m.offset()));
        } else if trace.change.is_none() {
            trace.change = Some((m.topic().to_string(), m.partition(), m.offset()));
        }
    }
}
