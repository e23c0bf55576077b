//! The interruption queue against moto's SQS through the real SDK: a missing queue is a clear
//! error naming it; received messages come parsed (events and named rejections alike) with
//! their receipts; deleted messages are gone; a message not deleted comes back after its
//! visibility timeout.

use std::time::Duration;

use joiner_aws::interruption::{QueueError, SqsQueue};
use joiner_aws::AwsClients;
use joiner_core::interruption::{EventKind, InterruptionQueue, Message};
use joiner_core::{CloudError, CloudErrorKind};
use joiner_moto::{MotoServer, MotoSession};

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/interruption/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

async fn sqs(moto: &MotoSession) -> aws_sdk_sqs::Client {
    AwsClients::from_config(&moto.sdk_config("us-east-1").await)
        .expect("clients")
        .sqs
}

async fn create(client: &aws_sdk_sqs::Client, name: &str) -> String {
    client
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("queue created")
        .queue_url
        .expect("url")
}

async fn send(client: &aws_sdk_sqs::Client, url: &str, body: &str) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("sent");
}

/// Receives until `want` messages came or a receive comes back empty.
async fn receive_all(queue: &SqsQueue, want: usize) -> Vec<Message> {
    let mut all = Vec::new();
    while all.len() < want {
        let batch = queue.receive().await.expect("receive");
        if batch.is_empty() {
            break;
        }
        all.extend(batch);
    }
    all
}

#[tokio::test]
async fn a_missing_queue_is_a_misconfiguration_naming_it() {
    let moto = MotoServer::session().expect("moto server");
    let client = sqs(&moto).await;
    let err = SqsQueue::connect(client, "no-such-queue")
        .await
        .expect_err("missing");
    assert!(matches!(err, QueueError::Missing { .. }), "{err:?}");
    assert_eq!(err.kind(), CloudErrorKind::Misconfigured);
    assert!(err.to_string().contains("\"no-such-queue\""), "{err}");
}

/// Answers every call with AccessDenied, as SQS does for a role without the permission.
#[derive(Debug)]
struct Deny;

impl aws_sdk_sqs::config::Intercept for Deny {
    fn name(&self) -> &'static str {
        "Deny"
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut aws_sdk_sqs::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let resp = ctx.response_mut();
        *resp.status_mut() = aws_smithy_runtime_api::http::StatusCode::try_from(400)?;
        resp.headers_mut()
            .insert("content-type", "application/x-amz-json-1.0");
        *resp.body_mut() = aws_smithy_types::body::SdkBody::from(
            r#"{"__type":"com.amazon.coral.service#AccessDeniedException","message":"User: arn:aws:sts::123456789012:assumed-role/joiner/x is not authorized to perform: sqs:getqueueurl"}"#,
        );
        Ok(())
    }
}

#[tokio::test]
async fn access_denied_is_a_misconfiguration_saying_what_the_role_needs() {
    let moto = MotoServer::session().expect("moto server");
    let client = sqs(&moto).await;
    create(&client, "denied").await;
    let denied =
        aws_sdk_sqs::Client::from_conf(client.config().to_builder().interceptor(Deny).build());
    let err = SqsQueue::connect(denied, "denied")
        .await
        .expect_err("denied");
    assert!(matches!(err, QueueError::AccessDenied { .. }), "{err:?}");
    assert_eq!(err.kind(), CloudErrorKind::Misconfigured);
    let text = err.to_string();
    assert!(
        text.contains("\"denied\"") && text.contains("sqs:ReceiveMessage"),
        "{text}"
    );
    assert!(
        text.contains("not authorized"),
        "AWS's words are kept: {text}"
    );
}

#[tokio::test]
async fn messages_come_parsed_and_deleted_ones_are_gone() {
    let moto = MotoServer::session().expect("moto server");
    let client = sqs(&moto).await;
    let url = create(&client, "joiner-c1").await;
    send(&client, &url, &fixture("spot_interruption")).await;
    send(&client, &url, &fixture("health_scheduled_change")).await;
    send(&client, &url, "{not json").await;
    send(&client, &url, " ").await;

    // By name, and by URL.
    let queue = SqsQueue::connect(client.clone(), "joiner-c1")
        .await
        .expect("connects")
        .with_timing(0, 30);
    assert_eq!(queue.url(), url);
    SqsQueue::connect(client.clone(), &url)
        .await
        .expect("connects by URL");

    let got = receive_all(&queue, 4).await;
    assert_eq!(got.len(), 4);
    let mut kinds: Vec<String> = got
        .iter()
        .map(|m| match &m.body {
            Ok(e) => e.kind.as_str().to_string(),
            Err(e) => e.reason.as_str().to_string(),
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        ["empty", "not_json", "scheduled_change", "spot_interruption"]
    );
    for m in &got {
        assert!(!m.message_id.is_empty());
        assert!(m.sent_at_ms.is_some_and(|t| t > 0), "{m:?}");
    }
    let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
    let answers = queue.delete(&receipts).await.expect("deleted");
    assert_eq!(answers, vec![None; 4], "each deleted");
    // A receipt the queue does not know is answered on its own; the others still go.
    let answers = queue
        .delete(&["not-a-receipt".to_string()])
        .await
        .expect("answered");
    assert_eq!(answers.len(), 1);
    assert!(answers[0].is_some(), "{answers:?}");
    let attrs = client
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .expect("attributes");
    let count = |name: aws_sdk_sqs::types::QueueAttributeName| {
        attrs
            .attributes
            .as_ref()
            .and_then(|a| a.get(&name))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
        "0"
    );
    assert_eq!(
        count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        "0"
    );
}

#[tokio::test]
async fn a_message_not_deleted_comes_back_after_its_visibility_timeout() {
    let moto = MotoServer::session().expect("moto server");
    let client = sqs(&moto).await;
    let url = create(&client, "joiner-retry").await;
    send(&client, &url, &fixture("state_change_stopping")).await;
    let queue = SqsQueue::connect(client, "joiner-retry")
        .await
        .expect("connects")
        .with_timing(0, 1);
    let first = queue.receive().await.expect("receive");
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].body.as_ref().map(|e| e.kind),
        Ok(EventKind::Stopping)
    );
    assert!(
        queue.receive().await.expect("receive").is_empty(),
        "hidden while in flight"
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let again = queue.receive().await.expect("receive");
    assert_eq!(again.len(), 1, "back after the visibility timeout");
    assert_eq!(again[0].message_id, first[0].message_id);
}
