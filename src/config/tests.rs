use super::*;

#[test]
fn inversus_on_a_periodic_pool_loads_with_a_warning_naming_the_queue() {
    assert_eq!(
        Config::from_toml_str("").unwrap().warnings(),
        Vec::<String>::new()
    );
    let c =
        Config::from_toml_str("[queues.1v1.rating]\nsystem = \"glicko2\"\nmode = \"periodic\"\n")
            .unwrap();
    let warnings = c.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("queues.1v1: ranking = \"inversus\""));
}

#[test]
fn defaults_load_and_name_the_four_queues() {
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(
        c.queues.keys().map(String::as_str).collect::<Vec<_>>(),
        ["1v1", "2v2", "5v5", "ffa8"]
    );
    assert_eq!(
        c.ranking,
        RankingConfig::default(),
        "config/default.toml's [ranking] spells out the code's defaults"
    );
    assert_eq!(c.queues["1v1"].rating.name(), "glicko2");
    assert_eq!(c.queues["2v2"].rating.name(), "glicko2");
    assert_eq!(c.queues["5v5"].rating.name(), "weng-lin-bt");
    assert_eq!(c.queues["ffa8"].rating.name(), "weng-lin-pl");
    assert_eq!(c.queues["1v1"].ranking, RankingKind::Inversus);
    assert_eq!(c.queues["5v5"].ranking, RankingKind::Ladder);
    assert_eq!(
        c.queues["ffa8"].shape(),
        Shape {
            teams: 8,
            team_size: 1
        }
    );
    assert_eq!(c.addr().to_string(), "127.0.0.1:50051");
    assert_eq!(c.metrics_addr().unwrap().to_string(), "127.0.0.1:9090");
    assert!(c.server.tick_interval_ms <= 1000);
    assert!(!c.auth.enabled);
}

#[test]
fn a_user_file_with_only_auth_merges_over_the_defaults() {
    let c = Config::from_toml_str(
        "[auth]\nenabled = true\njwt_secret = \"0123456789abcdef0123456789abcdef\"\n",
    )
    .unwrap();
    assert!(c.auth.enabled);
    assert_eq!(c.queues.len(), 4);
}

fn rule_of(user: &str) -> String {
    Config::from_toml_str(user).unwrap_err().to_string()
}

#[test]
fn queue_rules_reach_the_matcher_config() {
    let c = Config::from_toml_str(
        "[[queues.5v5.rules]]\nkind = \"equal\"\nattribute = \"mode\"\n\
         [[queues.5v5.rules]]\nkind = \"avoid\"\n",
    )
    .unwrap();
    let rules = &c.queues["5v5"].matching.rules;
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].attribute, "mode");
    assert!(c.queues["1v1"].matching.rules.is_empty());
    // The rules live beside `[queues.NAME.matching]`, never inside it.
    assert!(
        Config::from_toml_str(
            "[[queues.5v5.matching.rules]]\nkind = \"equal\"\nattribute = \"m\"\n"
        )
        .is_err()
    );
}

#[test]
fn a_nested_rule_names_the_whole_key_path() {
    let field = |user: &str| match Config::from_toml_str(user).unwrap_err() {
        ConfigError::Invalid(e) => e.field,
        other => panic!("not a rule: {other}"),
    };
    assert_eq!(
        field("[queues.1v1.rating]\nsystem = \"glicko2\"\ntau = -1.0\n"),
        "queues.1v1.rating.tau"
    );
    assert_eq!(
        field("[queues.1v1.matching]\nwindow = 0.0\n"),
        "queues.1v1.matching.window"
    );
    assert_eq!(
        field("[queues.5v5.backfill]\ntimeout_seconds = 0.0\n"),
        "queues.5v5.backfill.timeout_seconds"
    );
    assert_eq!(
        field("[[queues.5v5.rules]]\nkind = \"equal\"\nattribute = \"\"\n"),
        "queues.5v5.rules[0].attribute"
    );
    assert_eq!(
        field(
            "[[queues.5v5.rules]]\nkind = \"avoid\"\n[[queues.5v5.rules]]\n\
             kind = \"difference\"\nattribute = \"level\"\n"
        ),
        "queues.5v5.rules[1].max"
    );
    assert_eq!(
        field("[auth]\nenabled = true\njwt_secret = \"short\"\n"),
        "auth.jwt_secret"
    );
    // As long as HS256's output at least: 31 bytes are refused.
    assert_eq!(
        field("[auth]\nenabled = true\njwt_secret = \"0123456789abcdef0123456789abcde\"\n"),
        "auth.jwt_secret"
    );
    assert_eq!(
        field("[rate_limit]\nburst_seconds = 0.0\n"),
        "rate_limit.burst_seconds"
    );
}

