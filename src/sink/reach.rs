//! Reaching `bootstrap.servers` at start. librdkafka retries an unreachable cluster forever and,
//! when an admin call finally times out, says only `OperationTimedOut`; a mistyped address or a
//! closed firewall would look like a slow broker. This probe connects to each address itself
//! (naming what failed: unknown host, refused, no answer), then asks the cluster for metadata
//! through librdkafka with the connector's security settings, all within `bootstrap.timeout.ms`.
//! Only the first start is probed: once the connector has run, an outage is ridden out.

use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, Producer};

use super::SinkError;
use crate::config::SinkSettings;
use crate::error::Joined;

/// `host:port` of each bootstrap address (a `PROTOCOL://` prefix dropped).
fn addresses(bootstrap: &str) -> Vec<String> {
    bootstrap
        .split(',')
        .map(|a| a.trim())
        .filter(|a| !a.is_empty())
        .map(|a| a.rsplit_once("://").map_or(a, |(_, rest)| rest).to_string())
        .collect()
}

/// Why one address did not accept a TCP connection within `wait`, or `None` when it did.
async fn connect(addr: &str, wait: Duration) -> Option<String> {
    let targets = match tokio::time::timeout(wait, tokio::net::lookup_host(addr)).await {
        Err(_) => return Some("name lookup timed out".into()),
        Ok(Err(e)) => return Some(format!("unknown host ({e})")),
        Ok(Ok(t)) => t.collect::<Vec<_>>(),
    };
    if targets.is_empty() {
        return Some("the name resolves to no address".into());
    }
    let mut why = String::new();
    for t in targets {
        // the resolved address, where the name was not one
        let at = if t.to_string() == addr {
            String::new()
        } else {
            format!(" at {t}")
        };
        match tokio::time::timeout(wait, tokio::net::TcpStream::connect(t)).await {
            Ok(Ok(_)) => return None,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => why = format!("connection refused{at}"),
            Ok(Err(e)) => why = format!("{e}{at}"),
            Err(_) => why = format!("no answer within {} s{at} (filtered or blackholed?)", wait.as_secs()),
        }
    }
    Some(why)
}

