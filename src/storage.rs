//! Table storage: local files, or an object store (S3 and S3-compatible stores, GCS, Azure) behind
//! one path-shaped, blocking API for the readers (they run on blocking threads). A remote location
//! keeps its URL as its "path" (`s3://bucket/warehouse/t`), so readers join, name and display paths
//! the same way for both. Object-store calls run on a small runtime of their own.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::Joined;
use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

/// Object-store settings (`s3.*` connector keys; unset ones come from the usual environment
/// variables and credential chain of each store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageOptions {
    pub s3_endpoint: Option<String>,
    pub s3_region: Option<String>,
    pub s3_access_key_id: Option<String>,
    pub s3_secret_access_key: Option<String>,
    pub s3_session_token: Option<String>,
    pub s3_path_style: bool,
    pub s3_allow_http: bool,
    /// Retries of one request by the client, before the failure reaches the reader.
    pub s3_max_retries: usize,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            s3_endpoint: None,
            s3_region: None,
            s3_access_key_id: None,
            s3_secret_access_key: None,
            s3_session_token: None,
            s3_path_style: false,
            s3_allow_http: false,
            s3_max_retries: object_store::RetryConfig::default().max_retries,
        }
    }
}

/// One connector's storage: its object-store settings (`s3.*`) and the clients built from them,
/// one per bucket. Each source holds its connector's handle, so two connectors of one process
/// never read with each other's credentials. Cloning shares the clients. Local paths need no
/// settings: `Storage::default()` reads them (and remote ones with the environment's settings).
#[derive(Clone, Default)]
pub struct Storage {
    inner: Arc<StorageInner>,
}

#[derive(Default)]
struct StorageInner {
    options: StorageOptions,
    /// Clients by `scheme://bucket`.
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    /// AWS request signers by region (see `aws`): kept, so their credentials are too.
    signers: Mutex<HashMap<String, AwsSigner>>,
    /// Credentials a catalog vended for the table (see `vended`): S3 clients sign with them.
    vended: Mutex<Option<Arc<vended::VendedProvider>>>,
    /// The connector's request counters.
    requests: requests::Requests,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the options hold secrets
        f.debug_struct("Storage").finish_non_exhaustive()
    }
}

/// Object-store calls of every connector run on this small runtime (a pool of I/O threads,
/// not connector state).
static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

const SCHEMES: &[&str] = &["s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://"];

pub fn is_remote(p: &Path) -> bool {
    p.to_str().is_some_and(|s| SCHEMES.iter().any(|sc| s.starts_with(sc)))
}

/// A location string as a path (URLs kept as they are; `file:` stripped).
pub fn path_of(location: &str) -> PathBuf {
    if let Some(rest) = location.strip_prefix("file://") {
        PathBuf::from(rest)
    } else if let Some(rest) = location.strip_prefix("file:") {
        PathBuf::from(rest)
    } else if let Some(rest) = location.strip_prefix("s3a://") {
        PathBuf::from(format!("s3://{rest}"))
    } else {
        PathBuf::from(location)
    }
}

/// A location (`/x`, `file:/x`, `file:///x`, or an object-store URL) as a storage path; an error
/// names the schemes that are supported.
pub fn parse_location(location: &str) -> Result<PathBuf, String> {
    let p = path_of(location);
    if location.contains("://") && !location.starts_with("file:") && !is_remote(&p) {
        return Err(format!(
            "`{location}`: unsupported scheme (local paths, file://, s3://, s3a://, gs://, az://, abfs[s]://)"
        ));
    }
    Ok(p)
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn map_err(e: object_store::Error) -> io::Error {
    class::io_error(e)
}

fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lakestream-storage")
            .enable_all()
            .build()
            .expect("storage runtime")
    });
    // spawned, then awaited from any thread (async or not): never nests runtimes
    futures::executor::block_on(rt.spawn(f)).joined()
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub name: String,
    pub path: PathBuf,
    pub is_dir: bool,
    pub size: u64,
}

impl Storage {
    pub fn new(options: StorageOptions) -> Self {
        Self::with_requests(options, requests::Requests::default())
    }

    /// A connector's storage, its requests counted in `requests`.
    pub fn with_requests(options: StorageOptions, requests: requests::Requests) -> Self {
        Storage {
            inner: Arc::new(StorageInner {
                options,
                stores: Mutex::default(),
                signers: Mutex::default(),
                vended: Mutex::default(),
                requests,
            }),
        }
    }

    fn count(&self, op: Op) {
        self.inner.requests.count(op, 1);
    }

    /// One request to the table's catalog, counted with the storage requests (`op="catalog"`).
    pub fn count_catalog(&self) {
        self.count(Op::Catalog);
    }

    /// Whether S3 requests are signed with credentials a catalog vended.
    pub fn has_vended(&self) -> bool {
        self.inner.vended.lock().is_some()
    }

    /// Sign S3 requests with credentials a catalog vended (replacing any it vended before);
    /// `renew` asks it for new ones should they expire during a read. Returns whether these are
    /// the first (the S3 clients made before are dropped, to be made again with them).
    pub fn use_vended(&self, v: &vended::Vended, renew: vended::Renew) -> bool {
        {
            // (released before the clients' lock: `store` takes the two the other way round)
            let mut slot = self.inner.vended.lock();
            if let Some(p) = slot.as_ref() {
                p.replace(v, renew);
                return false;
            }
            *slot = Some(Arc::new(vended::VendedProvider::new(v, renew)));
        }
        self.inner.stores.lock().clear();
        true
    }

