//! The batching window over plain `Instant`s: opens on the first new pod, closes `idle` after
//! the last new pod, at most `max` after opening.

use std::time::{Duration, Instant};

use joiner_controller::provisioning::Batcher;

const IDLE: Duration = Duration::from_secs(1);
const MAX: Duration = Duration::from_secs(10);

fn keys(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("shop/{n}")).collect()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn no_pods_no_window() {
    let mut b = Batcher::new(IDLE, MAX);
    let t0 = Instant::now();
    assert_eq!(b.observe(keys(&[]), t0), 0);
    assert!(!b.is_open());
    assert_eq!(b.deadline(), None);
    assert!(!b.close_if_due(t0 + MAX * 2));
}

#[test]
fn closes_one_idle_period_after_the_last_new_pod() {
    let mut b = Batcher::new(IDLE, MAX);
    let t0 = Instant::now();
    assert_eq!(b.observe(keys(&["a"]), t0), 1);
    assert_eq!(b.deadline(), Some(t0 + IDLE));
    // A second pod 600 ms later pushes the deadline back.
    assert_eq!(b.observe(keys(&["a", "b"]), t0 + ms(600)), 1);
    assert_eq!(b.deadline(), Some(t0 + ms(1600)));
    // The same pods seen again are not arrivals: the deadline stays.
    assert_eq!(b.observe(keys(&["a", "b"]), t0 + ms(1200)), 0);
    assert!(!b.close_if_due(t0 + ms(1599)));
    assert!(b.close_if_due(t0 + ms(1600)));
    assert!(!b.is_open());
    // Still-pending pods do not reopen it; a new one does.
    assert_eq!(b.observe(keys(&["a", "b"]), t0 + ms(2000)), 0);
    assert!(!b.is_open());
    assert_eq!(b.observe(keys(&["a", "b", "c"]), t0 + ms(2100)), 1);
    assert_eq!(b.deadline(), Some(t0 + ms(3100)));
}

#[test]
fn a_steady_trickle_closes_at_the_maximum() {
    let mut b = Batcher::new(IDLE, MAX);
    let t0 = Instant::now();
    let mut names = Vec::new();
    // A new pod every 500 ms for 15 s never leaves an idle second.
    for i in 0..30u64 {
        names.push(format!("p{i}"));
        let now = t0 + ms(500 * i);
        b.observe(names.iter().map(|n| format!("shop/{n}")), now);
        if now < t0 + MAX {
            assert!(!b.close_if_due(now), "closed early at {i}");
        } else {
            assert!(
                b.close_if_due(now),
                "not closed at {i} ({:?})",
                b.deadline()
            );
            assert_eq!(now, t0 + MAX);
            return;
        }
    }
    panic!("the window never closed");
}

#[test]
fn a_pod_that_leaves_and_returns_is_new_again() {
    let mut b = Batcher::new(IDLE, MAX);
    let t0 = Instant::now();
    b.observe(keys(&["a"]), t0);
    assert!(b.close_if_due(t0 + IDLE));
    b.observe(keys(&[]), t0 + ms(1100));
    assert_eq!(b.observe(keys(&["a"]), t0 + ms(1200)), 1);
    assert_eq!(b.deadline(), Some(t0 + ms(2200)));
}

#[test]
fn trigger_opens_a_window_without_new_pods() {
    let mut b = Batcher::new(IDLE, MAX);
    let t0 = Instant::now();
    b.observe(keys(&["a"]), t0);
    assert!(b.close_if_due(t0 + IDLE));
    b.trigger(t0 + ms(5000));
    assert!(b.is_open());
    assert_eq!(b.deadline(), Some(t0 + ms(6000)));
}
