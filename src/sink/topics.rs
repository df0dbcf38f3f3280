//! The connector's topics: created when missing (events, offsets, transaction metadata), and an
//! offsets topic that retention would empty refused.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;

use super::{client_config, QuietContext, SinkError};
use crate::config::ConnectorConfig;

pub(super) async fn ensure_topics(cfg: &ConnectorConfig) -> Result<(), SinkError> {
    let admin: AdminClient<QuietContext> = client_config(cfg)
        .create_with_context(QuietContext::new(&cfg.name, "admin"))
        .map_err(|e| SinkError::kafka("admin client", e))?;
    let compact = [("cleanup.policy", "compact")];
    let txn_topic = cfg.transaction_topic();
    let mut topics = vec![
        NewTopic::new(
            &cfg.kafka.offsets_topic,
            1,
            TopicReplication::Fixed(cfg.kafka.replication_factor),
        )
        .set(compact[0].0, compact[0].1),
        NewTopic::new(
            &cfg.kafka.topic,
            cfg.kafka.topic_partitions,
            TopicReplication::Fixed(cfg.kafka.replication_factor),
        ),
    ];
    if cfg.events.txn_metadata {
        // one partition: BEGIN and END of every commit in order
        topics.push(NewTopic::new(
            &txn_topic,
            1,
            TopicReplication::Fixed(cfg.kafka.replication_factor),
        ));
    }
    let res = admin
        .create_topics(
            &topics,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .map_err(|e| {
            SinkError::kafka(
                format!("create topics (bootstrap.servers={})", cfg.kafka.bootstrap_servers),
                e,
            )
        })?;
    for r in res {
        match r {
            Ok(t) => tracing::info!(topic = %t, "topic created"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => {
                return Err(SinkError::Topic(format!("cannot create topic `{t}`: {code}")));
            }
        }
    }
    // positions kept by retention would be deleted: a restart would rescan or skip (Kafka Connect
    // refuses such an offsets topic too)
    let described = admin
        .describe_configs(
            &[ResourceSpecifier::Topic(&cfg.kafka.offsets_topic)],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .map_err(|e| SinkError::kafka("describe offsets topic", e))?;
    for r in described {
        let resource = r.map_err(|code| {
            SinkError::Topic(format!(
                "cannot describe offsets topic `{}`: {code}",
                cfg.kafka.offsets_topic
            ))
        })?;
        let policy = resource
            .get("cleanup.policy")
            .and_then(|e| e.value.clone())
            .unwrap_or_default();
        if !policy.split(',').any(|p| p.trim() == "compact") {
            return Err(SinkError::Topic(format!(
                "offsets topic `{}` has cleanup.policy={policy}: retention would delete connector positions. Set it to \
                 compact (kafka-configs --alter --add-config cleanup.policy=compact) or name another offsets.storage.topic",
                cfg.kafka.offsets_topic
            )));
        }
    }
    Ok(())
}
