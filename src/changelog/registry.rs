//! Confluent Schema Registry client: register (TopicNameStrategy subjects), with an id cache so a
//! schema is sent once per process, and retries for transient failures; schemas by id (verify).

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::Mutex;

use super::ChangelogError;
use crate::metrics::{self, RegistryResult};

pub struct RegistryClient {
    base: String,
    http: reqwest::Client,
    auth: Option<Auth>,
    cache: Mutex<HashMap<(String, String), u32>>,
    /// Schemas fetched by id.
    by_id: Mutex<HashMap<u32, String>>,
    /// The connector, for metric labels.
    connector: String,
}

enum Auth {
    Basic(String, String),
    Bearer(String),
}

pub use crate::config::RegistryOptions;

impl RegistryClient {
    pub fn new(opts: &RegistryOptions, connector: &str) -> Result<Self, ChangelogError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| ChangelogError::Settings(format!("{what}: {e}"));
        let mut b = reqwest::Client::builder().timeout(Duration::from_secs(30));
        if let Some(ca) = &opts.ca_location {
            let pem =
                std::fs::read(ca).map_err(|e| bad(&format!("schema.registry.ssl.ca.location {}", ca.display()), &e))?;
            for cert in
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad("schema.registry.ssl.ca.location", &e))?
            {
                b = b.add_root_certificate(cert);
            }
        }
        if let (Some(c), Some(k)) = (&opts.certificate_location, &opts.key_location) {
            let mut pem = std::fs::read(c)
                .map_err(|e| bad(&format!("schema.registry.ssl.certificate.location {}", c.display()), &e))?;
            pem.extend(
                std::fs::read(k).map_err(|e| bad(&format!("schema.registry.ssl.key.location {}", k.display()), &e))?,
            );
            b = b.identity(reqwest::Identity::from_pem(&pem).map_err(|e| bad("client certificate", &e))?);
        }
        let http = b.build().map_err(|e| bad("http client", &e))?;
        let auth = match (&opts.user_info, &opts.bearer_token) {
            (Some(ui), _) => {
                let (u, p) = ui.split_once(':').unwrap_or((ui.as_str(), ""));
                Some(Auth::Basic(u.to_string(), p.to_string()))
            }
            (None, Some(t)) => Some(Auth::Bearer(t.clone())),
            _ => None,
        };
        Ok(Self {
            base: opts.url.trim_end_matches('/').to_string(),
            http,
            auth,
            cache: Mutex::new(HashMap::new()),
            by_id: Mutex::new(HashMap::new()),
            connector: connector.to_string(),
        })
    }

    /// A GET with the client's auth; no answer is `RegistryUnavailable`.
    async fn get(&self, url: &str) -> Result<reqwest::Response, ChangelogError> {
        let req = match &self.auth {
            Some(Auth::Basic(u, p)) => self.http.get(url).basic_auth(u, Some(p)),
            Some(Auth::Bearer(t)) => self.http.get(url).bearer_auth(t),
            None => self.http.get(url),
        };
        req.send().await.map_err(|e| ChangelogError::RegistryUnavailable {
            url: url.to_string(),
            message: crate::causes::with_causes(&e),
        })
    }

    /// The versions registered under `subject` (`None`: no such subject), for `validate --online`.
    pub async fn versions(&self, subject: &str) -> Result<Option<Vec<u32>>, ChangelogError> {
        let url = format!("{}/subjects/{}/versions", self.base, subject);
        let res = self.get(&url).await?;
        if res.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !res.status().is_success() {
            return Err(ChangelogError::Registry {
                url,
                message: format!("HTTP {}", res.status()),
            });
        }
        res.json().await.map(Some).map_err(|e| ChangelogError::Registry {
            url,
            message: format!("bad response: {e}"),
        })
    }

    /// The schema registered under global id `id` (to decode events written with it), cached.
    pub async fn schema(&self, id: u32) -> Result<String, ChangelogError> {
        if let Some(text) = self.by_id.lock().await.get(&id) {
            return Ok(text.clone());
        }
        let url = format!("{}/schemas/ids/{id}", self.base);
        let res = self.get(&url).await?;
        if !res.status().is_success() {
            return Err(ChangelogError::Registry {
                message: format!(
                    "HTTP {} for schema id {id} (a record not written by this connector?)",
                    res.status()
                ),
                url,
            });
        }
        let v: serde_json::Value = res.json().await.map_err(|e| ChangelogError::Registry {
            url: url.clone(),
            message: format!("bad response: {e}"),
        })?;
        let text = v["schema"].as_str().ok_or_else(|| ChangelogError::Registry {
            url,
            message: format!("response without schema: {v}"),
        })?;
        self.by_id.lock().await.insert(id, text.to_string());
        Ok(text.to_string())
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
        let mut last_error = String::new();
        for attempt in 1..=6 {
            let mut req = self.http.post(&url);
            req = match &self.auth {
                Some(Auth::Basic(u, p)) => req.basic_auth(u, Some(p)),
                Some(Auth::Bearer(t)) => req.bearer_auth(t),
                None => req,
            };
            let res = req
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .json(&body)
                .send()
                .await;
            match res {
                Ok(r) if r.status().is_success() => {
                    let v: serde_json::Value = r.json().await.map_err(|e| ChangelogError::Registry {
                        url: url.clone(),
                        message: format!("bad response: {e}"),
                    })?;
                    let id = v["id"].as_u64().ok_or_else(|| ChangelogError::Registry {
                        url: url.clone(),
                        message: format!("response without id: {v}"),
                    })?;
                    metrics::REGISTRY_REQUESTS
                        .with_label_values(&[&self.connector, RegistryResult::Ok.label()])
                        .inc();
                    self.cache.lock().await.insert(key, id as u32);
                    return Ok(id as u32);
                }
                Ok(r) if r.status().is_client_error() => {
                    metrics::REGISTRY_REQUESTS
                        .with_label_values(&[&self.connector, RegistryResult::Rejected.label()])
                        .inc();
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    return Err(ChangelogError::Registry {
                        url,
                        message: format!(
                            "schema rejected ({status}): {text}; a table schema change that the subject's \
                             compatibility level forbids needs the subject's compatibility relaxed or a new topic"
                        ),
                    });
                }
                Ok(r) => {
                    metrics::REGISTRY_REQUESTS
                        .with_label_values(&[&self.connector, RegistryResult::Error.label()])
                        .inc();
                    tracing::warn!(%url, status = %r.status(), attempt, "schema registry error, retrying");
                    last_error = format!("HTTP {}", r.status());
                }
                Err(e) => {
                    metrics::REGISTRY_REQUESTS
                        .with_label_values(&[&self.connector, RegistryResult::Error.label()])
                        .inc();
                    tracing::warn!(%url, error = %crate::causes::with_causes(&e), attempt, "schema registry unreachable, retrying");
                    last_error = crate::causes::with_causes(&e);
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
        Err(ChangelogError::RegistryUnavailable {
            url,
            message: format!("no answer after 6 attempts (last: {last_error})"),
        })
    }
}
