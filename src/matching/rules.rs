//! Match rules: what a ticket says about itself beyond skill (`attributes`, an avoid-list) and
//! the per-queue rules every formed match must satisfy (`[[queues.NAME.rules]]`).
//!
//! The four kinds follow the filters real matchmakers apply before they balance: Open Match's
//! ticket search fields (string equality, tag sets, numeric ranges), FlexMatch rule sets
//! (`comparison` and `distance` rules with expansions, `collection` rules such as a common map)
//! and Nakama's matchmaker query over string and numeric properties:
//!
//! - `equal`: every ticket of the match has the same text value (`mode = "ranked"`), or with
//!   `groups` the same class of values (crossplay: `[["pc"], ["xbox", "playstation"]]`);
//! - `intersect`: the tags of every ticket share at least `min_common` values (maps, languages);
//! - `difference`: numbers differ by at most `max`, widened by wait like the skill window;
//! - `avoid`: nobody is matched with, or against, a player on their `avoid_player_ids`.
//!
//! What this module owns: the domain value of an attribute, the limits on a ticket's attributes,
//! the rule config and its validation, and the admission of one ticket against a queue's rules
//! (which the API calls once per EnterQueue). The per-tick checks the optimizer runs are in
//! `rule_index`. It does no I/O and imports nothing of the shell.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Shape;
use crate::ids::PlayerId;
use crate::rejection::FieldError;

/// Most attributes one ticket may carry (FlexMatch allows a similar handful per player; a rule
/// set rarely names more than five).
pub const MAX_ATTRIBUTES: usize = 16;
/// Most tags in one `tags` value (a map pool, a language list).
pub const MAX_TAGS: usize = 32;
/// Longest attribute name, text value or tag, in characters.
pub const MAX_TEXT_CHARS: usize = 64;
/// Most players on one ticket's avoid-list.
pub const MAX_AVOID: usize = 100;
/// Most rules in one queue.
pub const MAX_RULES: usize = 16;

/// One attribute value, the domain form of the proto `AttributeValue`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttributeValue {
    /// A single string (`mode = "ranked"`, `platform = "pc"`).
    Text(String),
    /// A finite number (a level, a rank tier).
    Number(f64),
    /// A set of strings, sorted and without duplicates (maps, languages).
    Tags(Vec<String>),
}

impl AttributeValue {
    /// The kind's name as the proto oneof spells it, for error messages.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            AttributeValue::Text(_) => "text",
            AttributeValue::Number(_) => "number",
            AttributeValue::Tags(_) => "tags",
        }
    }
}

/// A ticket's attributes by name; sorted, so a match's attributes read the same every time.
pub type Attributes = BTreeMap<String, AttributeValue>;

/// What a rule requires of the tickets of one match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleKind {
    /// Same text value (or same class of values, see [`MatchRule::groups`]).
    Equal,
    /// Tag sets with at least `min_common` values in common.
    Intersect,
    /// Numbers at most `max` apart.
    Difference,
    /// No player on anyone's avoid-list.
    Avoid,
}

impl RuleKind {
    /// The attribute kind the rule reads (`None` for `avoid`, which reads the avoid-list).
    #[must_use]
    pub fn value_kind(self) -> Option<&'static str> {
        match self {
            RuleKind::Equal => Some("text"),
            RuleKind::Intersect => Some("tags"),
            RuleKind::Difference => Some("number"),
            RuleKind::Avoid => None,
        }
    }

    /// The rule's name as config spells it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            RuleKind::Equal => "equal",
            RuleKind::Intersect => "intersect",
            RuleKind::Difference => "difference",
            RuleKind::Avoid => "avoid",
        }
    }
}

/// Who a rule binds: everyone in the match (the default), or only teammates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleScope {
    /// Teammates and opponents alike.
    #[default]
    Match,
    /// Teammates only (a voice language, say): opponents may differ.
    Team,
}

/// One step of a `difference` rule's expansion: from `after_seconds` of wait on, the ticket
/// accepts numbers up to `max` apart (like [`super::ExpansionStep`] for the skill window).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleStep {
    /// Wait in seconds from which the step applies; strictly increasing.
    pub after_seconds: f64,
    /// The widened distance; must not shrink.
    pub max: f64,
}

