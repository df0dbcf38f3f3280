//! librdkafka's own errors and log lines, each distinct one logged once per interval: a broker
//! outage otherwise repeats the same line hundreds of times a minute (every connection attempt
//! to every broker, once as an error callback and once as a log line).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

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
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
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

    pub fn error(&self, connector: &str, task: &str, error: &KafkaError, reason: &str) {
        let text = format!("{error}: {reason}");
        if let Some(repeated) = self.due(&text) {
            tracing::warn!(connector, task, kafka_error = %error, reason, repeated, "kafka client error");
        }
    }

    pub fn log(&self, connector: &str, task: &str, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let serious = matches!(level, RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error);
        if !serious && !matches!(level, RDKafkaLogLevel::Warning) {
            return;
        }
        if let Some(repeated) = self.due(&format!("{fac}|{message}")) {
            if serious {
                tracing::error!(connector, task, facility = fac, repeated, "librdkafka: {message}");
            } else {
                tracing::warn!(connector, task, facility = fac, repeated, "librdkafka: {message}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_message_is_due_once_per_interval_and_counts_the_rest() {
        let t = Throttle::default();
        assert_eq!(t.due("AllBrokersDown"), Some(0));
        for _ in 0..345 {
            assert_eq!(t.due("AllBrokersDown"), None);
        }
        assert_eq!(t.due("another"), Some(0));
        t.seen.lock().unwrap().get_mut("AllBrokersDown").unwrap().0 -= QUIET;
        assert_eq!(t.due("AllBrokersDown"), Some(345));
    }
}
