//! The API's methods a front treats apart: the streams that continue on the next owner, the
//! calls never sent twice, and the streams that end when the owner changes.

/// Streams that continue on the next owner.
pub(super) const RESUMABLE: &[&str] = &[
    "/matchmaker.v1.ClientService/WatchTicket",
    "/matchmaker.v1.GameServerService/ServeMatches",
];
/// Calls that are not sent again once they may have reached an engine.
pub(super) const ONCE: &[&str] = &[
    "/matchmaker.v1.AdminService/SeasonReset",
    // Admin changes: a second run would answer (and audit, and tell event watchers) as if it
    // were a new change, and SetRating, BanPlayer and UnbanPlayer would undo what happened in
    // between (results the next owner applied first, an unban by someone else).
    "/matchmaker.v1.AdminService/SetRating",
    "/matchmaker.v1.AdminService/EndSeason",
    "/matchmaker.v1.AdminService/MigrateFromElo",
    "/matchmaker.v1.AdminService/DeletePlayer",
    "/matchmaker.v1.AdminService/BanPlayer",
    "/matchmaker.v1.AdminService/UnbanPlayer",
    "/matchmaker.v1.AdminService/ReloadConfig",
    "/matchmaker.v1.GameServerService/RequestBackfill",
    // Records: a second party, or leaving the party one rejoined meanwhile.
    "/matchmaker.v1.PartyService/CreateParty",
    "/matchmaker.v1.PartyService/LeaveParty",
];
/// Streams that end when the owner changes.
pub(super) const STREAMS: &[&str] = &[
    "/matchmaker.v1.AdminService/ExportPlayers",
    "/matchmaker.v1.AdminService/WatchEvents",
];
