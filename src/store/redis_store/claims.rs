//! Claims on players across shards. With the queues split over shards, each shard's engine
//! knows only its own players' whereabouts, so a player could wait in a queue of one shard and
//! play in a match of another. A claim key per player (`{HOME~PLAYER}:claim`, its own slot on a
//! Redis Cluster) says which shard holds the player (`SHARD|TOKEN`, the token of the lease it
//! was claimed under): a shard claims each player before it queues them, and gives the claim
//! up once the player is idle there again (see `state::claims`). A newer owner's claims are
//! never given up or overwritten by an older owner of the same shard (a stalled node): the
//! token decides. Each shard also keeps the players it may hold a claim on (`{SHARD}:claimed`,
//! joined before a claim is made and left after it is given up), so a new owner finds the
//! claims an earlier one left.

use ::redis::Script;

use super::{RedisStore, redis_error};
use crate::ids::PlayerId;
use crate::store::event_clock::EventClock;
use crate::store::{Claim, StoreError};

/// Claims `KEYS[1]` for shard `ARGV[1]` under token `ARGV[2]`, the deployment's shards being
/// `ARGV[3..]`: `{1}` newly (a claim of a shard no longer configured is taken over), `{0}`
/// already this shard's (now under this token), `{-1, SHARD}` another shard's, `{-2}` this
/// shard's under a newer token (this store's owner is stale).
const CLAIM: &str = r"
local mine = ARGV[1] .. '|' .. ARGV[2]
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], mine)
  return {1, ''}
end
local shard, token = string.match(v, '^(.*)|(%d+)$')
if shard ~= ARGV[1] then
  for i = 3, #ARGV do
    if ARGV[i] == shard then return {-1, shard} end
  end
  redis.call('SET', KEYS[1], mine)
  return {1, ''}
end
if tonumber(token) > tonumber(ARGV[2]) then return {-2, ''} end
if v ~= mine then redis.call('SET', KEYS[1], mine) end
return {0, ''}
";

/// Deletes `KEYS[1]` if shard `ARGV[1]` holds it under a token no newer than `ARGV[2]`: `1`
/// deleted, `0` not this shard's, `-1` this shard's under a newer token (it stays indexed).
const RELEASE: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local shard, token = string.match(v, '^(.*)|(%d+)$')
if shard ~= ARGV[1] then return 0 end
if tonumber(token) > tonumber(ARGV[2]) then return -1 end
redis.call('DEL', KEYS[1])
return 1
";

/// How many claim keys [`RedisStore::held`] reads at once.
const HELD_IN_FLIGHT: usize = 64;

/// The claim key of `player` in the deployment whose home shard is `home`.
pub(super) fn claim_key(home: &str, player: &PlayerId) -> String {
    format!("{{{home}~{player}}}:claim")
}

impl RedisStore {
    /// Makes this store claim the players it queues, in the deployment whose shards are in
    /// `keyspaces`, the home shard's first (a cluster with several shards). Set once, before
    /// the engine runs.
    /// Its events then take cursors that compare across the shards ([`EventClock`]).
    pub fn claim_across(&self, keyspaces: &[String]) {
        let _ = self.claims.set(keyspaces.to_vec());
        if let Some(shard) = keyspaces.iter().position(|k| k == self.keys.keyspace()) {
            let now = self.event_ms();
            let mut data = self.mirror.data();
            let last = data.admin.last_event;
            data.admin.clock = Some(EventClock::new(shard, now, last));
            drop(data);
            // An older build must not own a keyspace whose cursors it would misread.
            super::format::mark(self, super::format::SHARDED);
        }
    }

    fn index_key(&self) -> String {
        format!("{{{}}}:claimed", self.keys.keyspace())
    }

