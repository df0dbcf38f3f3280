//! librdkafka's own errors and log lines, each distinct one logged once per interval: a broker
//! outage otherwise repeats the same line hundreds of times a minute (every connection attempt
//! to every broker, once as an error callback and once as a log line). Every client the
//! connector makes goes through one: the task's producer (`StatsContext`), and the short-lived
//! ones (admin, fencing and offsets producers, offsets reader, bootstrap probe: [`QuietContext`]).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::ProducerContext;
use rdkafka::ClientContext;

/// How long a distinct librdkafka message stays quiet after it was logged.
const QUIET: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Throttle {
    /// message -> (when last logged, repeats since)
    seen: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Throttle {
    /// `Some(repeats since it was last logged)` when `key` is due to be logged again.
    fn due(&self, key: &str) -> Option<u64> {
        let mut seen = self.seen.lock();
        let now = Instant::now();
        match seen.get_mut(key) {
            Some((last, n)) if now.duration_since(*last) < QUIET => {
                *n += 1;
                None
            }
            Some((last, n)) => {
                let repeats = *n;
                (*last, *n) = (now, 0);
                Some(repeats)
            }
            None => {
                if seen.len() > 1024 {
                    seen.retain(|_, (last, _)| now.duration_since(*last) < QUIET);
                }
                seen.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }

    /// `client`: which of the connector's clients (`task 0`, `admin`, `offsets reader`, ...).
    pub fn error(&self, connector: &str, client: &str, error: &KafkaError, reason: &str) {
        let text = format!("{error}: {reason}");
        if let Some(repeated) = self.due(&text) {
            tracing::warn!(connector, client, kafka_error = %error, reason, repeated, "kafka client error");
        }
    }

    pub fn log(&self, connector: &str, client: &str, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let serious = matches!(
            level,
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error
        );
        if !serious && !matches!(level, RDKafkaLogLevel::Warning) {
            // Only `producer.override.debug` makes librdkafka (the producer's) say more than warnings.
            tracing::debug!(connector, client, facility = fac, "librdkafka: {message}");
            return;
        }
        if let Some(repeated) = self.due(&format!("{fac}|{message}")) {
            if serious {
                tracing::error!(connector, client, facility = fac, repeated, "librdkafka: {message}");
            } else {
                tracing::warn!(connector, client, facility = fac, repeated, "librdkafka: {message}");
            }
        }
    }
}

/// The context of a short-lived client: its librdkafka errors and log lines throttled and
/// labelled with the connector and the client's role; a reader's end of partition is no error.
pub struct QuietContext {
    connector: String,
    client: &'static str,
    throttle: Throttle,
    tokens: super::oauth::TokenSource,
    /// The last authentication or TLS handshake failure librdkafka reported, if any.
    refused: Mutex<Option<String>>,
}

impl QuietContext {
    pub fn new(cfg: &crate::config::SinkSettings, client: &'static str) -> Self {
        Self {
            connector: cfg.name.clone(),
            client,
            throttle: Throttle::default(),
            // checked at start (`check_settings`)
            tokens: super::oauth::TokenSource::of_connector(cfg).unwrap_or(super::oauth::TokenSource::Unsecured),
            refused: Mutex::default(),
        }
    }

    /// The last authentication (SASL) or TLS handshake failure of this client: librdkafka keeps
    /// retrying after one, so only its error callback tells a refused login from a slow broker.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().clone()
    }
}

/// Whether librdkafka's error is the cluster refusing the client's credentials or handshake.
fn is_refusal(error: &KafkaError, reason: &str) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        error.rdkafka_error_code(),
        Some(C::Authentication | C::SaslAuthenticationFailed | C::SSL)
    ) || [
        "SASL authentication error",
        "SSL handshake failed",
        // the broker's verdict on the client's certificate (mutual TLS) arrives as an alert
        "alert bad certificate",
        "alert certificate",
        "alert unknown ca",
        "certificate verify failed",
    ]
    .iter()
    .any(|s| reason.contains(s))
}

impl super::oauth::WithTokens for QuietContext {
    fn tokens(&self) -> &super::oauth::TokenSource {
        &self.tokens
    }
}

impl ClientContext for QuietContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        config: Option<&str>,
    ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        Ok(self.tokens.token(config)?)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF);
        if !eof {
            if is_refusal(&error, reason) {
                *self.refused.lock() = Some(reason.to_string());
            }
            self.throttle.error(&self.connector, self.client, &error, reason);
        }
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        self.throttle.log(&self.connector, self.client, level, fac, message);
    }
}

impl ConsumerContext for QuietContext {}

impl ProducerContext for QuietContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_logins_and_handshakes_are_told_from_outages() {
        use rdkafka::types::RDKafkaErrorCode as C;
        let transport = KafkaError::Global(C::BrokerTransportFailure);
        assert!(is_refusal(
            &KafkaError::Global(C::Authentication),
            "SASL authentication error: Authentication failed"
        ));
        assert!(is_refusal(
            &transport,
            "Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate"
        ));
        assert!(!is_refusal(
            &transport,
            "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
        ));
        assert!(!is_refusal(
            &KafkaError::Global(C::AllBrokersDown),
            "1/1 brokers are down"
        ));
    }

    #[test]
    fn a_repeated_message_is_due_once_per_interval_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.due("AllBrokersDown"), Some(0));
        for _ in 0..345 {
            assert_eq!(t.due("AllBrokersDown"), None);
        }
        assert_eq!(t.due("another"), Some(0));
        t.seen.lock().get_mut("AllBrokersDown").unwrap().0 -= QUIET;
        assert_eq!(t.due("AllBrokersDown"), Some(345));
    }
}
