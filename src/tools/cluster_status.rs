//! `matchmaker admin cluster-status` as text: one line per thing an operator asks about a
//! cluster (who owns the queues, who could take them over from a copy, how far the writes
//! have gone, what Redis keeps across a crash).

use crate::cluster::status::ClusterStatus;

/// Seconds, from milliseconds, as the lines print them.
fn seconds(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The status as lines of text.
pub fn text(status: &ClusterStatus) -> String {
    let owner = match &status.owner {
        Some(o) => format!(
            "{} at {}, token {}, lease expires in {} unless renewed",
            o.node_id,
            o.addr,
            o.token,
            seconds(o.expires_in_ms)
        ),
        None => "none: the lease is free".into(),
    };
    let standbys = if status.standbys.is_empty() {
        "none (a takeover reads everything from Redis)".into()
    } else {
        status
            .standbys
            .iter()
            .map(|s| format!("{} (listed for {})", s.node_id, seconds(s.listed_for_ms)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let d = &status.durability;
    let redis = format!(
        "appendonly {}{}, {} replica{}",
        if d.aof { "yes" } else { "no" },
        d.appendfsync
            .as_ref()
            .map(|f| format!(" (appendfsync {f})"))
            .unwrap_or_default(),
        d.replicas,
        if d.replicas == 1 { "" } else { "s" }
    );
    let large = match status.large_write {
        None => String::new(),
        Some(w) => format!(
            "large      a write in parts, {} fields staged, {}\n",
            w.staged_fields,
            if w.committed {
                "committed: being applied (or left to the next owner to apply)"
            } else {
                "not committed yet"
            }
        ),
    };
    format!(
        "keyspace   {}\nowner      {owner}\nstandbys   {standbys}\nwrites     {} flushes, \
         fencing token {}, change log {} entries\nstored     {} players, {} waiting tickets\n\
         {large}redis      {redis}\n",
        status.keyspace,
        status.flushes,
        status.fencing_token,
        status.change_log_entries,
        status.players,
        status.waiting_tickets,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::status::{OwnerStatus, StandbyStatus};
    use crate::store::Durability;

    #[test]
    fn the_text_names_the_owner_the_standbys_and_what_redis_keeps() {
        let mut status = ClusterStatus {
            keyspace: "eu".into(),
            owner: Some(OwnerStatus {
                node_id: "mm-0".into(),
                addr: "10.0.0.7:50051".into(),
                token: 42,
                expires_in_ms: 2640,
            }),
            standbys: vec![StandbyStatus {
                node_id: "mm-1".into(),
                listed_for_ms: 2900,
            }],
            fencing_token: 42,
            flushes: 1234,
            change_log_entries: 1200,
            players: 1_000_000,
            waiting_tickets: 52,
            large_write: None,
            durability: Durability {
                aof: true,
                appendfsync: Some("everysec".into()),
                replicas: 1,
            },
        };
        let text = text(&status);
        for line in [
            "keyspace   eu\n",
            "owner      mm-0 at 10.0.0.7:50051, token 42, lease expires in 2.6 s unless renewed\n",
            "standbys   mm-1 (listed for 2.9 s)\n",
            "writes     1234 flushes, fencing token 42, change log 1200 entries\n",
            "stored     1000000 players, 52 waiting tickets\n",
            "redis      appendonly yes (appendfsync everysec), 1 replica\n",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        status.owner = None;
        status.standbys.clear();
        let text = super::text(&status);
        assert!(
            text.contains("owner      none: the lease is free"),
            "{text}"
        );
        assert!(text.contains("standbys   none"), "{text}");
        assert!(
            !text.contains("large"),
            "no write in parts: no line\n{text}"
        );
        status.large_write = Some(crate::cluster::status::LargeWrite {
            staged_fields: 1_001_004,
            committed: true,
        });
        let text = super::text(&status);
        assert!(
            text.contains("large      a write in parts, 1001004 fields staged, committed"),
            "{text}"
        );
    }
}
