//! Calls in flight per caller (`[rate_limit.max_in_flight]`), enforced with the rate limit.
//!
//! The rate limit counts calls as they come; this counts those not answered yet. A caller that
//! sends a call's headers and never its message holds a slot of the server-wide concurrency
//! limit until the call's deadline: within its rate alone, a player could hold most of them.
//! A call holds its caller's slot from when it passes the rate-limit layer until its answer
//! starts, as the server-wide limit does, so an open stream (`WatchTicket`, `ServeMatches`,
//! `WatchEvents`) counts only while it opens.
//!
//! Memory bound: a caller has an entry only while it has calls in flight, and every such call
//! holds a slot of the server-wide limit, so the map holds at most
//! `server.max_concurrent_requests` callers.

use std::sync::Arc;

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use super::{Caller, Class};

/// `[rate_limit.max_in_flight]`: calls in flight per caller, by class; 0 = unlimited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InFlightConfig {
    /// Per player token: a game client waits for few calls at once.
    pub player: usize,
    /// Per game-server token: unlimited, as a director reporting for a fleet may have many.
    pub server: usize,
    /// Per admin token: unlimited (trusted operators and tools).
    pub admin: usize,
    /// Per client IP address when auth is off: unlimited, as behind a proxy every caller
    /// shares one address.
    pub anonymous: usize,
}

impl Default for InFlightConfig {
    fn default() -> Self {
        Self {
            player: 16,
            server: 0,
            admin: 0,
            anonymous: 0,
        }
    }
}

/// A call refused because its caller has as many calls in flight as its class allows. Its
/// text is the RESOURCE_EXHAUSTED message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "in-flight limit: {caller} has {limit} calls waiting for their answers \
     (rate_limit.max_in_flight.{}); retry when one is answered",
    class.as_str()
)]
pub struct TooManyInFlight {
    pub caller: String,
    pub class: Class,
    pub limit: usize,
}

/// The calls in flight of every caller whose class has a limit.
#[derive(Debug)]
pub struct InFlight {
    limits: [Option<usize>; 4],
    calls: Arc<DashMap<Caller, usize>>,
}

impl InFlight {
    /// The limits of `config` that can apply (see [`super::RateLimiter::from_config`]).
    pub fn new(config: &InFlightConfig, auth_enabled: bool) -> Self {
        let limit = |n: usize, applies: bool| (applies && n > 0).then_some(n);
        Self {
            limits: [
                limit(config.player, auth_enabled),
                limit(config.server, auth_enabled),
                limit(config.admin, auth_enabled),
                limit(config.anonymous, !auth_enabled),
            ],
            calls: Arc::new(DashMap::new()),
        }
    }

    /// The limit of a class; `None` = unlimited.
    pub fn limit(&self, class: Class) -> Option<usize> {
        self.limits[class.index()]
    }

    /// Whether any class has a limit.
    pub fn any(&self) -> bool {
        self.limits.iter().any(Option::is_some)
    }

    /// Callers with calls in flight now.
    pub fn callers(&self) -> usize {
        self.calls.len()
    }

    /// Counts one more call of `caller`, until the [`Slot`] is dropped; `Ok(None)` for a caller
    /// whose class is unlimited.
    pub fn enter(&self, caller: &Caller) -> Result<Option<Slot>, TooManyInFlight> {
        let class = caller.class();
        let Some(limit) = self.limit(class) else {
            return Ok(None);
        };
        let mut calls = self.calls.entry(caller.clone()).or_insert(0);
        if *calls >= limit {
            return Err(TooManyInFlight {
                caller: caller.to_string(),
                class,
                limit,
            });
        }
        *calls += 1;
        Ok(Some(Slot {
            calls: self.calls.clone(),
            caller: caller.clone(),
        }))
    }
}

/// One call in flight; dropping it ends the call's count.
#[derive(Debug)]
pub struct Slot {
    calls: Arc<DashMap<Caller, usize>>,
    caller: Caller,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // The last call of a caller takes its entry with it.
        self.calls.remove_if_mut(&self.caller, |_, calls| {
            *calls = calls.saturating_sub(1);
            *calls == 0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;

    fn player(sub: &str) -> Caller {
        Caller::Subject {
            role: Role::Player,
            sub: sub.into(),
        }
    }

    #[test]
    fn a_caller_has_its_limit_of_calls_in_flight_and_a_slot_comes_back_when_one_ends() {
        let limits = InFlight::new(
            &InFlightConfig {
                player: 2,
                ..InFlightConfig::default()
            },
            true,
        );
        let first = limits.enter(&player("p1")).unwrap();
        let second = limits.enter(&player("p1")).unwrap();
        assert!(first.is_some() && second.is_some());
        let refused = limits.enter(&player("p1")).unwrap_err();
        assert_eq!(refused.class, Class::Player);
        assert_eq!(
            refused.to_string(),
            "in-flight limit: player p1 has 2 calls waiting for their answers \
             (rate_limit.max_in_flight.player); retry when one is answered"
        );
        // Another player has its own count.
        let other = limits.enter(&player("p2")).unwrap();
        assert_eq!(limits.callers(), 2);
        drop(first);
        let third = limits.enter(&player("p1")).expect("a slot came back");
        assert!(limits.enter(&player("p1")).is_err());
        drop((second, third, other));
        assert_eq!(limits.callers(), 0, "callers without calls hold no entry");
    }

    #[test]
    fn unlimited_classes_are_not_counted() {
        let limits = InFlight::new(&InFlightConfig::default(), true);
        let server = Caller::Subject {
            role: Role::Server,
            sub: "gs-1".into(),
        };
        let held: Vec<_> = (0..100).map(|_| limits.enter(&server).unwrap()).collect();
        assert!(held.iter().all(Option::is_none));
        assert_eq!(limits.callers(), 0);
        // Without auth only `anonymous` can apply, and it is unlimited by default.
        assert!(!InFlight::new(&InFlightConfig::default(), false).any());
        assert!(InFlight::new(&InFlightConfig::default(), true).any());
    }
}
