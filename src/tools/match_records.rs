//! `matchmaker admin match | matches | active-ticket | party | cancel-match`: the records calls
//! (`ClientService`, `GameServerService`, `PartyService`) made with the admin's token, printed
//! as text or, with `--json`, as one JSON object.

use std::io::Write;

use serde_json::json;
use tonic::transport::Channel;

use super::admin::{AdminCliError, AdminCommand, Bearer, rating_json};
use crate::proto;
use crate::proto::client_service_client::ClientServiceClient;
use crate::proto::game_server_service_client::GameServerServiceClient;
use crate::proto::party_service_client::PartyServiceClient;

fn phase_name(phase: i32) -> &'static str {
    match proto::MatchPhase::try_from(phase) {
        Ok(proto::MatchPhase::Formed) => "FORMED",
        Ok(proto::MatchPhase::Allocated) => "ALLOCATED",
        Ok(proto::MatchPhase::Started) => "STARTED",
        Ok(proto::MatchPhase::Completed) => "COMPLETED",
        Ok(proto::MatchPhase::Cancelled) => "CANCELLED",
        _ => "UNSPECIFIED",
    }
}

fn teams_json(teams: &[proto::Team]) -> serde_json::Value {
    json!(teams.iter().map(|t| &t.player_ids).collect::<Vec<_>>())
}

fn match_json(m: &proto::MatchRecord) -> serde_json::Value {
    let changes: Vec<_> = m
        .changes
        .iter()
        .map(|c| {
            json!({"player_id": c.player_id, "before": rating_json(c.before.as_ref()),
                   "after": rating_json(c.after.as_ref()),
                   "rank_points_before": c.rank_points_before,
                   "rank_points_after": c.rank_points_after})
        })
        .collect();
    json!({"match_id": m.match_id, "queue": m.queue, "phase": phase_name(m.phase),
           "teams": teams_json(&m.teams), "placements": m.placements, "changes": changes,
           "server_address": m.server_address, "formed_unix": m.formed_unix,
           "started_unix": m.started_unix, "ended_unix": m.ended_unix})
}

fn match_line(m: &proto::MatchRecord) -> String {
    let teams: Vec<String> = m.teams.iter().map(|t| t.player_ids.join(",")).collect();
    let placements: Vec<String> = m.placements.iter().map(ToString::to_string).collect();
    format!(
        "{}\t{}\t{}\t{}\tplacements [{}]\tserver {}\tformed {} started {} ended {}",
        m.match_id,
        m.queue,
        phase_name(m.phase),
        teams.join(" vs "),
        placements.join(","),
        if m.server_address.is_empty() {
            "-"
        } else {
            &m.server_address
        },
        m.formed_unix,
        m.started_unix,
        m.ended_unix
    )
}

fn party_json(p: &proto::Party) -> serde_json::Value {
    json!({"party_id": p.party_id, "invite_code": p.invite_code, "member_ids": p.member_ids,
           "leader_id": p.leader_id})
}

/// Runs one records command.
pub(super) async fn run(
    channel: Channel,
    bearer: Bearer,
    json: bool,
    command: AdminCommand,
    out: &mut impl Write,
) -> Result<(), AdminCliError> {
    let mut client = ClientServiceClient::with_interceptor(channel.clone(), bearer.clone());
    match command {
        AdminCommand::Match { id } => {
            let m = client
                .get_match(proto::GetMatchRequest { match_id: id })
                .await?
                .into_inner();
            if json {
                writeln!(out, "{}", match_json(&m))?;
            } else {
                writeln!(out, "{}", match_line(&m))?;
                for c in &m.changes {
                    let (before, after) = (
                        c.before.as_ref().map_or(0.0, |r| r.display),
                        c.after.as_ref().map_or(0.0, |r| r.display),
                    );
                    writeln!(
                        out,
                        "  {}\trating {before:.2} -> {after:.2}\trp {} -> {}",
                        c.player_id, c.rank_points_before, c.rank_points_after
                    )?;
                }
            }
        }
        AdminCommand::Matches {
            player,
            queue,
            limit,
            page_token,
        } => {
            let page = client
                .list_player_matches(proto::ListPlayerMatchesRequest {
                    player_id: player,
                    queue: queue.unwrap_or_default(),
                    page_token: page_token.unwrap_or_default(),
                    limit,
                })
                .await?
                .into_inner();
            if json {
                let matches: Vec<_> = page.matches.iter().map(match_json).collect();
                writeln!(
                    out,
                    "{}",
                    json!({"matches": matches, "next_page_token": page.next_page_token})
                )?;
            } else {
                for m in &page.matches {
                    writeln!(out, "{}", match_line(m))?;
                }
                if page.next_page_token.is_empty() {
                    writeln!(out, "{} matches; no more", page.matches.len())?;
                } else {
                    writeln!(
                        out,
                        "{} matches; next page: --page-token {}",
                        page.matches.len(),
                        page.next_page_token
                    )?;
                }
            }
        }
        AdminCommand::ActiveTicket { player } => {
            let t = client
                .get_active_ticket(proto::GetActiveTicketRequest { player_id: player })
                .await?
                .into_inner();
            let state =
                proto::TicketState::try_from(t.state).map_or("UNSPECIFIED", |s| s.as_str_name());
            let a = t.assignment.as_ref();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"ticket_id": t.ticket_id, "state": state,
                           "wait_seconds": t.wait_seconds, "reason": t.reason,
                           "match_id": a.map(|a| a.match_id.clone()),
                           "server_address": a.map(|a| a.server_address.clone()),
                           "teams": a.map(|a| teams_json(&a.teams))})
                )?;
            } else {
                writeln!(
                    out,
                    "ticket {}\t{state}\twaited {:.1}s{}",
                    if t.ticket_id.is_empty() {
                        "-"
                    } else {
                        &t.ticket_id
                    },
                    t.wait_seconds,
                    a.map_or(String::new(), |a| format!(
                        "\tmatch {} server {}",
                        a.match_id,
                        if a.server_address.is_empty() {
                            "-"
                        } else {
                            &a.server_address
                        }
                    ))
                )?;
            }
        }
        AdminCommand::Party { id } => {
            let p = PartyServiceClient::with_interceptor(channel, bearer)
                .get_party(proto::GetPartyRequest { party_id: id })
                .await?
                .into_inner();
            if json {
                writeln!(out, "{}", party_json(&p))?;
            } else {
                writeln!(
                    out,
                    "party {}\tcode {}\tleader {}\tmembers {}",
                    p.party_id,
                    p.invite_code,
                    p.leader_id,
                    p.member_ids.join(",")
                )?;
            }
        }
        AdminCommand::CancelMatch { id, reason } => {
            let r = GameServerServiceClient::with_interceptor(channel, bearer)
                .cancel_match(proto::CancelMatchRequest {
                    match_id: id.clone(),
                    reason,
                })
                .await?
                .into_inner();
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"match_id": id, "requeued_ticket_ids": r.requeued_ticket_ids})
                )?;
            } else if r.requeued_ticket_ids.is_empty() {
                writeln!(out, "match {id} cancelled; no ticket requeued")?;
            } else {
                writeln!(
                    out,
                    "match {id} cancelled; tickets back in their queues: {}",
                    r.requeued_ticket_ids.join(",")
                )?;
            }
        }
        _ => {
            return Err(AdminCliError::Usage("not a records command".to_string()));
        }
    }
    Ok(())
}
