//! Confluent Schema Registry client: register (TopicNameStrategy subjects), with an id cache so a
//! schema is sent once per process, and retries for transient failures.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::Mutex;

use super::ChangelogError;
use crate::metrics;

pub struct RegistryClient {
    base: String,
    http: reqwest::Client,
    cache: Mutex<HashMap<(String, String), u32>>,
}

impl RegistryClient {
    pub fn new(base: &str) -> Result<Self, ChangelogError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ChangelogError::Registry(format!("http client: {e}")))?;
        Ok(Self { base: base.trim_end_matches('/').to_string(), http, cache: Mutex::new(HashMap::new()) })
    }

    /// Register `schema` under `subject` (idempotent in the registry) and return its global id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, ChangelogError> {
        let key = (subject.to_string(), schema.to_string());
        if let Some(id) = self.cache.lock().await.get(&key) {
            return Ok(*id);
        }
        let url = format!("{}/subjects/{}/versions", self.base, subject);
        let body = serde_json::json!({ "schema": schema });
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=6 {
            let res = self
                .http
                .post(&url)
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .json(&body)
                .send()
                .await;
            match res {
                Ok(r) if r.status().is_success() => {
                    let v: serde_json::Value = r
                        .json()
                        .await
                        .map_err(|e| ChangelogError::Registry(format!("{url}: bad response: {e}")))?;
                    let id = v["id"]
                        .as_u64()
                        .ok_or_else(|| ChangelogError::Registry(format!("{url}: response without id: {v}")))?;
                    metrics::REGISTRY_REQUESTS.with_label_values(&["ok"]).inc();
                    self.cache.lock().await.insert(key, id as u32);
                    return Ok(id as u32);
                }
                Ok(r) if r.status().is_client_error() => {
                    metrics::REGISTRY_REQUESTS.with_label_values(&["rejected"]).inc();
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    return Err(ChangelogError::Registry(format!(
                        "{url}: schema rejected ({status}): {text}; a table schema change that the subject's \
                         compatibility level forbids needs the subject's compatibility relaxed or a new topic"
                    )));
                }
                Ok(r) => {
                    metrics::REGISTRY_REQUESTS.with_label_values(&["error"]).inc();
                    tracing::warn!(%url, status = %r.status(), attempt, "schema registry error, retrying");
                }
                Err(e) => {
                    metrics::REGISTRY_REQUESTS.with_label_values(&["error"]).inc();
                    tracing::warn!(%url, error = %e, attempt, "schema registry unreachable, retrying");
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
        Err(ChangelogError::Registry(format!("{url}: schema registry unavailable after retries")))
    }
}
