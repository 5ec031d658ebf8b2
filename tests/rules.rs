//! Match rules over real gRPC: ranked never meets casual, disjoint map preferences never meet,
//! an avoid-list holds both ways, and the match reports the common map to the ticket and to the
//! game server. "Never" is checked past the starvation wait (the server's injected clock is
//! advanced, never slept on): a starving ticket takes any legal opponent, so waiting then
//! proves there was none.

mod common;

use common::{TestServer, next, poll_until, serve};
use matchmaker::proto::attribute_value::Value;
use matchmaker::proto::client_service_client::ClientServiceClient;
use matchmaker::proto::{self, AttributeValue, TicketState, TicketUpdate};
use tonic::Code;
use tonic::transport::Channel;

/// The 1v1 queue with rules; the heartbeat is off so unwatched tickets wait through the clock
/// jumps instead of expiring (which would make "never met" trivially true).
const RULES: &str = r#"
[server]
ticket_heartbeat_seconds = 0.0

[[queues.1v1.rules]]
kind = "equal"
attribute = "mode"

[[queues.1v1.rules]]
kind = "intersect"
attribute = "maps"

[[queues.1v1.rules]]
kind = "avoid"
"#;

fn text(v: &str) -> AttributeValue {
    AttributeValue {
        value: Some(Value::Text(v.into())),
    }
}

fn tags(v: &[&str]) -> AttributeValue {
    AttributeValue {
        value: Some(Value::Tags(proto::StringList {
            values: v.iter().map(|s| s.to_string()).collect(),
        })),
    }
}

async fn enter(
    client: &mut ClientServiceClient<Channel>,
    player: &str,
    mode: &str,
    maps: &[&str],
    avoid: &[&str],
) -> String {
    client
        .enter_queue(proto::EnterQueueRequest {
            queue: "1v1".into(),
            player_ids: vec![player.into()],
            attributes: [("mode".into(), text(mode)), ("maps".into(), tags(maps))].into(),
            avoid_player_ids: avoid.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        })
        .await
        .expect("enter_queue")
        .into_inner()
        .ticket_id
}

type Updates = tonic::Streaming<TicketUpdate>;

async fn watch(client: &mut ClientServiceClient<Channel>, ticket: &str) -> Updates {
    client
        .watch_ticket(proto::WatchTicketRequest {
            ticket_id: ticket.into(),
        })
        .await
        .expect("watch_ticket")
        .into_inner()
}

/// Advances the clock past the starvation wait and reads `ticket`'s updates until one says a
/// tick saw it starving (its window is unbounded) while it still waits.
async fn starve(server: &TestServer, updates: &mut Updates) {
    server.clock.advance(130.0);
    loop {
        let u = next(updates).await;
        assert_eq!(u.state, TicketState::Searching as i32, "{u:?}");
        if u.window_low == f64::NEG_INFINITY {
            return;
        }
    }
}

/// Reads updates until MATCHED; returns the assignment.
async fn matched(updates: &mut Updates) -> proto::MatchAssignment {
    loop {
        let u = next(updates).await;
        if u.state == TicketState::Matched as i32 {
            return u.assignment.expect("MATCHED carries the assignment");
        }
        assert_eq!(u.state, TicketState::Searching as i32, "{u:?}");
    }
}

fn players(a: &proto::MatchAssignment) -> Vec<String> {
    let mut p: Vec<String> = a.teams.iter().flat_map(|t| t.player_ids.clone()).collect();
    p.sort();
    p
}

