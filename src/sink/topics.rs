//! The connector's topics: created when missing (events, offsets, transaction metadata), and an
//! offsets topic that retention would empty refused.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;

use super::{client_config, QuietContext, SinkError};
use crate::config::SinkSettings;

pub(super) async fn ensure_topics(cfg: &SinkSettings) -> Result<(), SinkError> {
    let admin: AdminClient<QuietContext> = client_config(cfg)
        .create_with_context(QuietContext::new(cfg, "admin"))
        .map_err(|e| SinkError::kafka("admin client", e))?;
    super::oauth::seeded(admin.inner(), cfg)?;
    let res = create_missing(&admin, cfg).await;
    super::client::close_detached(admin);
    res
}

async fn create_missing(admin: &AdminClient<QuietContext>, cfg: &SinkSettings) -> Result<(), SinkError> {
    let compact = [("cleanup.policy", "compact")];
    let txn_topic = cfg.transaction_topic.clone();
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
        )
        .set("cleanup.policy", &cfg.kafka.topic_cleanup_policy),
    ];
    if cfg.txn_metadata {
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
    let mut created_offsets = false;
    for r in res {
        match r {
            Ok(t) => {
                created_offsets |= t == cfg.kafka.offsets_topic;
                tracing::info!(topic = %t, "topic created");
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => {
                return Err(SinkError::Topic(format!("cannot create topic `{t}`: {code}")));
            }
        }
    }
    // created here with cleanup.policy=compact: nothing to check (a broker that has not applied
    // the new topic's metadata yet describes it without its configs)
    if created_offsets {
        return Ok(());
    }
    check_offsets_policy(admin, &cfg.kafka.offsets_topic).await
}

/// Positions kept by retention would be deleted: a restart would rescan or skip (Kafka Connect
/// refuses such an offsets topic too).
async fn check_offsets_policy(admin: &AdminClient<QuietContext>, topic: &str) -> Result<(), SinkError> {
    match policy_of(admin, topic).await? {
        Some(p) if p.split(',').any(|p| p.trim() == "compact") => Ok(()),
        Some(p) => Err(SinkError::Topic(format!(
            "offsets topic `{topic}` has cleanup.policy={p}: retention would delete connector positions. Set it to \
             compact (kafka-configs --alter --add-config cleanup.policy=compact) or name another offsets.storage.topic"
        ))),
        None => Err(SinkError::Topic(format!(
            "offsets topic `{topic}`: the cluster does not say its cleanup.policy (asked for 5 s); it must be \
             compact, or name another offsets.storage.topic"
        ))),
    }
}

/// The `cleanup.policy` of `topic` (`None`: the cluster does not say).
pub async fn cleanup_policy(cfg: &SinkSettings, topic: &str) -> Result<Option<String>, SinkError> {
    let admin: AdminClient<QuietContext> = client_config(cfg)
        .create_with_context(QuietContext::new(cfg, "admin"))
        .map_err(|e| SinkError::kafka("admin client", e))?;
    super::oauth::seeded(admin.inner(), cfg)?;
    let res = policy_of(&admin, topic).await;
    super::client::close_detached(admin);
    res
}

/// A topic's `cleanup.policy`. A description without the entry (a topic another client created
/// a moment ago) is asked again for a few seconds before it counts as unknown.
async fn policy_of(admin: &AdminClient<QuietContext>, topic: &str) -> Result<Option<String>, SinkError> {
    let mut tries = 0;
    loop {
        let described = admin
            .describe_configs(
                &[ResourceSpecifier::Topic(topic)],
                &AdminOptions::new().request_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .map_err(|e| SinkError::kafka("describe topic", e))?;
        let mut policy = None;
        for r in described {
            let resource = r.map_err(|code| SinkError::Topic(format!("cannot describe topic `{topic}`: {code}")))?;
            policy = resource
                .get("cleanup.policy")
                .and_then(|e| e.value.clone())
                .filter(|v| !v.is_empty());
        }
        match policy {
            Some(p) => return Ok(Some(p)),
            None if tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            None => return Ok(None),
        }
    }
}
