//! Player, party and match records through the real server: `GetActiveTicket`, `GetMatch`,
//! `ListPlayerMatches` (newest first, paged, bounded per player), `StartMatch`, `CancelMatch`
//! before the start (tickets back in their queues, wait kept) and after it, `PartyService` and
//! entering a party by id; with auth on, who may name whom and read what; and the admin
//! command line's records commands.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{TestServer, enter, next, player, report_winner, same_skill, skill, watch};
use jsonwebtoken::{EncodingKey, Header};
use matchmaker::proto;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::game_server_service_client::GameServerServiceClient;
use matchmaker::proto::party_service_client::PartyServiceClient;
use tonic::transport::Channel;
use tonic::{Code, Request};

const SECRET: &str = "records-secret-0123456789abcdef01";

fn auth_on() -> String {
    format!("[auth]\nenabled = true\njwt_secret = \"{SECRET}\"\n")
}

fn token(sub: &str, role: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = serde_json::json!({ "sub": sub, "role": role, "exp": now + 3600 });
    jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// `msg` with `tok` as its bearer token (`None`: no token).
fn with<T>(msg: T, tok: Option<&str>) -> Request<T> {
    let mut r = Request::new(msg);
    if let Some(tok) = tok {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {tok}").parse().unwrap());
    }
    r
}

async fn active(
    client: &mut ClientServiceClient<Channel>,
    player: &str,
    tok: Option<&str>,
) -> Result<proto::TicketUpdate, tonic::Status> {
    client
        .get_active_ticket(with(
            proto::GetActiveTicketRequest {
                player_id: player.into(),
            },
            tok,
        ))
        .await
        .map(tonic::Response::into_inner)
}

async fn get_match(
    client: &mut ClientServiceClient<Channel>,
    id: &str,
    tok: Option<&str>,
) -> Result<proto::MatchRecord, tonic::Status> {
    client
        .get_match(with(
            proto::GetMatchRequest {
                match_id: id.into(),
            },
            tok,
        ))
        .await
        .map(tonic::Response::into_inner)
}

async fn list(
    client: &mut ClientServiceClient<Channel>,
    player: &str,
    queue: &str,
    page_token: &str,
    limit: u32,
    tok: Option<&str>,
) -> Result<proto::ListPlayerMatchesResponse, tonic::Status> {
    client
        .list_player_matches(with(
            proto::ListPlayerMatchesRequest {
                player_id: player.into(),
                queue: queue.into(),
                page_token: page_token.into(),
                limit,
            },
            tok,
        ))
        .await
        .map(tonic::Response::into_inner)
}

fn ids(matches: &[proto::MatchRecord]) -> Vec<&str> {
    matches.iter().map(|m| m.match_id.as_str()).collect()
}

async fn start(
    gs: &mut GameServerServiceClient<Channel>,
    id: &str,
    tok: Option<&str>,
) -> Result<proto::StartMatchResponse, tonic::Status> {
    gs.start_match(with(
        proto::StartMatchRequest {
            match_id: id.into(),
        },
        tok,
    ))
    .await
    .map(tonic::Response::into_inner)
}

async fn cancel(
    gs: &mut GameServerServiceClient<Channel>,
    id: &str,
    tok: Option<&str>,
) -> Result<Vec<String>, tonic::Status> {
    gs.cancel_match(with(
        proto::CancelMatchRequest {
            match_id: id.into(),
            reason: "the server could not load the map".into(),
        },
        tok,
    ))
    .await
    .map(|r| {
        let mut ids = r.into_inner().requeued_ticket_ids;
        ids.sort();
        ids
    })
}

async fn report(
    gs: &mut GameServerServiceClient<Channel>,
    m: &proto::MatchAssignment,
    winner: &str,
    tok: Option<&str>,
) -> proto::MatchResultAck {
    gs.report_match_result(with(
        proto::MatchResult {
            match_id: m.match_id.clone(),
            placements: common::placements_with_winner(m, winner),
            ..Default::default()
        },
        tok,
    ))
    .await
    .expect("report")
    .into_inner()
}

/// Enters `a` and `b` into 1v1 and returns their match once the server on `offers` has it.
async fn pair(
    client: &mut ClientServiceClient<Channel>,
    offers: &mut tonic::Streaming<proto::MatchAssignment>,
    a: &str,
    b: &str,
) -> proto::MatchAssignment {
    common::enter(client, "1v1", &[a]).await;
    common::enter(client, "1v1", &[b]).await;
    next(offers).await
}

#[tokio::test]
async fn the_active_ticket_follows_a_player_from_queue_to_match_to_result() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let e = active(&mut client, "at-a", None).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "an idle player: {e:?}");
    let e = active(&mut client, "", None).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    let ticket = common::enter(&mut client, "1v1", &["at-a"]).await;
    let u = active(&mut client, "at-a", None).await.unwrap();
    assert_eq!(u.ticket_id, ticket);
    assert_eq!(u.state, proto::TicketState::Searching as i32);

    let mut offers = common::serve(&mut gs, "gs-at:7777").await;
    common::enter(&mut client, "1v1", &["at-b"]).await;
    let m = next(&mut offers).await;
    for player in ["at-a", "at-b"] {
        let u = active(&mut client, player, None).await.unwrap();
        assert_eq!(u.state, proto::TicketState::Matched as i32, "{player}");
        let a = u.assignment.expect("the match");
        assert_eq!(
            (a.match_id.as_str(), a.server_address.as_str()),
            (m.match_id.as_str(), "gs-at:7777")
        );
    }
    assert_eq!(
        active(&mut client, "at-a", None).await.unwrap().ticket_id,
        ticket
    );

    report(&mut gs, &m, "at-a", None).await;
    let e = active(&mut client, "at-b", None).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "free again after the result");
}