#[test]
fn a_ready_check_leaves_the_allocation_timeout_inside_the_match_timeout() {
    let server = "[server]\nallocation_timeout_seconds = 60.0\nmatch_timeout_seconds = 100.0\n";
    let e = rule_of(&format!(
        "{server}[queues.1v1]\nready_check_seconds = 40.0\n"
    ));
    assert!(
        e.contains("queues.1v1.ready_check_seconds")
            && e.contains("server.allocation_timeout_seconds (60)")
            && e.contains("server.match_timeout_seconds (100)")
            && e.contains("got 40"),
        "{e}"
    );
    let e = rule_of(&format!(
        "{server}[queues.2v2]\nready_check_seconds = 120.0\n"
    ));
    assert!(e.contains("queues.2v2.ready_check_seconds"), "{e}");
    let c = Config::from_toml_str(&format!(
        "{server}[queues.1v1]\nready_check_seconds = 39.5\n"
    ))
    .unwrap();
    assert_eq!(c.queues["1v1"].ready_check_seconds, 39.5);
}

#[test]
fn bad_values_name_the_key_and_the_rule() {
    let e = rule_of("[queues.1v1]\ntick_interval_ms = 0\n");
    assert!(e.contains("queues.1v1.tick_interval_ms"), "{e}");
    let e = rule_of("[server]\ntick_interval_ms = 0\n");
    assert!(
        e.contains("server.tick_interval_ms") && e.contains("1..=1000"),
        "{e}"
    );
    let e = rule_of("[server]\naddr = \"nonsense\"\n");
    assert!(e.contains("server.addr") && e.contains("HOST:PORT"), "{e}");
    let e = rule_of("[server]\naddr = \"0.0.0.0:50051\"\n");
    assert!(e.contains("allow_insecure"), "{e}");
    let e = rule_of("[queues.1v1]\nmax_party_size = 3\n");
    assert!(e.contains("queues.1v1.max_party_size"), "{e}");
    let e =
        rule_of("[queues.x]\nteams = 1\nteam_size = 1\nmax_party_size = 1\nranking = \"none\"\n");
    assert!(e.contains("queues.x.teams"), "{e}");
    let e = rule_of("[auth]\nenabled = true\n");
    assert!(e.contains("auth.jwt_secret"), "{e}");
}

#[test]
fn rate_limits_must_be_finite_non_negative_and_hold_one_request() {
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(c.rate_limit.player, 20.0);
    assert_eq!(c.rate_limit.anonymous, 0.0);
    let e = rule_of("[rate_limit]\nplayer = -1.0\n");
    assert!(e.contains("rate_limit.player") && e.contains(">= 0"), "{e}");
    let e = rule_of("[rate_limit]\nanonymous = inf\n");
    assert!(
        e.contains("rate_limit.anonymous") && e.contains("finite"),
        "{e}"
    );
    let e = rule_of("[rate_limit]\nburst_seconds = 0.0\n");
    assert!(e.contains("rate_limit.burst_seconds"), "{e}");
    let e = rule_of("[rate_limit]\nserver = 0.4\nburst_seconds = 2.0\n");
    assert!(
        e.contains("rate_limit.server") && e.contains("1 request"),
        "{e}"
    );
    let e = rule_of("[rate_limit]\nplayer = 5\nburst_seconds = 1\nplyer = 3\n");
    assert!(e.contains("plyer"), "{e}");
    Config::from_toml_str("[rate_limit]\nplayer = 0.0\nanonymous = 5.0\nburst_seconds = 0.2\n")
        .expect("0 = unlimited needs no bucket; 5/s × 0.2 s holds one request");
}