#[tokio::test]
async fn ranked_never_meets_casual() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let r1 = enter(&mut client, "r1", "ranked", &["dust"], &[]).await;
    enter(&mut client, "c1", "casual", &["dust"], &[]).await;
    let mut updates = watch(&mut client, &r1).await;
    starve(&server, &mut updates).await;
    let admin = server.admin().await;
    let stat = poll_until("waiting per mode", || {
        let mut admin = admin.clone();
        async move {
            let stats = admin
                .get_queue_stats(proto::GetQueueStatsRequest {
                    queue: "1v1".into(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let by_value: Vec<(String, String, u64)> = stats.queues[0]
                .waiting_by_value
                .iter()
                .map(|w| (w.attribute.clone(), w.value.clone(), w.tickets))
                .collect();
            if by_value.len() == 2 {
                Ok(by_value)
            } else {
                Err(format!("{by_value:?}"))
            }
        }
    })
    .await;
    assert_eq!(
        stat,
        vec![
            ("mode".to_string(), "casual".to_string(), 1),
            ("mode".to_string(), "ranked".to_string(), 1)
        ]
    );
    enter(&mut client, "r2", "ranked", &["dust"], &[]).await;
    let a = matched(&mut updates).await;
    assert_eq!(players(&a), ["r1", "r2"]);
    assert_eq!(a.attributes["mode"], text("ranked"));
}

#[tokio::test]
async fn disjoint_maps_never_meet_and_the_match_reports_the_common_map() {
    let server = TestServer::start(RULES).await;
    let mut game_server = server.game_server().await;
    let mut assignments = serve(&mut game_server, "gs-1:7777").await;
    let mut client = server.client().await;
    let t1 = enter(&mut client, "m1", "ranked", &["dust", "nuke"], &[]).await;
    enter(&mut client, "m2", "ranked", &["inferno", "mirage"], &[]).await;
    let mut updates = watch(&mut client, &t1).await;
    starve(&server, &mut updates).await;
    // m3 shares a map with m1 only: m2 starves as well, so a map in common with m2 would make
    // either pairing legal.
    enter(&mut client, "m3", "ranked", &["nuke", "vertigo"], &[]).await;
    let a = matched(&mut updates).await;
    assert_eq!(players(&a), ["m1", "m3"]);
    assert_eq!(a.attributes["maps"], tags(&["nuke"]));
    let on_server = next(&mut assignments).await;
    assert_eq!(on_server.match_id, a.match_id);
    assert_eq!(on_server.attributes["maps"], tags(&["nuke"]));
    assert_eq!(on_server.attributes["mode"], text("ranked"));
}

#[tokio::test]
async fn an_avoid_list_holds_both_ways() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    // Pair one: the first ticket avoids the second; pair two: the second avoids the first.
    // Separate modes keep the pairs apart; within a pair only the avoid-list stands between
    // them (they share "nuke"), and the late ticket "e" can only meet "a" (it shares "dust").
    let a = enter(&mut client, "a", "one", &["dust", "nuke"], &["b"]).await;
    enter(&mut client, "b", "one", &["nuke"], &[]).await;
    let c = enter(&mut client, "c", "two", &["dust", "nuke"], &[]).await;
    enter(&mut client, "d", "two", &["nuke"], &["c"]).await;
    let mut a_updates = watch(&mut client, &a).await;
    let mut c_updates = watch(&mut client, &c).await;
    starve(&server, &mut a_updates).await;
    loop {
        let u = next(&mut c_updates).await;
        assert_eq!(u.state, TicketState::Searching as i32, "{u:?}");
        if u.window_low == f64::NEG_INFINITY {
            break;
        }
    }
    enter(&mut client, "e", "one", &["dust"], &[]).await;
    let m = matched(&mut a_updates).await;
    assert_eq!(players(&m), ["a", "e"]);
}

#[tokio::test]
async fn bad_attributes_are_invalid_argument_naming_the_key() {
    let server = TestServer::start(RULES).await;
    let mut client = server.client().await;
    let cases: Vec<(proto::EnterQueueRequest, &str)> = vec![
        (
            proto::EnterQueueRequest {
                attributes: [("mode".into(), tags(&["x"])), ("maps".into(), tags(&["a"]))].into(),
                ..Default::default()
            },
            "attributes[\"mode\"]",
        ),
        (
            proto::EnterQueueRequest {
                attributes: [("mode".into(), text("x"))].into(),
                ..Default::default()
            },
            "attributes[\"maps\"]",
        ),
        (
            proto::EnterQueueRequest {
                attributes: [
                    ("mode".into(), text("x")),
                    (
                        "maps".into(),
                        AttributeValue {
                            value: Some(Value::Number(f64::NAN)),
                        },
                    ),
                ]
                .into(),
                ..Default::default()
            },
            "attributes[\"maps\"]",
        ),
        (
            proto::EnterQueueRequest {
                attributes: [("mode".into(), text("x")), ("maps".into(), tags(&["a"]))].into(),
                avoid_player_ids: vec!["p".into()],
                ..Default::default()
            },
            "avoid_player_ids[0]",
        ),
    ];
    for (mut request, field) in cases {
        request.queue = "1v1".into();
        request.player_ids = vec!["p".into()];
        let status = client.enter_queue(request).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{field}: {status:?}");
    }
    // A queue without rules takes no avoid-list.
    let status = client
        .enter_queue(proto::EnterQueueRequest {
            queue: "2v2".into(),
            player_ids: vec!["q".into()],
            avoid_player_ids: vec!["r".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("avoid_player_ids"), "{status:?}");
}

/// The worked example in `config/rules-5v5.toml`: twelve tickets, of which exactly ten can
/// meet (a PC player cannot cross into the console group, a casual player cannot meet ranked
/// ones). The ten speak two languages and the language rule binds teammates, so the teams
/// split by language; each team gets its tank and its support; the match reports the mode and
/// the one map everybody accepts.
#[tokio::test]
async fn the_worked_5v5_example_forms_language_teams_on_the_common_map() {
    let example = include_str!("../config/rules-5v5.toml");
    let server = TestServer::start(example).await;
    let mut game_server = server.game_server().await;
    let mut assignments = serve(&mut game_server, "gs-5v5:7777").await;
    let mut client = server.client().await;
    let maps = [
        &["bind", "haven"][..],
        &["bind", "ascent"],
        &["ascent", "bind", "lotus"],
        &["bind"],
        &["bind", "haven", "split"],
    ];
    let mut tickets = Vec::new();
    for (language, platform) in [("en", "xbox"), ("de", "playstation")] {
        for (i, role) in ["tank", "support", "", "", ""].iter().enumerate() {
            let player = format!("{language}{i}");
            let ticket = client
                .enter_queue(proto::EnterQueueRequest {
                    queue: "5v5".into(),
                    player_ids: vec![player.clone()],
                    roles: if role.is_empty() {
                        vec![]
                    } else {
                        vec![role.to_string()]
                    },
                    attributes: [
                        ("mode".into(), text("ranked")),
                        ("platform".into(), text(platform)),
                        ("maps".into(), tags(maps[i])),
                        ("language".into(), tags(&[language])),
                    ]
                    .into(),
                    ..Default::default()
                })
                .await
                .expect("enter_queue")
                .into_inner()
                .ticket_id;
            tickets.push((player, ticket));
        }
    }
    for (player, mode, platform) in [("pc0", "ranked", "pc"), ("casual0", "casual", "xbox")] {
        client
            .enter_queue(proto::EnterQueueRequest {
                queue: "5v5".into(),
                player_ids: vec![player.into()],
                roles: vec!["tank".into()],
                attributes: [
                    ("mode".into(), text(mode)),
                    ("platform".into(), text(platform)),
                    ("maps".into(), tags(&["bind"])),
                    ("language".into(), tags(&["en"])),
                ]
                .into(),
                ..Default::default()
            })
            .await
            .expect("enter_queue");
    }
    let mut updates = watch(&mut client, &tickets[0].1).await;
    let a = matched(&mut updates).await;
    let mut expected: Vec<String> = tickets.iter().map(|(p, _)| p.clone()).collect();
    expected.sort();
    assert_eq!(players(&a), expected);
    for team in &a.teams {
        let language = &team.player_ids[0][..2];
        assert!(
            team.player_ids.iter().all(|p| p.starts_with(language)),
            "teams split by language: {:?}",
            a.teams
        );
        // Players 0 and 1 of each language are its tank and its support.
        assert!(team.player_ids.contains(&format!("{language}0")), "{a:?}");
        assert!(team.player_ids.contains(&format!("{language}1")), "{a:?}");
    }
    assert_eq!(a.attributes["mode"], text("ranked"));
    assert_eq!(a.attributes["maps"], tags(&["bind"]));
    let on_server = next(&mut assignments).await;
    assert_eq!(on_server.match_id, a.match_id);
    assert_eq!(on_server.attributes["maps"], tags(&["bind"]));
}