#[tokio::test]
async fn matches_are_recorded_from_formed_to_completed_newest_first_and_bounded_per_player() {
    // Ratings move with every result: a wide window keeps the same players matching at once.
    let server = TestServer::start(
        "[history]\nmatches_per_player = 3\n[queues.1v1.matching]\nwindow = 5000.0\nmin_quality = 0.01\n\
         expansion = []\n",
    )
    .await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let mut offers = common::serve(&mut gs, "gs-h:1").await;

    let mut played = Vec::new();
    for i in 0..4 {
        let m = pair(&mut client, &mut offers, "h-a", &format!("h-b{i}")).await;
        let live = get_match(&mut client, &m.match_id, None).await.unwrap();
        assert_eq!(live.phase, proto::MatchPhase::Allocated as i32);
        assert_eq!(live.server_address, "gs-h:1");
        assert!(live.formed_unix > 0 && live.started_unix == 0 && live.ended_unix == 0);
        assert_eq!(
            live.win_probability, m.win_probability,
            "the prediction at formation"
        );
        assert_eq!(m.win_probability.len(), 2);
        let started = start(&mut gs, &m.match_id, None)
            .await
            .unwrap()
            .started_unix;
        assert!(started >= live.formed_unix);
        assert_eq!(
            start(&mut gs, &m.match_id, None)
                .await
                .unwrap()
                .started_unix,
            started,
            "StartMatch is idempotent"
        );
        let live = get_match(&mut client, &m.match_id, None).await.unwrap();
        assert_eq!(
            (live.phase, live.started_unix),
            (proto::MatchPhase::Started as i32, started)
        );
        let ack = report(&mut gs, &m, "h-a", None).await;
        let done = get_match(&mut client, &m.match_id, None).await.unwrap();
        assert_eq!(done.phase, proto::MatchPhase::Completed as i32);
        assert_eq!(done.placements, common::placements_with_winner(&m, "h-a"));
        assert!(
            common::same_changes(&done.changes, &ack.changes),
            "{done:?}"
        );
        assert_eq!(done.started_unix, started);
        assert!(done.ended_unix >= started);
        assert_eq!(
            done.win_probability, m.win_probability,
            "kept in the record"
        );
        let players: Vec<&str> = done
            .teams
            .iter()
            .flat_map(|t| &t.player_ids)
            .map(String::as_str)
            .collect();
        assert!(
            players.contains(&"h-a") && players.len() == 2,
            "{players:?}"
        );
        played.push(m.match_id);
    }
    // h-a keeps its three newest; the oldest is still h-b0's, so it can be read.
    let page = list(&mut client, "h-a", "", "", 0, None).await.unwrap();
    assert_eq!(ids(&page.matches), [&played[3], &played[2], &played[1]]);
    assert!(page.next_page_token.is_empty());
    let first = list(&mut client, "h-a", "", "", 2, None).await.unwrap();
    assert_eq!(ids(&first.matches), [&played[3], &played[2]]);
    assert_eq!(first.next_page_token, played[2]);
    let second = list(&mut client, "h-a", "", &first.next_page_token, 2, None)
        .await
        .unwrap();
    assert_eq!(ids(&second.matches), [&played[1]]);
    assert!(second.next_page_token.is_empty());
    assert!(
        list(&mut client, "h-a", "2v2", "", 0, None)
            .await
            .unwrap()
            .matches
            .is_empty(),
        "filtered by queue"
    );
    let e = list(&mut client, "h-a", "", "m-not-in-history", 0, None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(
        ids(&list(&mut client, "h-b0", "", "", 0, None)
            .await
            .unwrap()
            .matches),
        [&played[0]]
    );
    get_match(&mut client, &played[0], None)
        .await
        .expect("h-b0's history still holds it");
    // Once h-b0 plays three more, no player holds the first match: it is gone.
    for i in 0..3 {
        let m = pair(&mut client, &mut offers, "h-b0", &format!("h-c{i}")).await;
        report(&mut gs, &m, "h-b0", None).await;
    }
    let e = get_match(&mut client, &played[0], None).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        list(&mut client, "nobody", "", "", 0, None)
            .await
            .unwrap()
            .matches
            .is_empty()
    );
}

