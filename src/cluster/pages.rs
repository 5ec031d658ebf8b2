//! Paging across shards: the two paged lists about no one queue (`ListPlayerMatches` of every
//! queue, `ListAuditLog`) are read from every shard's list at once and merged into the pages
//! one node gives. A page token then holds where the listing stands in each shard's list: it
//! is `s1.` and the base64url of a small protobuf message ([`MatchesCursor`],
//! [`AuditCursor`]), opaque to clients. Pure: the front asks the shards
//! (`front::Dispatch`) and hands their answers here.

use std::iter::Peekable;

use prost::Message;

use crate::proto;
use crate::rejection::Rejection;

/// The start of every page token this module writes; a later layout takes the next number.
const VERSION: &str = "s1.";

/// Where a listing stands in one shard's `ListPlayerMatches` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// Nothing read yet: the shard's most recent match comes next.
    Start,
    /// After this match (the shard's own page token: the last match taken from it).
    After(String),
    /// Every match of the shard's list was taken.
    Done,
}

/// Where a `ListPlayerMatches` of every queue stands: in each shard's list (in shard order),
/// and how many matches its pages gave so far, so that the listing ends at
/// `[history] matches_per_player` matches in all, as one node's list of a player does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchesCursor {
    pub shards: Vec<Position>,
    pub returned: u32,
}

/// The page token's message. Tags 1 and 2 are not [`AuditWire`]'s, so neither token passes
/// for the other.
#[derive(Clone, PartialEq, Message)]
struct MatchesWire {
    #[prost(uint32, tag = "1")]
    returned: u32,
    #[prost(message, repeated, tag = "2")]
    shards: Vec<PositionWire>,
}

#[derive(Clone, PartialEq, Message)]
struct PositionWire {
    /// The last match taken; empty when none was.
    #[prost(string, tag = "1")]
    after: String,
    #[prost(bool, tag = "2")]
    done: bool,
}

/// `page_token` refused: the field, and what to do.
fn bad_token(rule: &str) -> Rejection {
    Rejection::invalid("page_token", rule)
}

const NOT_OURS: &str = "must be a next_page_token from an earlier response";

/// The message of a token [`VERSION`] starts; `None` when it does not start so.
fn wire<M: Message + Default>(token: &str) -> Option<Result<M, Rejection>> {
    let encoded = token.strip_prefix(VERSION)?;
    Some(
        from_base64url(encoded)
            .and_then(|bytes| M::decode(bytes.as_slice()).ok())
            .ok_or_else(|| bad_token(NOT_OURS)),
    )
}

fn to_token(message: &impl Message) -> String {
    format!("{VERSION}{}", to_base64url(&message.encode_to_vec()))
}

impl MatchesCursor {
    /// Reads a request's `page_token` for `shards` shards, the listing stopping at `cap`
    /// matches. Empty: every shard from its most recent match. A plain match id (one shard's
    /// token: one from before the queues were split over shards) goes on after that match in
    /// the shard its id names (`shard_of`), and the other shards count as read to their end:
    /// their matches all ended after the split, so a listing begun before it, newest first,
    /// was past them already, as it would be on one node.
    pub fn from_token(
        token: &str,
        shards: usize,
        shard_of: impl Fn(&str) -> usize,
        cap: u32,
    ) -> Result<Self, Rejection> {
        if token.is_empty() {
            return Ok(Self {
                shards: vec![Position::Start; shards],
                returned: 0,
            });
        }
        let Some(decoded) = wire::<MatchesWire>(token) else {
            let own = shard_of(token);
            return Ok(Self {
                shards: (0..shards)
                    .map(|shard| {
                        if shard == own {
                            Position::After(token.to_string())
                        } else {
                            Position::Done
                        }
                    })
                    .collect(),
                returned: 0,
            });
        };
        let decoded = decoded?;
        if decoded.shards.len() != shards {
            return Err(bad_token(&format!(
                "was made when the queues were split over {} shards, and are over {shards} \
                 now; start again without a token",
                decoded.shards.len()
            )));
        }
        let mut positions = Vec::with_capacity(shards);
        for shard in decoded.shards {
            positions.push(match (shard.after.is_empty(), shard.done) {
                (true, false) => Position::Start,
                (false, false) => Position::After(shard.after),
                (true, true) => Position::Done,
                (false, true) => return Err(bad_token(NOT_OURS)),
            });
        }
        // Never written: a listing that reached either has no next page.
        if decoded.returned >= cap || positions.iter().all(|p| *p == Position::Done) {
            return Err(bad_token(NOT_OURS));
        }
        Ok(Self {
            shards: positions,
            returned: decoded.returned,
        })
    }

