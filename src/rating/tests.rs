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
        c.validate(),
        Err("tau: must be finite and > 0 (got -1)".to_string())
    );
    let c = SystemConfig::Elo(elo::Config {
        k: f64::NAN,
        ..Default::default()
    });
    assert_eq!(
        c.validate(),
        Err("k: must be finite and > 0 (got NaN)".to_string())
    );
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
    let results = sys.period_results(&m).unwrap();
    assert_eq!(results[0][0].len(), 1);
    assert_eq!(results[0][0][0].score, 1.0);
    let after = sys
        .rate_period(&teams[0][0].skill, &results[0][0], 0.0)
        .unwrap();
    assert!(after.mean > 1500.0);
    assert!(
        SystemConfig::Elo(elo::Config::default())
            .period_results(&m)
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
