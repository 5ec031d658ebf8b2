//! Whether this process may act as the owner of the queues. An embedded server always may; a
//! cluster node only while its lease is valid, as a deadline on the monotonic clock that the
//! lease task moves forward on each renewal (SIGSTOP does not stop that clock, so a node resumed
//! after its lease ran out sees at once that it ran out).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// The lease's validity as this process knows it.
#[derive(Debug)]
pub struct Ownership {
    base: Instant,
    /// Nanoseconds after `base` until which the lease holds (0: not held).
    until_nanos: AtomicU64,
    /// Cancelled when the node starts stopping: the engine ends its streams then, which would
    /// otherwise hold the node's connections open.
    node_stopping: CancellationToken,
}

impl Default for Ownership {
    fn default() -> Self {
        Self::new()
    }
}

impl Ownership {
    /// Not held.
    pub fn new() -> Self {
        Self::stopping_with(&CancellationToken::new())
    }

    /// Not held, on a node that starts stopping when `node` is cancelled.
    pub fn stopping_with(node: &CancellationToken) -> Self {
        Self {
            base: Instant::now(),
            until_nanos: AtomicU64::new(0),
            node_stopping: node.child_token(),
        }
    }

    /// Cancelled when the node starts stopping.
    pub fn node_stopping(&self) -> &CancellationToken {
        &self.node_stopping
    }

    /// The lease holds until `until` (never moves backwards: a late renewal's answer cannot
    /// shorten what a later one established).
    pub fn extend(&self, until: Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos() as u64;
        self.until_nanos.fetch_max(nanos, Ordering::AcqRel);
    }

    /// The lease is gone: stop acting now.
    pub fn revoke(&self) {
        self.until_nanos.store(0, Ordering::Release);
    }

    /// Whether the lease holds at `now`.
    pub fn holds_at(&self, now: Instant) -> bool {
        let nanos = now.saturating_duration_since(self.base).as_nanos() as u64;
        nanos < self.until_nanos.load(Ordering::Acquire)
    }

    /// Whether the lease holds now.
    pub fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lease_holds_until_its_deadline_and_never_after_a_revoke() {
        let o = Ownership::new();
        let now = Instant::now();
        assert!(!o.holds_at(now), "not held before the first renewal");
        o.extend(now + Duration::from_secs(3));
        assert!(o.holds_at(now + Duration::from_secs(2)));
        assert!(!o.holds_at(now + Duration::from_secs(3)));
        // An older renewal's answer arriving late does not shorten the lease.
        o.extend(now + Duration::from_secs(1));
        assert!(o.holds_at(now + Duration::from_secs(2)));
        o.revoke();
        assert!(!o.holds_at(now));
    }
}
