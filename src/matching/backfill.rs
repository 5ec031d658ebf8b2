//! Backfill: choosing waiting tickets for the open slots of a running match.
//!
//! The same rules as a new match: a ticket joins only a match in a region it accepts under its
//! latency limit, the filled match's predicted balance (the underdog quality, [`quality_of`])
//! must meet the ticket's quality floor at its wait, the ticket's rating must be within its
//! skill window of the rating the slot needs, parties stay whole on one team, and role minimums
//! stay reachable. A starving ticket (past `max_wait_seconds`) lifts window, floor and latency
//! limit as it does for new matches.
//!
//! How a slot is chosen: the team with the most open slots goes first; the rating that would
//! bring it level with the other teams' mean is the target; the waiting tickets nearest that
//! target (at most [`NEAREST`]) are scored by the model with the team filled (slots still open
//! counted at the target rating), and the best quality wins, the longest wait breaking ties.
//! Slots nobody fits stay open for later ticks.
//!
//! Match rules hold as for a new match: a newcomer must satisfy every rule with the tickets
//! already seated ([`OpenMatch::seated`]); when those are unknown (a match restored after a
//! restart) a queue with rules fills nothing rather than guess.

use serde::{Deserialize, Serialize};

use super::{Member, Pool, RoleRequirement, Seated, Ticket, WinModel, quality_of};
use crate::ids::TicketId;
use crate::rejection::FieldError;

/// `[queues.NAME.backfill]`: backfill of running matches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillConfig {
    /// When a waiting ticket could both fill an open slot and start a new match: `true` fills
    /// the running match first (players already in a game wait on it), `false` forms new
    /// matches first and backfills from the tickets left.
    #[serde(default = "default_true")]
    pub prefer_backfill: bool,
    /// A request with slots still open after this many seconds is dropped (the server may ask
    /// again, naming the same leavers).
    #[serde(default = "default_backfill_timeout")]
    pub timeout_seconds: f64,
}

impl Default for BackfillConfig {
    fn default() -> Self {
        Self {
            prefer_backfill: true,
            timeout_seconds: default_backfill_timeout(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_backfill_timeout() -> f64 {
    120.0
}

impl BackfillConfig {
    /// The timeout is a finite positive number of seconds.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.timeout_seconds.is_finite() && self.timeout_seconds > 0.0 {
            Ok(())
        } else {
            Err(FieldError::new(
                "backfill.timeout_seconds",
                format!("must be finite and > 0 (got {})", self.timeout_seconds),
            ))
        }
    }
}

/// Waiting tickets scored with the model for one slot: the nearest to the target rating.
pub const NEAREST: usize = 32;

/// A running match's open slots as the optimizer sees them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpenMatch {
    /// Per team, `(mean, deviation)` of the players still in the match.
    pub teams: Vec<Vec<(f64, f64)>>,
    /// Per team, the slots to fill.
    pub open: Vec<u32>,
    /// Per team, the roles each remaining player declared (empty = any, missing = unknown,
    /// treated as any).
    pub roles: Vec<Vec<Vec<String>>>,
    /// The match's region, when the queue has regions.
    pub region: Option<String>,
    /// Per team, the tickets seated so far as the match rules see them; `None` when unknown.
    pub seated: Option<Vec<Vec<Seated>>>,
}

/// One ticket chosen for one team, removed from the pool.
#[derive(Clone, Debug, PartialEq)]
pub struct Fill {
    pub team: usize,
    pub ticket: Ticket,
    /// Predicted quality of the match with this ticket in (later slots at the target rating).
    pub quality: f64,
}

/// The waiting tickets by rating at one moment, for the backfill of one tick: built once
/// ([`Pool::fill_order`]) and shared by every running match the tick fills, instead of sorting
/// the pool again for each. A ticket a fill takes out is skipped by the fills after it; one put
/// back meanwhile waits for the next tick's order.
#[derive(Clone, Debug)]
pub struct FillOrder {
    now: f64,
    /// `(rating, handle)` of every ticket not past its TTL at `now`, by rating.
    by_rating: Vec<(f64, (u32, u32))>,
}

impl Pool {
    /// Chooses tickets for `open`'s slots and removes them from the pool. May fill only some
    /// slots (or none) when no waiting ticket meets the rules.
    pub fn fill(&mut self, now: f64, open: &OpenMatch, model: &dyn WinModel) -> Vec<Fill> {
        let order = self.fill_order(now);
        self.fill_from(&order, open, model)
    }