/// `[[queues.NAME.rules]]`: one rule every match of the queue satisfies. Unknown keys are
/// rejected, and keys that do not apply to the kind are errors naming the key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchRule {
    /// What the rule requires.
    pub kind: RuleKind,
    /// The ticket attribute it reads (every kind but `avoid`, which reads the avoid-list).
    #[serde(default)]
    pub attribute: String,
    /// `equal` only: classes of values that count as equal (crossplay pools); a value in no
    /// group is a class of its own.
    #[serde(default)]
    pub groups: Vec<Vec<String>>,
    /// `intersect` only: values every ticket's tags must share (default 1).
    #[serde(default)]
    pub min_common: Option<u32>,
    /// `difference` only: the largest distance between two tickets' numbers.
    #[serde(default)]
    pub max: Option<f64>,
    /// `difference` only: `max` widened by wait.
    #[serde(default)]
    pub expansion: Vec<RuleStep>,
    /// `match` (default) or `team`.
    #[serde(default)]
    pub scope: RuleScope,
    /// `intersect` and `difference` only: the rule is dropped for a match whose tickets have
    /// all waited `drop_after_seconds`. Rules are hard otherwise: the starvation guard,
    /// backfill and requeues keep them.
    #[serde(default)]
    pub optional: bool,
    /// With `optional = true`: the wait after which the rule no longer holds a ticket back.
    #[serde(default)]
    pub drop_after_seconds: Option<f64>,
}

impl MatchRule {
    /// A hard rule of `kind` on `attribute` with every other key at its default.
    #[must_use]
    pub fn new(kind: RuleKind, attribute: &str) -> MatchRule {
        MatchRule {
            kind,
            attribute: attribute.to_owned(),
            groups: Vec::new(),
            min_common: None,
            max: None,
            expansion: Vec::new(),
            scope: RuleScope::Match,
            optional: false,
            drop_after_seconds: None,
        }
    }

    /// `intersect`'s `min_common`, 1 when unset.
    #[must_use]
    pub fn min_common(&self) -> u32 {
        self.min_common.unwrap_or(1)
    }

    /// `difference`'s distance allowed to a ticket that waited `wait` seconds.
    #[must_use]
    pub fn max_at(&self, wait: f64) -> f64 {
        let mut max = self.max.unwrap_or(0.0);
        for step in &self.expansion {
            if wait < step.after_seconds {
                break;
            }
            max = step.max;
        }
        max
    }

    /// Whether the rule still holds a ticket that waited `wait` seconds back.
    #[must_use]
    pub fn binds(&self, wait: f64) -> bool {
        !self.optional || self.drop_after_seconds.is_none_or(|after| wait < after)
    }

    /// The class an `equal` value belongs to: its group's index, or the value itself.
    #[must_use]
    pub fn class_of<'a>(&self, value: &'a str) -> std::borrow::Cow<'a, str> {
        match self
            .groups
            .iter()
            .position(|g| g.iter().any(|v| v == value))
        {
            // A leading NUL cannot start a valid value (control characters are refused), so a
            // group's class never collides with a value's.
            Some(g) => format!("\0{g}").into(),
            None => value.into(),
        }
    }
}

