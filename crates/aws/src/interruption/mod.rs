//! The interruption queue: EventBridge events about joiner's instances, delivered to SQS.
//!
//! [`parse`](mod@parse) reads one message body into a core [`joiner_core::interruption::Event`] (or says
//! why it is not one); [`queue`] receives and deletes messages through the SDK. What is done
//! about each event is the controller's (`joiner_controller::interruption`).

pub mod parse;
pub mod queue;

pub use parse::parse;
pub use queue::{QueueError, SqsQueue};
