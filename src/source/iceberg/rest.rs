//! The Iceberg REST catalog (per the REST catalog OpenAPI spec): `GET /v1/config` (the server's
//! `prefix`), then `loadTable` for the table's `metadata-location`. Authentication is a static
//! bearer token (`catalog.token`) or OAuth 2 client credentials (`catalog.credential` =
//! `<client-id>:<secret>` or `<secret>`, `catalog.oauth2-server-uri` else the catalog's
//! `/v1/oauth/tokens`, `catalog.scope` else `catalog`), posted as form fields as Iceberg's
//! `OAuth2Util` and pyiceberg send them. A token is kept for the connector's polls
//! ([`RestSession`]) and fetched anew at 80 % of its life (`expires_in`, else the JWT's `exp`,
//! else an hour) or when the catalog answers 401 to it, once per request. One HTTP client serves
//! every poll. With `catalog.rest.sigv4-enabled`, every request is AWS SigV4-signed instead
//! (`catalog.rest.signing-name`, `catalog.rest.signing-region`; the connector's AWS credential
//! chain, as for Glue): AWS Glue's and S3 Tables' Iceberg REST endpoints. `loadTable` asks for vended credentials (`X-Iceberg-Access-Delegation`); S3
//! credentials in its answer (`storage-credentials` for the table's location, else `config`) are
//! what the connector's storage reads the table with from then on (`storage::vended`).

use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::catalog::{all_pages, catalog_error, excerpt, http_client, local, unavailable};
use crate::config::{RestCatalog, TableLocation};
use crate::source::{CatalogFailure, SourceError};
use crate::storage::aws::query_encode as encode;
use crate::storage::vended::{Renew, Vended};
use crate::storage::Storage;

/// What a connector keeps between polls of its REST catalog.
#[derive(Default)]
pub struct RestSession {
    client: OnceLock<reqwest::blocking::Client>,
    /// The OAuth 2 token and when to fetch the next one.
    token: Mutex<Option<(String, Instant)>>,
    /// The routes' prefix (`GET /v1/config`'s `prefix`), asked once.
    prefix: OnceLock<String>,
}

/// A life of a token whose answer gives none.
const DEFAULT_LIFE: Duration = Duration::from_secs(3600);

