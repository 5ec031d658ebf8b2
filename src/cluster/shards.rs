//! Shards: the queues split over several leases (`[[cluster.shards]]`), so that several nodes
//! run queues' optimizers at once. Each shard is a keyspace of its own with its own lease,
//! fence and engine, which knows only the shard's queues; the queues no shard names stay in
//! `cluster.keyspace`, the home shard. Which shard serves a call is read from the call:
//! the queue it names, or the shard a ticket or match id names (ids minted outside the home
//! shard carry their shard, [`crate::ids::new_tagged_id`]).

use std::collections::HashMap;

use prost::Message;

use crate::config::Config;
use crate::proto;

/// Each shard's config as its node part and engine see it, the home shard's first: the
/// shard's keyspace, its queues only, and the tag its ids carry.
pub fn shard_configs(config: &Config) -> Vec<Config> {
    config
        .cluster
        .keyspaces()
        .into_iter()
        .map(|keyspace| config.shard(keyspace))
        .collect()
}

/// Where `config` keeps each queue's and rating pool's records: fields `queue:NAME` and
/// `pool:NAME`, each with the keyspace of the shard that runs it (see
/// [`crate::store::check_placement`]).
pub fn placements(config: &Config) -> Vec<(String, String)> {
    let mut queues = Vec::new();
    let mut pools = std::collections::BTreeMap::new();
    for (name, queue) in &config.queues {
        let keyspace = config.cluster.keyspace_of(name).to_string();
        let pool = queue.rating_pool.as_deref().unwrap_or(name);
        pools.insert(format!("pool:{pool}"), keyspace.clone());
        queues.push((format!("queue:{name}"), keyspace));
    }
    queues.extend(pools);
    queues
}

/// Where a call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// One shard's engine, by its place in [`Shards`] (0 is the home shard).
    Shard(usize),
    /// Every shard's: the call is about no one queue (a player, the whole deployment).
    Every,
}

/// The shards a node serves, and which holds each queue.
#[derive(Clone, Debug)]
pub struct Shards {
    keyspaces: Vec<String>,
    queues: HashMap<String, usize>,
}

impl Shards {
    /// The shards of `config`, the home shard first.
    pub fn new(config: &Config) -> Self {
        let keyspaces: Vec<String> = config
            .cluster
            .keyspaces()
            .into_iter()
            .map(str::to_string)
            .collect();
        let queues = config
            .queues
            .keys()
            .map(|queue| {
                let keyspace = config.cluster.keyspace_of(queue);
                let at = keyspaces.iter().position(|k| k == keyspace).unwrap_or(0);
                (queue.clone(), at)
            })
            .collect();
        Self { keyspaces, queues }
    }

    /// How many shards there are.
    pub fn len(&self) -> usize {
        self.keyspaces.len()
    }

    /// Whether there are none (never: the home shard is always there).
    pub fn is_empty(&self) -> bool {
        self.keyspaces.is_empty()
    }

    /// Shard `shard`'s keyspace.
    pub fn keyspace(&self, shard: usize) -> &str {
        self.keyspaces.get(shard).map_or("?", String::as_str)
    }

    /// The shard of `keyspace`, when it is one of these.
    pub fn by_keyspace(&self, keyspace: &str) -> Option<usize> {
        self.keyspaces.iter().position(|k| k == keyspace)
    }

    /// The shard that holds `queue`. A queue no shard holds goes to the home shard, which
    /// answers it as unknown.
    fn by_queue(&self, queue: &str) -> Destination {
        Destination::Shard(self.queues.get(queue).copied().unwrap_or(0))
    }

    /// The shard a ticket or match id names; a plain id (or one naming no shard of these) is
    /// the home shard's.
    fn by_id(&self, id: &str) -> Destination {
        Destination::Shard(
            crate::ids::id_tag(id)
                .and_then(|tag| self.by_keyspace(tag))
                .unwrap_or(0),
        )
    }

    /// A queue named, or every shard when the call leaves it empty (all queues).
    fn by_queue_or_every(&self, queue: &str) -> Destination {
        if queue.is_empty() {
            Destination::Every
        } else {
            self.by_queue(queue)
        }
    }

