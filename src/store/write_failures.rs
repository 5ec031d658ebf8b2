//! Failed store writes: what `matchmaker_store_errors_total` counts, and how often the log of a
//! write that fails on every pass says so.

use std::time::Duration;

use super::StoreError;

/// Counts a failed store write of `op` in [`crate::telemetry::STORE_ERRORS`], unless it was refused because
/// another node holds the lease now (fenced): the normal end of an owner that lost its lease,
/// not a store failure, as the result journal treats it. Whether it was counted, so the caller
/// logs a counted one as an error and a fenced one as a warning ([`log_store_write_failure!`]).
pub fn store_write_failed(op: &'static str, e: &StoreError) -> bool {
    if matches!(e, StoreError::Fenced) {
        return false;
    }
    crate::telemetry::store_error(op);
    true
}

/// Counts a failed store write of `op` and logs it, at error with the count, or at warn with
/// `fenced = true` and no count when another node holds the lease:
/// `log_store_write_failure!("events", e, events = n, "events not written")`.
macro_rules! log_store_write_failure {
    ($op:expr, $e:expr, $($rest:tt)+) => {{
        let e = &$e;
        if $crate::store::write_failures::store_write_failed($op, e) {
            ::tracing::error!(error = %e, $($rest)+);
        } else {
            ::tracing::warn!(error = %e, fenced = true, $($rest)+);
        }
    }};
}
pub(crate) use log_store_write_failure;

/// How often a failure that repeats on every pass is logged (with [`crate::telemetry::LogLimit`]): a
/// flush of the embedded store that failed once fails for good, and a writer that tries on
/// every pass would otherwise log it on every pass until the restart.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;

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
                .filter(|l| l.starts_with(crate::telemetry::STORE_ERRORS) && l.contains("events"))
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
