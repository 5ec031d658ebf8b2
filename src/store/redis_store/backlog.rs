//! What waits unsent while flushes fail, and when the next flight goes.
//!
//! A flight that fails puts its batches back in front of the queue (see `flush.rs`), and writes
//! go on queueing behind them for as long as the lease holds: a replica that stopped
//! acknowledging (`wait_replicas`) fails every flush, while the lease, whose scripts wait for no
//! replica, still renews. Left alone, every flight would send the whole growing backlog again,
//! as often as calls come. So:
//!
//! - **The next flight waits** after one failed: 25 ms, doubling with each failure in a row up to
//!   the store's connection wait (a quarter lease, at most a second), less up to half of it at
//!   random so that retries do not fall into step with anything. Callers that waited for a
//!   flight that carried their batches and failed get its error instead of sending it again;
//!   the calls that queued meanwhile share the next flight.
//! - **The store gives up** once more than [`MAX_BATCHES`] batches or [`MAX_BYTES`] bytes wait
//!   while flushes fail: every later write and flush fails, the backlog is dropped, and
//!   [`RedisStore::failure`] fires, which stops the engine as a failed result journal does (its
//!   node gives the lease up and the queues restart from what Redis holds).
//!
//! A flight whose script ran but whose `WAIT` fell short counts as failed and is sent again
//! whole. Its writes are on the primary, but `WAIT` counts only the writes of its own
//! connection: after a reconnect to another primary (a Redis failover, Sentinel naming a new
//! one) they may be missing where the next `WAIT` counts, and only a flight sent again lands
//! them there. Sending them again is safe (whole values in order, each call numbered: see
//! `flush.rs`), and an OK still means that `WAIT` was met for every write it covers.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Pending, RedisStore, StoreError, redact};

/// Batches that may wait unsent while flushes fail.
pub(super) const MAX_BATCHES: usize = 10_000;

/// Bytes of writes that may wait unsent while flushes fail.
pub(super) const MAX_BYTES: usize = 64 << 20;

/// The wait after a first failed flight.
const FIRST_RETRY: Duration = Duration::from_millis(25);

/// The backlog's bounds and the first retry's wait ([`MAX_BATCHES`], [`MAX_BYTES`] and
/// [`FIRST_RETRY`]; tests take others).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bound {
    pub batches: usize,
    pub bytes: usize,
    pub first_retry: Duration,
}

impl Default for Bound {
    fn default() -> Self {
        Self {
            batches: MAX_BATCHES,
            bytes: MAX_BYTES,
            first_retry: FIRST_RETRY,
        }
    }
}

/// The flights that failed since the last that landed.
#[derive(Default)]
pub(super) struct Failures {
    /// Failed in a row (0: the last flight landed).
    in_a_row: u32,
    /// Failed since the store opened: a caller compares it before and after its wait for the
    /// flight lock, to tell whether a flight failed meanwhile.
    total: u64,
    /// The last batch the last failed flight carried.
    upto: u64,
    /// Why it failed.
    error: String,
    /// No flight before this.
    retry_at: Option<Instant>,
}

/// The wait before the next flight after `in_a_row` failed ones (at least one): `first`
/// doubled with each further failure, at most `most`, less `jitter` (0 to 1) times half of it.
pub(super) fn retry_after(first: Duration, most: Duration, in_a_row: u32, jitter: f64) -> Duration {
    let doublings = in_a_row.saturating_sub(1).min(20);
    let wait = first.saturating_mul(1 << doublings).min(most);
    wait.mul_f64(1.0 - jitter.clamp(0.0, 1.0) / 2.0)
}

/// About how many bytes a batch holds.
pub(super) fn batch_bytes(batch: &[super::Op]) -> usize {
    batch.iter().map(super::Op::bytes).sum()
}

impl RedisStore {
    /// Flights failed since the store opened.
    pub(super) fn failed_flights(&self) -> u64 {
        self.pending().failures.total
    }

    /// For a caller holding the flight lock, which saw `seen` failed flights before it waited
    /// for it: the failed flight's error if one failed meanwhile carrying batch `target`
    /// (sending it again at once would only fail again), else when the next flight may go.
    pub(super) fn next_flight(
        &self,
        seen: u64,
        target: u64,
    ) -> Result<Option<Instant>, StoreError> {
        let pending = self.pending();
        let failures = &pending.failures;
        if failures.total > seen && failures.upto >= target {
            return Err(StoreError::Redis(failures.error.clone()));
        }
        Ok(failures.retry_at)
    }

    /// A flight landed: the next goes at once.
    pub(super) fn flight_landed(&self) {
        let mut pending = self.pending();
        pending.failures.in_a_row = 0;
        pending.failures.retry_at = None;
    }

