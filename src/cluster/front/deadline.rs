//! A forwarded call's time: how long it may wait for an owner, how long it may take in all, and
//! the `grpc-timeout` each hop is given (a little less than the caller's, so that the caller
//! gets this node's reason rather than its own timer's).

use std::time::Duration;

use tonic::codegen::http;

/// How long a call may wait for an owner: the node's patience, or less when the caller's
/// deadline comes first. Then a little less than the deadline, so that the caller gets this
/// node's UNAVAILABLE (its reason, and a code clients retry) rather than racing its own timer
/// for the same instant: a twentieth of the deadline, at most 100 ms.
pub(super) fn patience(caller: Option<Duration>, node: Duration) -> Duration {
    match caller {
        Some(t) if t <= node => t - margin(t),
        _ => node,
    }
}

/// How long a call may take in all: the caller's deadline or the server's request timeout,
/// whichever is shorter, less a margin (see [`patience`]).
pub(super) fn budget(caller: Option<Duration>, server: Duration) -> Duration {
    let t = caller.map_or(server, |c| c.min(server));
    t - margin(t)
}

/// How much sooner than a deadline of `t` the next hop is told to give up: a twentieth of
/// it, at most 100 ms.
pub(super) fn margin(t: Duration) -> Duration {
    (t / 20).min(Duration::from_millis(100))
}

/// The caller's `grpc-timeout`, if it sent one.
pub(super) fn caller_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `left` as a `grpc-timeout` value: whole milliseconds, at least one, at most the eight
/// digits the header allows.
pub(super) fn grpc_timeout(left: Duration) -> http::HeaderValue {
    let ms = left.as_millis().clamp(1, 99_999_999);
    http::HeaderValue::from_str(&format!("{ms}m")).unwrap_or(http::HeaderValue::from_static("1m"))
}
