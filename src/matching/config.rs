//! Per-queue matching parameters (`[queues.<name>.matching]` in TOML) and what they mean for a
//! ticket that has waited a given time.
//!
//! This module owns the expansion schedule semantics: a ticket's skill window, quality floor and
//! latency limit are functions of its wait only, so the optimizer, `Pool::window` (the SEARCHING
//! update) and the tests all agree. It does no I/O; loading the file is the shell's job.
//!
//! Suggested sections for the four default queues (the same values as
//! [`MatchingConfig::default_for_scale`]; a test parses and validates exactly this text):
//!
//! ```toml
#![doc = include_str!("default_queues.toml")]
//! ```

use serde::{Deserialize, Serialize};

use super::Shape;
use super::rules::MatchRule;
use crate::rejection::FieldError;

/// One step of the expansion schedule, like a FlexMatch expansion: from `after_seconds` of wait
/// on, the fields it sets replace the queue's base values. Fields left out keep the value of the
/// previous step (or the base).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpansionStep {
    /// Wait in seconds from which this step applies; strictly increasing along the schedule.
    pub after_seconds: f64,
    /// New skill window half-width (display units); must not shrink.
    #[serde(default)]
    pub window: Option<f64>,
    /// New quality floor; must not rise.
    #[serde(default)]
    pub min_quality: Option<f64>,
    /// New latency limit in milliseconds; must not shrink.
    #[serde(default)]
    pub max_latency_ms: Option<u32>,
}

/// A role every team needs at least `min_per_team` of (e.g. one healer). Optional: White
/// ("Rated Multiplayer Competitions", 2011) advises letting players choose roles after a team is
/// formed rather than guaranteeing role minimums, so queues without roles leave this empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleRequirement {
    /// Role name as clients send it in `EnterQueueRequest.roles`.
    pub name: String,
    /// Minimum number of players per team able to fill it.
    pub min_per_team: u32,
}

/// Per-queue matching parameters. Every field has a default so a queue section may be empty;
/// unknown keys are rejected so a typo is an error, not a silently ignored setting.
///
/// Ratings are in the queue rating system's display units, so windows are per queue:
/// see [`MatchingConfig::default_for_scale`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MatchingConfig {
    /// Display units per 10:1 odds (400 for Glicko/Elo 1500-scale, ~15 for Weng-Lin μ). Only
    /// used to derive default windows and by the benchmark's rating distribution and model;
    /// the optimizer itself uses the windows below and the injected model.
    pub rating_scale: f64,
    /// Base skill window half-width: a fresh ticket accepts match-mates rated within ± this of
    /// its own rating.
    pub window: f64,
    /// Base quality floor: minimum underdog win probability (see `FormedMatch::quality`).
    /// Default 0.25: White's "GoodRatedMatch" test (the underdog has at least a 25% chance).
    pub min_quality: f64,
    /// Base latency limit: a ticket only matches into regions it reaches under this.
    pub max_latency_ms: u32,
    /// Relaxation of the three values above with wait, in increasing `after_seconds`.
    pub expansion: Vec<ExpansionStep>,
    /// Starvation guard: from this wait on, a ticket is matched with the best available match
    /// regardless of skill window and quality floor (regions, roles and parties still hold),
    /// and any region it listed is acceptable.
    pub max_wait_seconds: f64,
    /// A ticket waiting this long is removed as EXPIRED; must exceed `max_wait_seconds`.
    pub ticket_ttl_seconds: f64,
    /// Region names; empty = the queue ignores regions.
    pub regions: Vec<String>,
    /// Role minimums per team; empty = no roles.
    pub roles: Vec<RoleRequirement>,
    /// Largest party accepted; `None` = the team size. The config loader copies the queue's
    /// `max_party_size` here and refuses a different value set in this table.
    pub max_party_size: Option<u32>,
    /// 1v1 only: how many sorted neighbours ahead a ticket may be paired with (skipped tickets
    /// stay waiting). 1 = strict neighbours; larger finds better pairs at O(n · span) cost.
    pub pair_span: u32,
    /// The queue's match rules. Written as `[[queues.NAME.rules]]` beside this table (the
    /// config loader copies them here, so the matcher has one config), never inside it.
    #[serde(skip)]
    pub rules: Vec<MatchRule>,
}

impl Default for MatchingConfig {
    fn default() -> Self {
        Self::default_for_scale(400.0)
    }
}