#[test]
fn in_flight_limits_and_the_body_bound_default_as_the_code_says_and_merge_key_by_key() {
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(
        c.rate_limit.max_in_flight,
        crate::limits::InFlightConfig::default(),
        "config/default.toml's [rate_limit.max_in_flight] spells out the code's defaults"
    );
    assert_eq!(c.rate_limit.max_in_flight.player, 16);
    assert_eq!(c.server.request_body_timeout_ms, 3000);
    let c = Config::from_toml_str("[rate_limit.max_in_flight]\nplayer = 4\n").unwrap();
    assert_eq!(c.rate_limit.max_in_flight.player, 4);
    assert_eq!(c.rate_limit.max_in_flight.server, 0);
    assert_eq!(c.rate_limit.player, 20.0, "the rest of [rate_limit] stays");
    let e = rule_of("[rate_limit.max_in_flight]\nplyer = 3\n");
    assert!(e.contains("plyer"), "{e}");
    let e = rule_of("[rate_limit.max_in_flight]\nplayer = -1\n");
    assert!(e.contains("player"), "{e}");
}

#[test]
fn wrong_types_and_unknown_keys_name_the_key() {
    let e = rule_of("[server]\ntick_interval_ms = \"fast\"\n");
    assert!(e.contains("tick_interval_ms"), "{e}");
    let e = rule_of("[server]\ntick_intervl_ms = 5\n");
    assert!(e.contains("tick_intervl_ms"), "{e}");
    let e = rule_of("[queues.1v1.rating]\nsystem = \"chess\"\n");
    assert!(e.contains("chess"), "{e}");
}

#[test]
fn non_loopback_is_allowed_with_allow_insecure() {
    let c =
        Config::from_toml_str("[server]\naddr = \"0.0.0.0:1\"\n[auth]\nallow_insecure = true\n")
            .unwrap();
    assert_eq!(c.addr().port(), 1);
}

#[test]
fn the_environment_sections_are_the_config_sections() {
    let c = Config::from_toml_str("").unwrap();
    let value = toml::Value::try_from(&c).unwrap();
    let mut keys: Vec<&str> = value
        .as_table()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut sections = SECTIONS.to_vec();
    sections.sort_unstable();
    assert_eq!(keys, sections);
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type.
fn service_link_variables_are_not_config_but_section_variables_are() {
    figment::Jail::expect_with(|jail| {
        // What Kubernetes injects for a Service named `matchmaker`, and the binary's flags.
        jail.set_env("MATCHMAKER_PORT", "tcp://10.0.0.1:50051");
        jail.set_env("MATCHMAKER_PORT_50051_TCP", "tcp://10.0.0.1:50051");
        jail.set_env("MATCHMAKER_PORT_50051_TCP_ADDR", "10.0.0.1");
        jail.set_env("MATCHMAKER_SERVICE_HOST", "10.0.0.1");
        jail.set_env("MATCHMAKER_SERVICE_PORT_GRPC", "50051");
        jail.set_env("MATCHMAKER_LOG_JSON", "true");
        jail.set_env("MATCHMAKER_ADMIN_TOKEN", "x");
        jail.set_env("MATCHMAKER_SERVER__TICK_INTERVAL_MS", "50");
        jail.set_env("MATCHMAKER_RATE_LIMIT__PLAYER", "7");
        let c = Config::load(None, &Overrides::default()).map_err(|e| e.to_string())?;
        assert_eq!(c.server.tick_interval_ms, 50);
        assert_eq!(c.rate_limit.player, 7.0);
        // A typo inside a known section is still refused, naming the key.
        jail.set_env("MATCHMAKER_SERVER__TICK_INTERVL_MS", "50");
        let e = Config::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("tick_intervl_ms"), "{e}");
        Ok(())
    });
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type.
fn environment_overrides_file_and_flags_override_environment() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("user.toml", "[server]\ntick_interval_ms = 100\n")?;
        jail.set_env("MATCHMAKER_SERVER__TICK_INTERVAL_MS", "50");
        jail.set_env("MATCHMAKER_SERVER__ADDR", "127.0.0.1:7000");
        let overrides = Overrides {
            addr: Some("127.0.0.1:7001".into()),
            ..Overrides::default()
        };
        let c =
            Config::load(Some(Path::new("user.toml")), &overrides).map_err(|e| e.to_string())?;
        assert_eq!(c.server.tick_interval_ms, 50);
        assert_eq!(c.server.addr, "127.0.0.1:7001");
        Ok(())
    });
}