    /// The waiting tickets by rating at `now`, for [`Pool::fill_from`].
    #[must_use]
    pub fn fill_order(&self, now: f64) -> FillOrder {
        let mut by_rating: Vec<(f64, (u32, u32))> = self
            .handles()
            // A ticket past its TTL is expiring this tick, not a candidate (backfill can run
            // before the expiry sweep).
            .filter(|(h, _)| !self.past_ttl(*h, now))
            .map(|(h, t)| (t.rating(), h))
            .collect();
        by_rating.sort_by(|a, b| a.0.total_cmp(&b.0));
        FillOrder { now, by_rating }
    }

    /// [`Pool::fill`] at the moment `order` was taken, from the tickets of `order` still
    /// waiting.
    pub fn fill_from(
        &mut self,
        order: &FillOrder,
        open: &OpenMatch,
        model: &dyn WinModel,
    ) -> Vec<Fill> {
        let now = order.now;
        let config = self.config().clone();
        let ruled = !config.rules.is_empty();
        let mut seated = open.seated.clone().unwrap_or_default();
        if ruled && open.seated.is_none() {
            return Vec::new();
        }
        seated.resize(open.teams.len(), Vec::new());
        let cands = &order.by_rating;
        // Still waiting, and reaching the match's region under its latency limit.
        let eligible = |i: usize| -> Option<&Ticket> {
            let t = self.at(cands[i].1)?;
            let lim = config.limits(t.wait(now));
            let reaches = match &open.region {
                None => true,
                Some(r) => {
                    t.region_latency_ms.is_empty()
                        || t.region_latency_ms.iter().any(|(name, ms)| {
                            name == r && (lim.starving || *ms <= lim.max_latency_ms)
                        })
                }
            };
            reaches.then_some(t)
        };

        let mut teams = open.teams.clone();
        let mut roles: Vec<Vec<Vec<String>>> = (0..teams.len())
            .map(|k| open.roles.get(k).cloned().unwrap_or_default())
            .collect();
        let mut remaining = open.open.clone();
        remaining.resize(teams.len(), 0);
        let mut stuck = vec![false; teams.len()];
        let mut taken: Vec<usize> = Vec::new();
        let mut chosen: Vec<(usize, TicketId, f64)> = Vec::new();
        while let Some(k) = (0..teams.len())
            .filter(|&k| remaining[k] > 0 && !stuck[k])
            .max_by_key(|&k| (remaining[k], std::cmp::Reverse(k)))
        {
            let target = target_rating(&teams, &remaining, k);
            let dev = mean_deviation(&teams);
            // The nearest tickets that may join at all (in the window, under the rules, able
            // to leave the team's roles fillable): a slot is not left open because the nearest
            // ones the rules or the roles refuse crowd out one they allow.
            let best = nearest(cands, target, NEAREST, |i| {
                let Some(t) = eligible(i) else {
                    return false;
                };
                if taken.contains(&i) || t.size() as u32 > remaining[k] {
                    return false;
                }
                let lim = config.limits(t.wait(now));
                if !lim.starving && (cands[i].0 - target).abs() > lim.window {
                    return false;
                }
                let after = remaining[k] - t.size() as u32;
                roles_reachable(&config.roles, &roles[k], &declared(t), after)
                    && (!ruled || self.rules_hold(&with_newcomer(&seated, k, t, now)))
            })
            .into_iter()
            .filter_map(|i| {
                let t = eligible(i)?;
                let lim = config.limits(t.wait(now));
                let after = remaining[k] - t.size() as u32;
                let mut filled = teams.clone();
                filled[k].extend(t.member_ratings());
                for (j, team) in filled.iter_mut().enumerate() {
                    let open_after = if j == k { after } else { remaining[j] };
                    let fill_at = if j == k {
                        target
                    } else {
                        target_rating(&teams, &remaining, j)
                    };
                    team.extend(std::iter::repeat_n((fill_at, dev), open_after as usize));
                }
                let quality = quality_of(&model.win_probabilities(&filled));
                (lim.starving || quality >= lim.min_quality).then_some((i, t, quality))
            })
            .max_by(|a, b| {
                a.2.total_cmp(&b.2)
                    .then(a.1.wait(now).total_cmp(&b.1.wait(now)))
            });
            match best {
                Some((i, t, quality)) => {
                    teams[k].extend(t.member_ratings());
                    roles[k].extend(declared(t));
                    if ruled {
                        seated[k].push(Seated::of(t));
                    }
                    remaining[k] -= t.size() as u32;
                    taken.push(i);
                    chosen.push((k, t.id.clone(), quality));
                }
                None => stuck[k] = true,
            }
        }
        chosen
            .into_iter()
            .filter_map(|(team, id, quality)| {
                let ticket = self.remove(&id)?;
                Some(Fill {
                    team,
                    ticket,
                    quality,
                })
            })
            .collect()
    }
}

/// The seated tickets as rule members, with `t` added to team `k`.
fn with_newcomer<'a>(
    seated: &'a [Vec<Seated>],
    k: usize,
    t: &'a Ticket,
    now: f64,
) -> Vec<Vec<Member<'a>>> {
    let mut teams: Vec<Vec<Member<'a>>> = seated
        .iter()
        .map(|team| team.iter().map(Seated::member).collect())
        .collect();
    teams[k].push(Member::of(t, now));
    teams
}

