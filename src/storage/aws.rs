//! AWS requests lakestream makes itself (AWS Glue's `GetTable` today), signed with SigV4 by
//! object_store's own signer from the same credential chain as the connector's S3 reads: the
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
        let mut signers = self.inner.signers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = signers.get(region) {
            return Ok(s.clone());
        }
        let opts = &self.inner.options;
        // the builder needs a bucket; the chain does not depend on it and nothing is fetched
        let mut b = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name("lakestream-credentials")
            .with_region(region);
        if let (Some(k), Some(sec)) = (&opts.s3_access_key_id, &opts.s3_secret_access_key) {
            b = b.with_access_key_id(k).with_secret_access_key(sec);
        }
        if let Some(t) = &opts.s3_session_token {
            b = b.with_token(t);
        }
        let s3 = b.build().map_err(other)?;
        let signer = AwsSigner {
            credentials: s3.credentials().clone(),
            region: region.to_string(),
        };
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
        let provider = self.credentials.clone();
        let credential =
            block_on(async move { object_store::CredentialProvider::get_credential(provider.as_ref()).await })
                .map_err(|e| SignError::NoCredentials(e.to_string()))?;
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