/// How a connector authenticates to its REST catalog.
enum Auth<'a> {
    None,
    Bearer(&'a str),
    /// AWS SigV4, for a service name.
    SigV4(crate::storage::AwsSigner, &'a str),
    Client {
        id: Option<&'a str>,
        secret: &'a str,
        server: String,
        scope: &'a str,
    },
}

impl RestSession {
    fn client(&self, name: &str) -> Result<&reqwest::blocking::Client, SourceError> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let c = http_client(name)?;
        Ok(self.client.get_or_init(|| c))
    }

    /// The bearer token to send: the static one, or the OAuth 2 token kept (fetched when there is
    /// none, when it is due, or when `stale`, the one the catalog just refused).
    fn bearer(&self, name: &str, auth: &Auth<'_>, stale: Option<&str>) -> Result<Option<String>, SourceError> {
        let (id, secret, server, scope) = match auth {
            Auth::None | Auth::SigV4(..) => return Ok(None),
            Auth::Bearer(t) => return Ok(Some(t.to_string())),
            Auth::Client {
                id,
                secret,
                server,
                scope,
            } => (*id, *secret, server, *scope),
        };
        let mut kept = self.token.lock();
        if let Some((t, due)) = kept.as_ref() {
            if Instant::now() < *due && Some(t.as_str()) != stale {
                return Ok(Some(t.clone()));
            }
        }
        let (token, life) = self.fetch_token(name, id, secret, server, scope)?;
        tracing::info!(catalog = name, endpoint = %server, expires_in_s = life.as_secs(), "REST catalog OAuth2 token obtained");
        *kept = Some((token.clone(), Instant::now() + life.mul_f64(0.8)));
        Ok(Some(token))
    }

    /// A token from the OAuth 2 token endpoint `server` (client credentials grant), and how long
    /// it lives (`expires_in`, else the JWT's own expiry, else an hour).
    fn fetch_token(
        &self,
        name: &str,
        id: Option<&str>,
        secret: &str,
        server: &str,
        scope: &str,
    ) -> Result<(String, Duration), SourceError> {
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_secret", secret),
            ("scope", scope),
        ];
        if let Some(id) = id {
            form.push(("client_id", id));
        }
        let resp = self
            .client(name)?
            .post(server)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                form.iter()
                    .map(|(k, v)| format!("{k}={}", encode(v)))
                    .collect::<Vec<_>>()
                    .join("&"),
            )
            .send()
            .map_err(|e| unavailable(name, format!("token endpoint {server}: {e}")))?;
        let status = resp.status().as_u16();
        let body: Value = resp.json().unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            // OAuth 2 errors (RFC 6749 §5.2): a refused client is 400 or 401
            let failure = match status {
                400 | 401 | 403 => CatalogFailure::Unauthorized,
                408 | 429 | 500..=599 => CatalogFailure::Unavailable,
                _ => CatalogFailure::Failed,
            };
            let why = ["error", "error_description"]
                .iter()
                .filter_map(|k| body.get(*k).and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(": ");
            return Err(catalog_error(
                name,
                failure,
                format!(
                    "token endpoint {server} refused client {}: HTTP {status} ({why})",
                    id.unwrap_or("(no id)")
                ),
            ));
        }
        let token = body
            .get("access_token")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                catalog_error(
                    name,
                    CatalogFailure::Failed,
                    format!("token endpoint {server}: no access_token"),
                )
            })?
            .to_string();
        let life = body
            .get("expires_in")
            .and_then(Value::as_u64)
            .map(Duration::from_secs)
            .or_else(|| jwt_life(&token))
            .unwrap_or(DEFAULT_LIFE);
        Ok((token, life))
    }

    /// `GET url` as JSON, authenticated, with `headers`; a 401 to an OAuth 2 token fetches a new
    /// one and asks again.
    fn get(
        &self,
        storage: &Storage,
        name: &str,
        auth: &Auth<'_>,
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<Value, SourceError> {
        let mut refused: Option<String> = None;
        loop {
            let bearer = self.bearer(name, auth, refused.as_deref())?;
            storage.count_catalog();
            let mut req = self.client(name)?.get(url);
            match auth {
                // the given headers signed, with the signature's own
                Auth::SigV4(signer, service) => {
                    let signed = signer.sign(service, "GET", url, headers, b"").map_err(|e| {
                        catalog_error(name, CatalogFailure::Unauthorized, format!("signing GET {url}: {e}"))
                    })?;
                    for (k, v) in signed {
                        req = req.header(k, v);
                    }
                }
                _ => {
                    for (k, v) in headers {
                        req = req.header(*k, *v);
                    }
                }
            }
            if let Some(t) = &bearer {
                req = req.bearer_auth(t);
            }
            let resp = req.send().map_err(|e| unavailable(name, format!("{url}: {e}")))?;
            let status = resp.status().as_u16();
            if status == 401 && refused.is_none() && matches!(auth, Auth::Client { .. }) {
                refused = bearer;
                continue;
            }
            if !(200..300).contains(&status) {
                let body = resp.text().unwrap_or_default();
                let failure = match status {
                    401 | 403 => CatalogFailure::Unauthorized,
                    404 => CatalogFailure::NotFound,
                    408 | 429 | 500..=599 => CatalogFailure::Unavailable,
                    _ => CatalogFailure::Failed,
                };
                return Err(catalog_error(
                    name,
                    failure,
                    format!("GET {url}: HTTP {status}: {}", excerpt(&body)),
                ));
            }
            return resp
                .json()
                .map_err(|e| catalog_error(name, CatalogFailure::Failed, format!("{url}: bad JSON: {e}")));
        }
    }

    /// The table's current metadata file, as the catalog names it; credentials it vends for the
    /// table are handed to `storage` (with a way to renew them: asking again).
    pub fn metadata_location(self: &Arc<Self>, storage: &Storage, loc: &TableLocation) -> Result<PathBuf, SourceError> {
        let (name, body) = self.load_table(storage, loc)?;
        if let Some(v) = vended_of(&body) {
            let (session, at, st) = (self.clone(), loc.clone(), storage.clone());
            let renew: Renew = Arc::new(move || {
                let (name, body) = session.load_table(&st, &at).map_err(std::io::Error::other)?;
                vended_of(&body).ok_or_else(|| std::io::Error::other(format!("{name} vended no credentials this time")))
            });
            if storage.use_vended(&v, renew) {
                tracing::info!(catalog = %name, expires = ?v.expires, "reading the table with storage credentials the catalog vended");
            }
        }
        let location = body.get("metadata-location").and_then(Value::as_str).ok_or_else(|| {
            catalog_error(
                &name,
                CatalogFailure::Failed,
                "loadTable answered no metadata-location".into(),
            )
        })?;
        local(location)
    }

    /// `loadTable` of the table (asking for vended credentials): the catalog's name and its answer.
    fn load_table(&self, storage: &Storage, loc: &TableLocation) -> Result<(String, Value), SourceError> {
        let TableLocation::Rest {
            catalog,
            namespace,
            table,
        } = loc
        else {
            return Err(SourceError::Unreadable {
                why: crate::source::Unreadable::NotATable,
                message: "not a REST catalog".into(),
            });
        };
        let (name, auth, base) = self.connect(storage, catalog)?;
        let url = format!(
            "{base}namespaces/{}/tables/{}",
            namespace_path(namespace),
            encode(table)
        );
        let body = self.get(
            storage,
            &name,
            &auth,
            &url,
            &[("X-Iceberg-Access-Delegation", "vended-credentials")],
        )?;
        Ok((name, body))
    }

    /// Every table of the catalog (table discovery): the namespaces `depth` levels down
    /// (`listNamespaces`, with `parent` below the top level), each one's `listTables`, following
    /// `next-page-token`. Requests: 1 + (namespaces) + (namespaces above the last level).
    pub fn list_tables(
        &self,
        storage: &Storage,
        catalog: &RestCatalog,
        depth: u32,
    ) -> Result<Vec<(Vec<String>, String)>, SourceError> {
        let (name, auth, base) = self.connect(storage, catalog)?;
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?.iter().map(|s| s.as_str().map(str::to_string)).collect()
        };
        let mut level: Vec<Vec<String>> = self
            .paged(storage, &name, &auth, &format!("{base}namespaces"), "namespaces")?
            .iter()
            .filter_map(strings)
            .collect();
        let mut out = Vec::new();
        for d in 1..=depth {
            let mut next = Vec::new();
            for ns in &level {
                let path = namespace_path(ns);
                for t in self.paged(
                    storage,
                    &name,
                    &auth,
                    &format!("{base}namespaces/{path}/tables"),
                    "identifiers",
                )? {
                    let (Some(namespace), Some(table)) = (
                        t.get("namespace").and_then(strings),
                        t.get("name").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    out.push((namespace, table.to_string()));
                }
                if d < depth {
                    let url = format!("{base}namespaces?parent={path}");
                    next.extend(
                        self.paged(storage, &name, &auth, &url, "namespaces")?
                            .iter()
                            .filter_map(strings),
                    );
                }
            }
            level = next;
        }
        Ok(out)
    }

    /// The items of a list answer's `field`, over every page.
    fn paged(
        &self,
        storage: &Storage,
        name: &str,
        auth: &Auth<'_>,
        url: &str,
        field: &str,
    ) -> Result<Vec<Value>, SourceError> {
        all_pages(field, "next-page-token", |page| {
            let at = match page {
                None => url.to_string(),
                Some(t) => format!(
                    "{url}{}pageToken={}",
                    if url.contains('?') { '&' } else { '?' },
                    encode(t)
                ),
            };
            self.get(storage, name, auth, &at, &[])
        })
    }

    /// The catalog's name, how to authenticate to it, and the base of its routes
    /// (`{uri}/v1/{prefix}`, the prefix from `GET /v1/config`, asked once per session).
    fn connect<'a>(&self, storage: &Storage, c: &'a RestCatalog) -> Result<(String, Auth<'a>, String), SourceError> {
        let uri = &c.uri;
        let name = format!("REST catalog {uri}");
        let auth = match (&c.token, &c.credential) {
            _ if c.sigv4.is_some() => {
                let (region, service) = c
                    .sigv4
                    .as_ref()
                    .map(|(r, s)| (r.as_str(), s.as_str()))
                    .unwrap_or_default();
                let signer = storage
                    .aws_signer(region)
                    .map_err(|e| catalog_error(&name, CatalogFailure::Failed, format!("AWS credentials: {e}")))?;
                Auth::SigV4(signer, service)
            }
            (Some(t), _) => Auth::Bearer(t),
            (None, Some(cred)) => {
                let (id, secret) = match cred.split_once(':') {
                    Some((id, secret)) => (Some(id), secret),
                    None => (None, cred.as_str()),
                };
                Auth::Client {
                    id,
                    secret,
                    server: c
                        .oauth2_server_uri
                        .clone()
                        .unwrap_or_else(|| format!("{uri}/v1/oauth/tokens")),
                    scope: c.scope.as_deref().unwrap_or("catalog"),
                }
            }
            (None, None) => Auth::None,
        };
        let prefix = match self.prefix.get() {
            Some(p) => p.clone(),
            None => {
                let mut config_url = format!("{uri}/v1/config");
                if let Some(w) = &c.warehouse {
                    config_url.push_str(&format!("?warehouse={}", encode(w)));
                }
                let config = self.get(storage, &name, &auth, &config_url, &[])?;
                let prefix = config
                    .pointer("/overrides/prefix")
                    .or_else(|| config.pointer("/defaults/prefix"))
                    .and_then(Value::as_str)
                    .map(|p| format!("{}/", p.trim_matches('/')))
                    .unwrap_or_default();
                self.prefix.get_or_init(|| prefix).clone()
            }
        };
        Ok((name, auth, format!("{uri}/v1/{prefix}")))
    }
}

