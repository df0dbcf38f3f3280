//! Storage credentials a catalog hands out for one table (the Iceberg REST catalog's `loadTable`
//! with `X-Iceberg-Access-Delegation: vended-credentials`: Polaris, Unity, Gravitino, Lakekeeper,
//! S3 Tables). Once a connector has them, its S3 clients sign with them instead of the `s3.*` keys
//! or the environment; they are replaced whenever the catalog hands out new ones (every poll) and,
//! should a long read outlast them, renewed by asking the catalog again a minute before they
//! expire.

use parking_lot::RwLock;
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::aws::AwsCredential;

/// Credentials as a catalog vends them.
#[derive(Clone)]
pub struct Vended {
    pub key_id: String,
    pub secret: String,
    pub token: Option<String>,
    /// When they stop working, where the catalog says.
    pub expires: Option<SystemTime>,
}

/// Asks the catalog for new credentials (blocking).
pub type Renew = Arc<dyn Fn() -> io::Result<Vended> + Send + Sync>;

/// Renewed this long before they expire.
const AHEAD: Duration = Duration::from_secs(60);

/// object_store's credential source for a connector's S3 clients once credentials are vended.
pub(super) struct VendedProvider {
    current: RwLock<(Arc<AwsCredential>, Option<SystemTime>)>,
    renew: RwLock<Renew>,
}

impl std::fmt::Debug for VendedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // no credentials in logs
        f.write_str("VendedProvider")
    }
}

fn credential(v: &Vended) -> Arc<AwsCredential> {
    Arc::new(AwsCredential {
        key_id: v.key_id.clone(),
        secret_key: v.secret.clone(),
        token: v.token.clone(),
    })
}

impl VendedProvider {
    pub(super) fn new(v: &Vended, renew: Renew) -> Self {
        Self {
            current: RwLock::new((credential(v), v.expires)),
            renew: RwLock::new(renew),
        }
    }

    pub(super) fn replace(&self, v: &Vended, renew: Renew) {
        *self.current.write() = (credential(v), v.expires);
        *self.renew.write() = renew;
    }
}

#[async_trait::async_trait]
impl object_store::CredentialProvider for VendedProvider {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let (cred, expires) = self.current.read().clone();
        if expires.is_none_or(|e| e > SystemTime::now() + AHEAD) {
            return Ok(cred);
        }
        // on a thread of its own: the catalog client blocks, and this runs on the runtime
        let renew = self.renew.read().clone();
        let fresh = std::thread::spawn(move || renew())
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("renewing vended credentials panicked")));
        match fresh {
            Ok(v) => {
                tracing::info!("storage credentials vended by the catalog renewed before they expired");
                let c = credential(&v);
                *self.current.write() = (c.clone(), v.expires);
                Ok(c)
            }
            Err(e) => Err(object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::CredentialProvider;

    fn vended(key: &str, expires_in: i64) -> Vended {
        let now = SystemTime::now();
        Vended {
            key_id: key.into(),
            secret: "s".into(),
            token: None,
            expires: Some(match expires_in >= 0 {
                true => now + Duration::from_secs(expires_in as u64),
                false => now - Duration::from_secs((-expires_in) as u64),
            }),
        }
    }

    #[test]
    fn credentials_about_to_expire_are_renewed_by_asking_again() {
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let a = asked.clone();
        let renew: Renew = Arc::new(move || {
            a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(vended("fresh", 3600))
        });
        // valid for an hour: used as they are
        let p = VendedProvider::new(&vended("first", 3600), renew.clone());
        let c = futures::executor::block_on(p.get_credential()).unwrap();
        assert_eq!(
            (c.key_id.as_str(), asked.load(std::sync::atomic::Ordering::SeqCst)),
            ("first", 0)
        );
        // 30 s left: renewed once, then the new ones are kept
        p.replace(&vended("second", 30), renew);
        let c = futures::executor::block_on(p.get_credential()).unwrap();
        assert_eq!(c.key_id, "fresh");
        let c = futures::executor::block_on(p.get_credential()).unwrap();
        assert_eq!(
            (c.key_id.as_str(), asked.load(std::sync::atomic::Ordering::SeqCst)),
            ("fresh", 1)
        );
    }
}