    async fn index(&self, command: &str, players: &[PlayerId]) -> Result<(), StoreError> {
        if players.is_empty() {
            return Ok(());
        }
        let mut cmd = ::redis::cmd(command);
        cmd.arg(self.index_key());
        for p in players {
            cmd.arg(p.as_str());
        }
        let _: i64 = cmd
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_error(&self.url))?;
        Ok(())
    }

    pub(super) async fn claim(&self, players: &[PlayerId]) -> Result<Claim, StoreError> {
        let Some(home) = self.claims.get().and_then(|k| k.first()) else {
            return Ok(Claim::Claimed(Vec::new()));
        };
        let shards = self.claims.get().map_or(&[][..], Vec::as_slice);
        self.check_fence()?;
        self.index("SADD", players).await?;
        let shard = self.keys.keyspace();
        let mut newly = Vec::new();
        for player in players {
            let script = Script::new(CLAIM);
            let mut invocation = script.key(claim_key(home, player));
            invocation.arg(shard).arg(self.token);
            for known in shards {
                invocation.arg(known);
            }
            let (outcome, other): (i64, String) = invocation
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            // What this call claimed before a refusal stays claimed: another entry of the same
            // player may rely on it by now. The engine gives it up once the player is idle.
            match outcome {
                1 => newly.push(player.clone()),
                0 => {}
                -1 => {
                    return Ok(Claim::Elsewhere {
                        player: player.clone(),
                        keyspace: other,
                    });
                }
                _ => return Err(StoreError::Fenced),
            }
        }
        Ok(Claim::Claimed(newly))
    }

    pub(super) async fn release(&self, players: &[PlayerId]) -> Result<(), StoreError> {
        let Some(home) = self.claims.get().and_then(|k| k.first()) else {
            return Ok(());
        };
        // A store whose owner lost the lease gives nothing up: the next owner decides.
        self.check_fence()?;
        let shard = self.keys.keyspace();
        let mut unindexed = Vec::with_capacity(players.len());
        for player in players {
            let released: i64 = Script::new(RELEASE)
                .key(claim_key(home, player))
                .arg(shard)
                .arg(self.token)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            if released >= 0 {
                unindexed.push(player.clone());
            }
        }
        self.index("SREM", &unindexed).await
    }

    /// Those of `players` whose claim key names a shard of the deployment. One GET per
    /// player, each key in its own slot on a Redis Cluster (a pipeline there must keep to one
    /// slot), [`HELD_IN_FLIGHT`] at a time on the one multiplexed connection.
    pub(super) async fn held(&self, players: &[PlayerId]) -> Result<Vec<PlayerId>, StoreError> {
        let Some(shards) = self.claims.get() else {
            return Ok(Vec::new());
        };
        let Some(home) = shards.first() else {
            return Ok(Vec::new());
        };
        let mut held = Vec::new();
        for chunk in players.chunks(HELD_IN_FLIGHT) {
            let mut gets = tokio::task::JoinSet::new();
            for (i, player) in chunk.iter().enumerate() {
                let mut conn = self.conn.clone();
                let key = claim_key(home, player);
                gets.spawn(async move {
                    let value: Option<String> =
                        ::redis::cmd("GET").arg(key).query_async(&mut conn).await?;
                    Ok::<_, ::redis::RedisError>((i, value))
                });
            }
            let mut found = Vec::new();
            while let Some(got) = gets.join_next().await {
                let (i, value) = got?.map_err(redis_error(&self.url))?;
                // A claim of a shard no longer configured holds nobody: the next claim takes
                // it over.
                let shard = value
                    .as_deref()
                    .and_then(|v| v.rsplit_once('|'))
                    .map(|(s, _)| s);
                if shard.is_some_and(|s| shards.iter().any(|k| k == s)) {
                    found.push(i);
                }
            }
            found.sort_unstable();
            held.extend(found.into_iter().map(|i| chunk[i].clone()));
        }
        Ok(held)
    }

    pub(super) async fn claimed(&self) -> Result<Vec<PlayerId>, StoreError> {
        if self.claims.get().is_none() {
            return Ok(Vec::new());
        }
        // In steps, so that a large index never holds Redis for long.
        let mut players = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, step): (u64, Vec<String>) = ::redis::cmd("SSCAN")
                .arg(self.index_key())
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(redis_error(&self.url))?;
            players.extend(step.into_iter().map(PlayerId::new));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        players.sort_unstable();
        players.dedup();
        Ok(players)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Storage;
    use crate::store::contract::with_redis;
    use crate::store::redis_store::{Keys, RedisOptions};

    fn connect(url: &str) -> ::redis::Connection {
        ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Makes `player` claimed by a shard the deployment no longer has.
    fn claimed_by_a_removed_shard(url: &str, player: &PlayerId) {
        let () = ::redis::cmd("SET")
            .arg(claim_key("mm", player))
            .arg("gone|4")
            .query(&mut connect(url))
            .unwrap();
    }

    /// The store of the shard in `keyspace` under `token`, claiming in home shard `mm`.
    fn shard(
        runtime: &tokio::runtime::Handle,
        url: &str,
        keyspace: &str,
        token: u64,
    ) -> RedisStore {
        let () = ::redis::cmd("SET")
            .arg(format!("{{{keyspace}}}:lease"))
            .arg(format!("{token}|n|127.0.0.1:1"))
            .query(&mut connect(url))
            .unwrap();
        let options = RedisOptions {
            keys: Keys::new(keyspace),
            ..RedisOptions::default()
        };
        let store = runtime
            .block_on(RedisStore::open(url, token, &options))
            .unwrap();
        store.claim_across(&["mm".to_string(), "eu".to_string()]);
        store
    }

    #[test]
    fn one_shard_at_a_time_holds_a_player_and_a_newer_owner_s_claim_outlives_the_older_s() {
        with_redis(|server, runtime| {
            let url = server.url();
            let run = |f: crate::store::StoreFuture<'_, Claim>| runtime.block_on(f);
            let home = shard(&runtime, &url, "mm", 3);
            let eu = shard(&runtime, &url, "eu", 5);
            let (p, q) = (PlayerId::new("p"), PlayerId::new("q"));
            assert!(home.claims_players());
            assert_eq!(
                run(home.claim_players(std::slice::from_ref(&p))).unwrap(),
                Claim::Claimed(vec![p.clone()])
            );
            assert_eq!(
                run(home.claim_players(std::slice::from_ref(&p))).unwrap(),
                Claim::Claimed(vec![]),
                "already this shard's"
            );
            let elsewhere = Claim::Elsewhere {
                player: p.clone(),
                keyspace: "mm".into(),
            };
            assert_eq!(
                run(eu.claim_players(std::slice::from_ref(&p))).unwrap(),
                elsewhere
            );
            // A party: what it claimed before a member held elsewhere stays claimed (another
            // entry of q's may rely on it) until given up, once q is idle there.
            assert_eq!(
                run(eu.claim_players(&[q.clone(), p.clone()])).unwrap(),
                elsewhere
            );
            assert_eq!(
                run(home.claim_players(std::slice::from_ref(&q))).unwrap(),
                Claim::Elsewhere {
                    player: q.clone(),
                    keyspace: "eu".into()
                }
            );
            runtime
                .block_on(eu.release_claims(std::slice::from_ref(&q)))
                .unwrap();
            assert_eq!(
                run(home.claim_players(std::slice::from_ref(&q))).unwrap(),
                Claim::Claimed(vec![q.clone()])
            );
            runtime
                .block_on(home.release_claims(&[p.clone(), q.clone()]))
                .unwrap();
            assert_eq!(runtime.block_on(home.claimed_players()).unwrap(), vec![]);
            assert_eq!(
                run(eu.claim_players(std::slice::from_ref(&p))).unwrap(),
                Claim::Claimed(vec![p.clone()])
            );
            assert_eq!(
                runtime.block_on(eu.claimed_players()).unwrap(),
                vec![p.clone()]
            );

            // A claim of a shard no longer configured is taken over.
            let r = PlayerId::new("r");
            claimed_by_a_removed_shard(&url, &r);
            assert_eq!(
                run(eu.claim_players(std::slice::from_ref(&r))).unwrap(),
                Claim::Claimed(vec![r.clone()])
            );

            // A newer owner of shard eu takes the claim over; the older one can neither give it
            // up nor claim under it any more.
            let newer = shard(&runtime, &url, "eu", 9);
            assert_eq!(
                run(newer.claim_players(std::slice::from_ref(&p))).unwrap(),
                Claim::Claimed(vec![])
            );
            runtime
                .block_on(eu.release_claims(std::slice::from_ref(&p)))
                .unwrap();
            assert!(
                runtime
                    .block_on(newer.claimed_players())
                    .unwrap()
                    .contains(&p),
                "still indexed for the newer owner"
            );
            assert_eq!(
                run(home.claim_players(std::slice::from_ref(&p))).unwrap(),
                Claim::Elsewhere {
                    player: p.clone(),
                    keyspace: "eu".into()
                }
            );
            assert!(matches!(
                run(eu.claim_players(std::slice::from_ref(&p))),
                Err(StoreError::Fenced)
            ));
            runtime
                .block_on(newer.release_claims(std::slice::from_ref(&p)))
                .unwrap();
            assert_eq!(
                run(home.claim_players(std::slice::from_ref(&p))).unwrap(),
                Claim::Claimed(vec![p])
            );
        });
    }

    #[test]
    fn a_shards_events_take_cursors_of_its_clock_that_stay_above_what_it_closed() {
        use crate::store::{AdminRecords, EventKind, EventRecord};
        with_redis(|server, runtime| {
            let url = server.url();
            let event = |player: &str| EventRecord {
                kind: EventKind::PlayerBanned,
                unix: 1.0,
                match_id: String::new(),
                player_id: player.into(),
                detail_json: String::new(),
            };
            let home = shard(&runtime, &url, "mm", 3);
            let eu = shard(&runtime, &url, "eu", 5);
            let a = home.append_events(&[event("a"), event("b")]).unwrap();
            let c = eu.append_events(&[event("c")]).unwrap();
            // Each shard's cursors end in its number, so no two shards give the same one.
            let kept = home.events_after(0, 10).unwrap();
            let cursors: Vec<u64> = kept.iter().map(|(c, _)| *c).collect();
            assert_eq!(cursors.len(), 2);
            assert!(cursors[0] < cursors[1] && cursors[1] == a);
            assert!(cursors.iter().all(|c| c & 0xF == 0), "{cursors:?}");
            assert_eq!(c & 0xF, 1);
            // Closed past its last event; the next one comes after what it closed.
            let closed = eu.events_closed().unwrap();
            assert!(closed >= c);
            let d = eu.append_events(&[event("d")]).unwrap();
            assert!(d > closed);
            let e = eu.append_events(&[event("e")]).unwrap();
            assert!(e > d);
            assert_eq!(
                eu.events_before(e, 2)
                    .unwrap()
                    .iter()
                    .map(|(c, _)| *c)
                    .collect::<Vec<_>>(),
                vec![d, c],
                "newest first"
            );
            // What trimming dropped is kept across owners, though cursors have gaps.
            assert_eq!(eu.events_trimmed_through().unwrap(), 0);
            assert_eq!(eu.trim_events(0.0, 1).unwrap(), 2);
            assert_eq!(eu.events_trimmed_through().unwrap(), d);
            runtime.block_on(eu.flush_async()).unwrap();
            let next = shard(&runtime, &url, "eu", 6);
            assert_eq!(next.events_trimmed_through().unwrap(), d);
            assert_eq!(next.events_after(0, 10).unwrap().len(), 1);
            let f = next.append_events(&[event("f")]).unwrap();
            assert!(f > e && f & 0xF == 1);
        });
    }

    #[test]
    fn another_shard_reads_the_home_shard_s_rosters_and_every_shard_s_claims() {
        use crate::ids::PartyId;
        use crate::records::PartyRoster;
        use crate::store::RecordStorage;
        with_redis(|server, runtime| {
            let url = server.url();
            let home = shard(&runtime, &url, "mm", 3);
            let eu = shard(&runtime, &url, "eu", 5);
            let roster = PartyRoster {
                party_id: PartyId::new("party-1"),
                invite_code: "ABCDEFGH".into(),
                members: vec![PlayerId::new("lead"), PlayerId::new("mate")],
                leader: PlayerId::new("lead"),
                created_unix: 1.0,
                active_unix: 2.0,
            };
            home.put_rosters(&[&roster]).unwrap();
            let id = roster.party_id.clone();
            assert_eq!(
                runtime.block_on(eu.home_roster(&id)).unwrap(),
                None,
                "not flushed yet: not acknowledged either"
            );
            runtime.block_on(home.flush_async()).unwrap();
            assert_eq!(
                runtime.block_on(eu.home_roster(&id)).unwrap(),
                Some(roster.clone())
            );
            assert_eq!(
                runtime.block_on(home.home_roster(&id)).unwrap(),
                None,
                "the home shard's rosters are its state's own"
            );
            let unknown = PartyId::new("party-none");
            assert_eq!(runtime.block_on(eu.home_roster(&unknown)).unwrap(), None);
            // An entry in shard eu is noted for the home shard, with a time to live; the home
            // shard's own entries are its state's.
            let keep = std::time::Duration::from_secs(60);
            runtime.block_on(eu.note_party_entry(&id, keep)).unwrap();
            runtime
                .block_on(home.note_party_entry(&unknown, keep))
                .unwrap();
            let entered = runtime
                .block_on(home.parties_entered(&[unknown.clone(), id.clone()]))
                .unwrap();
            assert_eq!(entered[0], None);
            let at = entered[1].expect("noted");
            assert!((at - home.now_unix()).abs() < 5.0, "{at}");
            let ttl: i64 = ::redis::cmd("PTTL")
                .arg(Keys::new("mm").party_entered(&id))
                .query(&mut connect(&url))
                .unwrap();
            assert!((1..=60_000).contains(&ttl), "{ttl}");
            home.remove_rosters(std::slice::from_ref(&id)).unwrap();
            runtime.block_on(home.flush_async()).unwrap();
            assert_eq!(runtime.block_on(eu.home_roster(&id)).unwrap(), None);

            // Held: by either shard; not by a shard no longer configured, nor by none.
            let [p, q, r, s] = ["p", "q", "r", "s"].map(PlayerId::new);
            runtime
                .block_on(eu.claim_players(std::slice::from_ref(&p)))
                .unwrap();
            runtime
                .block_on(home.claim_players(std::slice::from_ref(&q)))
                .unwrap();
            claimed_by_a_removed_shard(&url, &r);
            let asked = [s.clone(), p.clone(), r.clone(), q.clone()];
            for store in [&home, &eu] {
                assert_eq!(
                    runtime.block_on(store.players_held(&asked)).unwrap(),
                    vec![p.clone(), q.clone()]
                );
            }
            // More players than are read at once, in their order.
            let many: Vec<PlayerId> = (0..HELD_IN_FLIGHT * 2 + 3)
                .map(|i| PlayerId::new(format!("m{i}")))
                .collect();
            let every_third: Vec<PlayerId> = many.iter().step_by(3).cloned().collect();
            runtime.block_on(eu.claim_players(&every_third)).unwrap();
            assert_eq!(
                runtime.block_on(home.players_held(&many)).unwrap(),
                every_third
            );
            runtime
                .block_on(eu.release_claims(std::slice::from_ref(&p)))
                .unwrap();
            assert_eq!(
                runtime.block_on(home.players_held(&asked)).unwrap(),
                vec![q]
            );

            // A store that claims nothing (one shard) reads neither.
            let options = RedisOptions {
                keys: Keys::new("solo"),
                ..RedisOptions::default()
            };
            let () = ::redis::cmd("SET")
                .arg("{solo}:lease")
                .arg("1|n|127.0.0.1:1")
                .query(&mut connect(&url))
                .unwrap();
            let solo = runtime
                .block_on(RedisStore::open(&url, 1, &options))
                .unwrap();
            assert!(
                runtime
                    .block_on(solo.players_held(&asked))
                    .unwrap()
                    .is_empty()
            );
            home.put_rosters(&[&roster]).unwrap();
            runtime.block_on(home.flush_async()).unwrap();
            assert_eq!(runtime.block_on(solo.home_roster(&id)).unwrap(), None);
        });
    }
}