/// Page limits and queues are checked as every other request checks them: a limit over the
/// most a page holds, or a queue the config does not define, is refused naming the field, not
/// clamped or answered with an empty page.
#[tokio::test]
async fn an_over_limit_page_or_an_unknown_queue_is_refused_naming_the_field() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    assert!(list(&mut client, "l-a", "", "", 100, None).await.is_ok());
    for (queue, limit, field) in [("", 101, "limit"), ("no-such-queue", 0, "queue")] {
        let e = list(&mut client, "l-a", queue, "", limit, None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with(field), "{e:?}");
    }
    let board = |limit| proto::GetLeaderboardRequest {
        queue: "1v1".into(),
        offset: 0,
        limit,
    };
    assert!(client.get_leaderboard(board(1000)).await.is_ok());
    let e = client.get_leaderboard(board(1001)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("limit"), "{e:?}");
}

#[tokio::test]
async fn a_match_cancelled_before_it_starts_requeues_its_tickets_and_after_it_frees_players() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let mut offers = common::serve(&mut gs, "gs-c:1").await;
    let ta = common::enter(&mut client, "1v1", &["c-a"]).await;
    let entered = std::time::Instant::now();
    let tb = common::enter(&mut client, "1v1", &["c-b"]).await;
    let m = next(&mut offers).await;
    let waited = entered.elapsed().as_secs_f64();

    let mut expected = vec![ta.clone(), tb.clone()];
    expected.sort();
    assert_eq!(cancel(&mut gs, &m.match_id, None).await.unwrap(), expected);
    // Back at the front of the queue, the same two tickets are matched again, wait kept.
    let again = next(&mut offers).await;
    assert_ne!(again.match_id, m.match_id);
    let u = active(&mut client, "c-a", None).await.unwrap();
    assert_eq!(
        (u.ticket_id.as_str(), u.state),
        (ta.as_str(), proto::TicketState::Matched as i32)
    );
    assert!(
        u.wait_seconds >= waited,
        "wait kept: {} < {waited}",
        u.wait_seconds
    );
    assert_eq!(u.assignment.unwrap().match_id, again.match_id);
    let record = get_match(&mut client, &m.match_id, None).await.unwrap();
    assert_eq!(
        (record.phase, record.server_address.as_str()),
        (proto::MatchPhase::Cancelled as i32, "gs-c:1")
    );
    assert!(record.ended_unix > 0 && record.placements.is_empty());
    let history = list(&mut client, "c-b", "", "", 0, None).await.unwrap();
    assert_eq!(ids(&history.matches), [m.match_id.as_str()]);
    assert!(
        cancel(&mut gs, &m.match_id, None).await.unwrap().is_empty(),
        "a repeated cancel is answered OK, requeueing nothing"
    );
    let e = start(&mut gs, &m.match_id, None).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

    // Once started, a cancel ends the match and frees its players.
    start(&mut gs, &again.match_id, None).await.unwrap();
    assert!(
        cancel(&mut gs, &again.match_id, None)
            .await
            .unwrap()
            .is_empty()
    );
    for p in ["c-a", "c-b"] {
        let e = active(&mut client, p, None).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{p} is free");
    }
    assert_eq!(
        list(&mut client, "c-a", "", "", 0, None)
            .await
            .unwrap()
            .matches
            .len(),
        2
    );
    // Both cancels are in the event log, the one before the start as the one after it.
    let cancelled = common::watch_events(
        &server.channel().await,
        0,
        &[proto::EventKind::MatchCancelled],
        2,
    )
    .await;
    let mut ids: Vec<&str> = cancelled.iter().map(|e| e.match_id.as_str()).collect();
    ids.sort_unstable();
    let mut expected = vec![m.match_id.as_str(), again.match_id.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    common::enter(&mut client, "1v1", &["c-a"]).await;
}