/// Wait until one bootstrap address accepts connections and the cluster answers a metadata
/// request, or fail after `bootstrap.timeout.ms` naming every address and its cause: the names
/// of the cluster's topics, as that answer has them.
pub async fn reach(cfg: &SinkSettings) -> Result<Vec<String>, SinkError> {
    let deadline = Instant::now() + cfg.kafka.bootstrap_timeout;
    let addrs = addresses(&cfg.kafka.bootstrap_servers);
    let each = |causes: Vec<Option<String>>| -> String {
        let each: Vec<String> = addrs
            .iter()
            .zip(causes)
            .map(|(a, c)| format!("{a}: {}", c.unwrap_or_else(|| "accepts TCP connections".into())))
            .collect();
        each.join("; ")
    };
    let causes = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = left.clamp(Duration::from_millis(100), Duration::from_secs(10));
        let causes = futures::future::join_all(addrs.iter().map(|a| connect(a, wait))).await;
        if causes.iter().any(Option::is_none) {
            break causes;
        }
        if Instant::now() + Duration::from_millis(500) >= deadline {
            return Err(SinkError::Unreachable(format!(
                "no bootstrap server could be reached within bootstrap.timeout.ms={} ({}). Check bootstrap.servers, \
                 DNS and network policies",
                cfg.kafka.bootstrap_timeout.as_millis(),
                each(causes)
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // a listener answers: now Kafka itself, with the connector's security settings
    let client: BaseProducer<super::QuietContext> = super::client_config(cfg)
        .create_with_context(super::QuietContext::new(cfg, "bootstrap probe"))
        .map_err(|e| SinkError::kafka("bootstrap probe client", e))?;
    super::oauth::seeded(client.client(), cfg)?;
    // asked in short steps: a refused login or handshake fails at once, naming it, where
    // librdkafka would retry it until the deadline and then say only "transport failure"
    let res = tokio::task::spawn_blocking(move || loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let step = left.clamp(Duration::from_millis(200), Duration::from_secs(1));
        let answer = client.client().fetch_metadata(None, step);
        // serves the error callbacks (a base producer only calls them from `poll`)
        client.poll(Duration::ZERO);
        let e = match answer {
            Ok(md) => return Ok(md.topics().iter().map(|t| t.name().to_string()).collect()),
            Err(e) => e,
        };
        if let Some(why) = client.context().refused() {
            return Err(Probe::Refused(why));
        }
        if Instant::now() >= deadline {
            return Err(Probe::NoAnswer(e.to_string()));
        }
    })
    .await
    .joined();
    res.map_err(|p| match p {
        Probe::Refused(why) => SinkError::Authentication(format!(
            "bootstrap.servers {} refused the connector's {}: {why}. Check sasl.username / sasl.password, \
             ssl.certificate.location / ssl.key.location (producer.override.*) and the listener's security.protocol",
            cfg.kafka.bootstrap_servers,
            login(cfg)
        )),
        Probe::NoAnswer(e) => SinkError::Unreachable(format!(
            "no Kafka metadata answer from bootstrap.servers within bootstrap.timeout.ms={} ({e}; {}). Is it a Kafka \
             listener, and do security.protocol / sasl.* / ssl.* (producer.override.*) match it?",
            cfg.kafka.bootstrap_timeout.as_millis(),
            each(causes)
        )),
    })
}

/// How the metadata probe failed.
enum Probe {
    /// The cluster refused the login or the handshake (librdkafka's reason).
    Refused(String),
    /// No answer by the deadline.
    NoAnswer(String),
}

/// The login the connector's settings ask for, as an operator names it: `SASL_SSL / SCRAM-SHA-512`.
pub fn login(cfg: &SinkSettings) -> String {
    let get = |k: &str| cfg.kafka.producer_overrides.get(k).cloned();
    let protocol = get("security.protocol").unwrap_or_else(|| "PLAINTEXT".into());
    match (
        protocol.to_ascii_uppercase().starts_with("SASL"),
        get("sasl.mechanism").or_else(|| get("sasl.mechanisms")),
    ) {
        (true, Some(m)) => format!("{protocol} login (sasl.mechanism {m})"),
        (true, None) => format!("{protocol} login (sasl.mechanism GSSAPI, librdkafka's default)"),
        (false, _) => format!("{protocol} handshake"),
    }
}

/// The connector's topics as the cluster has them (partitions, cleanup policy, retention), or
/// absent (created at the first run), for `validate --online`.
pub async fn describe_topics(cfg: &SinkSettings) -> Result<Vec<String>, SinkError> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: AdminClient<super::QuietContext> = super::client_config(cfg)
        .create_with_context(super::QuietContext::new(cfg, "admin"))
        .map_err(|e| SinkError::kafka("admin client", e))?;
    super::oauth::seeded(admin.inner(), cfg)?;
    let mut names = vec![cfg.kafka.topic.clone(), cfg.kafka.offsets_topic.clone()];
    if cfg.txn_metadata {
        names.push(cfg.transaction_topic.clone());
    }
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))
        .map_err(|e| SinkError::kafka("topic metadata", e))?;
    let mut lines = Vec::new();
    for name in names {
        let Some(t) = md.topics().iter().find(|t| t.name() == name && t.error().is_none()) else {
            lines.push(format!("topic {name}: absent (created at the first run)"));
            continue;
        };
        let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
        let described = admin
            .describe_configs(&[ResourceSpecifier::Topic(&name)], &opts)
            .await
            .map_err(|e| SinkError::kafka("describe topic", e))?;
        let mut settings = Vec::new();
        if let Some(Ok(r)) = described.first() {
            for key in ["cleanup.policy", "retention.ms", "min.insync.replicas"] {
                if let Some(v) = r.get(key).and_then(|e| e.value.clone()) {
                    settings.push(format!("{key}={v}"));
                }
            }
        }
        lines.push(format!(
            "topic {name}: {} partitions, {}",
            t.partitions().len(),
            settings.join(", ")
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bootstrap_addresses_drop_the_protocol_prefix() {
        assert_eq!(super::addresses("SASL_SSL://a:9093, b:9092,"), vec!["a:9093", "b:9092"]);
    }
}
