//! AWS requests lakestream makes itself (AWS Glue's `GetTable` today), signed with SigV4 by
//! object_store's own signer (and the presigned URL of Kafka's MSK IAM login, [`presign_get`]:
//! object_store presigns only with the clock of the moment, which no reference vector can meet; on
//! `ring`, already in the build through rustls) from the same credential chain as the connector's S3 reads: the
//! `s3.access-key-id` / `s3.secret-access-key` / `s3.session-token` keys where set, else the
//! environment, web identity (EKS IRSA), the ECS container endpoint and the instance profile,
//! refreshed before they expire. One signer and one chain for S3 and the catalog, rather than a
//! second AWS SDK whose settings could disagree with the reads'.

use std::io;

use object_store::aws::{AwsAuthorizer, AwsCredentialProvider};

use super::{block_on, other, Storage};

/// Signs requests to one AWS service endpoint region with the connector's credentials.
#[derive(Clone)]
pub struct AwsSigner {
    credentials: AwsCredentialProvider,
    region: String,
}

impl std::fmt::Debug for AwsSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // no credentials in logs
        f.debug_struct("AwsSigner")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// Why a request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// No credentials were found, or the chain's source refused to give them.
    #[error("no AWS credentials ({0}): set s3.access-key-id / s3.secret-access-key, or the environment's AWS credentials (AWS_ACCESS_KEY_ID, web identity, instance profile)")]
    NoCredentials(String),
    #[error("cannot sign the request: {0}")]
    Request(String),
}

impl Storage {
    /// A signer for AWS requests in `region`, with this connector's credential chain: made once
    /// per region and kept, so a catalog polled every few seconds does not fetch credentials
    /// (web identity, instance profile) anew each poll — the chain refreshes them before expiry.
    pub fn aws_signer(&self, region: &str) -> io::Result<AwsSigner> {
        let mut signers = self.inner.signers.lock();
        if let Some(s) = signers.get(region) {
            return Ok(s.clone());
        }
        let opts = &self.inner.options;
        let signer = AwsSigner::chain(region, |mut b| {
            if let (Some(k), Some(sec)) = (&opts.s3_access_key_id, &opts.s3_secret_access_key) {
                b = b.with_access_key_id(k).with_secret_access_key(sec);
            }
            if let Some(t) = &opts.s3_session_token {
                b = b.with_token(t);
            }
            b
        })?;
        signers.insert(region.to_string(), signer.clone());
        Ok(signer)
    }
}

impl AwsSigner {
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The headers of a SigV4-signed `method` request of `body` to `url` for `service`
    /// (`headers` as given, plus `x-amz-date`, `x-amz-content-sha256`, the session token where
    /// there is one, and `authorization`). Fetches or refreshes credentials as the chain needs.
    pub fn sign(
        &self,
        service: &str,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, SignError> {
        let credential = self.credential()?;
        sign_with(&credential, service, &self.region, method, url, headers, body)
    }
}

fn sign_with(
    credential: &object_store::aws::AwsCredential,
    service: &str,
    region: &str,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, SignError> {
    let bad = |e: &dyn std::fmt::Display| SignError::Request(e.to_string());
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = object_store::client::HttpRequestBody::from(bytes::Bytes::copy_from_slice(body));
    let mut req = req.body(body).map_err(|e| bad(&e))?;
    AwsAuthorizer::new(credential, service, region)
        .try_authorize(&mut req, None)
        .map_err(|e| bad(&e))?;
    req.headers()
        .iter()
        .map(|(k, v)| Ok((k.as_str().to_string(), v.to_str().map_err(|e| bad(&e))?.to_string())))
        .collect()
}

/// Characters SigV4 leaves as they are in a query (RFC 3986 unreserved); the rest is `%XX`.
const QUERY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `v` encoded as SigV4 encodes a query value: everything but RFC 3986's unreserved characters
/// (also what a URL path segment or form value needs: the REST catalog's requests use it).
pub fn query_encode(v: &str) -> String {
    percent_encoding::utf8_percent_encode(v, QUERY).to_string()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::sign(&k, data.as_bytes()).as_ref().to_vec()
}

/// A SigV4-presigned `GET https://<host>/?<params>` (query-string authentication, `host` the only
/// signed header, the hash of an empty payload), signed at `at` and valid for `expires` seconds —
/// as botocore's `SigV4QueryAuth` builds it, down to the order of the URL's parameters: `params`,
/// the algorithm, credential, date, expiry and signed headers, the session token where there is
/// one, then the signature.
pub fn presign_get(
    credential: &object_store::aws::AwsCredential,
    service: &str,
    region: &str,
    host: &str,
    params: &[(&str, &str)],
    expires: u64,
    at: chrono::DateTime<chrono::Utc>,
) -> String {
    let enc = query_encode;
    let (date, stamp) = (at.format("%Y%m%d").to_string(), at.format("%Y%m%dT%H%M%SZ").to_string());
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let credential_id = format!("{}/{scope}", credential.key_id);
    let expires = expires.to_string();
    let mut query: Vec<(&str, &str)> = params.to_vec();
    query.extend([
        ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
        ("X-Amz-Credential", credential_id.as_str()),
        ("X-Amz-Date", stamp.as_str()),
        ("X-Amz-Expires", expires.as_str()),
        ("X-Amz-SignedHeaders", "host"),
    ]);
    if let Some(t) = &credential.token {
        query.push(("X-Amz-Security-Token", t.as_str()));
    }
    let mut sorted: Vec<(String, String)> = query.iter().map(|(k, v)| (enc(k), enc(v))).collect();
    sorted.sort();
    let canonical_query: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let empty = hex::encode(ring::digest::digest(&ring::digest::SHA256, b""));
    let canonical = format!("GET\n/\n{}\nhost:{host}\n\nhost\n{empty}", canonical_query.join("&"));
    let hashed = hex::encode(ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes()));
    let to_sign = format!("AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashed}");
    let mut key = hmac(format!("AWS4{}", credential.secret_key).as_bytes(), &date);
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part);
    }
    let signature = hex::encode(hmac(&key, &to_sign));
    let url: Vec<String> = query.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect();
    format!("https://{host}/?{}&X-Amz-Signature={signature}", url.join("&"))
}

