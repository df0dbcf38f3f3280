//! A source's failures: typed by what they mean for the runtime (`kind`), naming the file,
//! version or catalog and the way out.

use std::path::PathBuf;

/// A source failure. `Unreadable` errors name the file or instant and the way out.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {}: {source}", crate::storage::IoClass::of(source).describe())]
    Io { path: PathBuf, source: std::io::Error },
    /// `transient`: a storage read failed inside the reader and a later attempt can get past it
    /// (see [`SourceError::parquet`]).
    #[error("{path}: cannot read parquet: {source}")]
    Parquet {
        path: PathBuf,
        source: parquet::errors::ParquetError,
        transient: bool,
    },
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },
    /// `transient`: as for `Parquet` (see [`SourceError::arrow`]).
    #[error("{context}: {source}")]
    Arrow {
        context: String,
        source: arrow_schema::ArrowError,
        transient: bool,
    },
    /// What cannot be read, and why (`why`); the message names the file or version and the
    /// way out.
    #[error("{message}")]
    Unreadable { why: Unreadable, message: String },
    /// The commits after the position can no longer be read: a cleaner, a snapshot expiry, log
    /// retention, a rollback or restore removed them (`history.gap=resync` converges from the
    /// topic's state instead; `fail` stops with this message and its ways out).
    #[error("{message}")]
    HistoryGone { message: String },
    #[error("{message}")]
    Unsupported { message: String },
    /// Reading was stopped from outside (the task shutting down, or failing elsewhere): not a
    /// problem of the table.
    #[error("reading stopped")]
    Stopped,
    /// The table and the connector's settings do not fit (no key, a key column the table lacks):
    /// the operator fixes the properties (exit 2, also from `validate`).
    #[error("{message}")]
    Config { message: String },
    /// A catalog (Iceberg REST, AWS Glue, sqlite) answered with a failure, or not at all.
    #[error("{catalog}: {failure}: {message}")]
    Catalog {
        /// Which catalog and where (`glue us-east-1 (https://...)`).
        catalog: String,
        failure: CatalogFailure,
        message: String,
    },
}

/// Why a table cannot be read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Nothing at the location is a table of the format (or the catalog is not of its type).
    NotATable,
    /// The table's metadata or files are not as its format says: truncated, damaged, or written
    /// against the spec.
    Damaged,
    /// A file the table still names is gone, removed outside the format.
    Missing,
    /// The version to read is no longer in the table's history (expired, archived, rolled back).
    Expired,
    /// The stored position is not one of this table's versions (an offsets record of another
    /// table or connector type).
    ForeignPosition,
    /// The table changed in a way the connector's settings cannot follow.
    Unfollowable,
    /// The connector's own bookkeeping broke: a bug, to report.
    Internal,
}

/// What a catalog's failure means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogFailure {
    /// Credentials missing, wrong or not allowed (exit 1, naming the catalog: nothing to ride out).
    Unauthorized,
    /// No such table or namespace: `table.identifier` or the catalog settings are wrong (exit 2).
    NotFound,
    /// Busy, throttled or out of reach: ridden out from the committed position.
    Unavailable,
    /// Any other refusal, or an answer that is not what the catalog's API says (exit 1).
    Failed,
}

impl std::fmt::Display for CatalogFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CatalogFailure::Unauthorized => "not authorized",
            CatalogFailure::NotFound => "not found",
            CatalogFailure::Unavailable => "unavailable",
            CatalogFailure::Failed => "failed",
        })
    }
}

impl SourceError {
    /// Storage that is busy or out of reach: the runtime retries from the committed position.
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }

    pub fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind as K;
        let storage = |transient: bool| if transient { K::Unavailable } else { K::Data };
        match self {
            SourceError::Io { source, .. } => storage(crate::storage::IoClass::of(source).is_transient()),
            SourceError::Parquet { transient, .. } | SourceError::Arrow { transient, .. } => storage(*transient),
            SourceError::Format { .. } | SourceError::Unreadable { .. } | SourceError::HistoryGone { .. } => K::Data,
            SourceError::Unsupported { .. } => K::Unsupported,
            SourceError::Stopped => K::Stopped,
            SourceError::Config { .. } => K::Config,
            SourceError::Catalog { failure, .. } => match failure {
                CatalogFailure::Unauthorized => K::Rejected,
                CatalogFailure::NotFound => K::Config,
                CatalogFailure::Unavailable => K::Unavailable,
                CatalogFailure::Failed => K::Rejected,
            },
        }
    }
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SourceError {
        let path = path.into();
        move |source| SourceError::Io { path, source }
    }
    pub fn format(path: impl Into<PathBuf>, message: impl Into<String>) -> SourceError {
        SourceError::Format {
            path: path.into(),
            message: message.into(),
        }
    }
    /// A Parquet reader's failure on `path`. Transient where the reader met a storage failure a
    /// later attempt can get past: found in its source chain, or noted by the read on this thread
    /// (see `storage::class`). Build it on the thread that read.
    pub fn parquet(path: impl Into<PathBuf>) -> impl FnOnce(parquet::errors::ParquetError) -> SourceError {
        let path = path.into();
        move |source| SourceError::Parquet {
            transient: transient_failure(&source),
            path,
            source,
        }
    }

    /// An Arrow failure in `context` (transient as for [`SourceError::parquet`]: the record-batch
    /// reader keeps only the text of the Parquet error it met).
    pub fn arrow(context: impl Into<String>) -> impl FnOnce(arrow_schema::ArrowError) -> SourceError {
        let context = context.into();
        move |source| SourceError::Arrow {
            transient: transient_failure(&source),
            context,
            source,
        }
    }
}

/// Whether a format library's error came from a storage failure a later attempt can get past:
/// noted by a read on this thread (taken, whatever the answer), or an I/O error in its chain.
fn transient_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let noted = crate::storage::take_noted().is_some();
    let io = std::iter::successors(Some(e), |&err| err.source()).find_map(|err| err.downcast_ref::<std::io::Error>());
    noted || io.is_some_and(|io| crate::storage::IoClass::of(io).is_transient())
}