async fn serve_with_capacity(
    gs: &mut GameServerServiceClient<Channel>,
    address: &str,
    capacity: u32,
) -> tonic::Streaming<proto::MatchAssignment> {
    gs.serve_matches(proto::ServeMatchesRequest {
        server_address: address.into(),
        capacity,
        ..Default::default()
    })
    .await
    .expect("serve_matches")
    .into_inner()
}

#[tokio::test]
async fn a_server_that_connects_again_gets_its_unstarted_matches_again_and_keeps_its_capacity() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let mut offers = serve_with_capacity(&mut gs, "gs-r:1", 2).await;
    let unstarted = pair(&mut client, &mut offers, "r-a", "r-b").await;
    let started = pair(&mut client, &mut offers, "r-c", "r-d").await;
    start(&mut gs, &started.match_id, None).await.unwrap();

    // The stream breaks (a network blip, a restart of the server's process): it connects again
    // and first gets the match it had not started, which the old stream may have lost.
    drop(offers);
    let mut offers = serve_with_capacity(&mut gs, "gs-r:1", 2).await;
    let again = next(&mut offers).await;
    assert_eq!(
        (again.match_id.as_str(), again.server_address.as_str()),
        (unstarted.match_id.as_str(), "gs-r:1")
    );
    // The two matches it holds fill its capacity of 2: the next match waits for room.
    common::enter(&mut client, "1v1", &["r-e"]).await;
    common::enter(&mut client, "1v1", &["r-f"]).await;
    let early = tokio::time::timeout(std::time::Duration::from_secs(1), offers.message()).await;
    assert!(early.is_err(), "a match past the capacity: {early:?}");
    // A result frees room, and the waiting match comes.
    report(&mut gs, &unstarted, "r-a", None).await;
    let third = next(&mut offers).await;
    let mut players: Vec<String> = third
        .teams
        .iter()
        .flat_map(|t| t.player_ids.clone())
        .collect();
    players.sort();
    assert_eq!(players, ["r-e", "r-f"]);
}

#[tokio::test]
async fn a_formed_match_no_server_took_is_not_started_and_its_cancel_requeues() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let a = common::form_match(&mut client, "1v1", &[&["f-a"], &["f-b"]]).await;
    let formed = get_match(&mut client, &a.match_id, None).await.unwrap();
    assert_eq!(formed.phase, proto::MatchPhase::Formed as i32);
    let e = start(&mut gs, &a.match_id, None).await.unwrap_err();
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "no server has it: {e:?}"
    );
    assert_eq!(cancel(&mut gs, &a.match_id, None).await.unwrap().len(), 2);
    // No server took it: it never reached a game, so no history.
    assert!(
        list(&mut client, "f-a", "", "", 0, None)
            .await
            .unwrap()
            .matches
            .is_empty()
    );
    let e = start(&mut gs, "m-unknown", None).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

async fn party_call<T>(
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    fut.await.map(tonic::Response::into_inner)
}