#[test]
fn a_missing_config_file_is_an_error() {
    let e = Config::load(
        Some(Path::new("/nonexistent/x.toml")),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--config") && e.contains("does not exist"),
        "{e}"
    );
}

#[test]
fn buffers_and_request_limits_are_bounded_both_ways() {
    for key in [
        "max_concurrent_requests",
        "stream_buffer",
        "max_concurrent_requests_per_connection",
    ] {
        let zero = rule_of(&format!("[server]\n{key} = 0\n"));
        assert!(zero.contains(&format!("server.{key}")), "{zero}");
        // Past what a tokio channel or semaphore takes: refused before anything binds.
        let huge = rule_of(&format!("[server]\n{key} = {}\n", u64::MAX / 2));
        assert!(
            huge.contains(&format!("server.{key}")) && huge.contains("1073741824"),
            "{huge}"
        );
    }
    assert!(Config::from_toml_str(&format!("[server]\nstream_buffer = {MAX_BUFFER}\n")).is_ok());
}

#[test]
fn a_compiled_in_queue_is_left_out_when_turned_off() {
    let c = Config::from_toml_str(
        "[queues.2v2]\nenabled = false\n[queues.ffa8]\nenabled = false\n[queues.ranked]\nteams = 2\nteam_size = 1\nmax_party_size = 1\nranking = \"ladder\"\n",
    )
    .unwrap();
    assert_eq!(
        c.queues.keys().map(String::as_str).collect::<Vec<_>>(),
        ["1v1", "5v5", "ranked"]
    );
    let none = rule_of(
        "[queues.1v1]\nenabled = false\n[queues.2v2]\nenabled = false\n[queues.5v5]\nenabled = false\n[queues.ffa8]\nenabled = false\n",
    );
    assert!(none.contains("at least one queue"), "{none}");
}

#[test]
fn the_acknowledgement_retention_defaults_to_a_week_and_refuses_less_than_an_hour() {
    let c = Config::from_toml_str("").unwrap();
    assert_eq!(
        c.results,
        crate::store::ResultsConfig::default(),
        "config/default.toml's [results] spells out the code's default"
    );
    assert_eq!(c.results.ack_retention_seconds, 86_400);
    let e = rule_of("[results]\nack_retention_seconds = 600\n");
    assert!(
        e.contains("results.ack_retention_seconds: must be in 3600..") && e.contains("got 600"),
        "{e}"
    );
    let c = Config::from_toml_str("[results]\nack_retention_seconds = 3600\n").unwrap();
    assert_eq!(c.results.ack_retention_seconds, 3600);
}

#[test]
fn a_variable_naming_no_config_section_is_refused_and_others_without_a_section_pass() {
    let keys = |k: &[&str]| {
        k.iter()
            .map(std::ffi::OsString::from)
            .collect::<Vec<_>>()
            .into_iter()
    };
    // Kubernetes service links and the binary's own flags carry no `__`: not config.
    assert_eq!(
        section_unknown(keys(&[
            "MATCHMAKER_SERVICE_HOST",
            "MATCHMAKER_PORT_50051_TCP_ADDR",
            "MATCHMAKER_LOG_JSON",
            "MATCHMAKER_CLUSTER__REDIS_URL",
            "matchmaker_server__addr",
            "PATH",
        ])),
        None
    );
    assert_eq!(
        section_unknown(keys(&[
            "MATCHMAKER_SERVER__ADDR",
            "MATCHMAKER_CLUSTR__REDIS_URL"
        ])),
        Some("MATCHMAKER_CLUSTR__REDIS_URL".to_string())
    );
}