    /// The token of this position.
    pub fn token(&self) -> String {
        to_token(&MatchesWire {
            returned: self.returned,
            shards: self
                .shards
                .iter()
                .map(|p| match p {
                    Position::Start => PositionWire::default(),
                    Position::After(id) => PositionWire {
                        after: id.clone(),
                        done: false,
                    },
                    Position::Done => PositionWire {
                        after: String::new(),
                        done: true,
                    },
                })
                .collect(),
        })
    }

    /// The page token to send `shard` (its own kind: the last match taken from it, or empty);
    /// `None` when it has nothing left to give.
    pub fn shard_token(&self, shard: usize) -> Option<&str> {
        match self.shards.get(shard)? {
            Position::Start => Some(""),
            Position::After(id) => Some(id),
            Position::Done => None,
        }
    }
}

/// The page of a `ListPlayerMatches` of every queue: the shards' answers (in shard order;
/// `None` for a shard not asked, read to its end) to `limit` matches after their positions in
/// `cursor`, merged most recently ended first (ties by match id, the greater first, then by
/// shard), up to `limit` matches (0: `DEFAULT_PAGE`) and no further than `cap` in all; the
/// next page's token names where each shard's list now stands.
pub fn merge_matches(
    cursor: &MatchesCursor,
    answers: Vec<Option<proto::ListPlayerMatchesResponse>>,
    limit: u32,
    cap: u32,
) -> proto::ListPlayerMatchesResponse {
    let limit = match limit {
        0 => crate::api::records::DEFAULT_PAGE,
        n => n as usize,
    };
    let room = (cap.saturating_sub(cursor.returned) as usize).min(limit);
    let mut lists: Vec<Option<Shard>> = answers
        .into_iter()
        .map(|answer| {
            answer.map(|a| Shard {
                given: a.matches.len(),
                next_page_token: a.next_page_token,
                matches: a.matches.into_iter().peekable(),
                taken: 0,
                last: None,
            })
        })
        .collect();
    let mut matches = Vec::new();
    while matches.len() < room {
        let newest = (0..lists.len())
            .filter_map(|shard| {
                let head = lists[shard].as_mut()?.matches.peek()?;
                Some((shard, head.ended_unix, head.match_id.clone()))
            })
            .max_by(|a, b| {
                (a.1, &a.2)
                    .cmp(&(b.1, &b.2))
                    // On a full tie, the first shard's.
                    .then_with(|| b.0.cmp(&a.0))
            });
        let Some((shard, _, _)) = newest else {
            break;
        };
        let Some(list) = lists[shard].as_mut() else {
            break;
        };
        if let Some(taken) = list.matches.next() {
            list.taken += 1;
            list.last = Some(taken.match_id.clone());
            matches.push(taken);
        }
    }
    let shards: Vec<Position> = lists
        .iter()
        .zip(&cursor.shards)
        .map(|(list, before)| match list {
            None => Position::Done,
            Some(list) if list.taken == list.given => {
                if list.next_page_token.is_empty() {
                    Position::Done
                } else {
                    Position::After(list.next_page_token.clone())
                }
            }
            Some(list) => list
                .last
                .clone()
                .map_or_else(|| before.clone(), Position::After),
        })
        .collect();
    let next = MatchesCursor {
        returned: cursor
            .returned
            .saturating_add(u32::try_from(matches.len()).unwrap_or(u32::MAX)),
        shards,
    };
    let ended = next.returned >= cap || next.shards.iter().all(|p| *p == Position::Done);
    proto::ListPlayerMatchesResponse {
        matches,
        next_page_token: if ended { String::new() } else { next.token() },
    }
}