/// A namespace in a route: its levels joined with the unit separator, URL-encoded.
fn namespace_path(namespace: &[String]) -> String {
    encode(&namespace.join("\u{1f}"))
}

/// S3 credentials a `loadTable` answer vends: the `storage-credentials` entry whose prefix is the
/// longest one of the table's location, else the table `config`'s `s3.*` keys.
fn vended_of(body: &Value) -> Option<Vended> {
    let location = body.pointer("/metadata/location").and_then(Value::as_str).unwrap_or("");
    let best = body
        .get("storage-credentials")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c.get("prefix")?.as_str()?, c.get("config")?)))
        .filter(|(prefix, _)| location.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, config)| config);
    let config = best.or_else(|| body.get("config"))?;
    let get = |k: &str| config.get(k).and_then(Value::as_str).map(str::to_string);
    let expires = get("s3.session-token-expires-at-ms")
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
    Some(Vended {
        key_id: get("s3.access-key-id")?,
        secret: get("s3.secret-access-key")?,
        token: get("s3.session-token"),
        expires,
    })
}

/// A JWT's remaining life from its `exp` (none where the token is not a JWT).
fn jwt_life(token: &str) -> Option<Duration> {
    use base64::Engine;
    let claims = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<Value>(&bytes).ok()?.get("exp")?.as_u64()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}
