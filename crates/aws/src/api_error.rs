//! Turning SDK errors into [`AwsError::Api`], keeping the AWS error code and message.
//!
//! Callers branch on the code (capacity errors, throttling, not-found), and people read the
//! message, so both survive; errors that never reached AWS (timeouts, DNS, a dead endpoint) keep
//! the SDK's full error chain as their message.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use crate::error::AwsError;

/// The code given to errors that never got an AWS answer.
pub const NO_RESPONSE: &str = "NoResponse";

/// Converts an SDK error of `operation` (e.g. `"ec2:CreateFleet"`).
pub fn api_error<E, R>(operation: &'static str, err: SdkError<E, R>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match err.as_service_error() {
        Some(service) => AwsError::Api {
            operation,
            code: service.code().unwrap_or("Unknown").to_string(),
            message: service.message().unwrap_or_default().to_string(),
        },
        None => AwsError::Api {
            operation,
            code: NO_RESPONSE.to_string(),
            message: DisplayErrorContext(&err).to_string(),
        },
    }
}
