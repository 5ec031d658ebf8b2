//! The tick end to end: each selector's behaviour through [`Pool::tick`], from inserted tickets
//! to formed matches (the selectors' own tests work on candidates directly).

mod one_v_one {
    use crate::matching::test_util::solo;
    use crate::matching::{LogisticModel, MatchingConfig, Pool, Shape};

    const ONE: Shape = Shape {
        teams: 2,
        team_size: 1,
    };
    const MODEL: LogisticModel = LogisticModel { scale: 400.0 };

    #[test]
    fn pairs_nearest_ratings_and_leaves_outliers_waiting() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        for (id, r) in [("a", 1500.0), ("b", 1900.0), ("c", 1510.0), ("d", 1530.0)] {
            pool.insert(solo(id, r, 0.0)).unwrap();
        }
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        let m = &out.matches[0];
        let mut ids: Vec<&str> = m.teams.iter().map(|t| t[0].id.as_str()).collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a", "c"]);
        assert!(m.quality > 0.48 && m.quality <= 0.5);
        assert!((m.win_probability.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(pool.len(), 2);
        assert_eq!(out.waiting, 2);
        assert_eq!(out.matched_waits, vec![1.0, 1.0]);
    }

    #[test]
    fn older_tickets_are_preferred_when_only_one_pair_is_possible() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("new", 1490.0, 9.0)).unwrap();
        pool.insert(solo("mid", 1500.0, 0.0)).unwrap();
        pool.insert(solo("old", 1510.0, 0.0)).unwrap();
        let out = pool.tick(9.5, &MODEL);
        assert_eq!(out.matches.len(), 1);
        assert_eq!(pool.tickets().next().unwrap().id.as_str(), "new");
    }

    #[test]
    fn the_window_widens_with_wait_until_the_pair_is_legal() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("a", 1500.0, 0.0)).unwrap();
        pool.insert(solo("b", 1580.0, 0.0)).unwrap();
        let id = crate::ids::TicketId::new("a");
        assert_eq!(pool.window(&id, 0.0), Some((1450.0, 1550.0)));
        assert!(pool.tick(5.0, &MODEL).matches.is_empty());
        assert_eq!(pool.window(&id, 10.0), Some((1400.0, 1600.0)));
        assert_eq!(pool.tick(10.0, &MODEL).matches.len(), 1);
    }

    #[test]
    fn a_starving_ticket_takes_the_best_available_and_ttl_expires() {
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("a", 1000.0, 0.0)).unwrap();
        pool.insert(solo("b", 2400.0, 100.0)).unwrap();
        pool.insert(solo("c", 2600.0, 100.0)).unwrap();
        pool.insert(solo("z", 1500.0, -1000.0)).unwrap();
        let out = pool.tick(121.0, &MODEL);
        assert_eq!(out.expired.len(), 1);
        assert_eq!(out.expired[0].id.as_str(), "z");
        // `a` starves and takes the nearer of b and c, far outside any window.
        assert_eq!(out.matches.len(), 1);
        let ids: Vec<&str> = out.matches[0]
            .teams
            .iter()
            .map(|t| t[0].id.as_str())
            .collect();
        assert!(ids.contains(&"a") && ids.contains(&"b"), "{ids:?}");
        assert!(out.matches[0].quality < 0.01);
    }

    #[test]
    fn regions_must_overlap_under_the_latency_limit() {
        let config = MatchingConfig {
            regions: vec!["eu".into(), "us".into()],
            ..MatchingConfig::default()
        };
        let mut pool = Pool::new(ONE, config);
        let mut a = solo("a", 1500.0, 0.0);
        a.region_latency_ms = vec![("eu".into(), 30), ("us".into(), 150)];
        let mut b = solo("b", 1501.0, 0.0);
        b.region_latency_ms = vec![("eu".into(), 200), ("us".into(), 40)];
        let mut c = solo("c", 1530.0, 0.0);
        c.region_latency_ms = vec![("eu".into(), 20)];
        pool.insert(a).unwrap();
        pool.insert(b).unwrap();
        pool.insert(c).unwrap();
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        assert_eq!(out.matches[0].region.as_deref(), Some("eu"));
        assert_eq!(pool.tickets().next().unwrap().id.as_str(), "b");
    }

    #[test]
    fn a_starving_ticket_is_served_before_a_pair_of_fresh_ones() {
        // `a` starves far below two fresh players who would make a close pair. The oldest
        // ticket chooses first: it takes the nearer of them, and the other waits.
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        pool.insert(solo("a", 1000.0, 0.0)).unwrap();
        pool.insert(solo("b", 1500.0, 129.0)).unwrap();
        pool.insert(solo("c", 1502.0, 129.0)).unwrap();
        let out = pool.tick(130.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        let mut ids: Vec<&str> = out.matches[0]
            .teams
            .tickets()
            .iter()
            .map(|t| t.id.as_str())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(pool.tickets().next().unwrap().id.as_str(), "c");
    }

    /// The logistic model with half of every match drawn: the two win probabilities sum to ½,
    /// as a rating system with a draw model (Thurstone-Mosteller) answers.
    struct Drawish;

    impl crate::matching::WinModel for Drawish {
        fn win_probabilities(&self, teams: &[Vec<(f64, f64)>]) -> Vec<f64> {
            let p = MODEL.win_probabilities(teams);
            p.iter().map(|x| x / 2.0).collect()
        }
    }

    #[test]
    fn the_quality_floor_is_checked_on_the_probabilities_the_match_records() {
        // Under `Drawish` an even pair records quality ¼, exactly the floor; a pair 20 apart
        // records 0.236 (its underdog wins 0.471 of the decided games, half of them drawn), so
        // it is refused; the favourite's share p = 0.264 taken as [p, 1 − p] would pass.
        let mut pool = Pool::new(ONE, MatchingConfig::default());
        for (id, r) in [
            ("even1", 1000.0),
            ("even2", 1000.0),
            ("a", 1500.0),
            ("b", 1520.0),
        ] {
            pool.insert(solo(id, r, 0.0)).unwrap();
        }
        let out = pool.tick(1.0, &Drawish);
        for m in &out.matches {
            assert!(m.quality >= 0.25, "quality {} under the floor", m.quality);
        }
        assert_eq!(out.matches.len(), 1);
        let mut left: Vec<&str> = pool.tickets().map(|t| t.id.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["a", "b"]);
    }
}

