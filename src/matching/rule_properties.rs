//! Property tests of the match rules over random pools: every formed match satisfies every rule
//! ([`holds`], the reference definition on tickets) for solos and parties in 1v1, 2v2, 5v5 and
//! free-for-all, the match reports the values it was formed under, and no starving ticket waits
//! while a legal match for it exists.

use proptest::prelude::*;

use super::rule_index::{Member, holds, match_attributes};
use super::rules::{AttributeValue, MatchRule, RuleKind, RuleScope, RuleStep};
use super::test_util::party;
use super::{LogisticModel, MatchingConfig, Pool, Shape, Ticket};
use crate::ids::PlayerId;

const NOW: f64 = 200.0;
const MODEL: LogisticModel = LogisticModel { scale: 400.0 };
const MODES: [&str; 2] = ["ranked", "casual"];
const PLATFORMS: [&str; 3] = ["pc", "xbox", "playstation"];
const LANGUAGES: [&str; 3] = ["en", "de", "fr"];

#[derive(Clone, Debug)]
struct Spec {
    size: u32,
    rating: f64,
    entered_at: f64,
    mode: usize,
    platform: usize,
    maps: u8,
    level: u8,
    languages: u8,
    avoid: Option<usize>,
}

fn spec(max_party: u32) -> impl Strategy<Value = Spec> {
    (
        (
            1..=max_party,
            1300.0..1700.0f64,
            prop_oneof![3 => -150.0..NOW, 1 => -450.0..-350.0f64],
        ),
        (0..2usize, 0..3usize, 1..=255u8, 0..10u8, 1..8u8),
        prop::option::weighted(0.2, 0..60usize),
    )
        .prop_map(
            |((size, rating, entered_at), (mode, platform, maps, level, languages), avoid)| Spec {
                size,
                rating,
                entered_at,
                mode,
                platform,
                maps,
                level,
                languages,
                avoid,
            },
        )
}

fn pick(mask: u8, names: &[&str]) -> AttributeValue {
    let mut tags: Vec<String> = (0..names.len())
        .filter(|&i| mask >> i & 1 == 1)
        .map(|i| names[i].to_string())
        .collect();
    tags.sort();
    AttributeValue::Tags(tags)
}

const MAPS: [&str; 8] = ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"];

fn ticket(i: usize, s: &Spec, n: usize) -> Ticket {
    let ratings: Vec<f64> = (0..s.size).map(|k| s.rating + 5.0 * f64::from(k)).collect();
    let mut t = party(&format!("t{i}"), &ratings, s.entered_at);
    let text = |v: &str| AttributeValue::Text(v.to_string());
    t.attributes = [
        ("mode".to_string(), text(MODES[s.mode])),
        ("platform".to_string(), text(PLATFORMS[s.platform])),
        ("maps".to_string(), pick(s.maps, &MAPS)),
        (
            "level".to_string(),
            AttributeValue::Number(f64::from(s.level)),
        ),
        ("language".to_string(), pick(s.languages, &LANGUAGES)),
    ]
    .into();
    if let Some(j) = s.avoid.filter(|&j| j < n && j != i) {
        t.avoid = vec![PlayerId::new(format!("t{j}.0"))];
    }
    t
}

/// Every kind of rule: mode, crossplay classes, a common map, levels at most 2 apart (4 after
/// 60 s), avoid-lists, and (with teams of two or more) a common language among teammates that
/// is dropped after 150 s.
fn rules(shape: Shape) -> Vec<MatchRule> {
    let mut rules = vec![
        MatchRule::new(RuleKind::Equal, "mode"),
        MatchRule {
            groups: vec![vec!["pc".into()], vec!["xbox".into(), "playstation".into()]],
            ..MatchRule::new(RuleKind::Equal, "platform")
        },
        MatchRule::new(RuleKind::Intersect, "maps"),
        MatchRule {
            max: Some(2.0),
            expansion: vec![RuleStep {
                after_seconds: 60.0,
                max: 4.0,
            }],
            ..MatchRule::new(RuleKind::Difference, "level")
        },
        MatchRule::new(RuleKind::Avoid, ""),
    ];
    if shape.team_size >= 2 {
        rules.push(MatchRule {
            scope: RuleScope::Team,
            optional: true,
            drop_after_seconds: Some(150.0),
            ..MatchRule::new(RuleKind::Intersect, "language")
        });
    }
    rules
}

