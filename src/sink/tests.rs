//! Unit tests of `sink`.

use rdkafka::producer::BaseProducer;
use rdkafka::ClientConfig;

/// The security settings users pass through `producer.override.*` are accepted by the bundled
/// librdkafka (creating a client validates them; nothing connects).
#[test]
fn librdkafka_accepts_sasl_and_ssl_settings() {
    let cases: &[&[(&str, &str)]] = &[
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ],
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
        ],
        &[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.config", "principal=lakestream scope=kafka"),
        ],
        &[
            ("security.protocol", "SSL"),
            ("ssl.endpoint.identification.algorithm", "https"),
        ],
    ];
    for case in cases {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", "127.0.0.1:1");
        for (k, v) in *case {
            c.set(*k, *v);
        }
        let p: Result<BaseProducer, _> = c.create();
        assert!(p.is_ok(), "{case:?}: {:?}", p.err());
    }
}

/// A fence meeting a transaction older than `transaction.timeout.ms` is the broker's timeout
/// abort (ridden out); any other fence is a newer instance (the task stops). Found on Kafka
/// 4.1.2: the broker down ~5 s with a commit pending and a 5 s transaction timeout.
#[test]
fn a_fence_after_the_transaction_timeout_is_an_expiry_not_a_newer_instance() {
    use super::{expired_or, SinkError};
    use std::time::Duration;
    let fenced = || SinkError::Fenced("commit_transaction: fenced".into());
    let timeout = Duration::from_secs(5);
    let old = expired_or(fenced(), Some(Duration::from_millis(5_200)), timeout);
    assert!(matches!(old, SinkError::Expired(_)) && old.is_transient(), "{old}");
    assert!(old.to_string().contains("5200 ms old"), "{old}");
    for age in [Some(Duration::from_millis(4_900)), None] {
        let young = expired_or(fenced(), age, timeout);
        assert!(
            matches!(young, SinkError::Fenced(_)) && !young.is_transient(),
            "{young}"
        );
    }
    let other = expired_or(SinkError::Aborted("x".into()), Some(Duration::from_secs(60)), timeout);
    assert!(matches!(other, SinkError::Aborted(_)));
}

/// Every client connects eagerly unless `producer.override.enable.sparse.connections` says
/// otherwise, and then every client (admin, offsets reader, probe) follows it, not only the
/// producer.
#[test]
fn sparse_connections_are_off_unless_overridden_for_every_client() {
    let dir = tempfile::tempdir().unwrap();
    let load = |extra: &str| {
        let file = dir.path().join("c.properties");
        std::fs::write(
            &file,
            format!(
                "name=c\nconnector.class=hudi\ntable.path={}\ntopic=t\nbootstrap.servers=127.0.0.1:9\n\
                 schema.registry.url=http://127.0.0.1:9\n{extra}",
                dir.path().display()
            ),
        )
        .unwrap();
        crate::config::load_connector(&file, 0).unwrap()
    };
    let sparse = |cfg: &crate::config::ConnectorConfig| {
        let cfg = &cfg.sink();
        let p = super::producer_config(cfg, "id", &[]);
        let c = super::client_config(cfg);
        (
            p.get("enable.sparse.connections").map(str::to_string),
            c.get("enable.sparse.connections").map(str::to_string),
        )
    };
    let f = Some("false".to_string());
    assert_eq!(sparse(&load("")), (f.clone(), f));
    let t = Some("true".to_string());
    assert_eq!(
        sparse(&load("producer.override.enable.sparse.connections=true\n")),
        (t.clone(), t)
    );
}
