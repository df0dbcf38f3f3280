//! AWS MSK IAM login (`producer.override.sasl.oauthbearer.method=aws_msk_iam`, MSK's default on
//! port 9098): an OAUTHBEARER token that is a SigV4-presigned `kafka-cluster:Connect` URL, built
//! the way AWS's `aws-msk-iam-sasl-signer` libraries build it (base64url of the URL, padding
//! stripped; `User-Agent` appended after signing; valid 900 s), signed with the environment's AWS
//! credential chain (the `AWS_*` variables, EKS web identity, the container endpoint, the
//! instance profile). Byte for byte the reference signer's for the same credentials, time and user
//! agent (`tests/test_msk_iam.py`).

use base64::Engine;
use rdkafka::client::OAuthToken;

use crate::storage::aws::{presign_get, query_encode, AwsSigner};

/// How long a token is valid (the reference signer's `DEFAULT_TOKEN_EXPIRY_SECONDS`).
const EXPIRES: u64 = 900;

/// The user agent lakestream's tokens carry (MSK logs it).
pub fn user_agent() -> String {
    format!("lakestream/{}", env!("CARGO_PKG_VERSION"))
}

/// The region of an MSK bootstrap address (`b-1.name.id.c2.kafka.<region>.amazonaws.com:9098`).
pub fn region_of(bootstrap: &str) -> Option<String> {
    bootstrap.split(',').find_map(|server| {
        let host = server.trim().split(':').next()?;
        let labels: Vec<&str> = host.split('.').collect();
        // provisioned clusters `….kafka.<region>.…`, serverless ones `….kafka-serverless.<region>.…`
        let k = labels.iter().position(|l| *l == "kafka" || *l == "kafka-serverless")?;
        let (region, rest) = (labels.get(k + 1)?, labels.get(k + 2..)?);
        (rest.first() == Some(&"amazonaws") && !region.is_empty()).then(|| region.to_string())
    })
}

/// A token signed now with `signer`'s credentials, for its region.
pub fn token(signer: &AwsSigner) -> Result<OAuthToken, String> {
    let credential = signer.credential().map_err(|e| format!("MSK IAM: {e}"))?;
    Ok(token_at(
        &credential,
        signer.region(),
        &user_agent(),
        chrono::Utc::now(),
    ))
}

/// The token for `credential` in `region`, signed at `at`, carrying `agent`.
pub fn token_at(
    credential: &object_store::aws::AwsCredential,
    region: &str,
    agent: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> OAuthToken {
    let host = format!("kafka.{region}.amazonaws.com");
    let url = presign_get(
        credential,
        "kafka-cluster",
        region,
        &host,
        &[("Action", "kafka-cluster:Connect")],
        EXPIRES,
        at,
    );
    let url = format!("{url}&User-Agent={}", query_encode(agent));
    OAuthToken {
        token: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url),
        principal_name: "aws-msk-iam".into(),
        lifetime_ms: (at + chrono::Duration::seconds(EXPIRES as i64)).timestamp_millis(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_equals_the_reference_signers() {
        // aws-msk-iam-sasl-signer-python 1.0.2, the same credentials, time and user agent
        // (`tests/test_msk_iam.py` recomputes it with the reference signer)
        let c = object_store::aws::AwsCredential {
            key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            token: None,
        };
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let t = token_at(&c, "us-east-1", "aws-msk-iam-sasl-signer-python/1.0.2", at);
        assert_eq!(t.token, "aHR0cHM6Ly9rYWZrYS51cy1lYXN0LTEuYW1hem9uYXdzLmNvbS8_QWN0aW9uPWthZmthLWNsdXN0ZXIlM0FDb25uZWN0JlgtQW16LUFsZ29yaXRobT1BV1M0LUhNQUMtU0hBMjU2JlgtQW16LUNyZWRlbnRpYWw9QUtJQUlPU0ZPRE5ON0VYQU1QTEUlMkYyMDI2MTIwNCUyRnVzLWVhc3QtMSUyRmthZmthLWNsdXN0ZXIlMkZhd3M0X3JlcXVlc3QmWC1BbXotRGF0ZT0yMDI2MTIwNFQwMDAwMDBaJlgtQW16LUV4cGlyZXM9OTAwJlgtQW16LVNpZ25lZEhlYWRlcnM9aG9zdCZYLUFtei1TaWduYXR1cmU9ZTM3M2VkNzYxMjcyNDdlZTJkNGY1YjAwOTAyMmMwZjY2YzY2NWVmYzA5YTk1ZmMyYjQ1NDVlYTNkNzBhMTRhOCZVc2VyLUFnZW50PWF3cy1tc2staWFtLXNhc2wtc2lnbmVyLXB5dGhvbiUyRjEuMC4y");
        assert_eq!(t.lifetime_ms, 1796343300000);
    }

    #[test]
    fn the_region_comes_from_an_msk_bootstrap_address() {
        let b = "b-1.lake.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.lake.abc123.c2.kafka.eu-west-1.amazonaws.com:9098";
        assert_eq!(region_of(b).as_deref(), Some("eu-west-1"));
        assert_eq!(
            region_of("boot-x.c1.kafka-serverless.us-east-2.amazonaws.com:9098").as_deref(),
            Some("us-east-2")
        );
        assert_eq!(region_of("localhost:9092"), None);
    }
}
