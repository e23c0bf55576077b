//! The process's tracing subscriber: `--log-level` in EnvFilter syntax (`info`,
//! `joiner_controller=debug,kube=warn`) and `--log-format json|text`. JSON (one object per
//! line, with the span fields of the reconcile that logged) is the default because cluster log
//! pipelines parse it; text is for a terminal.

use thiserror::Error;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable lines.
    Text,
}

/// Why logging could not be set up.
#[derive(Debug, Error)]
pub enum LoggingError {
    /// `--log-level` is not EnvFilter syntax.
    #[error("--log-level `{level}`: {reason}")]
    BadLevel {
        /// The value given.
        level: String,
        /// The parser's complaint.
        reason: String,
    },
    /// A global subscriber was installed already.
    #[error("a tracing subscriber is already installed: {0}")]
    AlreadyInstalled(String),
}

/// Parses `level` as an EnvFilter directive list.
pub fn filter(level: &str) -> Result<EnvFilter, LoggingError> {
    EnvFilter::builder()
        .parse(level)
        .map_err(|e| LoggingError::BadLevel {
            level: level.to_string(),
            reason: e.to_string(),
        })
}

/// Installs the global subscriber writing to stderr.
pub fn init(level: &str, format: LogFormat) -> Result<(), LoggingError> {
    let filter = filter(level)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.with_ansi(false).try_init(),
    };
    result.map_err(|e| LoggingError::AlreadyInstalled(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_as_env_filter_directives() {
        assert!(filter("info").is_ok());
        assert!(filter("joiner_controller=debug,kube=warn").is_ok());
        let err = filter("joiner=notalevel").err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.starts_with("--log-level `joiner=notalevel`")),
            "{err:?}"
        );
    }
}