/// A ticket's limits at one moment, the result of applying the expansion schedule to its wait.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Skill window half-width from the schedule (finite even when starving, so the optimizer
    /// can still prefer closer match-mates for a starving ticket).
    pub window: f64,
    /// Quality floor from the schedule.
    pub min_quality: f64,
    /// Latency limit from the schedule.
    pub max_latency_ms: u32,
    /// Past `max_wait_seconds`: window, quality floor and latency limit are lifted.
    pub starving: bool,
}

/// The expansion schedule resolved once per tick into the limits of each stage (stage `i` =
/// after `i` steps), so a ticket's limits cost a few comparisons and a copy rather than
/// applying every step's optional fields in turn; the 100k-ticket tick asks 100k times.
/// Always equal to [`MatchingConfig::limits`] (a test checks it).
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    after: Vec<f64>,
    stages: Vec<Limits>,
    max_wait: f64,
}

impl Schedule {
    /// A ticket's limits after waiting `wait` seconds.
    pub(crate) fn limits(&self, wait: f64) -> Limits {
        // `limits` applies a step unless `wait < after_seconds`; the same test here, on every
        // step (they increase, so it counts the same), because stopping at the first failing
        // step is a branch on `wait`, a value the tick has just loaded from a random slot:
        // mispredicting it stalled the gather of candidates on each cache miss in turn.
        let stage = self
            .after
            .iter()
            .filter(|&&a| wait.partial_cmp(&a) != Some(std::cmp::Ordering::Less))
            .count();
        Limits {
            starving: wait >= self.max_wait,
            ..self.stages[stage]
        }
    }
}

impl MatchingConfig {
    /// The same rules for ratings on a scale `factor` times as wide: the rating scale and every
    /// skill window multiplied, quality floors, latencies and times unchanged. For running a
    /// queue's matching under another rating system (`simulate --system`).
    #[must_use]
    pub fn rescaled(&self, factor: f64) -> Self {
        let mut out = self.clone();
        out.rating_scale *= factor;
        out.window *= factor;
        for step in &mut out.expansion {
            step.window = step.window.map(|w| w * factor);
        }
        out
    }

    /// Defaults whose windows scale with the rating system: `scale` is display units per 10:1
    /// odds (400 for the 1500-scale Glicko queues, 15 for Weng-Lin μ ~ 25). The base window is
    /// `scale / 8` (50 on 1500-scale, where the underdog still has 43%), doubling at 10 s, 30 s
    /// and 60 s with the quality floor easing from 0.25 to 0.2 and 0.15; starvation at 120 s,
    /// expiry at 600 s.
    #[must_use]
    pub fn default_for_scale(scale: f64) -> Self {
        let w = scale / 8.0;
        Self {
            rating_scale: scale,
            window: w,
            min_quality: 0.25,
            max_latency_ms: 80,
            expansion: vec![
                ExpansionStep {
                    after_seconds: 10.0,
                    window: Some(2.0 * w),
                    min_quality: None,
                    max_latency_ms: Some(120),
                },
                ExpansionStep {
                    after_seconds: 30.0,
                    window: Some(4.0 * w),
                    min_quality: Some(0.2),
                    max_latency_ms: Some(180),
                },
                ExpansionStep {
                    after_seconds: 60.0,
                    window: Some(8.0 * w),
                    min_quality: Some(0.15),
                    max_latency_ms: Some(250),
                },
            ],
            max_wait_seconds: 120.0,
            ticket_ttl_seconds: 600.0,
            regions: Vec::new(),
            roles: Vec::new(),
            max_party_size: None,
            pair_span: 4,
            rules: Vec::new(),
        }
    }

    /// The largest party this queue accepts.
    #[must_use]
    pub fn party_limit(&self, shape: Shape) -> u32 {
        self.max_party_size.unwrap_or(shape.team_size)
    }

    /// A ticket's limits after waiting `wait` seconds.
    #[must_use]
    pub fn limits(&self, wait: f64) -> Limits {
        let mut limits = Limits {
            window: self.window,
            min_quality: self.min_quality,
            max_latency_ms: self.max_latency_ms,
            starving: wait >= self.max_wait_seconds,
        };
        for step in &self.expansion {
            if wait < step.after_seconds {
                break;
            }
            if let Some(w) = step.window {
                limits.window = w;
            }
            if let Some(q) = step.min_quality {
                limits.min_quality = q;
            }
            if let Some(l) = step.max_latency_ms {
                limits.max_latency_ms = l;
            }
        }
        limits
    }

