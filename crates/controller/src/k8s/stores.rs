//! Reflector stores filled without an API server: what benchmarks, tests and the state's own
//! empty stores use.

use kube::runtime::watcher;

/// A store writer holding `items`, filled through the watcher's initial-list flow (`Init`,
/// one `InitApply` each, `InitDone`): a store the controller treats as synced. Benchmarks and
/// tests that feed the controller objects without an API server fill their stores this way.
pub fn filled<K>(items: impl IntoIterator<Item = K>) -> kube::runtime::reflector::store::Writer<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut w = kube::runtime::reflector::store::Writer::default();
    w.apply_watcher_event(&watcher::Event::Init);
    for item in items {
        w.apply_watcher_event(&watcher::Event::InitApply(item));
    }
    w.apply_watcher_event(&watcher::Event::InitDone);
    w
}
