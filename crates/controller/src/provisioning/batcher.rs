//! When to plan: pending pods are gathered into batches.
//!
//! Pods of one rollout arrive over a few hundred milliseconds; planning each on its own would buy
//! one small node per pod. The window opens on the first new pending pod, closes `idle` after the
//! last *new* pod (1 s), and at the latest `max` after it opened (10 s), so a steady trickle of
//! pods still gets capacity. Pure over `Instant`s, so the timing is tested without sleeping.

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// An open window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    opened: Instant,
    last_arrival: Instant,
}

/// The batching window over the pending pods the run loop observes.
#[derive(Debug)]
pub struct Batcher {
    idle: Duration,
    max: Duration,
    window: Option<Window>,
    seen: HashSet<String>,
}

impl Batcher {
    /// A batcher closing `idle` after the last new pod and at most `max` after opening.
    pub fn new(idle: Duration, max: Duration) -> Self {
        Batcher {
            idle,
            max,
            window: None,
            seen: HashSet::new(),
        }
    }

    /// Records the keys (`namespace/name`) of the pods pending at `now`. A key not seen before
    /// is an arrival: it opens the window, or pushes back its idle deadline. Keys no longer
    /// pending are forgotten, so a pod that leaves and comes back counts as new again. Returns
    /// how many pods arrived.
    pub fn observe<I>(&mut self, pending: I, now: Instant) -> usize
    where
        I: IntoIterator<Item = String>,
    {
        let current: HashSet<String> = pending.into_iter().collect();
        let arrivals = current.difference(&self.seen).count();
        self.seen = current;
        if arrivals > 0 {
            self.arrive(now);
        }
        arrivals
    }

    /// Opens a window (or counts as an arrival in the open one) without a new pod: the run loop
    /// asks for a re-plan this way after a claim was given up, or periodically while pods wait.
    pub fn trigger(&mut self, now: Instant) {
        self.arrive(now);
    }

    fn arrive(&mut self, now: Instant) {
        match &mut self.window {
            Some(w) => w.last_arrival = now,
            None => {
                self.window = Some(Window {
                    opened: now,
                    last_arrival: now,
                })
            }
        }
    }

    /// True while a window is open.
    pub fn is_open(&self) -> bool {
        self.window.is_some()
    }

    /// When the open window closes: the earlier of `idle` after the last arrival and `max`
    /// after opening. `None` when no window is open.
    pub fn deadline(&self) -> Option<Instant> {
        self.window
            .map(|w| (w.last_arrival + self.idle).min(w.opened + self.max))
    }

    /// True when a window is open and its deadline has passed at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now >= d)
    }

    /// Closes the window, if due at `now`; returns whether it was. The pods seen stay seen, so
    /// only newer pods open the next window.
    pub fn close_if_due(&mut self, now: Instant) -> bool {
        if self.is_due(now) {
            self.window = None;
            true
        } else {
            false
        }
    }
}