impl AwsSigner {
    /// The current credentials of the chain (fetched or refreshed as it needs).
    pub fn credential(&self) -> Result<std::sync::Arc<object_store::aws::AwsCredential>, SignError> {
        let provider = self.credentials.clone();
        block_on(async move { object_store::CredentialProvider::get_credential(provider.as_ref()).await })
            .map_err(|e| SignError::NoCredentials(e.to_string()))
    }

    /// A signer for `region` with the environment's credential chain alone (the
    /// `AWS_ACCESS_KEY_ID` family, web identity, the container endpoint, the instance profile),
    /// for AWS requests that are not the connector's storage (Kafka's MSK IAM login).
    pub fn from_env(region: &str) -> io::Result<AwsSigner> {
        Self::chain(region, |b| b)
    }

    /// A signer for `region` with object_store's credential chain: the environment's, with what
    /// `keys` adds to the builder.
    fn chain(
        region: &str,
        keys: impl FnOnce(object_store::aws::AmazonS3Builder) -> object_store::aws::AmazonS3Builder,
    ) -> io::Result<AwsSigner> {
        // the builder needs a bucket; the chain does not depend on it and nothing is fetched
        let b = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name("lakestream-credentials")
            .with_region(region);
        let s3 = keys(b).build().map_err(other)?;
        Ok(AwsSigner {
            credentials: s3.credentials().clone(),
            region: region.to_string(),
        })
    }
}

/// A signer with fixed credentials (tests).
#[cfg(test)]
pub(crate) fn static_signer(key: &str, secret: &str, region: &str) -> AwsSigner {
    AwsSigner {
        credentials: std::sync::Arc::new(object_store::StaticCredentialProvider::new(
            object_store::aws::AwsCredential {
                key_id: key.into(),
                secret_key: secret.into(),
                token: None,
            },
        )),
        region: region.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `presign_get` against botocore's `SigV4QueryAuth` as aws-msk-iam-sasl-signer-python 1.0.2
    /// uses it (`tests/test_msk_iam.py` recomputes these with the reference signer).
    #[test]
    fn a_presigned_url_equals_botocores() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let mut c = object_store::aws::AwsCredential {
            key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            token: None,
        };
        let host = "kafka.us-east-1.amazonaws.com";
        let params = [("Action", "kafka-cluster:Connect")];
        let url = presign_get(&c, "kafka-cluster", "us-east-1", host, &params, 900, at);
        assert_eq!(url, "https://kafka.us-east-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261204%2Fus-east-1%2Fkafka-cluster%2Faws4_request&X-Amz-Date=20261204T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=e373ed76127247ee2d4f5b009022c0f66c665efc09a95fc2b4545ea3d70a14a8");
        c.token = Some("FQoGZXIvYXdzEXAMPLETOKEN".into());
        let url = presign_get(&c, "kafka-cluster", "us-east-1", host, &params, 900, at);
        assert_eq!(url, "https://kafka.us-east-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261204%2Fus-east-1%2Fkafka-cluster%2Faws4_request&X-Amz-Date=20261204T000000Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Security-Token=FQoGZXIvYXdzEXAMPLETOKEN&X-Amz-Signature=ad575f5c4d6ac724bd63b046519bf84ed20366958530cffc05343b22f7dd5890");
    }

    #[test]
    fn a_signed_request_carries_the_sigv4_headers_and_no_secret() {
        let s = static_signer("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1");
        let h = s
            .sign(
                "glue",
                "POST",
                "https://glue.us-east-1.amazonaws.com/",
                &[
                    ("x-amz-target", "AWSGlue.GetTable"),
                    ("content-type", "application/x-amz-json-1.1"),
                ],
                b"{}",
            )
            .unwrap();
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        let auth = get("authorization").unwrap();
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), "{auth}");
        assert!(auth.contains("/us-east-1/glue/aws4_request"), "{auth}");
        assert!(auth.contains("x-amz-target"), "the target header is signed: {auth}");
        assert!(get("x-amz-date").is_some());
        assert!(h.iter().all(|(_, v)| !v.contains("wJalrXUtnFEMI")));
    }
}
