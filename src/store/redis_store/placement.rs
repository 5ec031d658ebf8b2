//! Where each queue's records are. A queue's waiting tickets, live matches and its rating
//! pool's records stay in the keyspace of the shard that ran it (`[[cluster.shards]]`), and a
//! shard's engine reads only its own keyspace: a queue moved to another shard in the config
//! would start there with none of them, its players' ratings back at the start. So the home
//! keyspace records the keyspace of every queue and pool the first time a node runs them
//! (`{mm}:placement`, fields `queue:NAME` and `pool:NAME`), and a node whose config puts one
//! elsewhere refuses to start, naming it.

use super::{Keys, RedisConn};

/// Answers the fields recorded in another keyspace than the one given, each followed by the
/// keyspace recorded; when there are none, records each field's keyspace where none is
/// recorded yet. One step: a refused config places nothing.
const PLACE: &str = r"
local moved = {}
for i = 1, #ARGV, 2 do
  local at = redis.call('HGET', KEYS[1], ARGV[i])
  if at and at ~= ARGV[i + 1] then
    table.insert(moved, ARGV[i])
    table.insert(moved, at)
  end
end
if #moved == 0 then
  for i = 1, #ARGV, 2 do
    redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return moved
";

/// A queue or pool configured in another keyspace than the one holding its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    /// `queue:NAME` or `pool:NAME`.
    pub field: String,
    /// Where the config puts it.
    pub configured: String,
    /// Where its records are.
    pub recorded: String,
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, name) = self.field.split_once(':').unwrap_or(("queue", &self.field));
        let setting = if what == "pool" {
            format!("rating pool {name:?}")
        } else {
            format!("queues.{name}")
        };
        write!(
            f,
            "{setting}: the config puts it in shard {:?}, but its records (waiting tickets, live \
             matches, ratings) are in keyspace {:?}",
            self.configured, self.recorded
        )
    }
}

/// Records where the config puts each queue and pool (`placed`: field and keyspace) unless a
/// place is recorded already, in the deployment whose home keyspace is `home`; the ones the
/// config moved (then nothing is recorded).
pub async fn check_placement(
    conn: &mut RedisConn,
    home: &Keys,
    placed: &[(String, String)],
) -> ::redis::RedisResult<Vec<Moved>> {
    let configured: std::collections::HashMap<&str, &str> = placed
        .iter()
        .map(|(field, keyspace)| (field.as_str(), keyspace.as_str()))
        .collect();
    let script = ::redis::Script::new(PLACE);
    let mut invocation = script.key(home.placement());
    for (field, keyspace) in placed {
        invocation.arg(field).arg(keyspace);
    }
    let moved: Vec<String> = invocation.invoke_async(conn).await?;
    Ok(moved
        .chunks(2)
        .filter_map(|pair| match pair {
            [field, recorded] => Some(Moved {
                configured: configured.get(field.as_str())?.to_string(),
                field: field.clone(),
                recorded: recorded.clone(),
            }),
            _ => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::with_redis;

    #[test]
    fn the_first_config_places_each_queue_and_a_later_one_may_not_move_it() {
        with_redis(|server, runtime| {
            let mut conn = runtime
                .block_on(RedisConn::connect(
                    &server.url(),
                    None,
                    crate::store::Patience::default(),
                ))
                .unwrap();
            let home = Keys::new("mm");
            let place = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
                pairs
                    .iter()
                    .map(|(f, k)| (f.to_string(), k.to_string()))
                    .collect()
            };
            let first = place(&[("queue:1v1", "mm"), ("pool:1v1", "mm")]);
            let mut check = |placed: &[(String, String)]| {
                runtime
                    .block_on(check_placement(&mut conn, &home, placed))
                    .unwrap()
            };
            assert_eq!(check(&first), vec![]);
            assert_eq!(check(&first), vec![], "the same places again");
            // A new queue in a new shard is placed there; 1v1 moved is refused, naming both.
            let moved = check(&place(&[
                ("queue:1v1", "eu"),
                ("pool:1v1", "eu"),
                ("queue:2v2", "eu"),
            ]));
            assert_eq!(
                moved,
                vec![
                    Moved {
                        field: "queue:1v1".into(),
                        configured: "eu".into(),
                        recorded: "mm".into(),
                    },
                    Moved {
                        field: "pool:1v1".into(),
                        configured: "eu".into(),
                        recorded: "mm".into(),
                    },
                ]
            );
            let said = moved[0].to_string();
            assert_eq!(
                said,
                "queues.1v1: the config puts it in shard \"eu\", but its records (waiting \
                 tickets, live matches, ratings) are in keyspace \"mm\""
            );
            assert!(moved[1].to_string().starts_with("rating pool \"1v1\""));
            // The refused config placed nothing: 2v2 is still free to go anywhere.
            assert_eq!(check(&place(&[("queue:2v2", "mm")])), vec![]);
            assert_eq!(
                check(&place(&[("queue:2v2", "eu")])),
                vec![Moved {
                    field: "queue:2v2".into(),
                    configured: "eu".into(),
                    recorded: "mm".into(),
                }]
            );
        });
    }
}