    /// Where the call to `path` with request `message` (one gRPC message, its 5-byte prefix
    /// included) goes. A message that does not decode goes to the home shard, whose engine
    /// refuses it as it would on one node.
    pub fn destination(&self, path: &str, message: &[u8]) -> Destination {
        let Some(method) = path.strip_prefix("/matchmaker.v1.") else {
            return Destination::Shard(0);
        };
        // An uncompressed message only: the engine refuses a compressed one anyway.
        let body = match message {
            [0, a, b, c, d, rest @ ..]
                if u32::from_be_bytes([*a, *b, *c, *d]) as usize == rest.len() =>
            {
                rest
            }
            _ => return Destination::Shard(0),
        };
        let decoded = |d: Option<Destination>| d.unwrap_or(Destination::Shard(0));
        macro_rules! read {
            ($ty:ty, |$r:ident| $then:expr) => {
                decoded(<$ty>::decode(body).ok().map(|$r| $then))
            };
        }
        match method {
            "ClientService/EnterQueue" => {
                read!(proto::EnterQueueRequest, |r| self.by_queue(&r.queue))
            }
            "ClientService/GetLeaderboard" => {
                read!(proto::GetLeaderboardRequest, |r| self.by_queue(&r.queue))
            }
            "ClientService/PredictMatch" => {
                read!(proto::PredictMatchRequest, |r| self.by_queue(&r.queue))
            }
            "AdminService/SetRating" => {
                read!(proto::SetRatingRequest, |r| self.by_queue(&r.queue))
            }
            "AdminService/MigrateFromElo" => {
                read!(proto::MigrateFromEloRequest, |r| self.by_queue(&r.queue))
            }
            "AdminService/SeasonReset" => read!(proto::SeasonResetRequest, |r| self
                .by_queue_or_every(&r.queue)),
            "AdminService/EndSeason" => read!(proto::EndSeasonRequest, |r| self
                .by_queue_or_every(&r.queue)),
            "AdminService/GetQueueStats" => read!(proto::GetQueueStatsRequest, |r| self
                .by_queue_or_every(&r.queue)),
            "ClientService/GetPlayer" => {
                read!(proto::GetPlayerRequest, |r| self.by_queue(&r.queue))
            }
            "AdminService/ExportPlayers" => {
                read!(proto::ExportPlayersRequest, |r| self.by_queue(&r.queue))
            }
            "ClientService/ListPlayerMatches" => read!(proto::ListPlayerMatchesRequest, |r| self
                .by_queue_or_every(&r.queue)),
            "AdminService/ListLiveMatches" => read!(proto::ListLiveMatchesRequest, |r| self
                .by_queue_or_every(&r.queue)),
            "AdminService/ListRecentResults" => read!(proto::ListRecentResultsRequest, |r| self
                .by_queue_or_every(&r.queue)),
            "ClientService/CancelTicket" => {
                read!(proto::CancelTicketRequest, |r| self.by_id(&r.ticket_id))
            }
            "ClientService/WatchTicket" => {
                read!(proto::WatchTicketRequest, |r| self.by_id(&r.ticket_id))
            }
            "ClientService/AcceptMatch" => {
                read!(proto::AcceptMatchRequest, |r| self.by_id(&r.match_id))
            }
            "ClientService/GetMatch" => read!(proto::GetMatchRequest, |r| self.by_id(&r.match_id)),
            "GameServerService/ReportMatchResult" => {
                read!(proto::MatchResult, |r| self.by_id(&r.match_id))
            }
            "GameServerService/CancelMatch" => {
                read!(proto::CancelMatchRequest, |r| self.by_id(&r.match_id))
            }
            "GameServerService/RequestBackfill" => {
                read!(proto::BackfillRequest, |r| self.by_id(&r.match_id))
            }
            "GameServerService/StartMatch" => {
                read!(proto::StartMatchRequest, |r| self.by_id(&r.match_id))
            }
            // Party rosters are no queue's: the home shard keeps them.
            m if m.starts_with("PartyService/") => Destination::Shard(0),
            _ => Destination::Every,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(message: &impl Message) -> Vec<u8> {
        let body = message.encode_to_vec();
        let mut framed = vec![0];
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(&body);
        framed
    }

    fn config() -> Config {
        Config::from_toml_str(
            r#"
            [cluster]
            redis_url = "redis://127.0.0.1:6379/0"
            [[cluster.shards]]
            keyspace = "eu"
            queues = ["5v5", "ffa8"]
            "#,
        )
        .unwrap()
    }

    #[test]
    fn every_queue_and_pool_is_placed_in_its_shard_s_keyspace() {
        let mut config = config();
        let mut twin = config.queues["5v5"].clone();
        twin.rating_pool = Some("5v5".into());
        config.queues.insert("ffa8".into(), twin);
        config.validate().unwrap();
        let placed = placements(&config);
        let at = |field: &str| {
            placed
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, k)| k.as_str())
        };
        assert_eq!(at("queue:1v1"), Some("mm"));
        assert_eq!(at("pool:1v1"), Some("mm"));
        assert_eq!(at("queue:5v5"), Some("eu"));
        assert_eq!(at("queue:ffa8"), Some("eu"));
        assert_eq!(at("pool:5v5"), Some("eu"));
        assert_eq!(at("pool:ffa8"), None, "ffa8 rates in 5v5's pool");
        assert_eq!(placed.len(), 4 + 3);
        assert!(
            placed[..4].iter().all(|(f, _)| f.starts_with("queue:")),
            "queues first: {placed:?}"
        );
    }