/// One shard's answer while its matches are merged.
struct Shard {
    given: usize,
    next_page_token: String,
    matches: Peekable<std::vec::IntoIter<proto::MatchRecord>>,
    taken: usize,
    last: Option<String>,
}

/// Where a `ListAuditLog` stands in each shard's log (in shard order): the sequence number of
/// the last entry taken from it (0: none yet; a log numbers its entries from 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditCursor {
    pub after: Vec<u64>,
}

#[derive(Clone, PartialEq, Message)]
struct AuditWire {
    #[prost(uint64, repeated, tag = "3")]
    after: Vec<u64>,
}

impl AuditCursor {
    /// Reads a request's `page_token` for `shards` shards. Empty: every log from its oldest
    /// entry. A plain number (one node's token, from before the queues were split over shards)
    /// goes on after that entry in the home shard's log, which was that node's, and from the
    /// oldest entry in the others', whose entries were all written after the split.
    pub fn from_token(token: &str, shards: usize) -> Result<Self, Rejection> {
        let mut after = vec![0; shards];
        if token.is_empty() {
            return Ok(Self { after });
        }
        match wire::<AuditWire>(token) {
            None => {
                let seq = token.parse().map_err(|_| bad_token(NOT_OURS))?;
                if let Some(home) = after.first_mut() {
                    *home = seq;
                }
                Ok(Self { after })
            }
            Some(decoded) => {
                let decoded = decoded?;
                if decoded.after.len() != shards {
                    return Err(bad_token(&format!(
                        "was made when the queues were split over {} shards, and are over \
                         {shards} now; start again without a token",
                        decoded.after.len()
                    )));
                }
                Ok(Self {
                    after: decoded.after,
                })
            }
        }
    }

    /// The token of this position.
    pub fn token(&self) -> String {
        to_token(&AuditWire {
            after: self.after.clone(),
        })
    }
}

/// One shard's `ListAuditLog` answer with its entries' sequence numbers (the answer's
/// `AUDIT_SEQS` header), one per entry.
pub struct AuditPage {
    pub answer: proto::ListAuditLogResponse,
    pub seqs: Vec<u64>,
}