#[tokio::test]
async fn a_party_is_made_joined_entered_by_id_and_left() {
    let server = TestServer::start("").await;
    let mut parties = PartyServiceClient::new(server.channel().await);
    let mut client = server.client().await;
    let p = party_call(parties.create_party(proto::CreatePartyRequest {
        player_id: "pt-lead".into(),
    }))
    .await
    .unwrap();
    assert_eq!(
        (p.member_ids.clone(), p.leader_id.as_str()),
        (vec!["pt-lead".to_string()], "pt-lead")
    );
    let e = party_call(parties.create_party(proto::CreatePartyRequest {
        player_id: "pt-lead".into(),
    }))
    .await
    .unwrap_err();
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "one party per player: {e:?}"
    );
    let joined = party_call(parties.join_party(proto::JoinPartyRequest {
        invite_code: p.invite_code.to_lowercase(),
        player_id: "pt-mate".into(),
    }))
    .await
    .unwrap();
    assert_eq!(joined.member_ids, ["pt-lead", "pt-mate"]);
    let e = party_call(parties.join_party(proto::JoinPartyRequest {
        invite_code: "ZZZZZZZZ".into(),
        player_id: "pt-x".into(),
    }))
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // The leader enters the whole party by id.
    let enter = |party_id: &str, players: &[&str]| proto::EnterQueueRequest {
        queue: "2v2".into(),
        party_id: party_id.into(),
        player_ids: players.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };
    let e = client
        .enter_queue(enter(&p.party_id, &["pt-lead"]))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::InvalidArgument,
        "party_id or player_ids: {e:?}"
    );
    let e = client
        .enter_queue(enter("party-none", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let ticket = client
        .enter_queue(enter(&p.party_id, &[]))
        .await
        .unwrap()
        .into_inner()
        .ticket_id;
    let u = active(&mut client, "pt-mate", None).await.unwrap();
    assert_eq!(u.ticket_id, ticket, "one ticket for the party");
    let e = client
        .enter_queue(enter("", &["pt-mate"]))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "already queued with the party"
    );
    client
        .cancel_ticket(proto::CancelTicketRequest { ticket_id: ticket })
        .await
        .unwrap();

    // The leader leaves: the lead passes on; the last member ends the party.
    let left = party_call(parties.leave_party(proto::LeavePartyRequest {
        party_id: p.party_id.clone(),
        player_id: "pt-lead".into(),
    }))
    .await
    .unwrap();
    assert_eq!(
        (left.member_ids.clone(), left.leader_id.as_str()),
        (vec!["pt-mate".to_string()], "pt-mate")
    );
    let got = party_call(parties.get_party(proto::GetPartyRequest {
        party_id: p.party_id.clone(),
    }))
    .await
    .unwrap();
    // The one who left gets no invite code back; the members still read it.
    assert!(left.invite_code.is_empty());
    assert_eq!(got.invite_code, p.invite_code);
    assert_eq!(
        got,
        proto::Party {
            invite_code: p.invite_code.clone(),
            ..left
        }
    );
    let ended = party_call(parties.leave_party(proto::LeavePartyRequest {
        party_id: p.party_id.clone(),
        player_id: "pt-mate".into(),
    }))
    .await
    .unwrap();
    assert!(ended.member_ids.is_empty());
    let e = party_call(parties.get_party(proto::GetPartyRequest {
        party_id: p.party_id.clone(),
    }))
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
}

/// A party entry refused because a member still waits alone stores no party rating: the
/// party's record is made by the entry that creates its ticket, from its members' ratings
/// then (here after the member's ticket played and moved their rating).
#[tokio::test]
async fn a_refused_party_entry_stores_no_party_rating() {
    let dir = tempfile::tempdir().unwrap();
    let config = matchmaker::config::Config::from_toml_str("").unwrap();
    let system = &config.queues["2v2"].rating;
    let mate_after = {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut parties = PartyServiceClient::new(server.channel().await);
        let mut client = server.client().await;
        let p = party_call(parties.create_party(proto::CreatePartyRequest {
            player_id: "rp-lead".into(),
        }))
        .await
        .unwrap();
        party_call(parties.join_party(proto::JoinPartyRequest {
            invite_code: p.invite_code.clone(),
            player_id: "rp-mate".into(),
        }))
        .await
        .unwrap();
        let solo = enter(&mut client, "2v2", &["rp-mate"]).await;
        let by_id = || proto::EnterQueueRequest {
            queue: "2v2".into(),
            party_id: p.party_id.clone(),
            ..Default::default()
        };
        let by_players = proto::EnterQueueRequest {
            queue: "2v2".into(),
            player_ids: vec!["rp-lead".into(), "rp-mate".into()],
            ..Default::default()
        };
        for request in [by_id(), by_players] {
            let e = client.enter_queue(request).await.unwrap_err();
            assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        }
        // The mate's ticket plays and wins.
        for other in ["rp-x", "rp-y", "rp-z"] {
            enter(&mut client, "2v2", &[other]).await;
        }
        let mut updates = watch(&mut client, &solo).await;
        let assignment = loop {
            let u = next(&mut updates).await;
            if let Some(a) = u.assignment {
                break a;
            }
        };
        report_winner(&server, &assignment, "rp-mate").await;
        let mate = player(&server, "rp-mate", "2v2").await;
        assert_eq!((mate.games, mate.status.as_str()), (1, "idle"), "{mate:?}");
        client.enter_queue(by_id()).await.expect("the party enters");
        server.stop().await.unwrap();
        skill(mate.rating.as_ref().unwrap())
    };
    let store = matchmaker::store::open(dir.path(), &config.store).unwrap();
    let stored = store.load_parties().unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].0, "rp-lead\u{1f}rp-mate");
    let record = &stored[0].1["2v2"];
    let expected = matchmaker::rating::party_initial(system, &[system.initial(), mate_after]);
    assert!(
        same_skill(&record.skill, &expected),
        "made from the ratings at the entry: {record:?}, expected {expected:?}"
    );
    assert_eq!(record.games, 0);
}

