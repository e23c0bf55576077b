//! The interruption queue on SQS: long polls of up to ten messages, and one DeleteMessageBatch
//! for the handled messages of each receive.
//!
//! The queue is named by `--interruption-queue` (a name, resolved with GetQueueUrl, or the
//! queue's URL). A queue that does not exist or that the role may not read is a
//! [`QueueError`] of kind `Misconfigured` with the queue's name, so the controller can say so
//! at start and retry with backoff instead of failing.

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageSystemAttributeName,
};
use joiner_core::interruption::{InterruptionQueue, Message};
use joiner_core::{CloudError, CloudErrorKind};
use thiserror::Error;

use super::parse::parse;
use crate::api_error::api_error;
use crate::error::AwsError;

/// Most messages one receive returns (the SQS maximum).
pub const BATCH: i32 = 10;
/// Long-poll wait, seconds (the SQS maximum): an idle queue costs one call per 20 s.
pub const WAIT_SECONDS: i32 = 20;
/// How long a received message stays hidden, seconds: a message whose handling failed (it is
/// not deleted) comes back after this and is tried again.
pub const VISIBILITY_TIMEOUT: i32 = 20;

/// A queue call that failed, naming the queue.
#[derive(Debug, Error)]
pub enum QueueError {
    /// The queue does not exist (in this account and region).
    #[error("interruption queue {queue:?} does not exist in this account and region; create it (iam/interruption-queue.yaml) or fix --interruption-queue")]
    Missing {
        /// The name or URL given.
        queue: String,
    },
    /// The role may not use the queue.
    #[error("interruption queue {queue:?}: access denied ({message}); the controller role needs sqs:GetQueueUrl, sqs:ReceiveMessage, sqs:ChangeMessageVisibility and sqs:DeleteMessage on it")]
    AccessDenied {
        /// The name or URL given.
        queue: String,
        /// AWS's words.
        message: String,
    },
    /// Any other failure of a call.
    #[error("interruption queue {queue:?}: {source}")]
    Api {
        /// The name or URL given.
        queue: String,
        /// The SDK error, with its code.
        #[source]
        source: AwsError,
    },
}

impl QueueError {
    fn code_of(&self) -> Option<&str> {
        match self {
            QueueError::Api {
                source: AwsError::Api { code, .. },
                ..
            } => Some(code),
            _ => None,
        }
    }
}

impl CloudError for QueueError {
    fn kind(&self) -> CloudErrorKind {
        match self {
            QueueError::Missing { .. } | QueueError::AccessDenied { .. } => {
                CloudErrorKind::Misconfigured
            }
            QueueError::Api { .. } => match self.code_of() {
                Some("ThrottlingException" | "RequestThrottled" | "OverLimit") => {
                    CloudErrorKind::Throttled
                }
                _ => CloudErrorKind::Other,
            },
        }
    }

    fn code(&self) -> String {
        match self {
            QueueError::Missing { .. } => "QueueDoesNotExist".into(),
            QueueError::AccessDenied { .. } => "AccessDenied".into(),
            QueueError::Api { .. } => self.code_of().unwrap_or("other").to_string(),
        }
    }
}

/// Classifies an SDK error of `operation` on `queue`.
fn classify(queue: &str, source: AwsError) -> QueueError {
    match &source {
        AwsError::Api { code, message, .. } => match code.as_str() {
            "AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist" => {
                QueueError::Missing {
                    queue: queue.to_string(),
                }
            }
            "AccessDenied" | "AccessDeniedException" | "AuthorizationError" => {
                QueueError::AccessDenied {
                    queue: queue.to_string(),
                    message: message.clone(),
                }
            }
            _ => QueueError::Api {
                queue: queue.to_string(),
                source,
            },
        },
        _ => QueueError::Api {
            queue: queue.to_string(),
            source,
        },
    }
}

/// The interruption queue, resolved to its URL.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    sqs: aws_sdk_sqs::Client,
    name: String,
    url: String,
    wait_seconds: i32,
    visibility_timeout: i32,
}

