//! SASL/OAUTHBEARER tokens for every Kafka client of a connector, served from the clients'
//! token-refresh callback (librdkafka asks again at 80 % of a token's lifetime, so a token that
//! expires during a run is replaced without a restart).
//! * `sasl.oauthbearer.method=oidc`: the OAuth 2 client-credentials grant against
//!   `sasl.oauthbearer.token.endpoint.url` with `sasl.oauthbearer.client.id` /
//!   `sasl.oauthbearer.client.secret` (HTTP basic auth, as librdkafka and Kafka's Java client
//!   send them) and `sasl.oauthbearer.scope`. librdkafka's own OIDC client needs a libcurl build;
//!   these keys (librdkafka's names) are served here instead and kept from librdkafka.
//! * otherwise: librdkafka's unsecured development token from `sasl.oauthbearer.config`
//!   (`principal=… [lifeSeconds=…] [scope=…]`), as librdkafka builds it when no callback is set.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use rdkafka::client::OAuthToken;

/// The `producer.override.*` keys this module serves in librdkafka's place under a method of
/// its own (`oidc`, `aws_msk_iam`).
pub(super) const SERVED_KEYS: &[&str] = &[
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.aws.region",
];

/// Where a connector's OAUTHBEARER tokens come from.
#[derive(Clone)]
pub enum TokenSource {
    /// `sasl.oauthbearer.method=oidc`: the client-credentials grant.
    Oidc {
        url: String,
        client_id: String,
        secret: String,
        scope: Option<String>,
    },
    /// `sasl.oauthbearer.method=aws_msk_iam`: AWS MSK IAM (see `msk_iam`).
    MskIam(crate::storage::aws::AwsSigner),
    /// librdkafka's unsecured token from `sasl.oauthbearer.config`.
    Unsecured,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // no secret in logs
        match self {
            TokenSource::Oidc { url, client_id, .. } => {
                write!(f, "TokenSource::Oidc {{ url: {url}, client_id: {client_id} }}")
            }
            TokenSource::MskIam(s) => write!(f, "TokenSource::MskIam {{ region: {} }}", s.region()),
            TokenSource::Unsecured => f.write_str("TokenSource::Unsecured"),
        }
    }
}

/// Whether `producer.override.<key>` is one this module serves (kept from librdkafka).
pub(super) fn served_here(overrides: &BTreeMap<String, String>, key: &str) -> bool {
    method(overrides).is_some() && SERVED_KEYS.contains(&key)
}

/// `sasl.oauthbearer.method` where it names one served here (`oidc`, `aws_msk_iam`).
fn method(overrides: &BTreeMap<String, String>) -> Option<&'static str> {
    let m = overrides.get("sasl.oauthbearer.method")?;
    ["oidc", "aws_msk_iam"].into_iter().find(|k| m.eq_ignore_ascii_case(k))
}

impl TokenSource {
    /// The token source of a connector's settings.
    pub fn of_connector(cfg: &crate::config::SinkSettings) -> Result<TokenSource, String> {
        Self::of(&cfg.kafka.producer_overrides, &cfg.kafka.bootstrap_servers)
    }

    /// The token source of `producer.override.*` settings for `bootstrap` servers; a setting
    /// missing one of its keys is named.
    pub fn of(overrides: &BTreeMap<String, String>, bootstrap: &str) -> Result<TokenSource, String> {
        match method(overrides) {
            None => Ok(TokenSource::Unsecured),
            Some("aws_msk_iam") => {
                let region = overrides
                    .get("sasl.oauthbearer.aws.region")
                    .cloned()
                    .or_else(|| super::msk_iam::region_of(bootstrap))
                    .or_else(|| std::env::var("AWS_REGION").ok())
                    .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
                    .ok_or_else(|| {
                        "producer.override.sasl.oauthbearer.method=aws_msk_iam needs the cluster's region: \
                         producer.override.sasl.oauthbearer.aws.region (not found in bootstrap.servers, AWS_REGION \
                         or AWS_DEFAULT_REGION)"
                            .to_string()
                    })?;
                crate::storage::aws::AwsSigner::from_env(&region)
                    .map(TokenSource::MskIam)
                    .map_err(|e| format!("MSK IAM credentials for {region}: {e}"))
            }
            Some(_) => {
                let need = |k: &str| {
                    overrides.get(k).cloned().ok_or_else(|| {
                        format!("producer.override.sasl.oauthbearer.method=oidc needs producer.override.{k}")
                    })
                };
                let url = need("sasl.oauthbearer.token.endpoint.url")?;
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(format!(
                        "producer.override.sasl.oauthbearer.token.endpoint.url `{url}` is not an http(s) URL"
                    ));
                }
                Ok(TokenSource::Oidc {
                    url,
                    client_id: need("sasl.oauthbearer.client.id")?,
                    secret: need("sasl.oauthbearer.client.secret")?,
                    scope: overrides.get("sasl.oauthbearer.scope").cloned(),
                })
            }
        }
    }

    /// A token now. `config`: librdkafka's `sasl.oauthbearer.config` (the unsecured token's).
    pub fn token(&self, config: Option<&str>) -> Result<OAuthToken, String> {
        match self {
            TokenSource::Unsecured => unsecured(config.unwrap_or("")),
            TokenSource::Oidc {
                url,
                client_id,
                secret,
                scope,
            } => {
                // on a thread of its own: librdkafka may call back from a thread that runs an
                // async runtime, where a blocking HTTP client must not run
                let (url, id, secret, scope) = (url.clone(), client_id.clone(), secret.clone(), scope.clone());
                std::thread::spawn(move || client_credentials(&url, &id, &secret, scope.as_deref()))
                    .join()
                    .map_err(|_| "the token request panicked".to_string())?
            }
            TokenSource::MskIam(signer) => {
                // (the credential chain may fetch: off the caller's thread, as above)
                let signer = signer.clone();
                std::thread::spawn(move || super::msk_iam::token(&signer))
                    .join()
                    .map_err(|_| "the MSK IAM token panicked".to_string())?
            }
        }
    }
}