/// The stored activity time of the one party in the store at `dir`, read with the server
/// stopped (each stop writes every party).
fn party_active_unix(dir: &std::path::Path) -> f64 {
    let config = matchmaker::config::Config::from_toml_str("").unwrap();
    let store = matchmaker::store::open(dir, &config.store).unwrap();
    let rosters = store.load_rosters().unwrap();
    assert_eq!(rosters.len(), 1, "{rosters:?}");
    rosters[0].active_unix
}

/// An entry by party id that is refused (too large a party, a role error, a banned member, a
/// member already queued) leaves the party's idle clock where it was, so a refused call does
/// not keep the party from expiring; an entry that creates the ticket moves it.
#[tokio::test]
async fn a_refused_entry_by_party_id_does_not_keep_the_party_from_expiring() {
    let dir = tempfile::tempdir().unwrap();
    let party_id = {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut parties = PartyServiceClient::new(server.channel().await);
        let p = party_call(parties.create_party(proto::CreatePartyRequest {
            player_id: "ip-lead".into(),
        }))
        .await
        .unwrap();
        party_call(parties.join_party(proto::JoinPartyRequest {
            invite_code: p.invite_code.clone(),
            player_id: "ip-mate".into(),
        }))
        .await
        .unwrap();
        server.stop().await.unwrap();
        p.party_id
    };
    let active = party_active_unix(dir.path());
    let by_id = |queue: &str, roles: &[&str]| proto::EnterQueueRequest {
        queue: queue.into(),
        party_id: party_id.clone(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        ..Default::default()
    };
    {
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut client = server.client().await;
        let mut admin = server.admin().await;
        let refused = async |client: &mut ClientServiceClient<Channel>, request, code| {
            let e = client.enter_queue(request).await.unwrap_err();
            assert_eq!(e.code(), code, "{e:?}");
        };
        refused(&mut client, by_id("1v1", &[]), Code::InvalidArgument).await;
        refused(&mut client, by_id("2v2", &["tank"]), Code::InvalidArgument).await;
        admin
            .ban_player(proto::BanPlayerRequest {
                player_id: "ip-mate".into(),
                until_unix: 0,
                reason: "test".into(),
            })
            .await
            .unwrap();
        refused(&mut client, by_id("2v2", &[]), Code::PermissionDenied).await;
        admin
            .unban_player(proto::UnbanPlayerRequest {
                player_id: "ip-mate".into(),
            })
            .await
            .unwrap();
        enter(&mut client, "2v2", &["ip-mate"]).await;
        refused(&mut client, by_id("2v2", &[]), Code::FailedPrecondition).await;
        server.stop().await.unwrap();
    }
    assert_eq!(party_active_unix(dir.path()), active, "untouched");
    {
        // The mate's ticket is not kept across the restart: the party enters.
        let mut server = TestServer::start_in(dir.path(), "").await;
        let mut client = server.client().await;
        client.enter_queue(by_id("2v2", &[])).await.unwrap();
        server.stop().await.unwrap();
    }
    assert!(
        party_active_unix(dir.path()) > active,
        "touched by the entry"
    );
}

#[tokio::test]
async fn with_auth_a_player_names_only_itself_and_reads_only_its_own_records() {
    let server = TestServer::start(&auth_on()).await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let mut parties = PartyServiceClient::new(server.channel().await);
    let (alice, bob, carol) = (
        token("alice", "player"),
        token("bob", "player"),
        token("carol", "player"),
    );
    let (gs1, gs2, admin) = (
        token("gs-1", "server"),
        token("gs-2", "server"),
        token("root", "admin"),
    );
    let enter = |players: &[&str], party: &str, tok: &str| {
        with(
            proto::EnterQueueRequest {
                queue: "2v2".into(),
                player_ids: players.iter().map(|p| p.to_string()).collect(),
                party_id: party.into(),
                ..Default::default()
            },
            Some(tok),
        )
    };

    // A ticket names only the caller: another player, or a party by ids, is refused.
    for players in [&["bob"][..], &["alice", "bob"][..]] {
        let e = client
            .enter_queue(enter(players, "", &alice))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{players:?}: {e:?}");
    }
    // Parties: each acts as itself; only members read the party; only the leader enters it.
    let e = party_call(parties.create_party(with(
        proto::CreatePartyRequest {
            player_id: "bob".into(),
        },
        Some(&alice),
    )))
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = party_call(parties.create_party(with(
        proto::CreatePartyRequest {
            player_id: "gs-1".into(),
        },
        Some(&gs1),
    )))
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "servers have no parties");
    let p = party_call(parties.create_party(with(
        proto::CreatePartyRequest {
            player_id: "alice".into(),
        },
        Some(&alice),
    )))
    .await
    .unwrap();
    party_call(parties.join_party(with(
        proto::JoinPartyRequest {
            invite_code: p.invite_code.clone(),
            player_id: "bob".into(),
        },
        Some(&bob),
    )))
    .await
    .unwrap();
    let get = |tok: &str| {
        with(
            proto::GetPartyRequest {
                party_id: p.party_id.clone(),
            },
            Some(tok),
        )
    };
    // A player outside the party is answered as for a party that does not exist (it was
    // PERMISSION_DENIED, which told that the party exists): by GetParty, and by EnterQueue
    // before the party's size or leader is checked.
    let unknown = format!("party {:?} not found", p.party_id);
    let e = party_call(parties.get_party(get(&carol)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "not a member: {e:?}");
    assert_eq!(e.message(), unknown);
    let e = client
        .enter_queue(enter(&[], &p.party_id, &carol))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "not a member: {e:?}");
    assert_eq!(e.message(), unknown);
    let e = client
        .enter_queue(enter(&[], "party-never-made", &carol))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::NotFound, "party \"party-never-made\" not found")
    );
    // Leaving a party one is not in changes nothing and tells nothing of it: no members, no
    // leader, no invite code (GetParty tells them to its members only).
    let left = party_call(parties.leave_party(with(
        proto::LeavePartyRequest {
            party_id: p.party_id.clone(),
            player_id: "carol".into(),
        },
        Some(&carol),
    )))
    .await
    .expect("carol was in no party");
    assert_eq!(left.party_id, p.party_id);
    assert!(left.member_ids.is_empty(), "{left:?}");
    assert!(left.leader_id.is_empty(), "{left:?}");
    assert!(left.invite_code.is_empty(), "{left:?}");
    let members = party_call(parties.get_party(get(&alice))).await.unwrap();
    assert_eq!(members.member_ids, ["alice", "bob"], "nothing changed");
    party_call(parties.get_party(get(&bob)))
        .await
        .expect("a member reads it");
    party_call(parties.get_party(get(&admin)))
        .await
        .expect("an admin reads it");
    let e = client
        .enter_queue(enter(&[], &p.party_id, &bob))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::PermissionDenied,
        "only the leader enters it: {e:?}"
    );
    let party_ticket = client
        .enter_queue(enter(&[], &p.party_id, &alice))
        .await
        .expect("the leader enters the party")
        .into_inner()
        .ticket_id;

    // GetActiveTicket: only about oneself (or as an admin); servers may not ask.
    assert_eq!(
        active(&mut client, "bob", Some(&bob))
            .await
            .unwrap()
            .ticket_id,
        party_ticket
    );
    for (tok, what) in [(&carol, "another player"), (&gs1, "a server")] {
        let e = active(&mut client, "bob", Some(tok)).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{what}: {e:?}");
    }
    active(&mut client, "bob", Some(&admin))
        .await
        .expect("an admin asks");

    // A match on gs-1: read by its players, its server and admins only.
    let mut offers = gs
        .serve_matches(with(
            proto::ServeMatchesRequest {
                server_address: "gs-1".into(),
                ..Default::default()
            },
            Some(&gs1),
        ))
        .await
        .unwrap()
        .into_inner();
    let party2 = party_call(parties.create_party(with(
        proto::CreatePartyRequest {
            player_id: "carol".into(),
        },
        Some(&carol),
    )))
    .await
    .unwrap();
    let dave = token("dave", "player");
    party_call(parties.join_party(with(
        proto::JoinPartyRequest {
            invite_code: party2.invite_code.clone(),
            player_id: "dave".into(),
        },
        Some(&dave),
    )))
    .await
    .unwrap();
    client
        .enter_queue(enter(&[], &party2.party_id, &carol))
        .await
        .unwrap();
    let m = next(&mut offers).await;
    let outsider = token("eve", "player");
    for (tok, ok) in [
        (&alice, true),
        (&dave, true),
        (&gs1, true),
        (&admin, true),
        (&outsider, false),
        (&gs2, false),
    ] {
        let got = get_match(&mut client, &m.match_id, Some(tok)).await;
        assert_eq!(got.is_ok(), ok, "{got:?}");
        if let Err(e) = got {
            assert_eq!(e.code(), Code::PermissionDenied);
        }
    }
    // Only its own server starts and cancels it.
    let e = start(&mut gs, &m.match_id, Some(&gs2)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = start(&mut gs, &m.match_id, Some(&alice)).await.unwrap_err();
    assert_eq!(
        e.code(),
        Code::PermissionDenied,
        "players do not start matches"
    );
    start(&mut gs, &m.match_id, Some(&gs1)).await.unwrap();
    report(&mut gs, &m, "alice", Some(&gs1)).await;

    // The history: the player itself and admins; a server sees only what it hosted.
    for (tok, ok) in [(&alice, true), (&admin, true), (&bob, false)] {
        let got = list(&mut client, "alice", "", "", 0, Some(tok)).await;
        match got {
            Ok(page) => {
                assert!(ok);
                assert_eq!(ids(&page.matches), [m.match_id.as_str()]);
            }
            Err(e) => {
                assert!(!ok);
                assert_eq!(e.code(), Code::PermissionDenied);
            }
        }
    }
    let hosted = list(&mut client, "alice", "", "", 0, Some(&gs1))
        .await
        .unwrap();
    assert_eq!(ids(&hosted.matches), [m.match_id.as_str()]);
    let elsewhere = list(&mut client, "alice", "", "", 0, Some(&gs2))
        .await
        .unwrap();
    assert!(elsewhere.matches.is_empty(), "gs-2 hosted none of them");
    for (tok, ok) in [
        (&dave, true),
        (&gs1, true),
        (&outsider, false),
        (&gs2, false),
    ] {
        let got = get_match(&mut client, &m.match_id, Some(tok)).await;
        assert_eq!(got.is_ok(), ok, "ended: {got:?}");
    }
    let e = get_match(&mut client, &m.match_id, None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
}

/// Runs `matchmaker admin ARGS --json` against `server`; returns the printed JSON.
async fn cli(server: &TestServer, args: &[&str]) -> serde_json::Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_matchmaker"))
        .arg("admin")
        .args(args)
        .args(["--addr", &format!("http://{}", server.addr), "--json"])
        .output()
        .await
        .expect("run matchmaker admin");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test]
