//! A run's failures: each layer's error, and the runtime's own (a stored position under other
//! terms, a command used in a way it refuses); `kind` decides the exit code and riding it out.

use super::verify;
use crate::changelog::ChangelogError;
use crate::config::ConfigError;
use crate::error::ErrorKind;
use crate::sink::SinkError;
use crate::source::SourceError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("source: {0}")]
    Source(#[from] SourceError),
    #[error("changelog: {0}")]
    Changelog(#[from] ChangelogError),
    #[error("sink: {0}")]
    Sink(#[from] SinkError),
    #[error("verify: {0}")]
    Verify(#[from] verify::VerifyError),
    /// The stored position was written under different terms than this run's (the key).
    #[error("position: {0}")]
    Position(String),
    /// A command used in a way it refuses (exit 2).
    #[error("{0}")]
    Usage(String),
}

impl RuntimeError {
    /// What the failure means: each layer's error says it; the exit code and the choice between
    /// riding it out and stopping follow from it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RuntimeError::Config(e) => e.kind(),
            RuntimeError::Usage(_) => ErrorKind::Config,
            RuntimeError::Source(e) => e.kind(),
            RuntimeError::Changelog(e) => e.kind(),
            RuntimeError::Sink(e) => e.kind(),
            RuntimeError::Verify(e) => e.kind(),
            RuntimeError::Position(_) => ErrorKind::Position,
        }
    }

    pub fn exit_code(&self) -> u8 {
        self.kind().exit_code()
    }

    /// A broker, registry or storage outage, which a new producer and the committed position
    /// recover from.
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }
}