/// Per player of `t`, the roles it declared (a missing entry means any role).
fn declared(t: &Ticket) -> Vec<Vec<String>> {
    (0..t.size())
        .map(|i| t.roles.get(i).cloned().unwrap_or_default())
        .collect()
}

/// The rating one new player on team `k` needs so the team's mean rating (once its open slots
/// are filled at that rating) equals the mean of the other teams' current players.
fn target_rating(teams: &[Vec<(f64, f64)>], remaining: &[u32], k: usize) -> f64 {
    let others: Vec<f64> = teams
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != k)
        .flat_map(|(_, t)| t.iter().map(|s| s.0))
        .collect();
    let everyone = || teams.iter().flatten().map(|s| s.0);
    let reference = if others.is_empty() {
        let n = everyone().count().max(1) as f64;
        everyone().sum::<f64>() / n
    } else {
        others.iter().sum::<f64>() / others.len() as f64
    };
    let open = f64::from(remaining[k].max(1));
    let size = teams[k].len() as f64 + open;
    let sum: f64 = teams[k].iter().map(|s| s.0).sum();
    (reference * size - sum) / open
}

fn mean_deviation(teams: &[Vec<(f64, f64)>]) -> f64 {
    let n = teams.iter().map(Vec::len).sum::<usize>();
    if n == 0 {
        return 0.0;
    }
    teams.iter().flatten().map(|s| s.1).sum::<f64>() / n as f64
}

/// Indices of up to `n` entries of `sorted` (by rating) nearest `target` that pass `ok`.
fn nearest<T>(
    sorted: &[(f64, T)],
    target: f64,
    n: usize,
    ok: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let split = sorted.partition_point(|c| c.0 < target);
    let (mut lo, mut hi) = (split, split);
    let mut out = Vec::with_capacity(n);
    while out.len() < n && (lo > 0 || hi < sorted.len()) {
        let take_low = match (lo > 0, hi < sorted.len()) {
            (true, true) => target - sorted[lo - 1].0 <= sorted[hi].0 - target,
            (low, _) => low,
        };
        let i = if take_low {
            lo -= 1;
            lo
        } else {
            hi += 1;
            hi - 1
        };
        if ok(i) {
            out.push(i);
        }
    }
    out
}