mod teams {
    use crate::matching::test_util::{party, solo};
    use crate::matching::{LogisticModel, MatchingConfig, Pool, RoleRequirement, Shape};

    const MODEL: LogisticModel = LogisticModel { scale: 400.0 };

    fn shape(teams: u32, team_size: u32) -> Shape {
        Shape { teams, team_size }
    }

    fn team_ids(m: &crate::matching::FormedMatch) -> Vec<Vec<String>> {
        m.teams
            .iter()
            .map(|t| t.iter().map(|x| x.id.to_string()).collect())
            .collect()
    }

    #[test]
    fn two_v_two_forms_tight_balanced_matches_from_rating_neighbours() {
        let mut pool = Pool::new(shape(2, 2), MatchingConfig::default());
        for (i, r) in [
            1500.0, 1510.0, 1520.0, 1530.0, 1800.0, 1810.0, 1820.0, 1830.0,
        ]
        .into_iter()
        .enumerate()
        {
            pool.insert(solo(&format!("t{i}"), r, 0.0)).unwrap();
        }
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 2);
        for m in &out.matches {
            assert!(m.rating_spread <= 30.0 + 1e-9, "{:?}", team_ids(m));
            // 1500+1530 vs 1510+1520: perfectly even.
            assert!((m.quality - 0.5).abs() < 1e-9);
            assert!(m.teams.iter().all(|t| t.len() == 2));
        }
        assert!(pool.is_empty());
    }

    #[test]
    fn five_v_five_keeps_parties_whole_on_one_team() {
        let mut pool = Pool::new(shape(2, 5), MatchingConfig::default());
        pool.insert(party("p3", &[1500.0, 1510.0, 1490.0], 0.0))
            .unwrap();
        pool.insert(party("p2", &[1505.0, 1495.0], 0.0)).unwrap();
        for i in 0..5 {
            pool.insert(solo(&format!("s{i}"), 1480.0 + 10.0 * f64::from(i), 0.0))
                .unwrap();
        }
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        let m = &out.matches[0];
        for team in &m.teams {
            assert_eq!(team.iter().map(|t| t.size()).sum::<usize>(), 5);
        }
        assert!(m.quality > 0.45);
    }

    #[test]
    fn a_starving_solo_among_duos_is_matched_with_a_solo_further_away() {
        // 2v2: the starving solo's nearest neighbours are duos (1 + 2 + 2 overflows the four
        // players), and the only other solo is far away. {A, D} vs a duo is legal once A
        // starves; the starvation guard must find it.
        let mut pool = Pool::new(shape(2, 2), MatchingConfig::default());
        let now = MatchingConfig::default().max_wait_seconds + 10.0;
        pool.insert(solo("a", 1000.0, 0.0)).unwrap();
        for (id, r) in [("d1", 1200.0), ("d2", 1350.0), ("d3", 1500.0)] {
            pool.insert(party(id, &[r, r], now - 1.0)).unwrap();
        }
        pool.insert(solo("z", 2000.0, now - 1.0)).unwrap();
        let out = pool.tick(now, &MODEL);
        assert_eq!(out.matches.len(), 1, "{out:?}");
        let ids: Vec<&str> = out.matches[0]
            .teams
            .iter()
            .flatten()
            .map(|t| t.id.as_str())
            .collect();
        assert!(ids.contains(&"a") && ids.contains(&"z"), "{ids:?}");
    }

    #[test]
    fn party_skill_replaces_member_skills_once_it_exists() {
        let mut pool = Pool::new(shape(2, 2), MatchingConfig::default());
        let mut strong = party("duo", &[1500.0, 1500.0], 0.0);
        strong.party_skill = Some((1900.0, 80.0));
        pool.insert(strong).unwrap();
        pool.insert(party("duo2", &[1500.0, 1500.0], 0.0)).unwrap();
        // The duo is matched as the 1900 unit it is: no legal opponent at 1500.
        assert!(pool.tick(1.0, &MODEL).matches.is_empty());
        assert_eq!(pool.window(&"duo".into(), 1.0), Some((1850.0, 1950.0)));
    }

    #[test]
    fn free_for_all_of_eight_puts_each_ticket_on_its_own_team() {
        let config = MatchingConfig::default_for_scale(15.0);
        let mut pool = Pool::new(shape(8, 1), config);
        for i in 0..9 {
            pool.insert(solo(&format!("f{i}"), 25.0 + 0.1 * f64::from(i), 0.0))
                .unwrap();
        }
        let out = pool.tick(1.0, &LogisticModel { scale: 15.0 });
        assert_eq!(out.matches.len(), 1);
        let m = &out.matches[0];
        assert_eq!(m.teams.len(), 8);
        assert!(m.teams.iter().all(|t| t.len() == 1));
        assert!((m.win_probability.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // Nearly equal ratings: the weakest has nearly its fair 1/8 share.
        assert!(m.quality > 0.45 && m.quality <= 0.5);
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn ten_v_ten_uses_the_heuristic_and_stays_balanced() {
        let mut pool = Pool::new(shape(2, 10), MatchingConfig::default());
        for i in 0..20 {
            pool.insert(solo(&format!("x{i}"), 1450.0 + 2.5 * f64::from(i), 0.0))
                .unwrap();
        }
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        assert!(out.matches[0].quality > 0.49);
    }

    #[test]
    fn roles_have_their_minimum_on_every_team() {
        let config = MatchingConfig {
            roles: vec![RoleRequirement {
                name: "healer".into(),
                min_per_team: 1,
            }],
            ..MatchingConfig::default()
        };
        let mut pool = Pool::new(shape(2, 2), config);
        for (i, heals) in [true, true, false, false, false].into_iter().enumerate() {
            let mut t = solo(&format!("r{i}"), 1500.0 + f64::from(i as u32), 0.0);
            t.roles = vec![if heals {
                vec!["healer".into()]
            } else {
                vec!["dps".into()]
            }];
            pool.insert(t).unwrap();
        }
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        for team in &out.matches[0].teams {
            assert!(team.iter().any(|t| t.roles[0][0] == "healer"));
        }
    }

    #[test]
    fn five_squads_each_get_a_medic_when_the_balanced_fill_bunches_them() {
        // Five squads of four, a medic in each: twenty solos 1500..1519, the medics at 1510,
        // 1511 and 1517..1519. Balancing by rating alone puts two medics in each of two
        // squads and none in two others; one exchange cannot repair both.
        let config = MatchingConfig {
            roles: vec![RoleRequirement {
                name: "medic".into(),
                min_per_team: 1,
            }],
            ..MatchingConfig::default()
        };
        let mut pool = Pool::new(shape(5, 4), config);
        for i in 0..20u32 {
            let mut t = solo(&format!("s{i}"), 1500.0 + f64::from(i), 0.0);
            let medic = matches!(i, 10 | 11 | 17..=19);
            t.roles = vec![vec![if medic { "medic" } else { "rifle" }.into()]];
            pool.insert(t).unwrap();
        }
        let out = pool.tick(1.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        for team in &out.matches[0].teams {
            assert_eq!(team.len(), 4);
            assert!(team.iter().any(|t| t.roles[0][0] == "medic"));
        }
    }

    #[test]
    fn the_oldest_ticket_gets_its_match_first() {
        let mut pool = Pool::new(shape(2, 2), MatchingConfig::default());
        // Four fresh tickets would make a tight 2v2 on their own; the old one (past the first
        // expansion step) anchors first, so the window is built around it.
        for (i, r) in [1500.0, 1510.0, 1520.0, 1530.0].into_iter().enumerate() {
            pool.insert(solo(&format!("y{i}"), r, 14.0)).unwrap();
        }
        pool.insert(solo("old", 1540.0, 0.0)).unwrap();
        let out = pool.tick(15.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        assert!(
            team_ids(&out.matches[0])
                .concat()
                .contains(&"old".to_string())
        );
        assert_eq!(pool.tickets().next().unwrap().id.as_str(), "y0");
    }

    /// Eight fresh solos 1500..1507 alternating between an eu and a na player: every run of
    /// four rating neighbours mixes the regions, yet the four of each region make a legal 2v2.
    fn two_region_pool(far: Option<u32>) -> Pool {
        let config = MatchingConfig {
            regions: vec!["eu".into(), "na".into()],
            ..MatchingConfig::default()
        };
        let mut pool = Pool::new(shape(2, 2), config);
        for i in 0..8u32 {
            let (near, other) = if i % 2 == 0 {
                ("eu", "na")
            } else {
                ("na", "eu")
            };
            let mut t = solo(&format!("{near}{i}"), 1500.0 + f64::from(i), 0.0);
            t.region_latency_ms = vec![(near.into(), 30)];
            if let Some(ms) = far {
                t.region_latency_ms.push((other.into(), ms));
            }
            pool.insert(t).unwrap();
        }
        pool
    }

    #[test]
    fn fresh_tickets_of_two_regions_match_within_their_own_region() {
        // Listing only the near region, or the far one too above the latency limit.
        for far in [None, Some(110)] {
            let mut pool = two_region_pool(far);
            let out = pool.tick(1.0, &MODEL);
            assert_eq!(out.matches.len(), 2, "{far:?}");
            for m in &out.matches {
                let region = m.region.as_deref().unwrap();
                for t in m.teams.iter().flatten() {
                    assert!(
                        t.id.as_str().starts_with(region),
                        "{far:?}: {t:?} in {region}"
                    );
                }
            }
            assert!(pool.is_empty());
        }
    }

    #[test]
    fn an_old_ticket_reaching_two_regions_gets_its_match_in_one_of_them() {
        // `old` reaches eu and na; its rating neighbours alternate between na-only and eu-only
        // players, so every window of its nearest neighbours mixes regions. It anchors first
        // (a later expansion stage) and must take the nearest eu players before e1 anchors
        // and forms the tighter {e1, e2, e3, e4} without it.
        let config = MatchingConfig {
            regions: vec!["eu".into(), "na".into()],
            ..MatchingConfig::default()
        };
        let mut pool = Pool::new(shape(2, 2), config);
        let mut old = solo("old", 1500.0, 0.0);
        old.region_latency_ms = vec![("eu".into(), 30), ("na".into(), 30)];
        pool.insert(old).unwrap();
        for (id, r, region) in [
            ("n1", 1501.0, "na"),
            ("e1", 1502.0, "eu"),
            ("n2", 1503.0, "na"),
            ("e2", 1504.0, "eu"),
            ("e3", 1505.0, "eu"),
            ("e4", 1506.0, "eu"),
        ] {
            let mut t = solo(id, r, 9.0);
            t.region_latency_ms = vec![(region.into(), 30)];
            pool.insert(t).unwrap();
        }
        let out = pool.tick(10.0, &MODEL);
        assert_eq!(out.matches.len(), 1, "{out:?}");
        let mut ids = team_ids(&out.matches[0]).concat();
        ids.sort_unstable();
        assert_eq!(ids, ["e1", "e2", "e3", "old"]);
        assert_eq!(out.matches[0].region.as_deref(), Some("eu"));
    }

    #[test]
    fn a_starving_ticket_gathers_players_for_every_role_seat_counting_each_player_once() {
        // 5v5 with a tank, two supports and two damage dealers per team: two tanks, four
        // supports and four damage dealers. `a` starves; the only players who can tank, `a`
        // and `b`, can also support, but each fills one seat, so the group needs the supports
        // at 1800 too. {a, b, s1..s4, d1..d4} is the one legal match.
        let role = |name: &str, min_per_team| RoleRequirement {
            name: name.into(),
            min_per_team,
        };
        let config = MatchingConfig {
            roles: vec![role("tank", 1), role("support", 2), role("damage", 2)],
            ..MatchingConfig::default()
        };
        let now = config.max_wait_seconds + 10.0;
        let mut pool = Pool::new(shape(2, 5), config);
        let mut add = |id: &str, rating: f64, entered_at: f64, roles: &[&str]| {
            let mut t = solo(id, rating, entered_at);
            t.roles = vec![roles.iter().map(|r| r.to_string()).collect()];
            pool.insert(t).unwrap();
        };
        add("a", 1500.0, 0.0, &["tank", "support"]);
        add("b", 1501.0, now - 1.0, &["tank", "support"]);
        add("s1", 1502.0, now - 1.0, &["support"]);
        add("s2", 1503.0, now - 1.0, &["support"]);
        for i in 1..=20u32 {
            add(
                &format!("d{i}"),
                1503.0 + f64::from(i),
                now - 1.0,
                &["damage"],
            );
        }
        add("s3", 1800.0, now - 1.0, &["support"]);
        add("s4", 1800.0, now - 1.0, &["support"]);
        let out = pool.tick(now, &MODEL);
        assert_eq!(out.matches.len(), 1, "{out:?}");
        let mut ids = team_ids(&out.matches[0]).concat();
        ids.sort_unstable();
        assert_eq!(
            ids,
            ["a", "b", "d1", "d2", "d3", "d4", "s1", "s2", "s3", "s4"]
        );
    }

    #[test]
    fn starving_tickets_that_no_role_group_can_serve_do_not_each_walk_the_whole_queue() {
        // 5v5 with a healer per team and a thousand starving damage dealers: no match is
        // possible. The first starving anchor looks at every ticket to learn that; the others
        // know it for the rest of the tick instead of looking again (a million steps).
        let config = MatchingConfig {
            roles: vec![RoleRequirement {
                name: "healer".into(),
                min_per_team: 1,
            }],
            ..MatchingConfig::default()
        };
        let now = config.max_wait_seconds + 10.0;
        let mut pool = Pool::new(shape(2, 5), config);
        for i in 0..1000u32 {
            let mut t = solo(&format!("d{i}"), 1000.0 + f64::from(i), 0.0);
            t.roles = vec![vec!["damage".into()]];
            pool.insert(t).unwrap();
        }
        crate::matching::teams::WALKED.with(|w| w.set(0));
        let out = pool.tick(now, &MODEL);
        assert!(out.matches.is_empty());
        assert_eq!(out.waiting, 1000);
        let walked = crate::matching::teams::WALKED.with(std::cell::Cell::get);
        assert!(walked < 1000, "{walked} tickets looked at");
    }

    #[test]
    fn quality_floor_holds_until_the_schedule_relaxes_it_then_starvation_lifts_it() {
        let mut pool = Pool::new(shape(2, 2), MatchingConfig::default());
        // One strong player with three weak ones: the best split is 1900+1500 vs 1500+1500.
        for (i, r) in [1500.0, 1500.0, 1500.0, 1900.0].into_iter().enumerate() {
            pool.insert(solo(&format!("q{i}"), r, 0.0)).unwrap();
        }
        assert!(pool.tick(1.0, &MODEL).matches.is_empty());
        // At 60 s the window is 400 wide and the floor 0.15: 1900+1500 vs 3000 gives 0.091.
        assert!(pool.tick(60.0, &MODEL).matches.is_empty());
        let out = pool.tick(120.0, &MODEL);
        assert_eq!(out.matches.len(), 1);
        assert!(out.matches[0].quality < 0.15);
    }
}