fn config(shape: Shape, rules: Vec<MatchRule>) -> MatchingConfig {
    let c = MatchingConfig {
        rules,
        ..MatchingConfig::default()
    };
    assert_eq!(super::rules::validate_rules(&c.rules, shape), Ok(()));
    assert_eq!(c.validate(shape), Ok(()));
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
            teams: 8,
            team_size: 1,
        },
    ])
}

/// Inserts `tickets`, ticks once, checks every formed match against the rules and its reported
/// attributes, and returns the pool after the tick.
fn tick_and_check(shape: Shape, config: &MatchingConfig, tickets: &[Ticket]) -> Pool {
    let mut pool = Pool::new(shape, config.clone());
    for t in tickets {
        pool.insert(t.clone()).unwrap();
    }
    let out = pool.tick(NOW, &MODEL);
    check_formed(config, &out);
    pool
}

/// Checks every match of a tick against the rules (on the tickets) and its reported attributes.
fn check_formed(config: &MatchingConfig, out: &super::TickOutcome) {
    for m in &out.matches {
        let teams: Vec<Vec<Member<'_>>> = m
            .teams
            .iter()
            .map(|team| team.iter().map(|t| Member::of(t, NOW)).collect())
            .collect();
        assert!(
            holds(&config.rules, &teams),
            "a match breaks a rule: {:?}",
            m.teams
                .tickets()
                .iter()
                .map(|t| (&t.id, &t.attributes, &t.avoid))
                .collect::<Vec<_>>()
        );
        let all: Vec<&Ticket> = m.teams.tickets().iter().map(|t| &**t).collect();
        assert_eq!(*m.attributes, match_attributes(&config.rules, &all));
        if config.rules.iter().any(|r| r.attribute == "mode") {
            let Some(AttributeValue::Text(mode)) = m.attributes.get("mode") else {
                panic!("no common mode reported: {:?}", m.attributes);
            };
            assert!(MODES.contains(&mode.as_str()));
        }
        if config.rules.iter().any(|r| r.attribute == "maps") {
            assert!(
                matches!(m.attributes.get("maps"), Some(AttributeValue::Tags(t)) if !t.is_empty())
            );
        }
    }
}

/// Asserts that no starving 1v1 ticket of `pool` waits beside another it could legally play.
fn assert_no_starving_ticket_beside_a_legal_opponent(
    config: &MatchingConfig,
    pool: &Pool,
    now: f64,
) -> Result<(), TestCaseError> {
    let rest: Vec<&Ticket> = pool.tickets().collect();
    for t in &rest {
        if !config.limits(t.wait(now)).starving {
            continue;
        }
        for o in rest.iter().filter(|o| o.id != t.id) {
            let pair = [vec![Member::of(t, now)], vec![Member::of(o, now)]];
            prop_assert!(
                !holds(&config.rules, &pair),
                "starving {} waits while {} is a legal opponent",
                t.id,
                o.id
            );
        }
    }
    Ok(())
}

/// One ticket of a churning 1v1 pool: its rating, a few of the common maps, a few junk maps
/// (from a vocabulary far larger than the 63 values an intersect rule interns), and whether
/// its player cancels after the tick.
type Churner = (f64, Vec<usize>, Vec<usize>, bool);