/// Checks a queue's rules against its shape. Fields are relative to the queue's table
/// (`rules[0].attribute`), so the caller puts them under `queues.NAME`.
pub fn validate_rules(rules: &[MatchRule], shape: Shape) -> Result<(), FieldError> {
    if rules.len() > MAX_RULES {
        return Err(FieldError::new(
            "rules",
            format!("at most {MAX_RULES} rules (got {})", rules.len()),
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let field = |name: &str| format!("rules[{i}].{name}");
        let err = |name: &str, rule: String| Err(FieldError::new(field(name), rule));
        let kind = rule.kind.name();
        if rule.kind == RuleKind::Avoid {
            if !rule.attribute.is_empty() {
                return err(
                    "attribute",
                    "avoid reads the ticket's avoid_player_ids, not an attribute".into(),
                );
            }
            if rules[..i].iter().any(|r| r.kind == RuleKind::Avoid) {
                return err("kind", "at most one avoid rule".into());
            }
        } else {
            if let Err(why) = text_rule(&rule.attribute) {
                return err("attribute", why);
            }
            if rules[..i].iter().any(|r| r.attribute == rule.attribute) {
                return err(
                    "attribute",
                    format!("{:?} is already read by another rule", rule.attribute),
                );
            }
        }
        if !rule.groups.is_empty() && rule.kind != RuleKind::Equal {
            return err(
                "groups",
                format!("only equal rules have groups, not {kind}"),
            );
        }
        for (g, group) in rule.groups.iter().enumerate() {
            if group.is_empty() {
                return err(&format!("groups[{g}]"), "must not be empty".into());
            }
            for (v, value) in group.iter().enumerate() {
                let name = format!("groups[{g}][{v}]");
                if let Err(why) = text_rule(value) {
                    return err(&name, why);
                }
                let earlier = rule.groups[..g].iter().flatten().chain(&group[..v]);
                if earlier.into_iter().any(|x| x == value) {
                    return err(&name, format!("{value:?} is in two groups"));
                }
            }
        }
        match (rule.kind, rule.min_common) {
            (RuleKind::Intersect, Some(n)) if n < 1 || n as usize > MAX_TAGS => {
                return err(
                    "min_common",
                    format!("must be between 1 and {MAX_TAGS} (got {n})"),
                );
            }
            (RuleKind::Intersect, _) | (_, None) => {}
            (_, Some(_)) => {
                return err(
                    "min_common",
                    format!("only intersect rules have min_common, not {kind}"),
                );
            }
        }
        validate_distance(rule, &field)?;
        if rule.scope == RuleScope::Team && shape.team_size < 2 {
            return err(
                "scope",
                format!(
                    "teams of {} player have no teammates; leave scope at \"match\"",
                    shape.team_size
                ),
            );
        }
        if rule.scope == RuleScope::Team && rule.kind == RuleKind::Equal {
            return err(
                "scope",
                "equal rules hold for the whole match; use an intersect rule with scope = \
                 \"team\" for what only teammates must share"
                    .into(),
            );
        }
        match (rule.optional, rule.drop_after_seconds) {
            (true, _) if matches!(rule.kind, RuleKind::Equal | RuleKind::Avoid) => {
                return err(
                    "optional",
                    format!(
                        "{kind} rules are always hard; only intersect and difference rules may be optional"
                    ),
                );
            }
            (true, Some(s)) if s.is_finite() && s > 0.0 => {}
            (true, _) => {
                return err(
                    "drop_after_seconds",
                    "an optional rule needs a positive finite drop_after_seconds".into(),
                );
            }
            (false, Some(_)) => {
                return err(
                    "drop_after_seconds",
                    "only an optional rule (optional = true) is dropped after a wait".into(),
                );
            }
            (false, None) => {}
        }
    }
    Ok(())
}

/// `max` and `expansion` of a `difference` rule (and their absence elsewhere).
fn validate_distance(rule: &MatchRule, field: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    let kind = rule.kind.name();
    if rule.kind != RuleKind::Difference {
        if rule.max.is_some() {
            return Err(FieldError::new(
                field("max"),
                format!("only difference rules have max, not {kind}"),
            ));
        }
        if !rule.expansion.is_empty() {
            return Err(FieldError::new(
                field("expansion"),
                format!("only difference rules expand, not {kind}"),
            ));
        }
        return Ok(());
    }
    let Some(mut prev) = rule.max else {
        return Err(FieldError::new(
            field("max"),
            "a difference rule needs max (the largest distance between two tickets)",
        ));
    };
    if !(prev.is_finite() && prev >= 0.0) {
        return Err(FieldError::new(
            field("max"),
            format!("must be a finite number >= 0 (got {prev})"),
        ));
    }
    let mut after = 0.0;
    for (s, step) in rule.expansion.iter().enumerate() {
        let name = |key: &str| field(&format!("expansion[{s}].{key}"));
        if !(step.after_seconds.is_finite() && step.after_seconds > after) {
            return Err(FieldError::new(
                name("after_seconds"),
                format!(
                    "must be finite and increase (got {} after {after})",
                    step.after_seconds
                ),
            ));
        }
        after = step.after_seconds;
        if !(step.max.is_finite() && step.max >= prev) {
            return Err(FieldError::new(
                name("max"),
                format!(
                    "must be finite and not shrink (got {} after {prev})",
                    step.max
                ),
            ));
        }
        prev = step.max;
    }
    Ok(())
}

/// The rule a name, text value or tag breaks, if any.
fn text_rule(value: &str) -> Result<(), String> {
    let chars = value.chars().count();
    if value.is_empty() {
        Err("must not be empty".into())
    } else if chars > MAX_TEXT_CHARS {
        Err(format!(
            "must be at most {MAX_TEXT_CHARS} characters (got {chars})"
        ))
    } else if value.chars().any(char::is_control) {
        Err("must not contain control characters".into())
    } else {
        Ok(())
    }
}

/// The field naming attribute `key` of a request (`attributes["mode"]`).
fn attribute_field(key: &str) -> String {
    format!("attributes[{key:?}]")
}

/// Checks the limits every attribute obeys whatever the queue's rules: at most
/// [`MAX_ATTRIBUTES`], names and strings non-empty, at most [`MAX_TEXT_CHARS`] characters and
/// free of control characters, numbers finite, at most [`MAX_TAGS`] tags. Sorts and
/// de-duplicates tags in place, so a tag set compares as a set.
pub fn normalize_attributes(attributes: &mut Attributes) -> Result<(), FieldError> {
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(FieldError::new(
            "attributes",
            format!(
                "at most {MAX_ATTRIBUTES} attributes (got {})",
                attributes.len()
            ),
        ));
    }
    for (key, value) in attributes.iter_mut() {
        let field = attribute_field(key);
        text_rule(key).map_err(|why| FieldError::new(&field, format!("name {why}")))?;
        match value {
            AttributeValue::Text(text) => {
                text_rule(text).map_err(|why| FieldError::new(&field, why))?;
            }
            AttributeValue::Number(x) => {
                if !x.is_finite() {
                    return Err(FieldError::new(
                        field,
                        format!("must be a finite number (got {x})"),
                    ));
                }
            }
            AttributeValue::Tags(tags) => {
                if tags.len() > MAX_TAGS {
                    return Err(FieldError::new(
                        field,
                        format!("at most {MAX_TAGS} tags (got {})", tags.len()),
                    ));
                }
                for (i, tag) in tags.iter().enumerate() {
                    text_rule(tag).map_err(|why| FieldError::new(format!("{field}[{i}]"), why))?;
                }
                tags.sort_unstable();
                tags.dedup();
            }
        }
    }
    Ok(())
}

/// Admits one ticket's attributes and avoid-list to a queue with `rules`: every attribute a
/// rule reads is present and of the rule's kind, an `intersect` value has at least
/// `min_common` tags, and an avoid-list needs an avoid rule and must not name the ticket's own
/// players. Attributes no rule reads are dropped (the matcher never looks at them, so keeping
/// them would only cost memory). Call after [`normalize_attributes`].
pub fn admit(
    rules: &[MatchRule],
    attributes: &mut Attributes,
    avoid: &[PlayerId],
    players: &[PlayerId],
) -> Result<(), FieldError> {
    for rule in rules {
        let Some(want) = rule.kind.value_kind() else {
            continue;
        };
        let field = attribute_field(&rule.attribute);
        let Some(value) = attributes.get(&rule.attribute) else {
            return Err(FieldError::new(
                field,
                format!(
                    "required: the queue has a {} rule on it ({want})",
                    rule.kind.name()
                ),
            ));
        };
        if value.kind() != want {
            return Err(FieldError::new(
                field,
                format!(
                    "the queue's {} rule reads {want}, not {}",
                    rule.kind.name(),
                    value.kind()
                ),
            ));
        }
        if let AttributeValue::Tags(tags) = value
            && tags.len() < rule.min_common() as usize
        {
            return Err(FieldError::new(
                field,
                format!(
                    "needs at least {} tags, the queue's min_common (got {})",
                    rule.min_common(),
                    tags.len()
                ),
            ));
        }
    }
    attributes.retain(|key, _| rules.iter().any(|r| &r.attribute == key));
    if !avoid.is_empty() {
        if !rules.iter().any(|r| r.kind == RuleKind::Avoid) {
            return Err(FieldError::new(
                "avoid_player_ids",
                "the queue has no avoid rule",
            ));
        }
        if avoid.len() > MAX_AVOID {
            return Err(FieldError::new(
                "avoid_player_ids",
                format!("at most {MAX_AVOID} players (got {})", avoid.len()),
            ));
        }
        if let Some(i) = avoid.iter().position(|p| players.contains(p)) {
            return Err(FieldError::new(
                format!("avoid_player_ids[{i}]"),
                format!("{} is on this ticket", avoid[i]),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIVE: Shape = Shape {
        teams: 2,
        team_size: 5,
    };

    fn tags(values: &[&str]) -> AttributeValue {
        AttributeValue::Tags(values.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn config_errors_name_the_rule_and_key() {
        type Edit = fn(&mut Vec<MatchRule>);
        let cases: Vec<(Edit, &str)> = vec![
            (|r| r[0].attribute.clear(), "rules[0].attribute"),
            (|r| r[1].attribute = "mode".into(), "rules[1].attribute"),
            (|r| r[0].min_common = Some(2), "rules[0].min_common"),
            (|r| r[1].min_common = Some(0), "rules[1].min_common"),
            (|r| r[2].max = None, "rules[2].max"),
            (|r| r[2].max = Some(f64::NAN), "rules[2].max"),
            (|r| r[0].max = Some(1.0), "rules[0].max"),
            (
                |r| {
                    r[2].expansion = vec![
                        RuleStep {
                            after_seconds: 10.0,
                            max: 5.0,
                        },
                        RuleStep {
                            after_seconds: 20.0,
                            max: 1.0,
                        },
                    ]
                },
                "rules[2].expansion[1].max",
            ),
            (|r| r[0].scope = RuleScope::Team, "rules[0].scope"),
            (|r| r[0].optional = true, "rules[0].optional"),
            (|r| r[1].optional = true, "rules[1].drop_after_seconds"),
            (
                |r| r[1].drop_after_seconds = Some(3.0),
                "rules[1].drop_after_seconds",
            ),
            (|r| r[3].attribute = "x".into(), "rules[3].attribute"),
            (|r| r.push(r[3].clone()), "rules[4].kind"),
            (
                |r| r[0].groups = vec![vec!["a".into()], vec!["a".into()]],
                "rules[0].groups[1][0]",
            ),
            (|r| r[1].groups = vec![vec!["a".into()]], "rules[1].groups"),
            (|r| r[0].attribute = "m".repeat(65), "rules[0].attribute"),
        ];
        let good = vec![
            MatchRule::new(RuleKind::Equal, "mode"),
            MatchRule::new(RuleKind::Intersect, "maps"),
            MatchRule {
                max: Some(2.0),
                ..MatchRule::new(RuleKind::Difference, "level")
            },
            MatchRule::new(RuleKind::Avoid, ""),
        ];
        assert_eq!(validate_rules(&good, FIVE), Ok(()));
        for (edit, field) in cases {
            let mut rules = good.clone();
            edit(&mut rules);
            let err = validate_rules(&rules, FIVE).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn toml_rules_parse_and_unknown_keys_are_rejected() {
        #[derive(Deserialize)]
        struct Q {
            rules: Vec<MatchRule>,
        }
        let q: Q = toml::from_str(
            "[[rules]]\nkind = \"equal\"\nattribute = \"platform\"\n\
             groups = [[\"pc\"], [\"xbox\", \"playstation\"]]\n\
             [[rules]]\nkind = \"difference\"\nattribute = \"level\"\nmax = 5\n\
             expansion = [{ after_seconds = 30, max = 10 }]\noptional = true\n\
             drop_after_seconds = 90\n\
             [[rules]]\nkind = \"intersect\"\nattribute = \"language\"\nscope = \"team\"\n",
        )
        .unwrap();
        assert_eq!(validate_rules(&q.rules, FIVE), Ok(()));
        assert_eq!(q.rules[1].max_at(0.0), 5.0);
        assert_eq!(q.rules[1].max_at(30.0), 10.0);
        assert!(q.rules[1].binds(89.0) && !q.rules[1].binds(90.0));
        assert_eq!(
            q.rules[0].class_of("xbox"),
            q.rules[0].class_of("playstation")
        );
        assert_ne!(q.rules[0].class_of("pc"), q.rules[0].class_of("xbox"));
        assert_eq!(q.rules[0].class_of("switch"), "switch");
        assert!(toml::from_str::<Q>("[[rules]]\nkind = \"equal\"\nattribut = \"m\"\n").is_err());
        assert!(toml::from_str::<Q>("[[rules]]\nkind = \"near\"\nattribute = \"m\"\n").is_err());
    }

    #[test]
    fn attribute_limits_name_the_key() {
        let bad: Vec<(Attributes, &str)> = vec![
            (
                (0..=MAX_ATTRIBUTES)
                    .map(|i| (format!("a{i}"), AttributeValue::Number(1.0)))
                    .collect(),
                "attributes",
            ),
            (
                [("lvl".into(), AttributeValue::Number(f64::NAN))].into(),
                "attributes[\"lvl\"]",
            ),
            (
                [(
                    "maps".into(),
                    AttributeValue::Tags((0..=MAX_TAGS).map(|i| format!("m{i}")).collect()),
                )]
                .into(),
                "attributes[\"maps\"]",
            ),
            (
                [("maps".into(), tags(&["ok", ""]))].into(),
                "attributes[\"maps\"][1]",
            ),
            (
                [("mode".into(), AttributeValue::Text("x".repeat(65)))].into(),
                "attributes[\"mode\"]",
            ),
            (
                [("".into(), AttributeValue::Number(1.0))].into(),
                "attributes[\"\"]",
            ),
        ];
        for (mut attributes, field) in bad {
            let err = normalize_attributes(&mut attributes).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
        let mut ok: Attributes = [("maps".into(), tags(&["b", "a", "b"]))].into();
        normalize_attributes(&mut ok).unwrap();
        assert_eq!(ok["maps"], tags(&["a", "b"]));
    }

    #[test]
    fn admission_checks_presence_kind_and_avoid_lists() {
        let rules = vec![
            MatchRule::new(RuleKind::Equal, "mode"),
            MatchRule {
                min_common: Some(2),
                ..MatchRule::new(RuleKind::Intersect, "maps")
            },
        ];
        let me = [PlayerId::new("me")];
        let mut a: Attributes = [
            ("mode".into(), AttributeValue::Text("ranked".into())),
            ("maps".into(), tags(&["a", "b"])),
            ("colour".into(), AttributeValue::Text("red".into())),
        ]
        .into();
        assert_eq!(admit(&rules, &mut a, &[], &me), Ok(()));
        assert!(
            !a.contains_key("colour"),
            "attributes no rule reads are dropped"
        );
        let avoid = [PlayerId::new("you")];
        let err = admit(&rules, &mut a.clone(), &avoid, &me).unwrap_err();
        assert_eq!(err.field, "avoid_player_ids");
        let mut with_avoid = rules.clone();
        with_avoid.push(MatchRule::new(RuleKind::Avoid, ""));
        assert_eq!(admit(&with_avoid, &mut a.clone(), &avoid, &me), Ok(()));
        let err = admit(&with_avoid, &mut a.clone(), &me, &me).unwrap_err();
        assert_eq!(err.field, "avoid_player_ids[0]");
        for (key, value, why) in [
            (
                "mode",
                AttributeValue::Number(1.0),
                "reads text, not number",
            ),
            ("maps", tags(&["a"]), "at least 2 tags"),
        ] {
            let mut b = a.clone();
            b.insert(key.into(), value);
            let err = admit(&rules, &mut b, &[], &me).unwrap_err();
            assert_eq!(err.field, format!("attributes[{key:?}]"));
            assert!(err.rule.contains(why), "{err}");
        }
        let mut missing = a.clone();
        missing.remove("mode");
        let err = admit(&rules, &mut missing, &[], &me).unwrap_err();
        assert!(err.rule.starts_with("required"), "{err}");
    }
}
