//! What an API server answer means to a reconciler.

/// The HTTP status of an API error, if `err` is one.
pub fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The API server's own message for an API error (what it says is wrong), else the error.
pub fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// True for 409 Conflict: another writer changed the object since it was read; the next pass
/// reads it again from the store and retries.
pub fn is_conflict(err: &kube::Error) -> bool {
    api_code(err) == Some(409)
}

/// True for 404 Not Found.
pub fn is_not_found(err: &kube::Error) -> bool {
    api_code(err) == Some(404)
}

/// True for 429 Too Many Requests (an Eviction refused by a PodDisruptionBudget, or the API
/// server's own throttling).
pub fn is_too_many_requests(err: &kube::Error) -> bool {
    api_code(err) == Some(429)
}

/// The message of the API server's generic 422 (`NewGenericServerResponse`): what a JSON patch
/// whose operation does not apply — a failed `test` — is answered with. It names no object and
/// gives no causes, unlike a validation failure (`Node "n1" is invalid: ...`, with causes).
const PATCH_NOT_APPLIED: &str = "the server rejected our request due to an error in our request";

/// True for the API server's answer to a JSON patch whose `test` operation failed: 422
/// `Invalid` with the generic message and no object or causes in its details. joiner's own
/// patches only `test` the resourceVersion (their other operations always apply), so this
/// means the object changed since it was read.
pub fn is_failed_patch_test(err: &kube::Error) -> bool {
    let kube::Error::Api(s) = err else {
        return false;
    };
    s.code == 422
        && s.message.starts_with(PATCH_NOT_APPLIED)
        && s.details
            .as_ref()
            .is_none_or(|d| d.causes.is_empty() && d.name.is_empty() && d.kind.is_empty())
}

/// True when a resourceVersion-guarded JSON patch lost a race: 409, or the 422 a real API
/// server answers a failed JSON-patch `test` with ([`is_failed_patch_test`]). The object
/// changed since it was read; the next pass reads it again and retries. Any other 422 — a
/// label value or field the API server refuses — is no race: retrying cannot help, so it is an
/// error the caller reports ([`is_refused`]).
pub fn is_guarded_patch_conflict(err: &kube::Error) -> bool {
    is_conflict(err) || is_failed_patch_test(err)
}

/// True when the API server refused the request's content (400 Bad Request, or a 422 that is
/// not a failed `test`): sending it again changes nothing, so it is reported (Event, condition,
/// log) and retried only after a backoff, never every pass.
pub fn is_refused(err: &kube::Error) -> bool {
    match api_code(err) {
        Some(400) => true,
        Some(422) => !is_failed_patch_test(err),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(v: serde_json::Value) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value::<kube::core::Status>(v)
                .expect("status")
                .boxed(),
        )
    }

    #[test]
    fn only_a_failed_test_is_a_conflict_among_422s() {
        // What a real API server answers a JSON patch whose `test` fails.
        let test_failed = api(serde_json::json!({
            "status": "Failure", "code": 422, "reason": "Invalid", "details": {},
            "message": PATCH_NOT_APPLIED}));
        // What it answers a label value it refuses.
        let invalid = api(serde_json::json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "Node \"n1\" is invalid: metadata.labels: Invalid value: \"a/b\": a valid label must be ...",
            "details": {"name": "n1", "kind": "Node", "causes": [
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"a/b\"", "field": "metadata.labels"}]}}));
        let conflict = api(
            serde_json::json!({"status": "Failure", "code": 409, "reason": "Conflict", "message": "changed"}),
        );
        assert!(is_guarded_patch_conflict(&test_failed) && !is_refused(&test_failed));
        assert!(!is_guarded_patch_conflict(&invalid) && is_refused(&invalid));
        assert!(is_guarded_patch_conflict(&conflict) && !is_refused(&conflict));
    }
}