fn churner() -> impl Strategy<Value = Churner> {
    (
        1300.0..1700.0f64,
        prop::collection::vec(0..MAPS.len(), 0..3),
        prop::collection::vec(0..400usize, 0..4),
        prop::bool::weighted(0.3),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Every formed match satisfies every rule, for solos and parties in every shape.
    #[test]
    fn every_formed_match_satisfies_every_rule(
        shape in shapes(),
        specs in prop::collection::vec(spec(3), 0..60),
    ) {
        let config = config(shape, rules(shape));
        let max = config.party_limit(shape).min(3);
        let tickets: Vec<Ticket> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| ticket(i, &Spec { size: s.size.min(max), ..s.clone() }, specs.len()))
            .collect();
        tick_and_check(shape, &config, &tickets);
    }

    /// 1v1 with every rule: after a tick no starving ticket waits beside another waiting
    /// ticket it could legally play.
    #[test]
    fn no_starving_one_v_one_ticket_waits_while_a_legal_opponent_waits(
        specs in prop::collection::vec(spec(1), 0..60),
    ) {
        let shape = Shape { teams: 2, team_size: 1 };
        let config = config(shape, rules(shape));
        let tickets: Vec<Ticket> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| ticket(i, s, specs.len()))
            .collect();
        let pool = tick_and_check(shape, &config, &tickets);
        assert_no_starving_ticket_beside_a_legal_opponent(&config, &pool, NOW)?;
    }

    /// 1v1 with a common map required, tickets entering, matching, cancelling and expiring
    /// over many ticks with maps from a vocabulary far larger than the 63 values the rule
    /// interns, so its table fills with values no waiting ticket holds and is rebuilt: every
    /// formed match holds on the tickets and reports its common maps, and no starving ticket
    /// waits beside a legal opponent, tick after tick.
    #[test]
    fn a_churning_map_vocabulary_changes_no_answer_of_the_rules(
        rounds in prop::collection::vec(prop::collection::vec(churner(), 5..40), 4..16),
    ) {
        let shape = Shape { teams: 2, team_size: 1 };
        let config = config(shape, vec![MatchRule::new(RuleKind::Intersect, "maps")]);
        let mut pool = Pool::new(shape, config.clone());
        let mut entered = 0usize;
        for (r, round) in rounds.iter().enumerate() {
            let now = 50.0 * r as f64;
            let mut cancels = Vec::new();
            for (rating, common, junk, cancels_after) in round {
                let mut maps: Vec<String> = common.iter().map(|&m| MAPS[m].to_string()).collect();
                maps.extend(junk.iter().map(|j| format!("junk-{j:03}")));
                if maps.is_empty() {
                    maps.push(format!("junk-{entered}"));
                }
                maps.sort();
                maps.dedup();
                let mut t = party(&format!("c{entered}"), &[*rating], now);
                entered += 1;
                t.attributes.insert("maps".into(), AttributeValue::Tags(maps));
                if *cancels_after {
                    cancels.push(t.id.clone());
                }
                pool.insert(t).unwrap();
            }
            let out = pool.tick(now, &MODEL);
            check_formed(&config, &out);
            assert_no_starving_ticket_beside_a_legal_opponent(&config, &pool, now)?;
            for id in &cancels {
                pool.remove(id);
            }
        }
    }

    /// Teams and free-for-all of solos under the rules whose legality is pairwise (mode,
    /// crossplay classes, avoid-lists): no starving ticket waits while enough tickets of its
    /// classes, none avoiding another, wait with it.
    #[test]
    fn no_starving_ticket_waits_while_a_legal_match_exists(
        shape in prop::sample::select(vec![
            Shape { teams: 2, team_size: 2 },
            Shape { teams: 2, team_size: 5 },
            Shape { teams: 8, team_size: 1 },
        ]),
        specs in prop::collection::vec(spec(1), 0..60),
    ) {
        let pairwise: Vec<MatchRule> = rules(shape)
            .into_iter()
            .filter(|r| matches!(r.kind, RuleKind::Equal | RuleKind::Avoid))
            .collect();
        let config = config(shape, pairwise);
        let tickets: Vec<Ticket> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| ticket(i, s, specs.len()))
            .collect();
        let pool = tick_and_check(shape, &config, &tickets);
        let rest: Vec<&Ticket> = pool.tickets().collect();
        let need = shape.players_per_match() as usize;
        let ok = |group: &[&Ticket]| {
            let teams: Vec<Vec<Member<'_>>> =
                group.iter().map(|t| vec![Member::of(t, NOW)]).collect();
            holds(&config.rules, &teams)
        };
        for t in &rest {
            if !config.limits(t.wait(NOW)).starving {
                continue;
            }
            let mut group: Vec<&Ticket> = vec![t];
            group.extend(rest.iter().filter(|o| o.id != t.id && ok(&[t, o])));
            prop_assert!(
                group.len() < need || !ok(&group),
                "starving {} waits beside {} compatible tickets",
                t.id,
                group.len() - 1
            );
        }
    }
}

