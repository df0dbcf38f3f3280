//! What kind of storage failure an error is, decided from types, never from its text: the
//! runtime rides out a store that is busy or out of reach and stops on the rest.
//!
//! * Local files: the `io::ErrorKind`.
//! * Object stores: when an `object_store::Error` becomes an `io::Error` ([`io_error`]), its class
//!   is read from its source chain — object_store's `HttpError` kinds (connect, timeout, broken
//!   request) — and kept inside the `io::Error` ([`Classified`]). The HTTP status of a store that
//!   answered with an error is private in object_store 0.14, so the clients are built with
//!   [`Classifying`]: it turns a 429/5xx answer into a transport error carrying a
//!   [`StoreAnswered`] (object_store retries it as it retried the status), which the chain then
//!   shows after the client's retries.
//! * Through Parquet and Arrow readers: their errors keep only text past the record-batch
//!   reader, so a failed read notes its class on the reading thread ([`note_failure`]) and the
//!   source error built from the library's error on that thread takes it ([`take_noted`]).

use std::cell::Cell;
use std::error::Error as StdError;
use std::io;

use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};

/// What kind of storage failure an error is, for messages and for the runtime's choice between
/// stopping and riding it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    NotFound,
    PermissionDenied,
    /// The store refused the rate of requests (HTTP 429/503 SlowDown) beyond its client's retries.
    Throttled,
    /// The store could not be reached, the connection broke, or it answered with server errors
    /// beyond its client's retries.
    Unreachable,
    /// The bytes are not what the format says (truncated, damaged).
    Corrupt,
    Other,
}

impl IoClass {
    pub fn of(e: &io::Error) -> IoClass {
        if let Some(c) = e.get_ref().and_then(|r| r.downcast_ref::<Classified>()) {
            return c.class;
        }
        use io::ErrorKind as K;
        match e.kind() {
            K::NotFound => IoClass::NotFound,
            K::PermissionDenied => IoClass::PermissionDenied,
            K::InvalidData | K::UnexpectedEof => IoClass::Corrupt,
            K::ResourceBusy | K::QuotaExceeded => IoClass::Throttled,
            K::TimedOut
            | K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::BrokenPipe
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown => IoClass::Unreachable,
            _ => IoClass::Other,
        }
    }

    /// A failure that a later attempt can get past (the store is busy or out of reach now).
    pub fn is_transient(self) -> bool {
        matches!(self, IoClass::Throttled | IoClass::Unreachable)
    }

    /// What the failure is and what to do about it, for the error message.
    pub fn describe(self) -> &'static str {
        match self {
            IoClass::NotFound => "not found",
            IoClass::PermissionDenied => "permission denied (check the credentials, role or ACL lakestream reads with)",
            IoClass::Throttled => {
                "throttled by the store beyond its client's retries (retried from the committed position)"
            }
            IoClass::Unreachable => "storage unreachable (retried from the committed position)",
            IoClass::Corrupt => "corrupt or truncated",
            IoClass::Other => "I/O error",
        }
    }

    /// The class of an object-store failure, from its source chain.
    fn of_store(e: &object_store::Error) -> IoClass {
        match e {
            object_store::Error::NotFound { .. } => return IoClass::NotFound,
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                return IoClass::PermissionDenied
            }
            _ => {}
        }
        let chain = || std::iter::successors(Some(e as &(dyn StdError + 'static)), |&err| err.source());
        // a store's answer sits under the transport error that carried it
        if let Some(a) = chain().find_map(|err| err.downcast_ref::<StoreAnswered>()) {
            return a.class();
        }
        for err in chain() {
            if let Some(h) = err.downcast_ref::<HttpError>() {
                return match h.kind() {
                    HttpErrorKind::Connect
                    | HttpErrorKind::Request
                    | HttpErrorKind::Timeout
                    | HttpErrorKind::Interrupted => IoClass::Unreachable,
                    _ => IoClass::Other,
                };
            }
            if let Some(io) = err.downcast_ref::<io::Error>() {
                return IoClass::of(io);
            }
        }
        IoClass::Other
    }
}

/// An object-store failure with the class read from its types (see the module doc); it shows
/// as the failure itself.
#[derive(Debug)]
pub struct Classified {
    class: IoClass,
    source: object_store::Error,
}

impl std::fmt::Display for Classified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl StdError for Classified {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.source()
    }
}

/// An object-store failure as an `io::Error`, its class kept (see [`IoClass::of`]).
pub(super) fn io_error(e: object_store::Error) -> io::Error {
    let class = IoClass::of_store(&e);
    let kind = match class {
        IoClass::NotFound => io::ErrorKind::NotFound,
        IoClass::PermissionDenied => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, Classified { class, source: e })
}

/// A store that answered a request with a status asking to come back later (429, 5xx), and the
/// start of what it said.
#[derive(Debug, thiserror::Error)]
#[error("the store answered {status}: {body}")]
pub struct StoreAnswered {
    pub status: http::StatusCode,
    pub body: String,
}

impl StoreAnswered {
    fn class(&self) -> IoClass {
        match self.status.as_u16() {
            429 | 503 => IoClass::Throttled,
            _ => IoClass::Unreachable,
        }
    }
}

/// The object-store clients' HTTP connector: reqwest's, with 429 and 5xx answers turned into
/// transport errors that carry their status ([`StoreAnswered`]). object_store retries both the
/// same way (with backoff, up to its limits); only the error after the last retry differs.
#[derive(Debug, Default)]
pub struct Classifying;

impl HttpConnector for Classifying {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(StatusAsError(
            ReqwestConnector::default().connect(options)?,
        )))
    }
}

#[derive(Debug)]
struct StatusAsError(HttpClient);

#[async_trait::async_trait]
impl HttpService for StatusAsError {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let resp = self.0.execute(req).await?;
        let status = resp.status();
        if status == http::StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            let bytes = resp.into_body().bytes().await.unwrap_or_default();
            let body = String::from_utf8_lossy(&bytes).chars().take(300).collect();
            return Err(HttpError::new(HttpErrorKind::Request, StoreAnswered { status, body }));
        }
        Ok(resp)
    }
}

thread_local! {
    /// The class of the last transient failure a storage read met on this thread, until taken.
    static NOTED: Cell<Option<IoClass>> = const { Cell::new(None) };
}

/// Note a failed storage read on this thread where a later attempt can get past it: the Parquet
/// and Arrow readers it fails inside keep only its text (see [`take_noted`]).
pub(super) fn note_failure(e: &io::Error) {
    let class = IoClass::of(e);
    if class.is_transient() {
        NOTED.with(|n| n.set(Some(class)));
    }
}

/// The transient failure noted on this thread since the last call (see [`note_failure`]): a
/// source error built from a format library's error takes it.
pub fn take_noted() -> Option<IoClass> {
    NOTED.with(|n| n.take())
}