/// The page of a `ListAuditLog` of every shard: the shards' answers (in shard order) to
/// `limit` entries after their positions in `cursor`, merged oldest first by when each entry's
/// call was answered (ties: the first shard's, and within a shard, its log's order), up to
/// `limit` entries (0: `AUDIT_PAGE`). As on one node, a full page has a next token (a later
/// call with it sees the entries written meanwhile) and a shorter one has none.
pub fn merge_audit(
    cursor: &AuditCursor,
    pages: Vec<AuditPage>,
    limit: u32,
) -> proto::ListAuditLogResponse {
    let limit = match limit {
        0 => crate::api::AUDIT_PAGE,
        n => n,
    } as usize;
    let mut logs: Vec<Peekable<_>> = pages
        .into_iter()
        .map(|page| page.answer.entries.into_iter().zip(page.seqs).peekable())
        .collect();
    let mut after = cursor.after.clone();
    let mut entries = Vec::new();
    while entries.len() < limit {
        let oldest = (0..logs.len())
            .filter_map(|shard| Some((shard, logs[shard].peek()?.0.unix)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let Some((shard, _)) = oldest else {
            break;
        };
        if let Some((entry, seq)) = logs[shard].next() {
            if let Some(at) = after.get_mut(shard) {
                *at = seq;
            }
            entries.push(entry);
        }
    }
    let full = entries.len() == limit;
    proto::ListAuditLogResponse {
        entries,
        next_page_token: if full {
            AuditCursor { after }.token()
        } else {
            String::new()
        },
    }
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `bytes` in base64url without padding (RFC 4648 §5): a token safe in any URL or header.
fn to_base64url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(BASE64URL[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// The bytes of [`to_base64url`]'s text; `None` for anything it does not write (another
/// alphabet, padding, a length no byte count gives, stray bits in the last character).
fn from_base64url(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u32> = text
        .bytes()
        .map(|c| BASE64URL.iter().position(|&d| d == c).map(|v| v as u32))
        .collect::<Option<_>>()?;
    if digits.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | d << (18 - 6 * i));
        let bytes = chunk.len() - 1;
        let kept = n.to_be_bytes();
        // The bits past the last whole byte are zero in what `to_base64url` writes.
        if kept[1 + bytes..].iter().any(|&b| b != 0) {
            return None;
        }
        out.extend_from_slice(&kept[1..=bytes]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, ended: i64) -> proto::MatchRecord {
        proto::MatchRecord {
            match_id: id.into(),
            ended_unix: ended,
            ..Default::default()
        }
    }

    fn page(matches: &[(&str, i64)], next: &str) -> Option<proto::ListPlayerMatchesResponse> {
        Some(proto::ListPlayerMatchesResponse {
            matches: matches.iter().map(|(id, at)| record(id, *at)).collect(),
            next_page_token: next.into(),
        })
    }

    fn ids(page: &proto::ListPlayerMatchesResponse) -> Vec<&str> {
        page.matches.iter().map(|m| m.match_id.as_str()).collect()
    }

    fn home(_: &str) -> usize {
        0
    }

    fn field(r: Result<impl std::fmt::Debug, Rejection>) -> String {
        match r {
            Err(Rejection::Invalid(f)) => f.field.clone(),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn base64url_round_trips_every_length_and_refuses_what_it_never_writes() {
        let bytes: Vec<u8> = (0..=255).rev().collect();
        for len in 0..40 {
            let text = to_base64url(&bytes[..len]);
            assert!(text.bytes().all(|c| BASE64URL.contains(&c)), "{text}");
            assert_eq!(from_base64url(&text).as_deref(), Some(&bytes[..len]));
        }
        assert_eq!(to_base64url(b"\xfb\xff"), "-_8");
        assert_eq!(to_base64url(b"Man"), "TWFu");
        for bad in ["TWFu=", "TW+u", "T", "TWFuT", "TWF/", "-_9"] {
            assert_eq!(from_base64url(bad), None, "{bad}");
        }
    }

    #[test]
    fn tokens_round_trip_and_bad_ones_name_the_page_token() {
        let cursor = MatchesCursor {
            shards: vec![
                Position::After("m-1".into()),
                Position::Start,
                Position::Done,
            ],
            returned: 7,
        };
        let token = cursor.token();
        assert!(token.starts_with("s1."), "{token}");
        assert_eq!(MatchesCursor::from_token(&token, 3, home, 100), Ok(cursor));
        let audit = AuditCursor {
            after: vec![4, 0, 19],
        };
        assert_eq!(
            AuditCursor::from_token(&audit.token(), 3),
            Ok(audit.clone())
        );

        for bad in ["s1.", "s1.!!", "s1.TWFu", "s1.A"] {
            assert_eq!(
                field(MatchesCursor::from_token(bad, 3, home, 100)),
                "page_token"
            );
            assert_eq!(field(AuditCursor::from_token(bad, 3)), "page_token");
        }
        // Each list's token is refused by the other, and on a node with other shards.
        assert_eq!(
            field(MatchesCursor::from_token(&audit.token(), 3, home, 100)),
            "page_token"
        );
        let two = MatchesCursor {
            shards: vec![Position::Start, Position::Start],
            returned: 0,
        };
        assert_eq!(
            field(AuditCursor::from_token(&two.token(), 2)),
            "page_token"
        );
        assert_eq!(
            field(MatchesCursor::from_token(&two.token(), 3, home, 100)),
            "page_token"
        );
        assert_eq!(
            field(AuditCursor::from_token(&audit.token(), 2)),
            "page_token"
        );
        assert_eq!(field(AuditCursor::from_token("x12", 2)), "page_token");
        // Positions no listing writes: past the cap, or with nothing left anywhere.
        let capped = MatchesCursor {
            shards: vec![Position::Start, Position::Start],
            returned: 100,
        };
        assert_eq!(
            field(MatchesCursor::from_token(&capped.token(), 2, home, 100)),
            "page_token"
        );
        let done = MatchesCursor {
            shards: vec![Position::Done, Position::Done],
            returned: 1,
        };
        assert_eq!(
            field(MatchesCursor::from_token(&done.token(), 2, home, 100)),
            "page_token"
        );
    }

    #[test]
    fn one_node_s_tokens_go_on_where_that_node_stood() {
        let eu = |id: &str| usize::from(id.starts_with("m.eu-"));
        let plain = MatchesCursor::from_token("m-abc", 2, eu, 100).unwrap();
        assert_eq!(
            plain.shards,
            [Position::After("m-abc".into()), Position::Done]
        );
        let tagged = MatchesCursor::from_token("m.eu-abc", 2, eu, 100).unwrap();
        assert_eq!(
            tagged.shards,
            [Position::Done, Position::After("m.eu-abc".into())]
        );
        assert_eq!(tagged.shard_token(0), None);
        assert_eq!(tagged.shard_token(1), Some("m.eu-abc"));
        assert_eq!(AuditCursor::from_token("41", 3).unwrap().after, [41, 0, 0]);
        assert_eq!(
            MatchesCursor::from_token("", 2, eu, 100)
                .unwrap()
                .shard_token(1),
            Some("")
        );
    }

    #[test]
    fn matches_merge_most_recently_ended_first_and_each_shard_goes_on_after_its_last() {
        let start = MatchesCursor::from_token("", 2, home, 100).unwrap();
        let first = merge_matches(
            &start,
            vec![
                page(&[("m-c", 50), ("m-b", 30), ("m-a", 10)], "m-a"),
                page(&[("m.eu-y", 40), ("m.eu-x", 30)], ""),
            ],
            3,
            100,
        );
        // 30 ties: the greater id first.
        assert_eq!(ids(&first), ["m-c", "m.eu-y", "m.eu-x"]);
        let next = MatchesCursor::from_token(&first.next_page_token, 2, home, 100).unwrap();
        assert_eq!(next.returned, 3);
        assert_eq!(next.shard_token(0), Some("m-c"), "one taken of three");
        assert_eq!(next.shard_token(1), None, "all taken, no more");

        // The home shard, asked again after m-c, is all that is left.
        let second = merge_matches(
            &next,
            vec![page(&[("m-b", 30), ("m-a", 10)], ""), None],
            3,
            100,
        );
        assert_eq!(ids(&second), ["m-b", "m-a"]);
        assert_eq!(second.next_page_token, "", "the end");
    }

    #[test]
    fn a_shard_with_a_full_page_keeps_its_own_token_and_none_taken_keeps_its_place() {
        let cursor = MatchesCursor {
            shards: vec![Position::After("m-9".into()), Position::Start],
            returned: 4,
        };
        let merged = merge_matches(
            &cursor,
            vec![
                page(&[("m-8", 100), ("m-7", 90)], "m-7"),
                page(&[("m.eu-1", 5), ("m.eu-0", 1)], "m.eu-0"),
            ],
            2,
            100,
        );
        assert_eq!(ids(&merged), ["m-8", "m-7"]);
        let next = MatchesCursor::from_token(&merged.next_page_token, 2, home, 100).unwrap();
        assert_eq!(
            next.shards,
            [Position::After("m-7".into()), Position::Start]
        );
        assert_eq!(next.returned, 6);
    }

    #[test]
    fn the_matches_listed_stop_at_the_history_s_length_in_all() {
        // Each shard keeps its own 3; one node would keep 3 of the player's in all.
        let start = MatchesCursor::from_token("", 2, home, 3).unwrap();
        let first = merge_matches(
            &start,
            vec![
                page(&[("m-3", 60), ("m-2", 40)], "m-2"),
                page(&[("m.eu-3", 50), ("m.eu-2", 30)], "m.eu-2"),
            ],
            2,
            3,
        );
        assert_eq!(ids(&first), ["m-3", "m.eu-3"]);
        let next = MatchesCursor::from_token(&first.next_page_token, 2, home, 3).unwrap();
        let second = merge_matches(
            &next,
            vec![
                page(&[("m-2", 40), ("m-1", 20)], "m-1"),
                page(&[("m.eu-2", 30), ("m.eu-1", 10)], "m.eu-1"),
            ],
            2,
            3,
        );
        assert_eq!(ids(&second), ["m-2"], "the third and last");
        assert_eq!(second.next_page_token, "");
        // The default page when the request says 0.
        let all = merge_matches(
            &MatchesCursor::from_token("", 1, home, 100).unwrap(),
            vec![page(
                &(0..30).map(|i| ("m", 100 - i)).collect::<Vec<_>>(),
                "m",
            )],
            0,
            100,
        );
        assert_eq!(all.matches.len(), crate::api::records::DEFAULT_PAGE);
    }

    fn entry(unix: f64, detail: &str) -> proto::AuditEntry {
        proto::AuditEntry {
            unix,
            detail: detail.into(),
            ..Default::default()
        }
    }

    fn audit_page(entries: &[(u64, f64, &str)]) -> AuditPage {
        AuditPage {
            answer: proto::ListAuditLogResponse {
                entries: entries.iter().map(|(_, at, d)| entry(*at, d)).collect(),
                next_page_token: String::new(),
            },
            seqs: entries.iter().map(|(seq, _, _)| *seq).collect(),
        }
    }

    fn details(page: &proto::ListAuditLogResponse) -> Vec<&str> {
        page.entries.iter().map(|e| e.detail.as_str()).collect()
    }

    #[test]
    fn audit_entries_merge_oldest_first_and_each_log_goes_on_after_its_last() {
        let start = AuditCursor::from_token("", 2).unwrap();
        let first = merge_audit(
            &start,
            vec![
                audit_page(&[(1, 10.0, "h1"), (2, 30.0, "h2"), (3, 40.0, "h3")]),
                audit_page(&[(1, 20.0, "e1"), (2, 30.0, "e2"), (3, 50.0, "e3")]),
            ],
            4,
        );
        // 30.0 ties: the home shard's first.
        assert_eq!(details(&first), ["h1", "e1", "h2", "e2"]);
        let next = AuditCursor::from_token(&first.next_page_token, 2).unwrap();
        assert_eq!(next.after, [2, 2]);

        let second = merge_audit(
            &next,
            vec![
                audit_page(&[(3, 40.0, "h3")]),
                audit_page(&[(7, 50.0, "e3")]),
            ],
            4,
        );
        assert_eq!(details(&second), ["h3", "e3"]);
        assert_eq!(second.next_page_token, "", "a short page, as one node's");
        let full = merge_audit(
            &next,
            vec![audit_page(&[]), audit_page(&[(7, 50.0, "e3")])],
            1,
        );
        assert_eq!(
            AuditCursor::from_token(&full.next_page_token, 2)
                .unwrap()
                .after,
            [2, 7],
            "a log with a gap goes on after the number it gave"
        );
    }
}
