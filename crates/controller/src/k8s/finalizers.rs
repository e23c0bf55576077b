//! joiner's termination finalizer on NodeClaims and Nodes: held until the node is drained and
//! its instance terminated.

use joiner_core::labels::TERMINATION_FINALIZER;
use kube::api::ObjectMeta;

/// True when the object holds joiner's termination finalizer.
pub fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == TERMINATION_FINALIZER)
}

/// The object's finalizers with joiner's added (once), other owners' entries kept in order.
pub fn finalizers_with_ours(meta: &ObjectMeta) -> Vec<String> {
    let mut out = meta.finalizers.clone().unwrap_or_default();
    if !has_finalizer(meta) {
        out.push(TERMINATION_FINALIZER.to_string());
    }
    out
}

/// The object's finalizers without joiner's, other owners' entries kept in order.
pub fn finalizers_without_ours(meta: &ObjectMeta) -> Vec<String> {
    meta.finalizers
        .iter()
        .flatten()
        .filter(|f| *f != TERMINATION_FINALIZER)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_of_other_owners_are_kept() {
        let meta = ObjectMeta {
            finalizers: Some(vec![
                "a.example/x".into(),
                TERMINATION_FINALIZER.into(),
                "b.example/y".into(),
            ]),
            ..Default::default()
        };
        assert!(has_finalizer(&meta));
        assert_eq!(
            finalizers_without_ours(&meta),
            ["a.example/x", "b.example/y"]
        );
        let none = ObjectMeta {
            finalizers: Some(vec!["a.example/x".into()]),
            ..Default::default()
        };
        assert_eq!(
            finalizers_with_ours(&none),
            ["a.example/x", TERMINATION_FINALIZER]
        );
        assert_eq!(finalizers_with_ours(&meta).len(), 3);
    }
}
