//! Waiting tickets and live matches a new owner of a cluster's queues restores from Redis,
//! against a real Redis whose clock (as the stores read it) is an hour behind this machine's.

use std::sync::Arc;

use super::test_util::enter;
use super::{Clock, Command, Loop};
use crate::ids::{PlayerId, TicketId};
use crate::state::{State, TicketState};
use crate::store::{Keys, RedisOptions, RedisServer, RedisStore, Storage, StoredTicket};

/// Seconds this machine's clock is ahead of Redis's in these tests.
const AHEAD: f64 = 3600.0;

async fn redis(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The store of the owner holding token `token`, on a Redis whose clock is [`AHEAD`] behind.
async fn owner(url: &str, token: u64) -> Arc<RedisStore> {
    let () = redis::cmd("SET")
        .arg(Keys::default().lease())
        .arg(format!("{token}|node-{token}|127.0.0.1:1"))
        .query_async(&mut redis(url).await)
        .await
        .unwrap();
    let store = RedisStore::open(url, token, &RedisOptions::default())
        .await
        .unwrap();
    store.shift_clock(-AHEAD);
    Arc::new(store)
}

fn state_on(store: Arc<RedisStore>) -> State {
    let config = Arc::new(crate::config::Config::from_toml_str("").unwrap());
    State::load(config, store).unwrap()
}

/// Redis's Unix seconds now as the stores read them (with the tests' shift).
async fn redis_now(url: &str) -> f64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut redis(url).await)
        .await
        .unwrap();
    seconds as f64 + micros as f64 / 1e6 - AHEAD
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_ticket_is_stamped_and_restored_on_redis_clock_whatever_the_nodes_clock_says() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();

    // The first owner stamps an entry with Redis's time, not this node's wall clock.
    let first = owner(&url, 1).await;
    let mut lp = Loop::new(state_on(first.clone()), Clock::start(), Vec::new());
    let before = redis_now(&url).await;
    let entered = enter(&mut lp, "p1").await;
    let after = redis_now(&url).await;
    let raw: String = redis::cmd("HGET")
        .arg(Keys::default().tickets())
        .arg(entered.as_str())
        .query_async(&mut redis(&url).await)
        .await
        .unwrap();
    let stamped: StoredTicket = serde_json::from_str(&raw).unwrap();
    assert!(
        (before - 1.0..=after + 1.0).contains(&stamped.entered_unix),
        "stamped {} on Redis's clock, which read {before}..{after}",
        stamped.entered_unix
    );
    // Another, stamped by that owner half a minute earlier.
    let earlier = StoredTicket {
        ticket_id: TicketId::new("t-p2"),
        players: vec![PlayerId::new("p2")],
        entered_unix: first.now_unix() - 30.0,
        ..stamped
    };
    first.put_ticket(&earlier).unwrap();
    first.flush_async().await.unwrap();
    drop(lp);

    // The next owner's own clock is an hour ahead of Redis's too: the waits it restores are
    // the ones Redis's clock measures, and its first tick expires neither ticket.
    let next = owner(&url, 2).await;
    let state = state_on(next);
    let clock = Clock::start();
    let mut lp = Loop::new(state.clone(), clock.clone(), Vec::new());
    let restored = state.restore_tickets(clock.now()).unwrap();
    let waits: Vec<(String, f64)> = restored
        .iter()
        .map(|(slot, entry)| (slot.id.to_string(), clock.now() - entry.entered_at))
        .collect();
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert_eq!(waits[0].0, "t-p2", "oldest first: {waits:?}");
    assert!((30.0..35.0).contains(&waits[0].1), "{waits:?}");
    assert!((0.0..5.0).contains(&waits[1].1), "{waits:?}");
    for (ticket, entry) in restored {
        lp.handle(Command::Enter { ticket, entry });
    }
    lp.tick();
    for id in ["t-p1", "t-p2"] {
        let view = state.ticket(&TicketId::new(id)).unwrap().view();
        assert_ne!(view.state, TicketState::Expired, "{id}: {view:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_match_is_dated_and_restored_on_redis_clock_whatever_the_nodes_clock_says() {
    let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();

    // The first owner forms a match and a game server takes it.
    let first = owner(&url, 1).await;
    let state = state_on(first.clone());
    let (_assignments, _) = state.register_server("gs-1:7777".into(), String::new(), 0);
    let mut lp = Loop::new(state.clone(), Clock::start(), Vec::new());
    let before = redis_now(&url).await;
    enter(&mut lp, "m1").await;
    enter(&mut lp, "m2").await;
    lp.tick();
    let after = redis_now(&url).await;
    let m = state
        .ticket(&TicketId::new("t-m1"))
        .unwrap()
        .view()
        .assignment
        .expect("m1 and m2 meet")
        .match_id
        .clone();
    let formed = state.match_slot(&m).unwrap().formed_unix;
    assert!(
        (before - 1.0..=after + 1.0).contains(&formed),
        "formed at {formed} on Redis's clock, which read {before}..{after}"
    );
    first.flush_async().await.unwrap();
    drop(lp);

    // The next owner's own clock is an hour ahead of Redis's: the match it restores is as old
    // as Redis's clock says, not an hour older (which the match timeout would end at once).
    let next = owner(&url, 2).await;
    let state = state_on(next);
    let clock = Clock::start();
    let (_, restored, _) = state.recover(clock.now()).unwrap();
    let ages: Vec<f64> = restored.iter().map(|r| clock.now() - r.formed_at).collect();
    assert_eq!(restored.len(), 1, "{ages:?}");
    assert_eq!(restored[0].id, m);
    assert!((0.0..5.0).contains(&ages[0]), "{ages:?}");
}
