//! Failed store writes: what `matchmaker_store_errors_total` counts, and a throttle for the log
//! of a write that fails on every pass.

use std::time::{Duration, Instant};

use crate::store::StoreError;

/// Counts a failed store write of `op` in [`super::STORE_ERRORS`], unless it was refused because
/// another node holds the lease now (fenced): the normal end of an owner that lost its lease,
/// not a store failure, as the result journal treats it. Whether it was counted, so the caller
/// logs a counted one as an error and a fenced one as a warning ([`log_store_write_failure!`]).
pub fn store_write_failed(op: &'static str, e: &StoreError) -> bool {
    if matches!(e, StoreError::Fenced) {
        return false;
    }
    super::store_error(op);
    true
}

/// Counts a failed store write of `op` and logs it, at error with the count, or at warn with
/// `fenced = true` and no count when another node holds the lease:
/// `log_store_write_failure!("events", e, events = n, "events not written")`.
macro_rules! log_store_write_failure {
    ($op:expr, $e:expr, $($rest:tt)+) => {{
        let e = &$e;
        if $crate::telemetry::store_errors::store_write_failed($op, e) {
            ::tracing::error!(error = %e, $($rest)+);
        } else {
            ::tracing::warn!(error = %e, fenced = true, $($rest)+);
        }
    }};
}
pub(crate) use log_store_write_failure;

/// How often a failure that repeats on every pass is logged.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// Logs a repeating failure the first time and then at most every [`LOG_EVERY`]: a flush of the
/// embedded store that failed once fails for good, and a writer that tries on every pass would
/// otherwise log it on every pass until the restart.
#[derive(Debug, Default)]
pub struct LogThrottle {
    last: Option<Instant>,
    /// Failures not logged since the last one that was.
    suppressed: u64,
}

impl LogThrottle {
    /// Whether a failure at `now` is logged: `Some` with the failures left unlogged since the
    /// last one logged, or `None` (counted among them).
    pub fn log_at(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < LOG_EVERY)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeating_failure_is_logged_once_then_at_most_every_minute_with_what_was_left_out() {
        let mut throttle = LogThrottle::default();
        let start = Instant::now();
        assert_eq!(throttle.log_at(start), Some(0));
        for s in 1..60 {
            assert_eq!(throttle.log_at(start + Duration::from_secs(s)), None);
        }
        assert_eq!(throttle.log_at(start + LOG_EVERY), Some(59));
        assert_eq!(throttle.log_at(start + LOG_EVERY), None);
        assert_eq!(throttle.log_at(start + 2 * LOG_EVERY), Some(1));
    }

    #[test]
    fn a_fenced_write_is_not_counted_and_any_other_failure_is() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let _local = metrics::set_default_local_recorder(&recorder);
        assert!(!store_write_failed("events", &StoreError::Fenced));
        let counted = |recorder: &metrics_exporter_prometheus::PrometheusRecorder| {
            recorder
                .handle()
                .render()
                .lines()
                .filter(|l| l.starts_with(super::super::STORE_ERRORS) && l.contains("events"))
                .map(|l| l.rsplit(' ').next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert!(counted(&recorder).is_empty());
        assert!(store_write_failed(
            "events",
            &StoreError::NotYet("x".into())
        ));
        assert_eq!(counted(&recorder), ["1"]);
    }
}