#[test]
fn ranked_never_meets_casual_even_when_starving() {
    let shape = Shape {
        teams: 2,
        team_size: 1,
    };
    let config = config(shape, vec![MatchRule::new(RuleKind::Equal, "mode")]);
    let mut pool = Pool::new(shape, config);
    for (id, mode, rating) in [("r", "ranked", 1500.0), ("c", "casual", 1500.0)] {
        let mut t = party(id, &[rating], 0.0);
        t.attributes
            .insert("mode".into(), AttributeValue::Text(mode.into()));
        pool.insert(t).unwrap();
    }
    assert!(pool.tick(500.0, &MODEL).matches.is_empty());
    assert_eq!(
        pool.waiting_by_value(),
        vec![
            ("mode".to_string(), "casual".to_string(), 1),
            ("mode".to_string(), "ranked".to_string(), 1)
        ]
    );
    let mut t = party("r2", &[2400.0], 0.0);
    t.attributes
        .insert("mode".into(), AttributeValue::Text("ranked".into()));
    pool.insert(t).unwrap();
    let out = pool.tick(500.0, &MODEL);
    assert_eq!(out.matches.len(), 1, "the starving ranked tickets meet");
    assert_eq!(
        out.matches[0].attributes["mode"],
        AttributeValue::Text("ranked".into())
    );
    assert_eq!(
        pool.waiting_by_value(),
        vec![("mode".to_string(), "casual".to_string(), 1)]
    );
}

#[test]
fn a_ticket_missing_a_rule_attribute_is_refused_by_the_pool() {
    let shape = Shape {
        teams: 2,
        team_size: 1,
    };
    let mut pool = Pool::new(
        shape,
        config(shape, vec![MatchRule::new(RuleKind::Equal, "mode")]),
    );
    let err = pool.insert(party("x", &[1500.0], 0.0)).unwrap_err();
    assert!(err.to_string().contains("attributes[\"mode\"]"), "{err}");
}

#[test]
fn a_starving_ticket_meets_a_fresh_one_sharing_one_map() {
    let shape = Shape {
        teams: 2,
        team_size: 1,
    };
    let rules = vec![
        MatchRule::new(RuleKind::Equal, "mode"),
        MatchRule::new(RuleKind::Intersect, "maps"),
        MatchRule::new(RuleKind::Avoid, ""),
    ];
    let mut pool = Pool::new(shape, config(shape, rules));
    for (id, maps, at) in [
        ("m1", &["dust", "nuke"][..], 0.0),
        ("m2", &["inferno", "mirage"], 0.0),
        ("m3", &["nuke", "vertigo"], 130.0),
    ] {
        let mut t = party(id, &[1500.0], at);
        t.attributes
            .insert("mode".into(), AttributeValue::Text("ranked".into()));
        t.attributes.insert(
            "maps".into(),
            AttributeValue::Tags(maps.iter().map(|m| m.to_string()).collect()),
        );
        pool.insert(t).unwrap();
    }
    let out = pool.tick(130.5, &MODEL);
    assert_eq!(out.matches.len(), 1);
    let ids: Vec<&str> = out.matches[0]
        .teams
        .tickets()
        .iter()
        .map(|t| t.id.as_str())
        .collect();
    assert!(ids.contains(&"m1") && ids.contains(&"m3"), "{ids:?}");
}

#[test]
fn fresh_tickets_of_a_rare_language_meet_across_the_others_between_them() {
    // 1v1 with a common language required: every tenth of 200 fresh players, a point apart,
    // speaks only French, the others only English. No French player has another among its
    // eight nearest, yet each is a few points from one: all twenty meet this tick.
    let shape = Shape {
        teams: 2,
        team_size: 1,
    };
    let config = config(shape, vec![MatchRule::new(RuleKind::Intersect, "language")]);
    let mut pool = Pool::new(shape, config.clone());
    for i in 0..200u32 {
        let language = if i % 10 == 5 { "fr" } else { "en" };
        let mut t = party(&format!("{language}{i}"), &[1400.0 + f64::from(i)], 0.0);
        t.attributes.insert(
            "language".into(),
            AttributeValue::Tags(vec![language.to_string()]),
        );
        pool.insert(t).unwrap();
    }
    let out = pool.tick(1.0, &MODEL);
    check_formed(&config, &out);
    let french = out
        .matches
        .iter()
        .filter(|m| {
            m.teams
                .tickets()
                .iter()
                .all(|t| t.id.as_str().starts_with("fr"))
        })
        .count();
    assert_eq!(french, 10, "{} still wait", pool.len());
}
