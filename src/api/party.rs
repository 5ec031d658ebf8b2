//! `PartyService`: validate, change the party (written through the store under the parties'
//! lock), make it durable, answer.

use tonic::{Request, Response, Status};

use super::convert;
use super::records::party;
use crate::auth::{Identity, MayAct, Role};
use crate::ids::{PartyId, PlayerId};
use crate::matchmaker::Clock;
use crate::proto;
use crate::proto::party_service_server::PartyService;
use crate::records::PartyRoster;
use crate::rejection::Rejection;
use crate::state::{INVITE_CODE_LEN, State};

/// The party service.
pub struct Parties {
    pub state: State,
    /// The matchmaker loop's clock, which parties' idle time is measured on (its sweep ends
    /// idle parties on the same clock).
    pub clock: Clock,
}

impl Parties {
    /// A change is durable before it is answered.
    async fn durable(
        &self,
        roster: crate::records::PartyRoster,
    ) -> Result<Response<proto::Party>, Status> {
        self.state.store().flush_async().await?;
        Ok(Response::new(party(&roster)))
    }
}

/// A player token outside the party is told what a party that does not exist answers
/// (NOT_FOUND): a player learns nothing of another's party, not even that it exists. Admins
/// and callers with auth off are not asked.
pub(super) fn hidden_from_outsiders(
    identity: &Option<Identity>,
    roster: &PartyRoster,
) -> Result<(), Rejection> {
    match identity {
        Some(id)
            if id.role == Role::Player && !roster.members.iter().any(|m| m.as_str() == id.sub) =>
        {
            Err(Rejection::NotFound {
                what: "party",
                id: roster.party_id.to_string(),
            })
        }
        _ => Ok(()),
    }
}

fn invite_code(code: &str) -> Result<(), Rejection> {
    if code.len() != INVITE_CODE_LEN || !code.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Rejection::invalid(
            "invite_code",
            format!(
                "must be {INVITE_CODE_LEN} letters and digits (got {:?})",
                code.chars().take(32).collect::<String>()
            ),
        ));
    }
    Ok(())
}

#[tonic::async_trait]
impl PartyService for Parties {
    async fn create_party(
        &self,
        request: Request<proto::CreatePartyRequest>,
    ) -> Result<Response<proto::Party>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::new_player_id("player_id", &req.player_id)?;
        identity.may_be(&req.player_id, "create a party")?;
        let roster = self
            .state
            .create_party(&PlayerId::new(req.player_id.as_str()), self.clock.now())?;
        self.durable(roster).await
    }

    async fn join_party(
        &self,
        request: Request<proto::JoinPartyRequest>,
    ) -> Result<Response<proto::Party>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        invite_code(&req.invite_code)?;
        convert::new_player_id("player_id", &req.player_id)?;
        identity.may_be(&req.player_id, "join a party")?;
        let roster = self.state.join_party(
            &req.invite_code,
            &PlayerId::new(req.player_id.as_str()),
            self.clock.now(),
        )?;
        self.durable(roster).await
    }

    async fn leave_party(
        &self,
        request: Request<proto::LeavePartyRequest>,
    ) -> Result<Response<proto::Party>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("party_id", &req.party_id)?;
        convert::id("player_id", &req.player_id)?;
        identity.may_be(&req.player_id, "leave a party")?;
        let (mut roster, was_member) = self.state.leave_party(
            &PartyId::new(req.party_id.as_str()),
            &PlayerId::new(req.player_id.as_str()),
            self.clock.now(),
        )?;
        if !was_member
            && identity
                .may_act_for(&roster.members, "read this party")
                .is_err()
        {
            // A player who is not in the party learns nothing of it (who is in it, who leads),
            // as `GetParty` tells it only to its members.
            roster.members.clear();
            roster.leader = PlayerId::new("");
        }
        let mut answer = self.durable(roster).await?;
        // The caller is in the party no more (or never was): the code that lets players join
        // it is for its members only.
        answer.get_mut().invite_code.clear();
        Ok(answer)
    }

    async fn get_party(
        &self,
        request: Request<proto::GetPartyRequest>,
    ) -> Result<Response<proto::Party>, Status> {
        let identity = request.extensions().get::<Identity>().cloned();
        let req = request.into_inner();
        convert::id("party_id", &req.party_id)?;
        let may = |members: &[PlayerId]| identity.may_act_for(members, "read this party");
        let roster = self.state.party_roster(
            &PartyId::new(req.party_id.as_str()),
            self.clock.now(),
            |r| may(&r.members).is_ok(),
        )?;
        hidden_from_outsiders(&identity, &roster)?;
        may(&roster.members)?;
        Ok(Response::new(party(&roster)))
    }
}