    /// The expansion schedule as a table of stages, for looking up many tickets' limits in one
    /// tick (see [`Schedule`]).
    pub(crate) fn schedule(&self) -> Schedule {
        let mut stages = vec![self.limits(0.0)];
        stages.extend(self.expansion.iter().map(|s| self.limits(s.after_seconds)));
        Schedule {
            after: self.expansion.iter().map(|s| s.after_seconds).collect(),
            stages: stages
                .into_iter()
                .map(|l| Limits {
                    starving: false,
                    ..l
                })
                .collect(),
            max_wait: self.max_wait_seconds,
        }
    }

    /// Checks the config against the queue's shape. The error names the key (relative to this
    /// table) and the rule, e.g. field `expansion[1].after_seconds`, rule `must increase (got 5
    /// after 10)`.
    pub fn validate(&self, shape: Shape) -> Result<(), FieldError> {
        let err = |field: &str, rule: String| Err(FieldError::new(field, rule));
        if shape.teams < 2 {
            return err(
                "shape.teams",
                format!("must be at least 2 (got {})", shape.teams),
            );
        }
        if shape.team_size < 1 {
            return err("shape.team_size", "must be at least 1 (got 0)".to_owned());
        }
        if shape.players_per_match() > 1000 {
            return err(
                "shape",
                format!(
                    "at most 1000 players per match (got {})",
                    shape.players_per_match()
                ),
            );
        }
        positive("rating_scale", self.rating_scale)?;
        positive("window", self.window)?;
        quality("min_quality", self.min_quality)?;
        positive("max_wait_seconds", self.max_wait_seconds)?;
        positive("ticket_ttl_seconds", self.ticket_ttl_seconds)?;
        if self.ticket_ttl_seconds <= self.max_wait_seconds {
            return err(
                "ticket_ttl_seconds",
                format!(
                    "must exceed max_wait_seconds (got {} <= {})",
                    self.ticket_ttl_seconds, self.max_wait_seconds
                ),
            );
        }
        self.validate_expansion()?;
        if self.regions.len() > 64 {
            return err(
                "regions",
                format!("at most 64 (got {})", self.regions.len()),
            );
        }
        for (i, r) in self.regions.iter().enumerate() {
            let field = format!("regions[{i}]");
            if r.is_empty() {
                return err(&field, "must not be empty".to_owned());
            }
            if self.regions[..i].contains(r) {
                return err(&field, format!("duplicate region {r:?}"));
            }
        }
        if self.roles.len() > 64 {
            return err("roles", format!("at most 64 (got {})", self.roles.len()));
        }
        let mut role_total = 0u32;
        for (i, role) in self.roles.iter().enumerate() {
            let field = format!("roles[{i}].name");
            if role.name.is_empty() {
                return err(&field, "must not be empty".to_owned());
            }
            if self.roles[..i].iter().any(|r| r.name == role.name) {
                return err(&field, format!("duplicate role {:?}", role.name));
            }
            role_total = role_total.saturating_add(role.min_per_team);
        }
        if role_total > shape.team_size {
            return err(
                "roles",
                format!(
                    "minimums add up to {role_total}, more than the team size {}",
                    shape.team_size
                ),
            );
        }
        if let Some(p) = self.max_party_size
            && (p < 1 || p > shape.team_size)
        {
            return err(
                "max_party_size",
                format!(
                    "must be between 1 and the team size {} (got {p})",
                    shape.team_size
                ),
            );
        }
        if self.pair_span < 1 || self.pair_span > 64 {
            return err(
                "pair_span",
                format!("must be between 1 and 64 (got {})", self.pair_span),
            );
        }
        Ok(())
    }