#[test]
fn shards_name_configured_queues_once_in_keyspaces_of_their_own_and_keep_pools_whole() {
    let sharded = |shards: &str| {
        Config::from_toml_str(&format!(
            "[cluster]\nredis_url = \"redis://127.0.0.1:6379/0\"\n{shards}"
        ))
    };
    let field = |shards: &str| match sharded(shards) {
        Err(ConfigError::Invalid(e)) => e.field,
        other => panic!("{shards}: {:?}", other.map(|c| c.cluster.shards)),
    };
    let shard = |keyspace: &str, queues: &str| {
        format!("[[cluster.shards]]\nkeyspace = \"{keyspace}\"\nqueues = [{queues}]\n")
    };
    let c = sharded(&shard("eu", "\"5v5\", \"ffa8\"")).unwrap();
    assert_eq!(c.cluster.keyspaces(), ["mm", "eu"]);
    assert_eq!(c.cluster.keyspace_of("5v5"), "eu");
    assert_eq!(c.cluster.keyspace_of("1v1"), "mm");
    assert_eq!(
        field(&shard("eu", "\"nope\"")),
        "cluster.shards[0].queues[0]"
    );
    assert_eq!(
        field(&format!(
            "{}{}",
            shard("eu", "\"5v5\""),
            shard("na", "\"5v5\"")
        )),
        "cluster.shards[1].queues[0]"
    );
    assert_eq!(field(&shard("mm", "\"5v5\"")), "cluster.shards[0].keyspace");
    assert_eq!(
        field(&format!(
            "{}{}",
            shard("eu", "\"5v5\""),
            shard("eu", "\"2v2\"")
        )),
        "cluster.shards[1].keyspace"
    );
    assert_eq!(
        field(&shard("{eu}", "\"5v5\"")),
        "cluster.shards[0].keyspace"
    );
    assert_eq!(field(&shard("eu", "")), "cluster.shards[0].queues");
    let embedded = Config::from_toml_str(&shard("eu", "\"5v5\""));
    assert!(
        matches!(&embedded, Err(ConfigError::Invalid(e)) if e.field == "cluster.shards"),
        "{:?}",
        embedded.map(|c| c.cluster.shards)
    );

    // A queue sharing 1v1's rating pool cannot leave 1v1's shard.
    let mut c = sharded("").unwrap();
    let mut twin = c.queues["1v1"].clone();
    twin.rating_pool = Some("1v1".into());
    c.queues.insert("1v1-twin".into(), twin);
    c.validate().unwrap();
    c.cluster.shards = vec![crate::store::ShardConfig {
        keyspace: "eu".into(),
        queues: vec!["1v1-twin".into()],
    }];
    match c.validate() {
        Err(ConfigError::Invalid(e)) => {
            assert_eq!(e.field, "queues.1v1-twin.rating_pool");
            assert!(e.rule.contains("one shard"), "{}", e.rule);
        }
        other => panic!("{other:?}"),
    }

    // Event cursors tell sixteen shards apart, the home shard one of them.
    let mut c = sharded("").unwrap();
    let solo = c.queues["1v1"].clone();
    let shards = |n: usize| -> Vec<crate::store::ShardConfig> {
        (0..n)
            .map(|i| crate::store::ShardConfig {
                keyspace: format!("s{i}"),
                queues: vec![format!("q{i}")],
            })
            .collect()
    };
    for i in 0..16 {
        c.queues.insert(format!("q{i}"), solo.clone());
    }
    c.cluster.shards = shards(15);
    c.validate().unwrap();
    c.cluster.shards = shards(16);
    match c.validate() {
        Err(ConfigError::Invalid(e)) => {
            assert_eq!(e.field, "cluster.shards");
            assert!(e.rule.contains("at most 15"), "{}", e.rule);
        }
        other => panic!("{other:?}"),
    }
}