async fn the_admin_cli_reads_matches_tickets_and_parties_and_cancels_a_match() {
    let server = TestServer::start("").await;
    let mut client = server.client().await;
    let mut gs = server.game_server().await;
    let mut offers = common::serve(&mut gs, "gs-cli:1").await;
    let m = pair(&mut client, &mut offers, "cli-a", "cli-b").await;
    let active = cli(&server, &["active-ticket", "--player", "cli-a"]).await;
    assert_eq!(active["state"], "MATCHED");
    assert_eq!(active["match_id"], m.match_id.as_str());
    assert_eq!(active["server_address"], "gs-cli:1");
    let live = cli(&server, &["match", "--id", &m.match_id]).await;
    assert_eq!(live["phase"], "ALLOCATED");
    let cancelled = cli(&server, &["cancel-match", "--id", &m.match_id]).await;
    assert_eq!(
        cancelled["requeued_ticket_ids"].as_array().unwrap().len(),
        2
    );
    let again = next(&mut offers).await;
    report(&mut gs, &again, "cli-a", None).await;
    let page = cli(&server, &["matches", "--player", "cli-a", "--limit", "1"]).await;
    assert_eq!(page["matches"][0]["match_id"], again.match_id.as_str());
    assert_eq!(page["matches"][0]["phase"], "COMPLETED");
    assert_eq!(page["matches"][0]["changes"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_page_token"], again.match_id.as_str());
    let older = cli(
        &server,
        &[
            "matches",
            "--player",
            "cli-a",
            "--page-token",
            &again.match_id,
        ],
    )
    .await;
    assert_eq!(older["matches"][0]["phase"], "CANCELLED");

    let p = party_call(
        PartyServiceClient::new(server.channel().await).create_party(proto::CreatePartyRequest {
            player_id: "cli-lead".into(),
        }),
    )
    .await
    .unwrap();
    let shown = cli(&server, &["party", "--id", &p.party_id]).await;
    assert_eq!(shown["invite_code"], p.invite_code.as_str());
    assert_eq!(shown["leader_id"], "cli-lead");
}