/// A client context that holds its connector's token source (the one its refresh callback uses).
pub(super) trait WithTokens {
    fn tokens(&self) -> &TokenSource;
}

/// Whether the connector's clients log in with SASL/OAUTHBEARER.
fn is_oauthbearer(overrides: &BTreeMap<String, String>) -> bool {
    ["sasl.mechanism", "sasl.mechanisms"]
        .iter()
        .filter_map(|k| overrides.get(*k))
        .any(|m| m.eq_ignore_ascii_case("OAUTHBEARER"))
}

/// Sets a freshly made client's first OAUTHBEARER token at once (nothing without OAUTHBEARER).
///
/// librdkafka asks for tokens through a client's main queue, which only polled clients serve: an
/// admin client has a queue of its own for its results, and a consumer asked for watermarks
/// before its first poll has not served it yet, so such a client would wait for a token until
/// its request timed out. Polled clients renew theirs from the refresh callback (the producers'
/// threads poll every 100 ms); the others are short-lived and live on the first.
pub(super) fn seed<C: rdkafka::client::ClientContext + WithTokens>(
    client: &rdkafka::client::Client<C>,
    cfg: &crate::config::SinkSettings,
) -> Result<(), String> {
    let overrides = &cfg.kafka.producer_overrides;
    if !is_oauthbearer(overrides) {
        return Ok(());
    }
    // the client's own source (an MSK IAM one keeps its credential chain: not built again here)
    let t = client
        .context()
        .tokens()
        .token(overrides.get("sasl.oauthbearer.config").map(String::as_str))?;
    let text = |s: String| std::ffi::CString::new(s).map_err(|_| "an OAUTHBEARER token with a NUL byte".to_string());
    let (token, principal) = (text(t.token)?, text(t.principal_name)?);
    let mut err = [0 as std::ffi::c_char; 512];
    // SAFETY: the client is alive for the call, the strings outlive it and librdkafka copies
    // them; no extensions (a null array of length 0); `err` is as long as said
    let code = unsafe {
        rdkafka::bindings::rd_kafka_oauthbearer_set_token(
            client.native_ptr(),
            token.as_ptr(),
            t.lifetime_ms,
            principal.as_ptr(),
            std::ptr::null_mut(),
            0,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if code == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Ok(());
    }
    // SAFETY: librdkafka leaves a NUL-terminated message in `err` (zeroed, and one byte longer
    // than any message it writes)
    let why = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
    Err(format!(
        "librdkafka refused the OAUTHBEARER token: {}",
        why.to_string_lossy()
    ))
}

/// [`seed`] for one of the connector's clients: a token that cannot be had is an authentication
/// failure naming the bootstrap servers (and, in `why`, the token endpoint and its answer).
pub(super) fn seeded<C: rdkafka::client::ClientContext + WithTokens>(
    client: &rdkafka::client::Client<C>,
    cfg: &crate::config::SinkSettings,
) -> Result<(), super::SinkError> {
    seed(client, cfg).map_err(|why| {
        super::SinkError::Authentication(format!(
            "no OAUTHBEARER token for bootstrap.servers {}: {why}",
            cfg.kafka.bootstrap_servers
        ))
    })
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// The client-credentials grant (RFC 6749 §4.4): the token, its subject and expiry.
fn client_credentials(url: &str, id: &str, secret: &str, scope: Option<&str>) -> Result<OAuthToken, String> {
    let mut form = "grant_type=client_credentials".to_string();
    if let Some(s) = scope {
        form.push_str("&scope=");
        form.extend(percent_encoding::utf8_percent_encode(
            s,
            percent_encoding::NON_ALPHANUMERIC,
        ));
    }
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("token endpoint client: {e}"))?;
    let resp = client
        .post(url)
        .basic_auth(id, Some(secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .map_err(|e| format!("token endpoint {url}: {e}"))?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        let why = body.get("error").and_then(|e| e.as_str()).unwrap_or("no error code");
        return Err(format!(
            "token endpoint {url} refused client {id}: HTTP {status} ({why})"
        ));
    }
    let token = body
        .get("access_token")
        .and_then(|t| t.as_str())
        .ok_or_else(|| format!("token endpoint {url}: no access_token in its answer"))?
        .to_string();
    let claims = jwt_claims(&token);
    // the earlier of `expires_in` and the JWT's own `exp`: a whole-second `exp` can end up to a
    // second before `expires_in` says, and librdkafka refreshes at 80 % of what it is told (told
    // too late, a connection presented an expired token: `invalid_token`)
    let by_answer = body
        .get("expires_in")
        .and_then(|e| e.as_u64())
        .map(|s| now() + Duration::from_secs(s));
    let by_claim = claims.get("exp").and_then(|e| e.as_u64()).map(Duration::from_secs);
    let expires = match (by_answer, by_claim) {
        (Some(a), Some(c)) => a.min(c),
        (a, c) => a.or(c).unwrap_or_else(|| now() + Duration::from_secs(3600)),
    };
    let principal = claims.get("sub").and_then(|s| s.as_str()).unwrap_or(id).to_string();
    tracing::info!(endpoint = url, client_id = id, principal = %principal, expires_in_s = expires.saturating_sub(now()).as_secs(),
        "OAUTHBEARER token obtained");
    Ok(OAuthToken {
        token,
        principal_name: principal,
        lifetime_ms: expires.as_millis() as i64,
    })
}

/// A JWT's claims (empty where the token is not a JWT: an opaque token is used as it is).
fn jwt_claims(token: &str) -> serde_json::Map<String, serde_json::Value> {
    token
        .split('.')
        .nth(1)
        .and_then(|p| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p.trim_end_matches('='))
                .ok()
        })
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// librdkafka's unsecured JWT (`alg: none`) from `principal=… lifeSeconds=… scope=…`.
fn unsecured(config: &str) -> Result<OAuthToken, String> {
    let mut principal = None;
    let (mut life, mut scope) = (3600u64, None);
    for part in config.split_whitespace() {
        match part.split_once('=') {
            Some(("principal", v)) => principal = Some(v.to_string()),
            Some(("lifeSeconds", v)) => {
                life = v
                    .parse()
                    .map_err(|_| format!("sasl.oauthbearer.config: lifeSeconds `{v}` is not a number"))?
            }
            Some(("scope", v)) => scope = Some(v.to_string()),
            _ => {}
        }
    }
    let principal = principal.ok_or_else(|| {
        "OAUTHBEARER needs producer.override.sasl.oauthbearer.config=principal=<name> (unsecured tokens) or \
         producer.override.sasl.oauthbearer.method=oidc"
            .to_string()
    })?;
    let iat = now();
    let exp = iat + Duration::from_secs(life);
    let mut claims = serde_json::json!({ "sub": principal, "iat": iat.as_secs(), "exp": exp.as_secs() });
    if let Some(s) = scope {
        claims["scope"] = serde_json::Value::from(s);
    }
    let b64 = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    Ok(OAuthToken {
        token: format!("{}.{}.", b64(&serde_json::json!({ "alg": "none" })), b64(&claims)),
        principal_name: principal,
        lifetime_ms: exp.as_millis() as i64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsecured_token_carries_the_principal_and_its_lifetime() {
        let t = unsecured("principal=lake lifeSeconds=60 scope=kafka").unwrap();
        assert_eq!(t.principal_name, "lake");
        let claims = jwt_claims(&t.token);
        assert_eq!(claims["sub"], "lake");
        assert_eq!(claims["scope"], "kafka");
        let life = claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap();
        assert_eq!(life, 60);
        assert!(unsecured("lifeSeconds=60").is_err());
    }

    #[test]
    fn oidc_settings_are_complete_or_named() {
        let mut o = BTreeMap::new();
        o.insert("sasl.oauthbearer.method".to_string(), "OIDC".to_string());
        o.insert("sasl.oauthbearer.token.endpoint.url".into(), "http://idp/token".into());
        o.insert("sasl.oauthbearer.client.id".into(), "lake".into());
        let e = TokenSource::of(&o, "localhost:9092").unwrap_err();
        assert!(e.contains("sasl.oauthbearer.client.secret"), "{e}");
        o.insert("sasl.oauthbearer.client.secret".into(), "s3cret".into());
        let s = TokenSource::of(&o, "localhost:9092").unwrap();
        assert!(!format!("{s:?}").contains("s3cret"));
        assert!(served_here(&o, "sasl.oauthbearer.client.secret"));
        assert!(!served_here(&o, "sasl.mechanism"));
    }
}
