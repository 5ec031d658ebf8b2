//! The last hour of each queue's numbers for the console's charts: a fixed-size ring of samples
//! per queue. Pure: the caller passes the time and the queue's counters; nothing here reads a
//! clock. Matches per minute is derived from the cumulative `matches_formed` counter of two
//! consecutive samples, so a sample costs no extra bookkeeping in the matchmaker loop.
//!
//! Samples are ordered, windowed and rated on a monotonic clock (the console's), so a wall
//! clock that steps neither drops samples nor empties the window nor skews a rate; the wall
//! clock's time is kept with each sample as its label only.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// What the sampler reads from one queue at one moment (the numbers `GetQueueStats` answers).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub tickets_waiting: u64,
    /// Cumulative since the server started.
    pub matches_formed: u64,
    pub wait_p50_seconds: f64,
    pub wait_p95_seconds: f64,
    pub quality_mean: f64,
    pub skill_window: f64,
    pub starving: bool,
    pub accept_rate: f64,
    pub backfill_fill_p50_seconds: f64,
}

/// One point of a queue's charts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds on the monotonic clock samples are taken on: their order, and what a reader
    /// asks for samples after.
    pub at: f64,
    /// Unix seconds on the wall clock when it was taken: a label, which jumps when the wall
    /// clock steps.
    pub t: f64,
    pub tickets_waiting: u64,
    /// Matches formed per minute since the previous sample (0 for a queue's first sample).
    pub matches_per_minute: f64,
    pub wait_p50_seconds: f64,
    pub wait_p95_seconds: f64,
    pub quality_mean: f64,
    pub skill_window: f64,
    pub starving: bool,
    pub accept_rate: f64,
    pub backfill_fill_p50_seconds: f64,
}

/// One queue's ring.
#[derive(Debug, Default)]
struct Ring {
    samples: VecDeque<Sample>,
    /// The previous reading's monotonic time and counter, for the rate.
    last: Option<(f64, u64)>,
}

/// Every queue's samples over the last `window_seconds`, at most `capacity` per queue.
#[derive(Debug)]
pub struct History {
    capacity: usize,
    window_seconds: f64,
    queues: BTreeMap<String, Ring>,
}

impl History {
    /// A history keeping `window_seconds` of samples taken every `every_seconds`.
    #[must_use]
    pub fn new(window_seconds: f64, every_seconds: f64) -> Self {
        let capacity = (window_seconds / every_seconds.max(0.001)).ceil() as usize + 1;
        Self {
            capacity: capacity.max(2),
            window_seconds,
            queues: BTreeMap::new(),
        }
    }

    /// Most samples kept per queue.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Records `queue`'s reading at `at` on the monotonic clock, labelled with `t`, the wall
    /// clock's Unix seconds. Samples older than the window, and the oldest past the capacity,
    /// are dropped. A reading not after the queue's last one on the monotonic clock is ignored
    /// (time must move forward for a rate); the label may go any way. A counter that went down
    /// (the server's counters restarted) gives a rate of 0 for that sample.
    pub fn record(&mut self, queue: &str, at: f64, t: f64, r: &Reading) {
        let ring = self.queues.entry(queue.to_owned()).or_default();
        let matches_per_minute = match ring.last {
            Some((at0, _)) if at <= at0 => return,
            Some((at0, m0)) => r.matches_formed.saturating_sub(m0) as f64 * 60.0 / (at - at0),
            None => 0.0,
        };
        ring.last = Some((at, r.matches_formed));
        if ring.samples.len() == self.capacity {
            ring.samples.pop_front();
        }
        ring.samples.push_back(Sample {
            at,
            t,
            tickets_waiting: r.tickets_waiting,
            matches_per_minute,
            wait_p50_seconds: r.wait_p50_seconds,
            wait_p95_seconds: r.wait_p95_seconds,
            quality_mean: r.quality_mean,
            skill_window: r.skill_window,
            starving: r.starving,
            accept_rate: r.accept_rate,
            backfill_fill_p50_seconds: r.backfill_fill_p50_seconds,
        });
        let oldest = at - self.window_seconds;
        while ring.samples.front().is_some_and(|s| s.at < oldest) {
            ring.samples.pop_front();
        }
    }

    /// Records `queue`'s reading at `at` (labelled `t`, as [`History::record`]) unless its last
    /// one is less than `every` seconds older: for a console that samples only when a page asks
    /// (a cluster node's, which has no matchmaker loop of its own), however many pages ask.
    /// Whether it recorded.
    pub fn record_due(&mut self, queue: &str, at: f64, t: f64, every: f64, r: &Reading) -> bool {
        let due = self
            .queues
            .get(queue)
            .and_then(|ring| ring.last)
            .is_none_or(|(at0, _)| at - at0 >= every);
        if due {
            self.record(queue, at, t, r);
        }
        due
    }

    /// `queue`'s samples taken after `after` on the monotonic clock (all of them for a
    /// negative `after`), oldest first.
    #[must_use]
    pub fn after(&self, queue: &str, after: f64) -> Vec<Sample> {
        self.queues.get(queue).map_or_else(Vec::new, |ring| {
            // Samples are in time order: skip the old ones from the back's point of view.
            let newer = ring
                .samples
                .iter()
                .rev()
                .take_while(|s| s.at > after)
                .count();
            ring.samples
                .iter()
                .skip(ring.samples.len() - newer)
                .copied()
                .collect()
        })
    }

