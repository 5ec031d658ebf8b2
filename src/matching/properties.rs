//! Property tests of the optimizer's invariants over random pools, for every queue shape:
//! matches are disjoint and exactly shaped, parties stay whole, regions, roles, windows and
//! quality floors hold for each ticket's wait (or a member is starving), tickets are conserved,
//! expiry is exact, and no starving ticket is left waiting while a legal match exists.

use std::collections::HashSet;

use proptest::prelude::*;

use super::balance::{Unit, roles_ok};
use super::pool::region_mask;
use super::teams::role_masks;
use super::test_util::party;
use super::{
    LogisticModel, MatchingConfig, Pool, RoleRequirement, Shape, Ticket, WinModel, quality_of,
};
use crate::ids::TicketId;

const NOW: f64 = 200.0;
const MODEL: LogisticModel = LogisticModel { scale: 400.0 };
const REGIONS: [&str; 3] = ["eu", "us", "asia"];

#[derive(Clone, Debug)]
struct Spec {
    size: u32,
    rating: f64,
    entered_at: f64,
    latencies: Vec<Option<u32>>,
    heals: Vec<bool>,
}

fn spec(max_party: u32) -> impl Strategy<Value = Spec> {
    (
        1..=max_party,
        1200.0..1800.0f64,
        prop_oneof![9 => -150.0..NOW, 1 => -450.0..-350.0f64],
        prop::collection::vec(prop::option::of(10u32..300), 3),
        prop::collection::vec(any::<bool>(), 3),
    )
        .prop_map(|(size, rating, entered_at, latencies, heals)| Spec {
            size,
            rating,
            entered_at,
            latencies,
            heals,
        })
}

fn ticket(i: usize, s: &Spec, regions: bool, roles: bool) -> Ticket {
    let ratings: Vec<f64> = (0..s.size).map(|k| s.rating + 7.0 * f64::from(k)).collect();
    let mut t = party(&format!("t{i}"), &ratings, s.entered_at);
    if regions {
        t.region_latency_ms = REGIONS
            .iter()
            .zip(&s.latencies)
            .filter_map(|(r, l)| l.map(|l| (r.to_string(), l)))
            .collect();
    }
    if roles {
        t.roles = (0..s.size as usize)
            .map(|k| {
                if s.heals[k % 3] {
                    vec!["healer".to_string()]
                } else {
                    vec!["dps".to_string()]
                }
            })
            .collect();
    }
    t
}

fn config(shape: Shape, regions: bool, roles: bool) -> MatchingConfig {
    let mut c = MatchingConfig::default();
    if regions {
        c.regions = REGIONS.iter().map(|r| r.to_string()).collect();
    }
    if roles && shape.team_size >= 2 {
        c.roles = vec![RoleRequirement {
            name: "healer".into(),
            min_per_team: 1,
        }];
    }
    c
}

fn shapes() -> impl Strategy<Value = Shape> {
    prop::sample::select(vec![
        Shape {
            teams: 2,
            team_size: 1,
        },
        Shape {
            teams: 2,
            team_size: 2,
        },
        Shape {
            teams: 2,
            team_size: 5,
        },
        Shape {
            teams: 3,
            team_size: 2,
        },
        Shape {
            teams: 8,
            team_size: 1,
        },
        Shape {
            teams: 2,
            team_size: 10,
        },
    ])
}