    /// A flight carrying the batches up to `upto` failed with `error` (they are back in the
    /// queue): the next waits, and past the bound the store gives up.
    pub(super) fn flight_failed(&self, upto: u64, error: &StoreError) {
        let over = {
            let mut pending = self.pending();
            let failures = &mut pending.failures;
            failures.in_a_row += 1;
            failures.total += 1;
            failures.upto = upto;
            failures.error = match error {
                StoreError::Redis(e) => e.clone(),
                e => e.to_string(),
            };
            let wait = retry_after(
                self.bound.first_retry,
                self.options.patience.connect.max(self.bound.first_retry),
                failures.in_a_row,
                rand::random::<f64>(),
            );
            failures.retry_at = Some(Instant::now() + wait);
            self.over_bound(&pending)
        };
        if let Some(why) = over {
            self.give_up(why);
        }
    }

    /// Why the store gives up with `pending` waiting, if it does: flushes fail and more waits
    /// than the bound allows.
    pub(super) fn over_bound(&self, pending: &Pending) -> Option<String> {
        let failures = &pending.failures;
        let over = pending.batches.len() > self.bound.batches || pending.bytes > self.bound.bytes;
        (failures.in_a_row > 0 && over).then(|| {
            format!(
                "{}: {} writes ({} bytes) waited unsent while every flush failed (the last: \
                 {}); the store stops so that the queues restart from what Redis holds",
                redact(&self.url),
                pending.batches.len(),
                pending.bytes,
                failures.error
            )
        })
    }

    /// Refuses every later write and flush with `why`, drops what waits, and tells the engine
    /// ([`RedisStore::failure`]).
    pub(super) fn give_up(&self, why: String) {
        if self.gave_up.set(why.clone()).is_err() {
            return;
        }
        tracing::error!(token = self.token, reason = %why, "the cluster store gives up");
        {
            let mut pending = self.pending();
            pending.batches = Vec::new();
            pending.bytes = 0;
        }
        self.failure.cancel();
    }

    /// Cancelled once the store gave up (see the module documentation).
    pub fn failure(&self) -> CancellationToken {
        self.failure.clone()
    }

    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::{Pin, pin};
    use std::task::Poll;

    use super::super::{Keys, RedisOptions};
    use super::*;
    use crate::ids::PlayerId;
    use crate::store::Storage;
    use crate::store::contract::{record, with_redis};

    /// A store of node `a` under token 7 on `url`, whose every flush waits for a replica (there
    /// is none: `WAIT` answers 0 after `wait_ms`), with `bound`.
    fn unacknowledged(
        runtime: &tokio::runtime::Handle,
        url: &str,
        wait_ms: u64,
        bound: Bound,
    ) -> RedisStore {
        let mut conn = ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap();
        let () = ::redis::cmd("SET")
            .arg(Keys::default().lease())
            .arg("7|a|127.0.0.1:1")
            .query(&mut conn)
            .unwrap();
        let options = RedisOptions {
            node: "a".into(),
            wait_replicas: 1,
            wait_timeout_ms: wait_ms,
            patience: crate::store::Patience {
                connect: Duration::from_secs(2),
                ..crate::store::Patience::default()
            },
            ..RedisOptions::default()
        };
        let mut store = runtime
            .block_on(RedisStore::open(url, 7, &options))
            .unwrap();
        store.bound = bound;
        store
    }

    /// How many flush scripts ran (each counts itself first, whatever follows).
    fn scripts_run(url: &str) -> u64 {
        let mut conn = ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap();
        let seq: Option<u64> = ::redis::cmd("GET")
            .arg(Keys::default().change_seq())
            .query(&mut conn)
            .unwrap();
        seq.unwrap_or(0)
    }

