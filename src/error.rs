//! What a failure means, whatever layer it comes from. Each layer keeps its own error type (its
//! variants say what happened, with the file, instant or topic and the cause as `source()`), and
//! each says its [`ErrorKind`]: what the failure means for the operator. The runtime decides from
//! the kind alone whether to ride a failure out or stop, the process's exit code is the kind's,
//! and `lakestream_errors_total` counts by kind. (iceberg-rust's `Error { kind, message, source }`
//! is the model; the kinds sit beside typed variants instead of replacing them, so a caller can
//! still match on what happened.)

/// What a failure means for the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The properties, the command line, or the table and the settings do not fit: the operator
    /// fixes them (exit 2).
    Config,
    /// A broker, registry or object store is busy or out of reach: ridden out from the committed
    /// position with a new producer.
    Unavailable,
    /// `bootstrap.servers` did not answer at start within `bootstrap.timeout.ms`: a wrong address
    /// fails at once, naming it, rather than waiting forever (exit 1).
    Unreachable,
    /// The table cannot be read as it is: a missing, cleaned or damaged file, expired history,
    /// metadata that does not parse (exit 1, naming the file or instant and the way out).
    Data,
    /// The table uses something this build cannot read or encode (exit 1, naming it).
    Unsupported,
    /// A service refused a request: the registry a schema, the broker a topic (exit 1, with its
    /// answer).
    Rejected,
    /// Another instance of the task took over its transactional id (exit 1).
    Fenced,
    /// The stored position does not fit this run: written by something else, under another key,
    /// or a task change the stored positions cannot follow (exit 1, with what to do).
    Position,
    /// The work was stopped from outside (a shutdown).
    Stopped,
    /// A failure of lakestream itself or of a library (exit 1).
    Internal,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Config,
        ErrorKind::Unavailable,
        ErrorKind::Unreachable,
        ErrorKind::Data,
        ErrorKind::Unsupported,
        ErrorKind::Rejected,
        ErrorKind::Fenced,
        ErrorKind::Position,
        ErrorKind::Stopped,
        ErrorKind::Internal,
    ];

    /// The process's exit code for a failure of this kind.
    pub fn exit_code(self) -> u8 {
        match self {
            ErrorKind::Config => 2,
            _ => 1,
        }
    }

    /// A failure a later attempt from the committed position can get past.
    pub fn is_transient(self) -> bool {
        self == ErrorKind::Unavailable
    }

    /// The kind's name in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::Data => "data",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Rejected => "rejected",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Position => "position",
            ErrorKind::Stopped => "stopped",
            ErrorKind::Internal => "internal",
        }
    }
}

/// The value of a joined Tokio task. A task that panicked is a bug, not an input error: its own
/// panic resumes here, payload and message intact (an `expect` would replace them with its own);
/// a task cancelled by the runtime's shutdown panics saying so.
pub trait Joined<T> {
    fn joined(self) -> T;
}

impl<T> Joined<T> for Result<T, tokio::task::JoinError> {
    fn joined(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => match e.try_into_panic() {
                Ok(payload) => std::panic::resume_unwind(payload),
                Err(e) => panic!("a task was cancelled by the runtime's shutdown: {e}"),
            },
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;
    use crate::changelog::ChangelogError;
    use crate::runtime::RuntimeError;
    use crate::sink::SinkError;
    use crate::source::SourceError;

    fn io(kind: std::io::ErrorKind, text: &str) -> SourceError {
        SourceError::Io {
            path: "s3://lake/t/f.parquet".into(),
            source: std::io::Error::new(kind, text.to_string()),
        }
    }

    /// Each layer's failures mean what the runtime acts on: exit 2 for what the operator's
    /// settings got wrong, outages ridden out, everything else stopping with exit 1.
    #[test]
    fn every_layer_says_what_its_failures_mean() {
        let cases: Vec<(RuntimeError, ErrorKind)> = vec![
            (
                SourceError::Config {
                    message: "no key".into(),
                }
                .into(),
                ErrorKind::Config,
            ),
            (
                ChangelogError::Settings("schema.registry.ssl.ca.location /nope: not found".into()).into(),
                ErrorKind::Config,
            ),
            (RuntimeError::Usage("--force".into()), ErrorKind::Config),
            (
                io(std::io::ErrorKind::ConnectionRefused, "refused").into(),
                ErrorKind::Unavailable,
            ),
            (
                io(std::io::ErrorKind::ResourceBusy, "throttled").into(),
                ErrorKind::Unavailable,
            ),
            (io(std::io::ErrorKind::NotFound, "gone").into(), ErrorKind::Data),
            (
                // a storage failure inside the reader, in its source chain
                SourceError::parquet("f")(parquet::errors::ParquetError::External(Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "reset",
                ))))
                .into(),
                ErrorKind::Unavailable,
            ),
            (
                SourceError::parquet("f")(parquet::errors::ParquetError::General("bad magic".into())).into(),
                ErrorKind::Data,
            ),
            (
                ChangelogError::RegistryUnavailable {
                    url: "http://r".into(),
                    message: "connection refused".into(),
                }
                .into(),
                ErrorKind::Unavailable,
            ),
            (
                ChangelogError::Registry {
                    url: "http://r".into(),
                    message: "409".into(),
                }
                .into(),
                ErrorKind::Rejected,
            ),
            (SinkError::Aborted("x".into()).into(), ErrorKind::Unavailable),
            (SinkError::Fenced("x".into()).into(), ErrorKind::Fenced),
            (SinkError::Topic("x".into()).into(), ErrorKind::Rejected),
            (SinkError::Unreachable("x".into()).into(), ErrorKind::Unreachable),
            (RuntimeError::Position("foreign record".into()), ErrorKind::Position),
            (SourceError::Stopped.into(), ErrorKind::Stopped),
        ];
        for (e, want) in cases {
            assert_eq!(e.kind(), want, "{e}");
            assert_eq!(e.exit_code(), if want == ErrorKind::Config { 2 } else { 1 }, "{e}");
            assert_eq!(e.is_transient(), want == ErrorKind::Unavailable, "{e}");
        }
    }
}