    /// The queues with samples.
    pub fn queues(&self) -> impl Iterator<Item = &str> {
        self.queues.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(waiting: u64, formed: u64) -> Reading {
        Reading {
            tickets_waiting: waiting,
            matches_formed: formed,
            ..Reading::default()
        }
    }

    #[test]
    fn matches_per_minute_comes_from_the_counter_of_consecutive_samples() {
        let mut h = History::new(3600.0, 10.0);
        h.record("1v1", 100.0, 100.0, &reading(5, 40));
        h.record("1v1", 110.0, 110.0, &reading(6, 50));
        h.record("1v1", 130.0, 130.0, &reading(7, 50));
        let s = h.after("1v1", 0.0);
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0].matches_per_minute, 0.0,
            "no rate without a previous sample"
        );
        assert_eq!(s[1].matches_per_minute, 60.0, "10 matches in 10 s");
        assert_eq!(s[2].matches_per_minute, 0.0);
        assert_eq!(s[2].tickets_waiting, 7);
    }

    #[test]
    fn the_ring_keeps_the_window_and_its_capacity() {
        let mut h = History::new(60.0, 10.0);
        assert_eq!(h.capacity(), 7);
        for i in 0..100 {
            h.record(
                "q",
                f64::from(i) * 10.0,
                f64::from(i) * 10.0,
                &reading(i as u64, 0),
            );
        }
        let s = h.after("q", 0.0);
        assert_eq!(s.len(), 7);
        assert_eq!(s.first().unwrap().t, 930.0);
        assert_eq!(s.last().unwrap().t, 990.0);
        // Samples older than the window go even below the capacity (a gap in sampling).
        h.record("q", 2000.0, 2000.0, &reading(1, 0));
        assert_eq!(h.after("q", 0.0).len(), 1);
    }

    #[test]
    fn after_returns_only_newer_samples_and_time_must_advance() {
        let mut h = History::new(3600.0, 1.0);
        for t in [1.0, 2.0, 3.0, 4.0] {
            h.record("q", t, t, &reading(0, 0));
        }
        h.record("q", 4.0, 4.0, &reading(9, 0));
        h.record("q", 3.5, 3.5, &reading(9, 0));
        let times: Vec<f64> = h.after("q", 2.0).iter().map(|s| s.t).collect();
        assert_eq!(times, [3.0, 4.0]);
        assert!(h.after("q", 4.0).is_empty());
        assert!(h.after("other", 0.0).is_empty());
        assert_eq!(h.queues().collect::<Vec<_>>(), ["q"]);
    }

    #[test]
    fn sampling_on_demand_keeps_one_sample_per_interval() {
        let mut h = History::new(3600.0, 10.0);
        assert!(h.record_due("q", 100.0, 100.0, 10.0, &reading(1, 0)));
        assert!(!h.record_due("q", 105.0, 105.0, 10.0, &reading(2, 5)));
        assert!(h.record_due("other", 105.0, 105.0, 10.0, &reading(3, 0)));
        assert!(h.record_due("q", 110.0, 110.0, 10.0, &reading(4, 10)));
        let s = h.after("q", 0.0);
        assert_eq!(s.iter().map(|s| s.t).collect::<Vec<_>>(), [100.0, 110.0]);
        assert_eq!(s[1].matches_per_minute, 60.0, "10 matches in 10 s");
    }

    /// The wall clock steps back a minute, then forward an hour: every reading is still a
    /// sample, in the order taken, with its rate over the monotonic time between readings, and
    /// the window still holds them all.
    #[test]
    fn a_wall_clock_that_steps_moves_only_the_labels() {
        let mut h = History::new(3600.0, 10.0);
        h.record("q", 0.0, 100.0, &reading(1, 0));
        h.record("q", 10.0, 40.0, &reading(2, 10));
        h.record("q", 20.0, 50.0 + 3600.0, &reading(3, 20));
        let s = h.after("q", -1.0);
        let points: Vec<(f64, f64, f64)> = s
            .iter()
            .map(|s| (s.at, s.t, s.matches_per_minute))
            .collect();
        assert_eq!(
            points,
            [(0.0, 100.0, 0.0), (10.0, 40.0, 60.0), (20.0, 3650.0, 60.0)]
        );
        assert_eq!(h.after("q", 10.0).len(), 1);
        assert!(
            !h.record_due("q", 25.0, 3660.0, 10.0, &reading(4, 25)),
            "due by the monotonic clock"
        );
    }

    #[test]
    fn a_counter_that_restarted_counts_no_matches() {
        let mut h = History::new(3600.0, 1.0);
        h.record("q", 1.0, 1.0, &reading(0, 100));
        h.record("q", 2.0, 2.0, &reading(0, 3));
        assert_eq!(h.after("q", 1.0)[0].matches_per_minute, 0.0);
        h.record("q", 3.0, 3.0, &reading(0, 4));
        assert_eq!(h.after("q", 2.0)[0].matches_per_minute, 60.0);
    }
}