impl SqsQueue {
    /// Resolves `queue` (a name, or an `https://` / `http://` URL used as is after a check that
    /// it answers) and returns the queue, or why it cannot be used.
    pub async fn connect(sqs: aws_sdk_sqs::Client, queue: &str) -> Result<Self, QueueError> {
        let url = if queue.starts_with("https://") || queue.starts_with("http://") {
            // Reading an attribute proves the queue exists and the role may use it.
            sqs.get_queue_attributes()
                .queue_url(queue)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout)
                .send()
                .await
                .map_err(|e| classify(queue, api_error("sqs:GetQueueAttributes", e)))?;
            queue.to_string()
        } else {
            sqs.get_queue_url()
                .queue_name(queue)
                .send()
                .await
                .map_err(|e| classify(queue, api_error("sqs:GetQueueUrl", e)))?
                .queue_url
                .ok_or_else(|| QueueError::Missing {
                    queue: queue.to_string(),
                })?
        };
        Ok(SqsQueue {
            sqs,
            name: queue.to_string(),
            url,
            wait_seconds: WAIT_SECONDS,
            visibility_timeout: VISIBILITY_TIMEOUT,
        })
    }

    /// The same queue with another long-poll wait and visibility timeout (tests shorten both).
    pub fn with_timing(mut self, wait_seconds: i32, visibility_timeout: i32) -> Self {
        self.wait_seconds = wait_seconds.clamp(0, WAIT_SECONDS);
        self.visibility_timeout = visibility_timeout.max(0);
        self
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl InterruptionQueue for SqsQueue {
    type Error = QueueError;

    async fn receive(&self) -> Result<Vec<Message>, QueueError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(BATCH)
            .wait_time_seconds(self.wait_seconds)
            .visibility_timeout(self.visibility_timeout)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(|e| classify(&self.name, api_error("sqs:ReceiveMessage", e)))?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                // A message without a receipt handle cannot be deleted; SQS always sends one.
                let receipt = m.receipt_handle?;
                let sent_at_ms = m
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                    .and_then(|t| t.parse().ok());
                Some(Message {
                    message_id: m.message_id.unwrap_or_default(),
                    receipt,
                    body: parse(m.body.as_deref().unwrap_or_default()),
                    sent_at_ms,
                })
            })
            .collect())
    }

    async fn delete(&self, receipts: &[String]) -> Result<Vec<Option<String>>, QueueError> {
        let mut answers: Vec<Option<String>> = vec![None; receipts.len()];
        // DeleteMessageBatch takes ten entries, as ReceiveMessage gives at most ten.
        for (chunk_at, chunk) in receipts.chunks(BATCH as usize).enumerate() {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, receipt)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| QueueError::Api {
                    queue: self.name.clone(),
                    source: AwsError::Api {
                        operation: "sqs:DeleteMessageBatch",
                        code: "InvalidRequest".into(),
                        message: e.to_string(),
                    },
                })?;
            let out = self
                .sqs
                .delete_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| classify(&self.name, api_error("sqs:DeleteMessageBatch", e)))?;
            for failed in out.failed {
                let slot = failed
                    .id
                    .parse::<usize>()
                    .ok()
                    .map(|i| chunk_at * BATCH as usize + i);
                if let Some(answer) = slot.and_then(|i| answers.get_mut(i)) {
                    *answer = Some(format!(
                        "{}: {}",
                        failed.code,
                        failed.message.unwrap_or_default()
                    ));
                }
            }
        }
        Ok(answers)
    }

    fn visibility(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.visibility_timeout.max(0) as u64)
    }

    async fn extend(&self, receipts: &[String]) -> Result<(), QueueError> {
        for chunk in receipts.chunks(BATCH as usize) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, receipt)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt)
                        .visibility_timeout(self.visibility_timeout)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| QueueError::Api {
                    queue: self.name.clone(),
                    source: AwsError::Api {
                        operation: "sqs:ChangeMessageVisibilityBatch",
                        code: "InvalidRequest".into(),
                        message: e.to_string(),
                    },
                })?;
            let out = self
                .sqs
                .change_message_visibility_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| {
                    classify(&self.name, api_error("sqs:ChangeMessageVisibilityBatch", e))
                })?;
            // A message whose extension failed (deleted meanwhile, or its receipt expired)
            // may come back: it is then answered as a duplicate, so this is only logged.
            for failed in out.failed {
                tracing::debug!(queue = %self.name, code = %failed.code,
                    detail = failed.message.as_deref().unwrap_or_default(),
                    "interruption message visibility not extended");
            }
        }
        Ok(())
    }
}
