//! Cross-system tests: the public API, config parsing, errors, shapes.

use super::test_util::*;
use super::*;

fn all_systems() -> Vec<SystemConfig> {
    vec![
        SystemConfig::Glicko2(glicko2::Config::default()),
        SystemConfig::Glicko(glicko::Config::default()),
        SystemConfig::WengLinBt(weng_lin::Config::default()),
        SystemConfig::WengLinPl(weng_lin::Config::default()),
        SystemConfig::WengLinTm(weng_lin::Config::default()),
        SystemConfig::Elo(elo::Config::default()),
    ]
}

#[test]
fn default_is_glicko2_and_every_system_validates() {
    assert_eq!(SystemConfig::default().name(), "glicko2");
    let names: Vec<&str> = all_systems().iter().map(SystemConfig::name).collect();
    assert_eq!(
        names,
        [
            "glicko2",
            "glicko",
            "weng-lin-bt",
            "weng-lin-pl",
            "weng-lin-tm",
            "elo"
        ]
    );
    for s in all_systems() {
        assert_eq!(s.validate(), Ok(()), "{}", s.name());
    }
}

#[test]
fn config_parses_from_toml_with_defaults_and_rejects_unknown_keys() {
    let c: SystemConfig =
        toml::from_str("system = \"glicko2\"\nteam_strategy = \"composite-team\"\ntau = 0.5\n")
            .unwrap();
    assert_eq!(c, SystemConfig::default());
    let c: SystemConfig = toml::from_str("system = \"weng-lin-pl\"\nkappa = 0.001\n").unwrap();
    assert_eq!(
        c,
        SystemConfig::WengLinPl(weng_lin::Config {
            kappa: 0.001,
            ..Default::default()
        })
    );
    let c: SystemConfig = toml::from_str(
        "system = \"glicko\"\nmode = \"periodic\"\nteam_strategy = \"individual\"\n",
    )
    .unwrap();
    assert!(c.is_periodic());
    let err = toml::from_str::<SystemConfig>("system = \"elo\"\nkfactor = 3\n").unwrap_err();
    assert!(err.to_string().contains("kfactor"), "{err}");
    assert!(toml::from_str::<SystemConfig>("system = \"trueskill\"\n").is_err());
}

#[test]
fn validate_names_the_key_and_the_rule() {
    let c = SystemConfig::Glicko2(glicko2::Config {
        tau: -1.0,
        ..Default::default()
    });
    assert_eq!(
        c.validate().map_err(|e| e.to_string()),
        Err("tau: must be finite and > 0 (got -1)".to_string())
    );
    let c = SystemConfig::Elo(elo::Config {
        k: f64::NAN,
        ..Default::default()
    });
    assert_eq!(
        c.validate().map_err(|e| e.to_string()),
        Err("k: must be finite and > 0 (got NaN)".to_string())
    );
}

#[test]
fn each_system_reports_the_key_and_the_rule_apart() {
    let cases = [
        (
            SystemConfig::Glicko2(glicko2::Config {
                min_volatility: 0.5,
                max_volatility: 0.2,
                ..Default::default()
            }),
            "min_volatility",
            "must be <= max_volatility (0.5 > 0.2)",
        ),
        (
            SystemConfig::Glicko(glicko::Config {
                typical_deviation: 400.0,
                ..Default::default()
            }),
            "typical_deviation",
            "must be <= max_deviation (400 > 350)",
        ),
        (
            SystemConfig::WengLinPl(weng_lin::Config {
                kappa: 2.0,
                ..Default::default()
            }),
            "kappa",
            "must be in (0, 1] (got 2)",
        ),
        (
            SystemConfig::Elo(elo::Config {
                inflation_per_win: -1.0,
                ..Default::default()
            }),
            "inflation_per_win",
            "must be finite and >= 0 (got -1)",
        ),
    ];
    for (config, field, rule) in cases {
        let err = config.validate().unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.rule.as_str()),
            (field, rule),
            "{}",
            config.name()
        );
        assert_eq!(err.to_string(), format!("{field}: {rule}"));
    }
}

