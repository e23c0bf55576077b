//! What an API server answer means to a reconciler.

/// The HTTP status of an API error, if `err` is one.
pub fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
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

/// True when a resourceVersion-guarded JSON patch lost a race: 409, or 422 — a real API server
/// answers a failed JSON-patch `test` with 422 Unprocessable Entity, not 409. Either way the
/// object changed since it was read; the next pass reads it again and retries.
pub fn is_guarded_patch_conflict(err: &kube::Error) -> bool {
    matches!(api_code(err), Some(409 | 422))
}