    #[test]
    fn each_shard_config_keeps_its_own_queues_keyspace_and_id_tag() {
        let config = config();
        let shards = shard_configs(&config);
        assert_eq!(shards.len(), 2);
        assert_eq!(shards[0].cluster.keyspace, "mm");
        assert_eq!(shards[0].cluster.id_tag, "");
        assert_eq!(
            shards[0].queues.keys().collect::<Vec<_>>(),
            vec!["1v1", "2v2"]
        );
        assert_eq!(shards[1].cluster.keyspace, "eu");
        assert_eq!(shards[1].cluster.id_tag, "eu");
        assert!(
            shards.iter().all(|s| s.cluster.claims == ["mm", "eu"]),
            "every shard claims players in the home shard's name"
        );
        let unsharded = Config::from_toml_str("").unwrap();
        assert!(shard_configs(&unsharded)[0].cluster.claims.is_empty());
        assert_eq!(
            shards[1].queues.keys().collect::<Vec<_>>(),
            vec!["5v5", "ffa8"]
        );
        assert!(shards.iter().all(|s| s.cluster.shards.is_empty()));
    }

    #[test]
    fn calls_go_to_the_shard_of_their_queue_or_of_their_id() {
        let shards = Shards::new(&config());
        let enter = |queue: &str| {
            shards.destination(
                "/matchmaker.v1.ClientService/EnterQueue",
                &frame(&proto::EnterQueueRequest {
                    queue: queue.into(),
                    ..Default::default()
                }),
            )
        };
        assert_eq!(enter("5v5"), Destination::Shard(1));
        assert_eq!(enter("1v1"), Destination::Shard(0));
        assert_eq!(enter("nowhere"), Destination::Shard(0));
        let report = |id: String| {
            shards.destination(
                "/matchmaker.v1.GameServerService/ReportMatchResult",
                &frame(&proto::MatchResult {
                    match_id: id,
                    ..Default::default()
                }),
            )
        };
        assert_eq!(
            report(crate::ids::new_tagged_id("m", "eu")),
            Destination::Shard(1)
        );
        assert_eq!(report(crate::ids::new_id("m")), Destination::Shard(0));
        assert_eq!(
            report(crate::ids::new_tagged_id("m", "gone")),
            Destination::Shard(0)
        );
        let stats = |queue: &str| {
            shards.destination(
                "/matchmaker.v1.AdminService/GetQueueStats",
                &frame(&proto::GetQueueStatsRequest {
                    queue: queue.into(),
                }),
            )
        };
        assert_eq!(stats(""), Destination::Every);
        assert_eq!(stats("ffa8"), Destination::Shard(1));
        assert_eq!(
            shards.destination(
                "/matchmaker.v1.ClientService/GetPlayer",
                &frame(&proto::GetPlayerRequest {
                    player_id: "p".into(),
                    queue: "5v5".into(),
                })
            ),
            Destination::Shard(1)
        );
        assert_eq!(
            shards.destination(
                "/matchmaker.v1.ClientService/GetActiveTicket",
                &frame(&proto::GetActiveTicketRequest {
                    player_id: "p".into()
                })
            ),
            Destination::Every
        );
        assert_eq!(
            shards.destination("/matchmaker.v1.PartyService/CreateParty", &[]),
            Destination::Shard(0)
        );
    }

    #[test]
    fn a_message_that_does_not_decode_goes_to_the_home_shard() {
        let shards = Shards::new(&config());
        let path = "/matchmaker.v1.ClientService/EnterQueue";
        assert_eq!(shards.destination(path, &[]), Destination::Shard(0));
        assert_eq!(
            shards.destination(path, &[1, 0, 0, 0, 1, 7]),
            Destination::Shard(0),
            "compressed"
        );
        assert_eq!(
            shards.destination(path, &[0, 0, 0, 0, 9, 1]),
            Destination::Shard(0),
            "a length that does not match"
        );
        assert_eq!(
            shards.destination(path, &[0, 0, 0, 0, 2, 0xff, 0xff]),
            Destination::Shard(0),
            "not a message"
        );
    }
}