    /// The expansion schedule: steps in increasing time, each only widening what came before.
    fn validate_expansion(&self) -> Result<(), FieldError> {
        let mut prev = Limits {
            window: self.window,
            min_quality: self.min_quality,
            max_latency_ms: self.max_latency_ms,
            starving: false,
        };
        let mut prev_after = 0.0;
        for (i, step) in self.expansion.iter().enumerate() {
            let field = |name: &str| format!("expansion[{i}].{name}");
            positive(&field("after_seconds"), step.after_seconds)?;
            if i > 0 && step.after_seconds <= prev_after {
                return Err(FieldError::new(
                    field("after_seconds"),
                    format!(
                        "must increase (got {} after {prev_after})",
                        step.after_seconds
                    ),
                ));
            }
            prev_after = step.after_seconds;
            if let Some(w) = step.window {
                positive(&field("window"), w)?;
                if w < prev.window {
                    return Err(FieldError::new(
                        field("window"),
                        format!("must not shrink (got {w} after {})", prev.window),
                    ));
                }
                prev.window = w;
            }
            if let Some(q) = step.min_quality {
                quality(&field("min_quality"), q)?;
                if q > prev.min_quality {
                    return Err(FieldError::new(
                        field("min_quality"),
                        format!("must not rise (got {q} after {})", prev.min_quality),
                    ));
                }
                prev.min_quality = q;
            }
            if let Some(l) = step.max_latency_ms {
                if l < prev.max_latency_ms {
                    return Err(FieldError::new(
                        field("max_latency_ms"),
                        format!("must not shrink (got {l} after {})", prev.max_latency_ms),
                    ));
                }
                prev.max_latency_ms = l;
            }
        }
        Ok(())
    }
}

fn positive(field: &str, v: f64) -> Result<(), FieldError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("must be a positive finite number (got {v})"),
        ))
    }
}