    /// The store of a remote path and the object path inside it.
    fn store(&self, p: &Path) -> io::Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        let s = p.to_str().ok_or_else(|| other("non-UTF-8 path"))?;
        let (scheme, rest) = s.split_once("://").ok_or_else(|| other(format!("{s}: not a URL")))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        let opts = &self.inner.options;
        let id = format!("{scheme}://{bucket}");
        let mut map = self.inner.stores.lock();
        let st = match map.get(&id) {
            Some(st) => st.clone(),
            None => {
                let st: Arc<dyn ObjectStore> = match scheme {
                    "s3" => {
                        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                        if let Some(e) = &opts.s3_endpoint {
                            b = b.with_endpoint(e);
                        }
                        if let Some(r) = &opts.s3_region {
                            b = b.with_region(r);
                        }
                        if let (Some(k), Some(sec)) = (&opts.s3_access_key_id, &opts.s3_secret_access_key) {
                            b = b.with_access_key_id(k).with_secret_access_key(sec);
                        }
                        if let Some(t) = &opts.s3_session_token {
                            b = b.with_token(t);
                        }
                        let vended = self.inner.vended.lock().clone();
                        if let Some(p) = vended {
                            b = b.with_credentials(p);
                        }
                        b = b
                            .with_http_connector(class::Classifying)
                            .with_retry(object_store::RetryConfig {
                                max_retries: opts.s3_max_retries,
                                ..Default::default()
                            })
                            .with_allow_http(opts.s3_allow_http)
                            .with_virtual_hosted_style_request(!opts.s3_path_style);
                        Arc::new(b.build().map_err(other)?)
                    }
                    "gs" => Arc::new(
                        object_store::gcp::GoogleCloudStorageBuilder::from_env()
                            .with_bucket_name(bucket)
                            .with_http_connector(class::Classifying)
                            .build()
                            .map_err(other)?,
                    ),
                    _ => Arc::new(
                        object_store::azure::MicrosoftAzureBuilder::from_env()
                            .with_url(format!("{scheme}://{bucket}"))
                            .with_http_connector(class::Classifying)
                            .build()
                            .map_err(other)?,
                    ),
                };
                map.insert(id, st.clone());
                st
            }
        };
        Ok((st, ObjectPath::from(key.trim_matches('/'))))
    }

    pub fn read(&self, p: &Path) -> io::Result<Bytes> {
        self.count(Op::Get);
        if !is_remote(p) {
            return std::fs::read(p).map(Bytes::from);
        }
        let (st, key) = self.store(p)?;
        block_on(async move { st.get(&key).await?.bytes().await }).map_err(map_err)
    }

    pub fn read_to_string(&self, p: &Path) -> io::Result<String> {
        String::from_utf8(self.read(p)?.to_vec()).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    pub fn read_range(&self, p: &Path, start: u64, len: u64) -> io::Result<Bytes> {
        self.count(Op::RangedGet);
        if !is_remote(p) {
            use std::io::{Read, Seek, SeekFrom};
            let mut f = std::fs::File::open(p)?;
            let mut buf = vec![0u8; len as usize];
            f.seek(SeekFrom::Start(start))?;
            f.read_exact(&mut buf)?;
            return Ok(Bytes::from(buf));
        }
        let (st, key) = self.store(p)?;
        block_on(async move { st.get_range(&key, start..start + len).await }).map_err(map_err)
    }

    /// `len` bytes from `start` as a stream: a buffered range of a local file; a remote range is
    /// fetched whole.
    pub fn open_range(&self, p: &Path, start: u64, len: u64) -> io::Result<Box<dyn io::Read + Send>> {
        if !is_remote(p) {
            self.count(Op::RangedGet);
            use std::io::{Read, Seek, SeekFrom};
            let mut f = std::fs::File::open(p)?;
            f.seek(SeekFrom::Start(start))?;
            return Ok(Box::new(io::BufReader::with_capacity(256 << 10, f.take(len))));
        }
        Ok(Box::new(io::Cursor::new(self.read_range(p, start, len)?)))
    }

    pub fn size(&self, p: &Path) -> io::Result<u64> {
        self.count(Op::Head);
        if !is_remote(p) {
            return std::fs::metadata(p).map(|m| m.len());
        }
        let (st, key) = self.store(p)?;
        block_on(async move { st.head(&key).await })
            .map(|m| m.size)
            .map_err(map_err)
    }

    pub fn exists(&self, p: &Path) -> bool {
        if !is_remote(p) {
            return p.exists();
        }
        self.size(p).is_ok() || self.list(p).is_ok_and(|l| !l.is_empty())
    }

    /// Open a file to read Parquet from: a local file, or a remote object read in ranges.
    pub fn open(&self, p: &Path) -> io::Result<Input> {
        if is_remote(p) {
            let (st, key) = self.store(p)?;
            input::RemoteFile::open(st, key, self.inner.requests.clone()).map(|r| Input::Remote(Arc::new(r)))
        } else {
            std::fs::File::open(p).map(|f| Input::File(Arc::new(f)))
        }
    }
}

pub use aws::{AwsSigner, SignError};
pub use class::{take_noted, IoClass, StoreAnswered};
pub use input::Input;
pub use requests::Op;

pub mod aws;
mod class;
mod input;
mod listing;
pub mod requests;
#[cfg(test)]
mod tests;
pub mod vended;