/// Runs one tick and checks every invariant; returns the pool after the tick.
fn check_tick(shape: Shape, config: &MatchingConfig, tickets: &[Ticket]) -> Pool {
    let mut pool = Pool::new(shape, config.clone());
    for t in tickets {
        pool.insert(t.clone()).unwrap();
    }
    let out = pool.tick(NOW, &MODEL);

    let mut seen = HashSet::new();
    for t in &out.expired {
        assert!(t.wait(NOW) >= config.ticket_ttl_seconds);
        assert!(seen.insert(t.id.clone()));
    }
    for m in &out.matches {
        assert_eq!(m.teams.len(), shape.teams as usize);
        let flat: Vec<&TicketId> = m.teams.iter().flatten().map(|t| &t.id).collect();
        let all: Vec<&TicketId> = m.teams.tickets().iter().map(|t| &t.id).collect();
        assert_eq!(flat, all, "tickets() is the teams in order");
        assert_eq!(m.win_probability.len(), shape.teams as usize);
        // Exactly the model's answer for the teams' member ratings, however it was asked.
        let ratings: Vec<Vec<(f64, f64)>> = m
            .teams
            .iter()
            .map(|team| team.iter().flat_map(|t| t.member_ratings()).collect())
            .collect();
        assert_eq!(&*m.win_probability, &MODEL.win_probabilities(&ratings)[..]);
        assert_eq!(m.quality, quality_of(&m.win_probability));
        let starving = m
            .teams
            .iter()
            .flatten()
            .any(|t| config.limits(t.wait(NOW)).starving);
        for team in &m.teams {
            let players: usize = team.iter().map(|t| t.size()).sum();
            assert_eq!(players, shape.team_size as usize);
            let units: Vec<Unit> = team
                .iter()
                .map(|t| Unit {
                    size: t.size() as u32,
                    strength: 0.0,
                    role_masks: role_masks(config, t),
                })
                .collect();
            let all: Vec<usize> = (0..units.len()).collect();
            assert!(roles_ok(&units, &all, &config.roles), "roles");
        }
        let tickets: Vec<&Ticket> = m.teams.iter().flatten().map(|t| &**t).collect();
        for t in &tickets {
            // Disjoint across matches and expiry; parties are whole Ticket values.
            assert!(seen.insert(t.id.clone()), "ticket {} twice", t.id);
            assert!(t.wait(NOW) < config.ticket_ttl_seconds);
            let lim = config.limits(t.wait(NOW));
            if let Some(region) = &m.region {
                let bit = config.regions.iter().position(|r| r == region).unwrap();
                assert!(
                    region_mask(&config.regions, t, &lim) >> bit & 1 == 1,
                    "region"
                );
            } else {
                assert!(config.regions.is_empty());
            }
        }
        if !starving {
            let lo = tickets
                .iter()
                .map(|t| t.rating())
                .fold(f64::INFINITY, f64::min);
            let hi = tickets
                .iter()
                .map(|t| t.rating())
                .fold(f64::NEG_INFINITY, f64::max);
            let mut floor = 0.0f64;
            for t in &tickets {
                let lim = config.limits(t.wait(NOW));
                assert!(t.rating() - lo <= lim.window + 1e-9, "window");
                assert!(hi - t.rating() <= lim.window + 1e-9, "window");
                floor = floor.max(lim.min_quality);
            }
            assert!(
                m.quality + 1e-12 >= floor,
                "quality {} < {floor}",
                m.quality
            );
        }
    }
    for t in pool.tickets() {
        assert!(seen.insert(t.id.clone()), "matched ticket left in the pool");
        assert!(t.wait(NOW) < config.ticket_ttl_seconds);
    }
    assert_eq!(seen.len(), tickets.len(), "tickets conserved");
    assert_eq!(out.waiting, pool.len());
    let waiting_players: usize = pool.tickets().map(Ticket::size).sum();
    assert_eq!(
        pool.stats(NOW).waiting_players,
        waiting_players,
        "players counted"
    );
    let matched: usize = out
        .matches
        .iter()
        .map(|m| m.teams.iter().flatten().count())
        .sum();
    assert_eq!(out.matched_waits.len(), matched);
    pool
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_formed_match_is_legal(
        shape in shapes(),
        regions in any::<bool>(),
        roles in any::<bool>(),
        specs in prop::collection::vec(spec(3), 0..60),
    ) {
        let config = config(shape, regions, roles);
        let max = config.party_limit(shape).min(3);
        let tickets: Vec<Ticket> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let s = Spec { size: s.size.min(max), ..s.clone() };
                ticket(i, &s, regions, roles)
            })
            .collect();
        check_tick(shape, &config, &tickets);
    }

    /// The same with roles (one healer per team), for the shapes whose team split is exact
    /// (2v2, 5v5 of solo players): a starving ticket may not wait while `P - 1` others share a
    /// region with it and, with it, hold a healer for every team. Its nearest neighbours may
    /// all be damage dealers; it must look further for healers.
    #[test]
    fn no_starving_ticket_waits_while_a_legal_match_with_roles_exists(
        shape in prop::sample::select(vec![
            Shape { teams: 2, team_size: 2 },
            Shape { teams: 2, team_size: 5 },
        ]),
        regions in any::<bool>(),
        specs in prop::collection::vec(spec(1), 0..60),
    ) {
        let config = config(shape, regions, true);
        let tickets: Vec<Ticket> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| ticket(i, s, regions, true))
            .collect();
        let pool = check_tick(shape, &config, &tickets);
        let rest: Vec<&Ticket> = pool.tickets().collect();
        let need = shape.players_per_match() as usize;
        let mask = |t: &Ticket| region_mask(&config.regions, t, &config.limits(t.wait(NOW)));
        let heals = |t: &Ticket| t.roles.iter().any(|r| r.iter().any(|x| x == "healer"));
        for t in &rest {
            if !config.limits(t.wait(NOW)).starving {
                continue;
            }
            for bit in (0..64).filter(|b| mask(t) >> b & 1 == 1) {
                let partners: Vec<&&Ticket> = rest
                    .iter()
                    .filter(|o| o.id != t.id && mask(o) >> bit & 1 == 1)
                    .collect();
                let healers = partners.iter().filter(|o| heals(o)).count() + usize::from(heals(t));
                prop_assert!(
                    partners.len() + 1 < need || healers < shape.teams as usize,
                    "starving {} waits beside {} others ({healers} healers) in region {bit}",
                    t.id,
                    partners.len()
                );
            }
        }
    }

    /// Solo tickets, no roles: any `P` waiting tickets that share a region form a legal match
    /// for a starving one (its window and floor are lifted), so after a tick no starving ticket
    /// may still wait beside `P - 1` others accepting one of its regions. With regions this
    /// holds for every shape, not only 1v1: a starving anchor whose rating neighbours share no
    /// region with it looks further, region by region.
    #[test]
    fn no_starving_ticket_waits_while_a_legal_match_exists(
        shape in shapes(),
        regions in any::<bool>(),
        specs in prop::collection::vec(spec(1), 0..60),
    ) {
        let config = config(shape, regions, false);
        let tickets: Vec<Ticket> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| ticket(i, s, regions, false))
            .collect();
        let pool = check_tick(shape, &config, &tickets);
        let rest: Vec<&Ticket> = pool.tickets().collect();
        let need = shape.players_per_match() as usize;
        let mask = |t: &Ticket| region_mask(&config.regions, t, &config.limits(t.wait(NOW)));
        for t in &rest {
            if !config.limits(t.wait(NOW)).starving {
                continue;
            }
            for bit in (0..64).filter(|b| mask(t) >> b & 1 == 1) {
                let partners = rest
                    .iter()
                    .filter(|o| o.id != t.id && mask(o) >> bit & 1 == 1)
                    .count();
                prop_assert!(
                    partners + 1 < need,
                    "starving {} waits beside {partners} others in region {bit}",
                    t.id
                );
            }
        }
    }
}