/// Whether a team whose players declared `have` (plus `newcomer`) and with `open_after` slots
/// still to fill (by anyone) can meet every role minimum: a bipartite matching of required
/// seats to distinct players, where an empty role list means any role.
fn roles_reachable(
    required: &[RoleRequirement],
    have: &[Vec<String>],
    newcomer: &[Vec<String>],
    open_after: u32,
) -> bool {
    if required.is_empty() {
        return true;
    }
    let players: Vec<&Vec<String>> = have.iter().chain(newcomer).collect();
    let seats: Vec<&str> = required
        .iter()
        .flat_map(|r| std::iter::repeat_n(r.name.as_str(), r.min_per_team as usize))
        .collect();
    // Open slots can be filled by anyone later, so they cover any seat.
    let wildcards = open_after as usize;
    let fits = |p: usize, seat: &str| -> bool {
        p >= players.len() || players[p].is_empty() || players[p].iter().any(|r| r == seat)
    };
    let total = players.len() + wildcards;
    let mut owner: Vec<Option<usize>> = vec![None; total];
    fn augment(
        seat: usize,
        seats: &[&str],
        owner: &mut [Option<usize>],
        seen: &mut [bool],
        fits: &dyn Fn(usize, &str) -> bool,
    ) -> bool {
        for p in 0..owner.len() {
            if seen[p] || !fits(p, seats[seat]) {
                continue;
            }
            seen[p] = true;
            if owner[p].is_none_or(|other| augment(other, seats, owner, seen, fits)) {
                owner[p] = Some(seat);
                return true;
            }
        }
        false
    }
    (0..seats.len()).all(|s| {
        let mut seen = vec![false; total];
        augment(s, &seats, &mut owner, &mut seen, &fits)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::test_util::party;
    use crate::matching::{LogisticModel, MatchingConfig, Shape};

    fn config() -> MatchingConfig {
        MatchingConfig {
            max_party_size: Some(2),
            ..MatchingConfig::default_for_scale(400.0)
        }
    }

    fn pool(config: MatchingConfig) -> Pool {
        Pool::new(
            Shape {
                teams: 2,
                team_size: 5,
            },
            config,
        )
    }

    fn ticket(id: &str, ratings: &[f64], entered_at: f64) -> Ticket {
        party(id, ratings, entered_at)
    }

    fn model() -> LogisticModel {
        LogisticModel { scale: 400.0 }
    }

    /// Team 0 lost its 1600 player: the 1600 ticket is the one that restores balance.
    fn open_one_slot() -> OpenMatch {
        OpenMatch {
            teams: vec![
                vec![(1500.0, 50.0); 4],
                vec![
                    (1500.0, 50.0),
                    (1500.0, 50.0),
                    (1500.0, 50.0),
                    (1500.0, 50.0),
                    (1600.0, 50.0),
                ],
            ],
            open: vec![1, 0],
            roles: Vec::new(),
            region: None,
            seated: None,
        }
    }

    #[test]
    fn a_newcomer_keeps_the_rules_with_the_seated_tickets() {
        use crate::matching::{AttributeValue, MatchRule, RuleKind};
        let rules = vec![
            MatchRule::new(RuleKind::Equal, "mode"),
            MatchRule::new(RuleKind::Avoid, ""),
        ];
        let mut p = pool(MatchingConfig { rules, ..config() });
        let with_mode = |id: &str, r: f64, mode: &str| {
            let mut t = ticket(id, &[r], 0.0);
            t.attributes
                .insert("mode".into(), AttributeValue::Text(mode.into()));
            t
        };
        // The best-balancing ticket is casual; the next one avoids a seated player; the last
        // is seated-avoided; only "ok" fits.
        p.insert(with_mode("casual", 1600.0, "casual")).unwrap();
        let mut avoider = with_mode("avoider", 1601.0, "ranked");
        avoider.avoid = vec![crate::ids::PlayerId::new("s1.0")];
        p.insert(avoider).unwrap();
        p.insert(with_mode("avoided", 1602.0, "ranked")).unwrap();
        p.insert(with_mode("ok", 1610.0, "ranked")).unwrap();
        let mut seated = crate::matching::Seated::of(&with_mode("s1", 1500.0, "ranked"));
        let other = crate::matching::Seated {
            avoid: vec![crate::ids::PlayerId::new("avoided.0")],
            ..crate::matching::Seated::of(&with_mode("s2", 1500.0, "ranked"))
        };
        let mut open = open_one_slot();
        assert!(
            p.fill(1.0, &open, &model()).is_empty(),
            "seated tickets unknown"
        );
        seated.players = vec![crate::ids::PlayerId::new("s1.0")];
        open.seated = Some(vec![vec![seated], vec![other]]);
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].ticket.id.as_str(), "ok");
    }

    #[test]
    fn a_ticket_the_rules_allow_fills_the_slot_behind_more_than_a_handful_they_refuse() {
        use crate::matching::{AttributeValue, MatchRule, RuleKind};
        let rules = vec![MatchRule::new(RuleKind::Equal, "mode")];
        let mut p = pool(MatchingConfig { rules, ..config() });
        let with_mode = |id: &str, r: f64, mode: &str| {
            let mut t = ticket(id, &[r], 0.0);
            t.attributes
                .insert("mode".into(), AttributeValue::Text(mode.into()));
            t
        };
        // Twice the nearest tickets looked at are casual and closer to the slot's target than
        // the one ranked ticket, which is still within the window.
        for i in 0..2 * NEAREST {
            p.insert(with_mode(
                &format!("casual{i}"),
                1600.0 + i as f64 * 0.1,
                "casual",
            ))
            .unwrap();
        }
        p.insert(with_mode("ranked", 1630.0, "ranked")).unwrap();
        let seated: Vec<Vec<crate::matching::Seated>> = (0..2)
            .map(|team| {
                let mut s = crate::matching::Seated::of(&with_mode("s", 1500.0, "ranked"));
                s.players = vec![crate::ids::PlayerId::new(format!("s{team}"))];
                vec![s]
            })
            .collect();
        let open = OpenMatch {
            seated: Some(seated),
            ..open_one_slot()
        };
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].ticket.id.as_str(), "ranked");
    }

    #[test]
    fn one_order_serves_every_running_match_of_a_tick() {
        let mut p = pool(MatchingConfig {
            regions: vec!["eu".into(), "na".into()],
            ..config()
        });
        let near = |id: &str, r: f64, region: &str| {
            let mut t = ticket(id, &[r], 0.0);
            t.region_latency_ms = vec![(region.into(), 30)];
            t
        };
        for (id, r, region) in [
            ("eu1", 1600.0, "eu"),
            ("na1", 1601.0, "na"),
            ("eu2", 1605.0, "eu"),
        ] {
            p.insert(near(id, r, region)).unwrap();
        }
        let order = p.fill_order(1.0);
        let open_in = |region: &str| OpenMatch {
            region: Some(region.into()),
            ..open_one_slot()
        };
        let ids = |fills: Vec<Fill>| -> Vec<String> {
            fills.into_iter().map(|f| f.ticket.id.to_string()).collect()
        };
        // Each match takes the best ticket of its region still waiting.
        assert_eq!(ids(p.fill_from(&order, &open_in("eu"), &model())), ["eu1"]);
        assert_eq!(ids(p.fill_from(&order, &open_in("eu"), &model())), ["eu2"]);
        assert!(p.fill_from(&order, &open_in("eu"), &model()).is_empty());
        assert_eq!(ids(p.fill_from(&order, &open_in("na"), &model())), ["na1"]);
        // A ticket put back after the order was taken (in a slot a taken one left) waits for
        // the next tick's order.
        p.insert(near("eu1", 1600.0, "eu")).unwrap();
        assert!(p.fill_from(&order, &open_in("eu"), &model()).is_empty());
        assert_eq!(ids(p.fill(1.0, &open_in("eu"), &model())), ["eu1"]);
    }

    #[test]
    fn fills_one_slot_with_the_ticket_that_balances_the_teams() {
        let mut p = pool(config());
        for (id, r) in [("low", 1400.0), ("even", 1600.0), ("high", 1800.0)] {
            p.insert(ticket(id, &[r], 0.0)).unwrap();
        }
        let fills = p.fill(1.0, &open_one_slot(), &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].team, 0);
        assert_eq!(fills[0].ticket.id.as_str(), "even");
        assert!(
            (fills[0].quality - 0.5).abs() < 1e-9,
            "{}",
            fills[0].quality
        );
        assert_eq!(p.len(), 2, "the chosen ticket left the pool");
        assert!(p.get(&TicketId::from("even")).is_none());
    }

    #[test]
    fn leaves_the_slot_open_when_no_ticket_is_within_window_and_floor() {
        let mut p = pool(config());
        p.insert(ticket("far", &[2300.0], 0.0)).unwrap();
        assert!(p.fill(1.0, &open_one_slot(), &model()).is_empty());
        assert_eq!(p.len(), 1);
        // Once it starves (120 s by default) the limits are lifted, as for new matches.
        let fills = p.fill(200.0, &open_one_slot(), &model());
        assert_eq!(fills.len(), 1);
    }

    #[test]
    fn a_ticket_past_its_ttl_is_not_backfilled() {
        let mut p = pool(config());
        p.insert(ticket("old", &[1600.0], 0.0)).unwrap();
        let ttl = config().ticket_ttl_seconds;
        assert!(p.fill(ttl, &open_one_slot(), &model()).is_empty());
        assert_eq!(p.len(), 1, "left for the expiry sweep");
        assert_eq!(p.fill(ttl - 1.0, &open_one_slot(), &model()).len(), 1);
    }

    #[test]
    fn a_party_fills_two_slots_of_one_team_and_never_one() {
        let mut p = pool(config());
        p.insert(ticket("duo", &[1500.0, 1500.0], 0.0)).unwrap();
        let mut open = open_one_slot();
        assert!(
            p.fill(1.0, &open, &model()).is_empty(),
            "a duo cannot fill one slot"
        );
        open.teams[0].pop();
        open.open = vec![2, 0];
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].ticket.players.len(), 2);
    }

    #[test]
    fn the_match_region_must_be_acceptable_under_the_latency_limit() {
        let mut c = config();
        c.regions = vec!["eu".into(), "us".into()];
        let mut p = pool(c);
        let mut far = ticket("far", &[1600.0], 0.0);
        far.region_latency_ms = vec![("eu".into(), 300), ("us".into(), 10)];
        let mut near = ticket("near", &[1630.0], 0.0);
        near.region_latency_ms = vec![("eu".into(), 20)];
        p.insert(far).unwrap();
        p.insert(near).unwrap();
        let mut open = open_one_slot();
        open.region = Some("eu".into());
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].ticket.id.as_str(), "near");
    }

    #[test]
    fn role_minimums_stay_reachable() {
        let mut c = config();
        c.roles = vec![RoleRequirement {
            name: "healer".into(),
            min_per_team: 1,
        }];
        let mut p = pool(c);
        let mut dps = ticket("dps", &[1600.0], 0.0);
        dps.roles = vec![vec!["dps".into()]];
        let mut healer = ticket("healer", &[1650.0], 0.0);
        healer.roles = vec![vec!["healer".into()]];
        p.insert(dps).unwrap();
        p.insert(healer).unwrap();
        let mut open = open_one_slot();
        // The team left has four damage dealers: its last slot must go to a healer.
        open.roles = vec![vec![vec!["dps".to_string()]; 4], Vec::new()];
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].ticket.id.as_str(), "healer");
    }

    #[test]
    fn a_healer_past_the_nearest_damage_dealers_still_fills_the_healer_slot() {
        let mut c = config();
        c.roles = vec![RoleRequirement {
            name: "healer".into(),
            min_per_team: 1,
        }];
        let mut p = pool(c);
        // More damage dealers than the search looks at, all nearer the target than the healer.
        for i in 0..(NEAREST + 8) {
            let mut dps = ticket(&format!("dps{i}"), &[1600.0 + i as f64 * 0.1], 0.0);
            dps.roles = vec![vec!["dps".into()]];
            p.insert(dps).unwrap();
        }
        let mut healer = ticket("healer", &[1640.0], 0.0);
        healer.roles = vec![vec!["healer".into()]];
        p.insert(healer).unwrap();
        let mut open = open_one_slot();
        open.roles = vec![vec![vec!["dps".to_string()]; 4], Vec::new()];
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1);
        assert_eq!(fills[0].ticket.id.as_str(), "healer");
    }

    #[test]
    fn a_ticket_without_declared_roles_can_fill_any_role() {
        let mut c = config();
        c.roles = vec![RoleRequirement {
            name: "healer".into(),
            min_per_team: 1,
        }];
        let mut p = pool(c);
        p.insert(ticket("flex", &[1600.0], 0.0)).unwrap();
        let mut open = open_one_slot();
        open.roles = vec![vec![vec!["dps".to_string()]; 4], Vec::new()];
        let fills = p.fill(1.0, &open, &model());
        assert_eq!(fills.len(), 1, "no declared role means any role");
    }

    #[test]
    fn the_longest_wait_breaks_a_tie() {
        let mut p = pool(config());
        p.insert(ticket("new", &[1600.0], 50.0)).unwrap();
        p.insert(ticket("old", &[1600.0], 10.0)).unwrap();
        let fills = p.fill(60.0, &open_one_slot(), &model());
        assert_eq!(fills[0].ticket.id.as_str(), "old");
    }

    #[test]
    fn roles_reachable_counts_open_slots_as_any_role() {
        let req = [RoleRequirement {
            name: "tank".into(),
            min_per_team: 2,
        }];
        let dps = [vec!["dps".to_string()]];
        assert!(!roles_reachable(&req, &dps, &dps, 1));
        assert!(roles_reachable(&req, &dps, &dps, 2));
        assert!(roles_reachable(&req, &[vec![]], &[vec!["tank".into()]], 0));
    }
}