fn quality(field: &str, v: f64) -> Result<(), FieldError> {
    if (0.0..=0.5).contains(&v) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("must be between 0 and 0.5 (got {v})"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rescaling_moves_the_windows_and_nothing_else() {
        let c = MatchingConfig::default_for_scale(15.0);
        let r = c.rescaled(400.0 / 15.0);
        assert!((r.rating_scale - 400.0).abs() < 1e-9);
        assert!((r.window - c.window * 400.0 / 15.0).abs() < 1e-9);
        for (a, b) in c.expansion.iter().zip(&r.expansion) {
            assert_eq!(a.after_seconds, b.after_seconds);
            assert_eq!(a.min_quality, b.min_quality);
            assert_eq!(a.max_latency_ms, b.max_latency_ms);
            assert_eq!(a.window.map(|w| w * 400.0 / 15.0), b.window);
        }
        assert_eq!(
            (r.min_quality, r.max_wait_seconds, r.ticket_ttl_seconds),
            (c.min_quality, c.max_wait_seconds, c.ticket_ttl_seconds)
        );
    }

    const FIVE: Shape = Shape {
        teams: 2,
        team_size: 5,
    };

    #[test]
    fn defaults_validate_for_every_default_queue_shape() {
        for (scale, shape) in [
            (
                400.0,
                Shape {
                    teams: 2,
                    team_size: 1,
                },
            ),
            (
                400.0,
                Shape {
                    teams: 2,
                    team_size: 2,
                },
            ),
            (15.0, FIVE),
            (
                15.0,
                Shape {
                    teams: 8,
                    team_size: 1,
                },
            ),
        ] {
            assert_eq!(
                MatchingConfig::default_for_scale(scale).validate(shape),
                Ok(())
            );
        }
    }

    #[test]
    fn expansion_must_increase_with_a_message_naming_the_field() {
        let mut c = MatchingConfig::default();
        c.expansion[1].after_seconds = 5.0;
        assert_eq!(
            c.validate(FIVE).map_err(|e| e.to_string()),
            Err("expansion[1].after_seconds: must increase (got 5 after 10)".to_string())
        );
    }

    #[test]
    fn the_error_carries_the_key_and_the_rule_apart() {
        let mut c = MatchingConfig::default();
        c.expansion[1].after_seconds = 5.0;
        let err = c.validate(FIVE).unwrap_err();
        assert_eq!(err.field, "expansion[1].after_seconds");
        assert_eq!(err.rule, "must increase (got 5 after 10)");
        assert_eq!(
            err.under("queues.5v5.matching").field,
            "queues.5v5.matching.expansion[1].after_seconds"
        );
        let c = MatchingConfig {
            window: f64::NAN,
            ..MatchingConfig::default()
        };
        let err = c.validate(FIVE).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.rule.as_str()),
            ("window", "must be a positive finite number (got NaN)")
        );
    }

    #[test]
    fn windows_must_not_shrink_and_floors_must_not_rise() {
        let mut c = MatchingConfig::default();
        c.expansion[0].window = Some(10.0);
        assert!(
            c.validate(FIVE)
                .unwrap_err()
                .to_string()
                .starts_with("expansion[0].window")
        );
        let mut c = MatchingConfig::default();
        c.expansion[0].min_quality = Some(0.4);
        assert!(
            c.validate(FIVE)
                .unwrap_err()
                .to_string()
                .starts_with("expansion[0].min_quality")
        );
    }

    #[test]
    fn other_rules_are_checked() {
        type Edit = fn(&mut MatchingConfig);
        let bad: Vec<(Edit, &str)> = vec![
            (|c| c.ticket_ttl_seconds = 10.0, "ticket_ttl_seconds"),
            (|c| c.window = f64::NAN, "window"),
            (|c| c.min_quality = 0.7, "min_quality"),
            (|c| c.max_party_size = Some(6), "max_party_size"),
            (
                |c| {
                    c.roles = vec![RoleRequirement {
                        name: "tank".into(),
                        min_per_team: 6,
                    }]
                },
                "roles",
            ),
            (|c| c.regions = vec!["eu".into(), "eu".into()], "regions[1]"),
        ];
        for (edit, field) in bad {
            let mut c = MatchingConfig::default();
            edit(&mut c);
            let err = c.validate(FIVE).unwrap_err().to_string();
            assert!(err.starts_with(field), "{err}");
        }
    }

    #[test]
    fn limits_follow_the_schedule_and_starvation() {
        let c = MatchingConfig::default();
        assert_eq!(c.limits(0.0).window, 50.0);
        assert_eq!(c.limits(10.0).window, 100.0);
        assert_eq!(c.limits(45.0).min_quality, 0.2);
        assert_eq!(c.limits(45.0).max_latency_ms, 180);
        assert!(!c.limits(119.0).starving);
        assert!(c.limits(120.0).starving);
    }

    #[test]
    fn the_documented_default_queue_sections_parse_validate_and_match_the_defaults() {
        #[derive(Deserialize)]
        struct Queue {
            matching: MatchingConfig,
        }
        #[derive(Deserialize)]
        struct File {
            queues: std::collections::BTreeMap<String, Queue>,
        }
        let file: File = toml::from_str(include_str!("default_queues.toml")).unwrap();
        let shapes = [
            (
                "1v1",
                Shape {
                    teams: 2,
                    team_size: 1,
                },
                400.0,
                None,
            ),
            (
                "2v2",
                Shape {
                    teams: 2,
                    team_size: 2,
                },
                400.0,
                Some(2),
            ),
            ("5v5", FIVE, 15.0, Some(5)),
            (
                "ffa8",
                Shape {
                    teams: 8,
                    team_size: 1,
                },
                15.0,
                Some(1),
            ),
        ];
        assert_eq!(file.queues.len(), shapes.len());
        for (name, shape, scale, party) in shapes {
            let c = &file.queues[name].matching;
            assert_eq!(c.validate(shape), Ok(()), "{name}");
            let want = MatchingConfig {
                max_party_size: party,
                ..MatchingConfig::default_for_scale(scale)
            };
            assert_eq!(c, &want, "{name}");
        }
    }

    #[test]
    fn toml_keys_parse_and_unknown_keys_are_rejected() {
        let c: MatchingConfig = toml::from_str(
            "window = 1.5\nexpansion = [{ after_seconds = 5, window = 3.0 }]\n\
             roles = [{ name = \"support\", min_per_team = 1 }]\n",
        )
        .unwrap();
        assert_eq!(c.window, 1.5);
        assert_eq!(c.expansion.len(), 1);
        assert_eq!(c.min_quality, 0.25);
        assert!(toml::from_str::<MatchingConfig>("windw = 3.0").is_err());
    }

    proptest! {
        /// The per-tick stage table gives exactly the limits of applying the schedule, for
        /// waits on and around every step boundary and for schedules that leave fields out.
        #[test]
        fn the_schedule_table_equals_applying_the_steps(
            wait in prop_oneof![0.0..200.0f64, prop::sample::select(vec![0.0, 10.0, 30.0, 60.0, 120.0])],
            skip_window in any::<bool>(),
            skip_latency in any::<bool>(),
        ) {
            let mut c = MatchingConfig::default();
            if skip_window {
                c.expansion[1].window = None;
            }
            if skip_latency {
                c.expansion[0].max_latency_ms = None;
            }
            for w in [wait, wait.next_down(), wait.next_up()] {
                prop_assert_eq!(c.schedule().limits(w), c.limits(w));
            }
            let none = MatchingConfig { expansion: Vec::new(), ..c.clone() };
            prop_assert_eq!(none.schedule().limits(wait), none.limits(wait));
        }
    }
}
