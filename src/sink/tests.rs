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
