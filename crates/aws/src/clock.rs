//! Time as the caches see it, behind a trait so tests can move it forward without sleeping.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A monotonic clock. Every TTL in this crate reads time through it, so tests assert expiry by
/// advancing a [`ManualClock`] instead of waiting (no timed assertions).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at the moment it is created.
    pub fn new() -> Arc<Self> {
        Arc::new(ManualClock {
            start: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        })
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut offset = self.offset.lock().unwrap_or_else(|p| p.into_inner());
        *offset += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + *self.offset.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The default clock, shared.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}