#[test]
fn errors_name_the_field() {
    let teams = vec![
        vec![player(1500.0, 200.0, 0.06)],
        vec![player(1500.0, -1.0, 0.06)],
    ];
    let err = SystemConfig::default()
        .rate(&MatchInput {
            teams: &teams,
            placements: &[1, 2],
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "teams[1][0].skill.deviation: must be finite and > 0 (at most 1e9) (got -1)"
    );
    let mut teams = vec![
        vec![player(1500.0, 200.0, 0.06)],
        vec![player(1500.0, 200.0, 0.06)],
    ];
    teams[0][0].elapsed_seconds = f64::INFINITY;
    let err = SystemConfig::default()
        .rate(&MatchInput {
            teams: &teams,
            placements: &[1, 2],
        })
        .unwrap_err();
    assert!(
        err.to_string().starts_with("teams[0][0].elapsed_seconds:"),
        "{err}"
    );
    let err = SystemConfig::default()
        .rate(&MatchInput {
            teams: &teams[..1],
            placements: &[1],
        })
        .unwrap_err();
    assert!(matches!(err, RatingError::InvalidShape { .. }));
    let err = SystemConfig::default()
        .rate(&MatchInput {
            teams: &teams,
            placements: &[1],
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "placements: need one placement per team (2 teams, 1 placements)"
    );
    let err = SystemConfig::default()
        .rate(&MatchInput {
            teams: &teams,
            placements: &[0, 1],
        })
        .unwrap_err();
    assert_eq!(err.to_string(), "placements[0]: must be >= 1 (1 = first)");
}

#[test]
fn every_system_rates_every_shape() {
    for sys in all_systems() {
        let i = sys.initial();
        let p = PlayerInput::new(i);
        let shapes: Vec<(Vec<Vec<PlayerInput>>, Vec<u32>)> = vec![
            (vec![vec![p], vec![p]], vec![1, 2]),
            (vec![vec![p, p], vec![p, p]], vec![2, 1]),
            (vec![vec![p], vec![p], vec![p], vec![p]], vec![1, 2, 2, 4]),
            (vec![vec![p, p, p], vec![p]], vec![1, 1]),
        ];
        for (teams, placements) in shapes {
            let out = sys
                .rate(&MatchInput {
                    teams: &teams,
                    placements: &placements,
                })
                .unwrap();
            assert_eq!(out.len(), teams.len());
            for (o, t) in out.iter().zip(&teams) {
                assert_eq!(o.len(), t.len());
            }
            let pred = {
                let skills: Vec<Vec<Skill>> = teams
                    .iter()
                    .map(|t| t.iter().map(|p| p.skill).collect())
                    .collect();
                let refs: Vec<&[Skill]> = skills.iter().map(Vec::as_slice).collect();
                sys.predict(&refs).unwrap()
            };
            let total: f64 = pred.win_probability.iter().sum::<f64>() + pred.draw_probability;
            assert_close(total, 1.0, 1e-12);
        }
    }
}

#[test]
fn generic_1v1_equals_the_allocation_free_function() {
    let a = Skill {
        mean: 1600.0,
        deviation: 120.0,
        volatility: 0.06,
    };
    let b = Skill {
        mean: 1450.0,
        deviation: 80.0,
        volatility: 0.05,
    };
    let teams = vec![vec![PlayerInput::new(a)], vec![PlayerInput::new(b)]];
    let m = MatchInput {
        teams: &teams,
        placements: &[2, 1],
    };
    let c2 = glicko2::Config::default();
    let (na, nb) = glicko2::rate_1v1(&a, &b, 0.0, &c2);
    assert_eq!(
        SystemConfig::Glicko2(c2).rate(&m).unwrap(),
        vec![vec![na], vec![nb]]
    );
    let c1 = glicko::Config::default();
    let (na, nb) = glicko::rate_1v1(&a, &b, 0.0, &c1);
    assert_eq!(
        SystemConfig::Glicko(c1).rate(&m).unwrap(),
        vec![vec![na], vec![nb]]
    );
}

#[test]
fn periodic_mode_leaves_ratings_until_rate_period() {
    let sys = SystemConfig::Glicko2(glicko2::Config {
        mode: Mode::Periodic,
        ..Default::default()
    });
    let teams = vec![
        vec![player(1500.0, 200.0, 0.06)],
        vec![player(1400.0, 30.0, 0.06)],
    ];
    let m = MatchInput {
        teams: &teams,
        placements: &[1, 2],
    };
    let out = sys.rate(&m).unwrap();
    assert_eq!(out[0][0], teams[0][0].skill);
    let results = sys.period_results(&m, &[]).unwrap();
    assert_eq!(results[0][0].len(), 1);
    assert_eq!(results[0][0][0].score, 1.0);
    let after = sys
        .rate_period(&teams[0][0].skill, &results[0][0], 0.0)
        .unwrap();
    assert!(after.mean > 1500.0);
    assert!(
        SystemConfig::Elo(elo::Config::default())
            .period_results(&m, &[])
            .is_err()
    );
}

#[test]
fn display_rules() {
    let s = Skill {
        mean: 30.0,
        deviation: 2.0,
        volatility: 0.0,
    };
    let d = SystemConfig::WengLinPl(weng_lin::Config::default()).display(&s);
    assert_eq!((d.display, d.low, d.high), (24.0, 30.0 - 3.92, 30.0 + 3.92));
    let g = SystemConfig::Glicko(glicko::Config::default()).display(&Skill {
        mean: 1500.0,
        deviation: 100.0,
        volatility: 0.0,
    });
    assert_eq!((g.display, g.low, g.high), (1500.0, 1304.0, 1696.0));
}

#[test]
fn glicko2_team_match_composite_team() {
    let sys = SystemConfig::default();
    let strong = player(1700.0, 80.0, 0.06);
    let weak = player(1300.0, 80.0, 0.06);
    let mid = player(1500.0, 80.0, 0.06);
    // Strong + weak lose to two average players: the weak teammate lowered the expectation, so
    // the strong player loses less than after losing 1v1 to an average player.
    let teams = vec![vec![strong, weak], vec![mid, mid]];
    let out = sys
        .rate(&MatchInput {
            teams: &teams,
            placements: &[2, 1],
        })
        .unwrap();
    let solo = vec![vec![strong], vec![mid]];
    let alone = sys
        .rate(&MatchInput {
            teams: &solo,
            placements: &[2, 1],
        })
        .unwrap();
    assert!(out[0][0].mean < 1700.0 && out[0][1].mean < 1300.0);
    assert!(out[1][0].mean > 1500.0);
    assert!(1700.0 - out[0][0].mean < 1700.0 - alone[0][0].mean);
}

#[test]
fn glicko2_free_for_all_orders_the_changes() {
    let sys = SystemConfig::default();
    let p = player(1500.0, 150.0, 0.06);
    let teams = vec![vec![p], vec![p], vec![p], vec![p]];
    let out = sys
        .rate(&MatchInput {
            teams: &teams,
            placements: &[3, 1, 4, 2],
        })
        .unwrap();
    let m: Vec<f64> = out.iter().map(|t| t[0].mean).collect();
    assert!(
        m[1] > m[3] && m[3] > 1500.0 && 1500.0 > m[0] && m[0] > m[2],
        "{m:?}"
    );
}

#[test]
fn inactivity_before_a_game_grows_the_update() {
    for sys in [
        SystemConfig::default(),
        SystemConfig::Glicko(glicko::Config::default()),
    ] {
        let fresh = player(1500.0, 80.0, 0.06);
        let away = PlayerInput {
            elapsed_seconds: 120.0 * DAY_SECONDS,
            ..fresh
        };
        let opp = player(1500.0, 80.0, 0.06);
        let a = sys
            .rate(&MatchInput {
                teams: &[vec![fresh], vec![opp]],
                placements: &[1, 2],
            })
            .unwrap();
        let b = sys
            .rate(&MatchInput {
                teams: &[vec![away], vec![opp]],
                placements: &[1, 2],
            })
            .unwrap();
        assert!(
            b[0][0].mean - 1500.0 > a[0][0].mean - 1500.0,
            "{}",
            sys.name()
        );
    }
}

#[test]
fn decay_per_system() {
    let s = Skill {
        mean: 1500.0,
        deviation: 100.0,
        volatility: 0.06,
    };
    let g2 = SystemConfig::default();
    assert!(g2.decay(&s, g2.rating_period_seconds()).unwrap().deviation > 100.0);
    let elo = SystemConfig::Elo(elo::Config::default());
    assert_eq!(elo.decay(&s, 1e9).unwrap(), s);
    let wl = SystemConfig::WengLinBt(weng_lin::Config::default());
    let w = Skill {
        mean: 25.0,
        deviation: 2.0,
        volatility: 0.0,
    };
    assert_eq!(wl.decay(&w, 1e9).unwrap(), w);
    let wl = SystemConfig::WengLinBt(weng_lin::Config {
        sigma_decay_per_period: 0.5,
        ..Default::default()
    });
    let grown = wl.decay(&w, wl.rating_period_seconds() * 4.0).unwrap();
    assert_close(grown.deviation, (4.0f64 + 1.0).sqrt(), 1e-12);
    assert!(g2.decay(&s, -1.0).is_err());
    assert!(
        g2.decay(
            &Skill {
                volatility: 0.0,
                ..s
            },
            1.0
        )
        .is_err()
    );
}

#[test]
fn predict_favours_the_stronger_team_in_every_system() {
    for sys in [
        SystemConfig::default(),
        SystemConfig::Glicko(glicko::Config::default()),
        SystemConfig::WengLinBt(weng_lin::Config::default()),
        SystemConfig::WengLinPl(weng_lin::Config::default()),
        SystemConfig::WengLinTm(weng_lin::Config::default()),
        SystemConfig::Elo(elo::Config::default()),
    ] {
        let i = sys.initial();
        let strong = Skill {
            mean: i.mean + if i.mean > 100.0 { 200.0 } else { 5.0 },
            ..i
        };
        let p = sys.predict(&[&[i], &[strong], &[i]]).unwrap();
        assert!(
            p.win_probability[1] > p.win_probability[0],
            "{}: {p:?}",
            sys.name()
        );
        assert_close(p.win_probability[0], p.win_probability[2], 1e-12);
    }
}

#[test]
fn every_config_round_trips_through_toml() {
    for sys in all_systems() {
        let text = toml::to_string(&sys).unwrap();
        assert!(
            text.contains(&format!("system = \"{}\"", sys.name())),
            "{text}"
        );
        let back: SystemConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, sys);
    }
}

#[test]
fn weng_lin_kappa_floors_the_variance_shrink() {
    // Two very uncertain players with little noise: Bradley-Terry shrinks σ² by
    // (σ/c)³·p(1 − p) ≈ 0.707³/4 ≈ 8.8%; κ = 0.95 stops the shrink at 5%.
    let config = weng_lin::Config {
        kappa: 0.95,
        beta: 0.1,
        ..Default::default()
    };
    let a = Skill {
        mean: 0.0,
        deviation: 8.0,
        volatility: 0.0,
    };
    let b = Skill {
        mean: 0.0,
        deviation: 8.0,
        volatility: 0.0,
    };
    let (na, _) = weng_lin::rate_1v1_bt(&a, &b, 1.0, &config);
    assert_close(na.deviation, 8.0 * 0.95f64.sqrt(), 1e-12);
    let refs: [&[Skill]; 2] = [&[a], &[b]];
    let out = weng_lin::rate(weng_lin::Model::ThurstoneMosteller, &refs, &[1, 2], &config);
    assert!(out[0][0].deviation >= 8.0 * 0.95f64.sqrt() - 1e-12);
}

#[test]
fn free_for_all_win_probability_is_the_chance_of_finishing_first() {
    use crate::rating::win_shares;
    // Equal entrants: 1/n each.
    let even = win_shares(8, |_, _| 0.5);
    assert!(even.iter().all(|p| (p - 0.125).abs() < 1e-12), "{even:?}");
    // Two teams: exactly the pairwise probability.
    let two = win_shares(2, |_, _| 0.8);
    assert!(
        (two[0] - 0.8).abs() < 1e-12 && (two[1] - 0.2).abs() < 1e-12,
        "{two:?}"
    );
    // Bradley-Terry strengths 4:2:1:1 are recovered exactly.
    let s = [4.0, 2.0, 1.0, 1.0];
    let bt = win_shares(4, |i, j| s[i] / (s[i] + s[j]));
    for (p, si) in bt.iter().zip(s) {
        assert!((p - si / 8.0).abs() < 1e-12, "{bt:?}");
    }
    // One entrant who beats each of seven others for certain wins nearly surely (the old
    // average of pairwise chances said 0.25).
    let dominant = win_shares(8, |i, _| if i == 0 { 1.0 } else { 0.5 });
    assert!(dominant[0] > 0.99, "{dominant:?}");
    assert!((dominant.iter().sum::<f64>() - 1.0).abs() < 1e-12);
}

/// Known answers for every margin option on one hand-computed case: two equal players (so the
/// expected score is ½), team a wins 12 games to 5. The options give
/// weighted: w = 12/17; multiplier: w = ln(7 + 1) · 2.2/(0.001 · 0 + 2.2) = ln 8 = 2.079442;
/// partial (κ = 3, λ = 0.8): s = 0.2 + 0.8 · σ(3 · ln(12/5)) = 0.946033.
mod margin_known_answers {
    use super::*;
    use crate::rating::margin::{Margin, MarginKind};

    const SCORES: [f64; 2] = [12.0, 5.0];

    fn margin(kind: MarginKind) -> Margin {
        Margin {
            kind,
            scale: 3.0,
            weight: 0.8,
        }
    }

    fn one_v_one(system: &SystemConfig, a: Skill, b: Skill) -> (Skill, Skill) {
        let teams = vec![vec![PlayerInput::new(a)], vec![PlayerInput::new(b)]];
        let out = system
            .rate_scored(
                &MatchInput {
                    teams: &teams,
                    placements: &[1, 2],
                },
                &SCORES,
            )
            .unwrap();
        (out[0][0], out[1][0])
    }

    /// Plain Elo K = 32: the winner gains K · w · (s − ½).
    #[test]
    fn elo() {
        let p = Skill {
            mean: 1500.0,
            deviation: 0.0,
            volatility: 0.0,
        };
        for (kind, gain) in [
            (MarginKind::None, 16.0),
            (MarginKind::Weighted, 11.294_118),
            (MarginKind::Multiplier, 33.271_065),
            (MarginKind::Partial, 14.273_071),
        ] {
            let system = SystemConfig::Elo(elo::Config {
                k: 32.0,
                margin: margin(kind),
                ..elo::Config::plain()
            });
            let (a, b) = one_v_one(&system, p, p);
            assert_close(a.mean - 1500.0, gain, 1e-6);
            assert_close(b.mean - 1500.0, -gain, 1e-6);
        }
    }

    /// Glicko-1, both at 1500 / RD 100: g = 1/√(1 + 3q²·100²/π²) = 0.953498,
    /// 1/d² = q²g²/4, r' = 1500 + q/(1/RD² + 1/d²) · w · g · (s − ½), RD' = 96.436835 whatever
    /// the margin.
    #[test]
    fn glicko() {
        let p = Skill {
            mean: 1500.0,
            deviation: 100.0,
            volatility: 0.0,
        };
        for (kind, after) in [
            (MarginKind::None, 1_525.513_638),
            (MarginKind::Weighted, 1_518.009_627),
            (MarginKind::Multiplier, 1_553.054_118),
            (MarginKind::Partial, 1_522.759_872),
        ] {
            let system = SystemConfig::Glicko(glicko::Config {
                margin: margin(kind),
                ..glicko::Config::default()
            });
            let (a, b) = one_v_one(&system, p, p);
            assert_close(a.mean, after, 1e-5);
            assert_close(b.mean, 3000.0 - after, 1e-5);
            assert_close(a.deviation, 96.436_835, 1e-5);
        }
    }

    /// Glicko-2 with drift measured in time only (no per-match volatility step) and no
    /// bounds, both at μ = 0, φ = 1: g = 1/√(1 + 3/π²), 1/v = g²/4, φ' = 1/√(1 + 1/v),
    /// μ' = φ'² · w · g · (s − ½).
    #[test]
    fn glicko2() {
        let p = Skill {
            mean: 1500.0,
            deviation: glicko2::SCALE,
            volatility: 0.06,
        };
        let g = 1.0 / (1.0 + 3.0 / (std::f64::consts::PI * std::f64::consts::PI)).sqrt();
        let phi2 = 1.0 / (1.0 + g * g / 4.0);
        for (kind, s, w) in [
            (MarginKind::None, 1.0, 1.0),
            (MarginKind::Weighted, 1.0, 12.0 / 17.0),
            (MarginKind::Multiplier, 1.0, 8f64.ln()),
            (MarginKind::Partial, 0.946_033, 1.0),
        ] {
            let system = SystemConfig::Glicko2(glicko2::Config {
                per_match_drift: false,
                margin: margin(kind),
                ..glicko2::Config::unbounded()
            });
            let (a, _) = one_v_one(&system, p, p);
            let mu = phi2 * w * g * (s - 0.5);
            assert_close(a.mean, 1500.0 + glicko2::SCALE * mu, 1e-3);
            assert_close(a.deviation, glicko2::SCALE * phi2.sqrt(), 1e-9);
        }
        // With the per-match step (the default) φ also grows by the new volatility.
        let system = SystemConfig::Glicko2(glicko2::Config::unbounded());
        let (a, _) = one_v_one(&system, p, p);
        assert!(a.deviation > glicko2::SCALE * phi2.sqrt());
    }

    /// Weng-Lin Bradley-Terry, both at μ 25, σ 25/3, β 25/6: c = √(2σ² + 2β²) = 13.176157,
    /// μ' = 25 + w · σ²/c · (s − ½); σ' does not depend on the margin.
    #[test]
    fn weng_lin() {
        let p = Skill {
            mean: 25.0,
            deviation: 25.0 / 3.0,
            volatility: 0.0,
        };
        let mut sigma = None;
        for (kind, after) in [
            (MarginKind::None, 27.635_231),
            (MarginKind::Weighted, 26.860_163),
            (MarginKind::Multiplier, 30.479_810),
            (MarginKind::Partial, 27.350_803),
        ] {
            for system in [
                SystemConfig::WengLinBt(weng_lin::Config {
                    margin: margin(kind),
                    ..weng_lin::Config::default()
                }),
                SystemConfig::WengLinPl(weng_lin::Config {
                    margin: margin(kind),
                    ..weng_lin::Config::default()
                }),
            ] {
                let (a, b) = one_v_one(&system, p, p);
                assert_close(a.mean, after, 1e-5);
                assert_close(b.mean, 50.0 - after, 1e-5);
                assert_close(a.deviation, *sigma.get_or_insert(a.deviation), 1e-12);
            }
        }
        // Thurstone-Mosteller mixes the updates for finishing ahead and behind: a partial
        // outcome moves the winner less than a plain win, and a weight scales the move.
        let tm = |kind| {
            let system = SystemConfig::WengLinTm(weng_lin::Config {
                margin: margin(kind),
                ..weng_lin::Config::default()
            });
            one_v_one(&system, p, p).0.mean - 25.0
        };
        let plain = tm(MarginKind::None);
        assert!(0.0 < tm(MarginKind::Partial) && tm(MarginKind::Partial) < plain);
        assert_close(tm(MarginKind::Weighted), plain * 12.0 / 17.0, 1e-9);
    }

    /// Scores must be one finite, non-negative number per team; the error names the field.
    #[test]
    fn bad_scores_are_named() {
        let system = SystemConfig::Elo(elo::Config::default());
        let p = PlayerInput::new(system.initial());
        let teams = vec![vec![p], vec![p]];
        let m = MatchInput {
            teams: &teams,
            placements: &[1, 2],
        };
        for (scores, field) in [
            (&[1.0][..], "team_scores"),
            (&[1.0, f64::NAN][..], "team_scores[1]"),
            (&[-1.0, 2.0][..], "team_scores[0]"),
        ] {
            let e = system.rate_scored(&m, scores).unwrap_err().to_string();
            assert!(e.starts_with(field), "{e}");
        }
    }
}