    /// Polls `f` once: whether it is still waiting.
    async fn waits<F: Future>(mut f: Pin<&mut F>) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx).is_pending())).await
    }

    fn player(i: usize) -> PlayerId {
        PlayerId::new(format!("p{i}"))
    }

    #[test]
    fn writes_piling_up_while_every_flush_fails_make_the_store_give_up_past_its_bound() {
        with_redis(|server, runtime| {
            let url = server.url();
            let bound = Bound {
                batches: 0,
                bytes: usize::MAX,
                first_retry: Duration::from_millis(1),
            };
            let mut store = unacknowledged(&runtime, &url, 1, bound);
            // Three batches beside what the store queued as it opened.
            let opened = store.pending().batches.len();
            store.bound.batches = opened + 3;
            let failure = store.failure();
            for i in 0..3 {
                store.put_players(&[(&player(i), &record(1500.0))]).unwrap();
                match store.flush() {
                    Err(StoreError::Redis(e)) => assert!(e.contains("0 of 1 replicas"), "{e}"),
                    other => panic!("a flush no replica acknowledged: {other:?}"),
                }
                assert!(!failure.is_cancelled(), "{} of 3 batches wait", i + 1);
            }
            // A fourth batch waiting is one too many.
            store.put_players(&[(&player(3), &record(1500.0))]).unwrap();
            assert!(failure.is_cancelled(), "the store gave up");
            for refused in [
                store.put_players(&[(&player(4), &record(1500.0))]),
                store.flush(),
            ] {
                match refused {
                    Err(StoreError::Redis(e)) => assert!(e.contains("waited unsent"), "{e}"),
                    other => panic!("a write after the store gave up: {other:?}"),
                }
            }
            assert!(store.pending().batches.is_empty(), "the backlog is dropped");

            // The bound counts bytes too.
            let bound = Bound {
                batches: usize::MAX,
                bytes: 1,
                first_retry: Duration::from_millis(1),
            };
            let store = unacknowledged(&runtime, &url, 1, bound);
            store
                .put_players(&[(&player(10), &record(1500.0))])
                .unwrap();
            assert!(!store.failure().is_cancelled(), "no flush failed yet");
            assert!(store.flush().is_err());
            assert!(store.failure().is_cancelled(), "its one batch is over");
        });
    }

    #[test]
    fn a_store_whose_flushes_land_holds_any_backlog() {
        with_redis(|server, runtime| {
            let url = server.url();
            let mut conn = ::redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let () = ::redis::cmd("SET")
                .arg(Keys::default().lease())
                .arg("7|a|127.0.0.1:1")
                .query(&mut conn)
                .unwrap();
            let options = RedisOptions {
                node: "a".into(),
                ..RedisOptions::default()
            };
            let mut store = runtime
                .block_on(RedisStore::open(&url, 7, &options))
                .unwrap();
            store.bound = Bound {
                batches: 1,
                bytes: 1,
                first_retry: Duration::from_millis(1),
            };
            for i in 0..5 {
                store.put_players(&[(&player(i), &record(1500.0))]).unwrap();
            }
            assert!(!store.failure().is_cancelled());
            store.flush().unwrap();
        });
    }

    #[test]
    fn after_a_failed_flight_its_callers_get_its_error_and_the_next_flight_waits() {
        with_redis(|server, runtime| {
            let url = server.url();
            // The first retry waits 0.75 to 1.5 s; each flight's WAIT, 50 ms.
            let bound = Bound {
                first_retry: Duration::from_millis(1500),
                ..Bound::default()
            };
            let store = unacknowledged(&runtime, &url, 50, bound);
            let before = scripts_run(&url);
            runtime.block_on(async {
                store.put_players(&[(&player(1), &record(1500.0))]).unwrap();
                let carried = store.queued();
                let mut first = pin!(store.flush_through(carried));
                assert!(waits(first.as_mut()).await, "the first flight is sent");
                // A caller whose batch that flight carries waits for it...
                let mut waiter = pin!(store.flush_through(carried));
                assert!(waits(waiter.as_mut()).await);
                // ... and one whose batch came after it, for the next.
                store.put_players(&[(&player(2), &record(1600.0))]).unwrap();
                let mut later = pin!(store.flush_through(store.queued()));
                assert!(waits(later.as_mut()).await);

                let failed = first.await;
                let failed_at = Instant::now();
                assert!(
                    matches!(&failed, Err(StoreError::Redis(e)) if e.contains("0 of 1 replicas")),
                    "{failed:?}"
                );
                let waited = waiter.await;
                assert_eq!(
                    format!("{waited:?}"),
                    format!("{failed:?}"),
                    "the failed flight's error"
                );
                assert_eq!(scripts_run(&url), before + 1, "and nothing sent again");

                let next = later.await;
                assert!(next.is_err(), "{next:?}");
                assert_eq!(
                    scripts_run(&url),
                    before + 2,
                    "one flight took both batches"
                );
                let after = failed_at.elapsed();
                assert!(
                    after >= Duration::from_millis(750),
                    "the next flight went {after:?} after the failed one"
                );
            });
        });
    }

    #[test]
    fn the_wait_after_failed_flights_doubles_up_to_its_most_less_up_to_half_at_random() {
        let first = Duration::from_millis(25);
        let most = Duration::from_millis(750);
        let wait = |n, jitter| retry_after(first, most, n, jitter);
        assert_eq!(wait(1, 0.0), first);
        assert_eq!(wait(2, 0.0), first * 2);
        assert_eq!(wait(3, 0.0), first * 4);
        assert_eq!(wait(5, 0.0), first * 16);
        assert_eq!(wait(6, 0.0), most, "capped");
        assert_eq!(wait(1_000, 0.0), most, "no overflow");
        assert_eq!(wait(1, 1.0), first / 2, "at most half less");
        assert_eq!(wait(6, 0.5), most.mul_f64(0.75));
        assert_eq!(wait(0, 0.0), first, "as after one");
    }
}
