//! Skill systems: pure functions from one match to new skills.
//!
//! This module owns the rating math and nothing else: no I/O, no clock, no RNG, no tokio. Time
//! arrives as `elapsed_seconds` in the input, so every result is reproducible.
//!
//! Layout (one file per algorithm, like `skillratings`; each module names its source and where
//! it deliberately departs from it):
//! - [`glicko2`]: bounded Glicko-2 (Glickman's Glicko-2 example, 2012; INVERSUS's bounds),
//!   streaming and periodic, fractional inactivity.
//! - [`glicko`]: continuous Glicko-1 with closed-form decay (Glickman 1999; rating-update's
//!   continuous variant), and periodic Glicko-1.
//! - [`weng_lin`]: Weng-Lin Bradley-Terry full, Plackett-Luce and Thurstone-Mosteller full
//!   (Weng & Lin 2011).
//! - [`elo`]: Elo for random teams (White 2011: sqrt(N) normalisation, productivity, inflation).
//! - [`teams`]: team strategies and free-for-all for the Glicko family (INVERSUS).
//! - [`party`]: a pre-made party's own skill (Menke, GDC 2016).
//!
//! Every system implements [`RatingSystem`]; [`SystemConfig`] is the per-queue choice read from
//! TOML and dispatches statically to the system it names.
//!
//! # Example
//!
//! ```
//! use matchmaker::rating::{MatchInput, PlayerInput, SystemConfig};
//!
//! let config: SystemConfig = toml::from_str("system = \"glicko2\"\ntau = 0.5").unwrap();
//! config.validate().unwrap();
//! let fresh = PlayerInput::new(config.initial());
//! let teams = vec![vec![fresh, fresh], vec![fresh, fresh]];
//! let team = [fresh.skill, fresh.skill];
//! let before = config.predict(&[&team, &team]).unwrap();
//! assert!((before.win_probability[0] - 0.5).abs() < 1e-12);
//! // Team 0 won; placements are 1 = first, equal = tie.
//! let after = config.rate(&MatchInput { teams: &teams, placements: &[1, 2] }).unwrap();
//! assert!(after[0][0].mean > 1500.0 && after[1][1].mean < 1500.0);
//! ```
//!
//! Invariants: for finite, in-domain input every returned number is finite and inside the
//! configured bounds; non-finite or out-of-domain input is a [`RatingError`], never a panic or NaN.
//! `rate` is all-or-nothing: it is pure, so an `Err` leaves nothing changed.

pub mod calibration;
pub mod elo;
pub mod glicko;
pub mod glicko2;
pub mod margin;
pub mod party;
pub mod teams;
pub mod weng_lin;

pub mod numeric;

pub use party::party_initial;
pub use teams::TeamStrategy;

use serde::{Deserialize, Serialize};

use crate::rejection::FieldError;

/// Largest absolute mean accepted as input. Far beyond any real rating on any scale here, it
/// keeps sums over teams and exponentials finite, so finite input can never produce `inf`.
pub const MAX_ABS_MEAN: f64 = 1.0e9;
/// Largest deviation accepted as input, for the same reason as [`MAX_ABS_MEAN`].
pub const MAX_DEVIATION: f64 = 1.0e9;
/// Largest elapsed time accepted (about 3,000 years): keeps period counts finite.
pub const MAX_ELAPSED_SECONDS: f64 = 1.0e11;

/// Skill state in the system's display units: Glicko family on the 1500 scale (mean = r,
/// deviation = RD, volatility = σ), Weng-Lin μ/σ (volatility unused = 0), Elo rating with
/// deviation 0.
///
/// One plain value type for every system, so the server stores and ships skills without knowing
/// which system produced them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skill {
    /// Expected skill (Glicko r, Weng-Lin μ, Elo rating).
    pub mean: f64,
    /// Uncertainty of `mean` (Glicko RD, Weng-Lin σ, 0 for Elo).
    pub deviation: f64,
    /// Glicko-2 volatility σ; 0 for the other systems.
    pub volatility: f64,
}

/// What a player is shown: a single number and an interval around the estimate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisplayRating {
    /// The number on the profile (Glicko r, Weng-Lin μ − kσ, Elo rating).
    pub display: f64,
    /// Lower end of the ~95% interval (mean − 1.96·deviation; Elo: the rating).
    pub low: f64,
    /// Upper end of the ~95% interval (mean + 1.96·deviation; Elo: the rating).
    pub high: f64,
}

/// Win probability per team and draw probability of one match-up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Probability that each team finishes first, same order as the input; sums to
    /// `1 − draw_probability`.
    pub win_probability: Vec<f64>,
    /// Probability of a draw, for systems that model one (Thurstone-Mosteller with two teams);
    /// 0 otherwise.
    pub draw_probability: f64,
}

/// One player's part of a match report.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlayerInput {
    /// The skill before this match (display units).
    pub skill: Skill,
    /// Seconds since this player's last rated game; 0 for a new player. Drives deviation growth.
    pub elapsed_seconds: f64,
    /// Optional per-player performance. Elo reads it as productivity on the rating scale (see
    /// [`elo`]); the other systems ignore it.
    pub performance: Option<f64>,
    /// Wins so far, before this match; Elo's inflation bonus stops after a configured count.
    pub wins: u32,
}

impl PlayerInput {
    /// A player with no elapsed time, no performance and no wins: the common test and bench case.
    #[must_use]
    pub const fn new(skill: Skill) -> Self {
        Self {
            skill,
            elapsed_seconds: 0.0,
            performance: None,
            wins: 0,
        }
    }
}

/// One match: teams of players and their placements.
#[derive(Clone, Copy, Debug)]
pub struct MatchInput<'a> {
    /// Two or more teams of one or more players (1v1 is two teams of one; FFA is N teams of one).
    pub teams: &'a [Vec<PlayerInput>],
    /// One per team: 1 = first; equal numbers are a tie.
    pub placements: &'a [u32],
}

/// Why a rating call refused its input. Messages name the field and the rule, so an RPC handler
/// can hand them to the client as `INVALID_ARGUMENT` unchanged.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum RatingError {
    /// A number is non-finite or outside the domain of the system.
    #[error("{field}: {rule} (got {value})")]
    InvalidValue {
        /// Path of the field, e.g. `teams[1][0].skill.deviation`.
        field: String,
        /// The rule it broke, e.g. `must be finite and > 0`.
        rule: &'static str,
        /// The offending value.
        value: f64,
    },
    /// The match has the wrong shape (too few teams, an empty team, placement count mismatch).
    #[error("{field}: {rule}")]
    InvalidShape {
        /// Path of the field, e.g. `placements`.
        field: String,
        /// What was expected.
        rule: String,
    },
    /// The configuration broke a rule (see [`SystemConfig::validate`]).
    #[error("config: {0}")]
    InvalidConfig(String),
    /// A computation left the finite range despite valid input; reported rather than stored.
    #[error("{0}: result is not finite")]
    NonFinite(&'static str),
}

/// The contract every skill system implements.
///
/// Implementations are plain config values; all methods are pure.
pub trait RatingSystem {
    /// Stable system name as written in TOML (`"glicko2"`, `"weng-lin-pl"`, ...).
    fn name(&self) -> &'static str;
    /// Checks every parameter; the error names the key and the rule.
    fn validate(&self) -> Result<(), FieldError>;
    /// The skill of an unrated player.
    fn initial(&self) -> Skill;
    /// What to show a player for `skill`.
    fn display(&self, skill: &Skill) -> DisplayRating;
    /// Win probability per team and draw probability, for any number of teams of any size.
    fn predict(&self, teams: &[&[Skill]]) -> Result<Prediction, RatingError>;
    /// New skills after one match, same shape as `m.teams`.
    fn rate(&self, m: &MatchInput<'_>) -> Result<Vec<Vec<Skill>>, RatingError> {
        self.rate_scored(m, &[])
    }
    /// [`RatingSystem::rate`] with the teams' reported scores (`team_scores`: one finite,
    /// non-negative number per team, or none), which the system's margin option reads
    /// ([`margin`]). Without a margin option the scores are validated and change nothing.
    fn rate_scored(
        &self,
        m: &MatchInput<'_>,
        team_scores: &[f64],
    ) -> Result<Vec<Vec<Skill>>, RatingError>;
    /// Deviation growth for `elapsed_seconds` of inactivity.
    fn decay(&self, skill: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError>;
    /// Length of one rating period in seconds.
    fn rating_period_seconds(&self) -> f64;
}

/// A queue's system and parameters, straight from TOML, e.g.
///
/// ```toml
/// [queues.2v2.rating]
/// system = "glicko2"            # glicko2 | glicko | weng-lin-bt | weng-lin-pl | weng-lin-tm | elo
/// team_strategy = "composite-team"
/// tau = 0.5
/// ```
///
/// Every parameter has a default (`serde(default)`, documented on each system's `Config`);
/// unknown keys are rejected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "system", rename_all = "kebab-case")]
pub enum SystemConfig {
    /// Bounded Glicko-2 ([`glicko2`]).
    Glicko2(glicko2::Config),
    /// Continuous (or periodic) Glicko-1 ([`glicko`]).
    Glicko(glicko::Config),
    /// Weng-Lin Bradley-Terry full pairing ([`weng_lin`]).
    WengLinBt(weng_lin::Config),
    /// Weng-Lin Plackett-Luce ([`weng_lin`]).
    WengLinPl(weng_lin::Config),
    /// Weng-Lin Thurstone-Mosteller full pairing ([`weng_lin`]).
    WengLinTm(weng_lin::Config),
    /// Elo for random teams ([`elo`]).
    Elo(elo::Config),
}

impl Default for SystemConfig {
    /// Bounded Glicko-2 with its defaults: the system of a queue that names none.
    fn default() -> Self {
        Self::Glicko2(glicko2::Config::default())
    }
}

/// Dispatches a method call to the system a [`SystemConfig`] names, statically.
macro_rules! dispatch {
    ($self:expr, $sys:ident => $body:expr) => {
        match $self {
            SystemConfig::Glicko2(c) => {
                let $sys = c;
                $body
            }
            SystemConfig::Glicko(c) => {
                let $sys = c;
                $body
            }
            SystemConfig::WengLinBt(c) => {
                let w = weng_lin::WengLin::new(weng_lin::Model::BradleyTerry, c);
                let $sys = &w;
                $body
            }
            SystemConfig::WengLinPl(c) => {
                let w = weng_lin::WengLin::new(weng_lin::Model::PlackettLuce, c);
                let $sys = &w;
                $body
            }
            SystemConfig::WengLinTm(c) => {
                let w = weng_lin::WengLin::new(weng_lin::Model::ThurstoneMosteller, c);
                let $sys = &w;
                $body
            }
            SystemConfig::Elo(c) => {
                let $sys = c;
                $body
            }
        }
    };
}

impl SystemConfig {
    /// Checks every parameter. Err names the key relative to this table and the rule, e.g.
    /// field `tau`, rule `must be finite and > 0 (got -1)`.
    pub fn validate(&self) -> Result<(), FieldError> {
        dispatch!(self, s => RatingSystem::validate(s))
    }

    /// The system's TOML name (`"glicko2"`, `"glicko"`, `"weng-lin-bt"`, `"weng-lin-pl"`,
    /// `"weng-lin-tm"`, `"elo"`), for logs, metrics and reports.
    #[must_use]
    pub fn name(&self) -> &'static str {
        dispatch!(self, s => RatingSystem::name(s))
    }

    /// The skill of an unrated player.
    #[must_use]
    pub fn initial(&self) -> Skill {
        dispatch!(self, s => RatingSystem::initial(s))
    }

    /// What to show for a skill: Glicko r with r ± 1.96·RD; Weng-Lin the conservative μ − kσ
    /// (k = `display_k`, default 3) with μ ± 1.96σ as the interval; Elo the rating itself.
    #[must_use]
    pub fn display(&self, s: &Skill) -> DisplayRating {
        dispatch!(self, sys => RatingSystem::display(sys, s))
    }

    /// Win probability per team (same order as input) and draw probability, for any number of
    /// teams.
    pub fn predict(&self, teams: &[&[Skill]]) -> Result<Prediction, RatingError> {
        dispatch!(self, s => RatingSystem::predict(s, teams))
    }

    /// One match: returns the new skills, same shape as input. All-or-nothing: it is pure, so an
    /// `Err` leaves nothing changed.
    ///
    /// For a Glicko-family system in `mode = "periodic"` ratings move only at the end of a
    /// rating period: this returns the skills unchanged (validated); the server collects
    /// [`SystemConfig::period_results`] in each record and calls [`SystemConfig::rate_period`]
    /// at period end (`results::close_period`).
    pub fn rate(&self, m: &MatchInput<'_>) -> Result<Vec<Vec<Skill>>, RatingError> {
        dispatch!(self, s => RatingSystem::rate_scored(s, m, &[]))
    }

    /// [`SystemConfig::rate`] with the teams' reported scores (one per team, or none): the
    /// margin of victory the system's `margin` option learns from ([`margin`]).
    pub fn rate_scored(
        &self,
        m: &MatchInput<'_>,
        team_scores: &[f64],
    ) -> Result<Vec<Vec<Skill>>, RatingError> {
        dispatch!(self, s => RatingSystem::rate_scored(s, m, team_scores))
    }

    /// The system's margin-of-victory option.
    #[must_use]
    pub fn margin(&self) -> &margin::Margin {
        match self {
            Self::Glicko2(c) => &c.margin,
            Self::Glicko(c) => &c.margin,
            Self::WengLinBt(c) | Self::WengLinPl(c) | Self::WengLinTm(c) => &c.margin,
            Self::Elo(c) => &c.margin,
        }
    }

    /// Mutable access to the margin option (the tuner searches it).
    pub fn margin_mut(&mut self) -> &mut margin::Margin {
        match self {
            Self::Glicko2(c) => &mut c.margin,
            Self::Glicko(c) => &mut c.margin,
            Self::WengLinBt(c) | Self::WengLinPl(c) | Self::WengLinTm(c) => &mut c.margin,
            Self::Elo(c) => &mut c.margin,
        }
    }

    /// The pool's calibration settings.
    #[must_use]
    pub fn calibration(&self) -> &calibration::CalibrationConfig {
        match self {
            Self::Glicko2(c) => &c.calibration,
            Self::Glicko(c) => &c.calibration,
            Self::WengLinBt(c) | Self::WengLinPl(c) | Self::WengLinTm(c) => &c.calibration,
            Self::Elo(c) => &c.calibration,
        }
    }

    /// Mutable access to the calibration settings (replay switches them on and off).
    pub fn calibration_mut(&mut self) -> &mut calibration::CalibrationConfig {
        match self {
            Self::Glicko2(c) => &mut c.calibration,
            Self::Glicko(c) => &mut c.calibration,
            Self::WengLinBt(c) | Self::WengLinPl(c) | Self::WengLinTm(c) => &mut c.calibration,
            Self::Elo(c) => &mut c.calibration,
        }
    }

    /// The win probabilities the pool shows: [`SystemConfig::predict`], then the pool's
    /// calibration when `calibration` is given (its map is monotone, so the favourite stays
    /// the favourite; a draw probability keeps its share).
    pub fn predict_calibrated(
        &self,
        teams: &[&[Skill]],
        calibration: Option<&calibration::Calibration>,
    ) -> Result<Prediction, RatingError> {
        let mut p = self.predict(teams)?;
        if let Some(c) = calibration {
            c.apply(&mut p.win_probability);
        }
        Ok(p)
    }

    /// Deviation growth for `elapsed_seconds` of inactivity (used by the season soft reset: one
    /// period). Elo has no deviation and returns the skill unchanged.
    pub fn decay(&self, s: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError> {
        dispatch!(self, sys => RatingSystem::decay(sys, s, elapsed_seconds))
    }

    /// Length of one rating period in seconds (Glicko-2 default 14 days, Glicko-1 7 days; Elo and
    /// Weng-Lin have no periods and report 7 days so a season's weekly roll has a value).
    #[must_use]
    pub fn rating_period_seconds(&self) -> f64 {
        dispatch!(self, s => RatingSystem::rating_period_seconds(s))
    }

    /// Checks a skill against this system's domain (the rules every rating call applies to its
    /// inputs), so a skill set from outside (an admin's `SetRating`) can be rated later.
    /// `field` names it in the error, e.g. `rating` gives `rating.volatility`.
    pub fn validate_skill(&self, s: &Skill, field: &str) -> Result<(), RatingError> {
        let rules = match self {
            Self::Glicko2(_) => glicko2::input_rules(),
            Self::Glicko(_) => glicko::input_rules(),
            Self::WengLinBt(_) | Self::WengLinPl(_) | Self::WengLinTm(_) => weng_lin::input_rules(),
            Self::Elo(_) => elo::input_rules(),
        };
        validate_skill(s, &rules, || field.to_string())
    }

    /// Display rating points per 10:1 odds between two settled players: 400 for the 1500-scale
    /// systems (Glicko-2, Glicko, Elo), √2·β·ln 10 for Weng-Lin (≈ 13.6 with the default β).
    /// The unit matching windows are written in, to carry them from one system to another.
    #[must_use]
    pub fn odds_scale(&self) -> f64 {
        match self {
            Self::Glicko2(_) | Self::Glicko(_) | Self::Elo(_) => 400.0,
            Self::WengLinBt(c) | Self::WengLinPl(c) | Self::WengLinTm(c) => {
                std::f64::consts::SQRT_2 * c.beta * std::f64::consts::LN_10
            }
        }
    }

    /// True when this queue batches Glicko results per rating period instead of rating each match.
    #[must_use]
    pub fn is_periodic(&self) -> bool {
        match self {
            Self::Glicko2(c) => c.mode == Mode::Periodic,
            Self::Glicko(c) => c.mode == Mode::Periodic,
            _ => false,
        }
    }

    /// For periodic Glicko queues: each player's results from one match, as (opponent or virtual
    /// opponent, score) pairs by the queue's team strategy, same shape as `m.teams`. The server
    /// stores them until the period ends. Other systems: an error naming the system.
    pub fn period_results(
        &self,
        m: &MatchInput<'_>,
        team_scores: &[f64],
    ) -> Result<Vec<Vec<Vec<teams::PeriodResult>>>, RatingError> {
        match self {
            Self::Glicko2(c) => {
                validate_match(m, &glicko2::input_rules())?;
                margin::validate_scores(team_scores, m.teams.len())?;
                Ok(teams::pairwise_results(
                    m,
                    team_scores,
                    &c.margin,
                    c.team_strategy,
                ))
            }
            Self::Glicko(c) => {
                validate_match(m, &glicko::input_rules())?;
                margin::validate_scores(team_scores, m.teams.len())?;
                Ok(teams::pairwise_results(
                    m,
                    team_scores,
                    &c.margin,
                    c.team_strategy,
                ))
            }
            _ => Err(RatingError::InvalidConfig(format!(
                "{}: has no rating periods (period_results is for glicko and glicko2)",
                self.name()
            ))),
        }
    }

    /// For periodic Glicko queues: the batch update at the end of a period from everything the
    /// player did in it (Glickman's algorithm; no results = one period of inactivity).
    /// `elapsed_seconds` is inactivity before this period beyond the period itself (usually 0).
    pub fn rate_period(
        &self,
        player: &Skill,
        results: &[teams::PeriodResult],
        elapsed_seconds: f64,
    ) -> Result<Skill, RatingError> {
        match self {
            Self::Glicko2(c) => glicko2::rate_period_checked(player, results, elapsed_seconds, c),
            Self::Glicko(c) => glicko::rate_period_checked(player, results, elapsed_seconds, c),
            _ => Err(RatingError::InvalidConfig(format!(
                "{}: has no rating periods (rate_period is for glicko and glicko2)",
                self.name()
            ))),
        }
    }
}

impl RatingSystem for SystemConfig {
    fn name(&self) -> &'static str {
        SystemConfig::name(self)
    }
    fn validate(&self) -> Result<(), FieldError> {
        SystemConfig::validate(self)
    }
    fn initial(&self) -> Skill {
        SystemConfig::initial(self)
    }
    fn display(&self, skill: &Skill) -> DisplayRating {
        SystemConfig::display(self, skill)
    }
    fn predict(&self, teams: &[&[Skill]]) -> Result<Prediction, RatingError> {
        SystemConfig::predict(self, teams)
    }
    fn rate_scored(
        &self,
        m: &MatchInput<'_>,
        team_scores: &[f64],
    ) -> Result<Vec<Vec<Skill>>, RatingError> {
        SystemConfig::rate_scored(self, m, team_scores)
    }
    fn decay(&self, skill: &Skill, elapsed_seconds: f64) -> Result<Skill, RatingError> {
        SystemConfig::decay(self, skill, elapsed_seconds)
    }
    fn rating_period_seconds(&self) -> f64 {
        SystemConfig::rating_period_seconds(self)
    }
}

/// Glicko-family update mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Each match is one rating period for the players in it (INVERSUS, continuous Glicko).
    #[default]
    Streaming,
    /// Results are batched and applied at the end of each rating period (classic Glicko).
    Periodic,
}

/// Seconds in a day, the unit of rating period lengths in config.
pub const DAY_SECONDS: f64 = 86_400.0;

/// What a system accepts as input skill: the domain, not the configured bounds (values outside
/// the bounds but inside the domain are clamped in, so a stored skill from an older config stays
/// usable).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InputRules {
    /// Deviation must be > 0 (Glicko, Weng-Lin) or may be 0 (Elo).
    pub deviation_positive: bool,
    /// Volatility must be > 0 (Glicko-2) or is ignored.
    pub volatility_positive: bool,
}

pub(crate) fn invalid(field: String, rule: &'static str, value: f64) -> RatingError {
    RatingError::InvalidValue { field, rule, value }
}

/// Checks one skill against the domain rules; `path` prefixes the field name.
pub(crate) fn validate_skill(
    s: &Skill,
    rules: &InputRules,
    path: impl Fn() -> String,
) -> Result<(), RatingError> {
    if !s.mean.is_finite() || s.mean.abs() > MAX_ABS_MEAN {
        return Err(invalid(
            format!("{}.mean", path()),
            "must be finite and within ±1e9",
            s.mean,
        ));
    }
    if rules.deviation_positive {
        if !(s.deviation.is_finite() && s.deviation > 0.0 && s.deviation <= MAX_DEVIATION) {
            return Err(invalid(
                format!("{}.deviation", path()),
                "must be finite and > 0 (at most 1e9)",
                s.deviation,
            ));
        }
    } else if !(s.deviation.is_finite() && s.deviation >= 0.0 && s.deviation <= MAX_DEVIATION) {
        return Err(invalid(
            format!("{}.deviation", path()),
            "must be finite and >= 0 (at most 1e9)",
            s.deviation,
        ));
    }
    if rules.volatility_positive {
        if !(s.volatility.is_finite() && s.volatility > 0.0 && s.volatility <= 10.0) {
            return Err(invalid(
                format!("{}.volatility", path()),
                "must be finite and in (0, 10]",
                s.volatility,
            ));
        }
    } else if !s.volatility.is_finite() {
        return Err(invalid(
            format!("{}.volatility", path()),
            "must be finite",
            s.volatility,
        ));
    }
    Ok(())
}

/// Checks a whole match: shape, placements, every player's skill, elapsed time and performance.
pub(crate) fn validate_match(m: &MatchInput<'_>, rules: &InputRules) -> Result<(), RatingError> {
    if m.teams.len() < 2 {
        return Err(RatingError::InvalidShape {
            field: "teams".into(),
            rule: format!("need at least 2 teams (got {})", m.teams.len()),
        });
    }
    if m.placements.len() != m.teams.len() {
        return Err(RatingError::InvalidShape {
            field: "placements".into(),
            rule: format!(
                "need one placement per team ({} teams, {} placements)",
                m.teams.len(),
                m.placements.len()
            ),
        });
    }
    if let Some(i) = m.placements.iter().position(|&p| p == 0) {
        return Err(RatingError::InvalidShape {
            field: format!("placements[{i}]"),
            rule: "must be >= 1 (1 = first)".into(),
        });
    }
    for (t, team) in m.teams.iter().enumerate() {
        if team.is_empty() {
            return Err(RatingError::InvalidShape {
                field: format!("teams[{t}]"),
                rule: "a team needs at least one player".into(),
            });
        }
        for (p, player) in team.iter().enumerate() {
            validate_player(player, rules, t, p)?;
        }
    }
    Ok(())
}

fn validate_player(
    player: &PlayerInput,
    rules: &InputRules,
    t: usize,
    p: usize,
) -> Result<(), RatingError> {
    validate_skill(&player.skill, rules, || format!("teams[{t}][{p}].skill"))?;
    validate_elapsed(player.elapsed_seconds, || {
        format!("teams[{t}][{p}].elapsed_seconds")
    })?;
    if let Some(perf) = player.performance
        && (!perf.is_finite() || perf.abs() > MAX_ABS_MEAN)
    {
        return Err(invalid(
            format!("teams[{t}][{p}].performance"),
            "must be finite and within ±1e9",
            perf,
        ));
    }
    Ok(())
}

/// Checks an elapsed time: finite, >= 0 and below [`MAX_ELAPSED_SECONDS`].
pub(crate) fn validate_elapsed(
    elapsed: f64,
    field: impl Fn() -> String,
) -> Result<(), RatingError> {
    if elapsed.is_finite() && (0.0..=MAX_ELAPSED_SECONDS).contains(&elapsed) {
        Ok(())
    } else {
        Err(invalid(
            field(),
            "must be finite, >= 0 and at most 1e11",
            elapsed,
        ))
    }
}

/// Checks the teams passed to `predict`.
pub(crate) fn validate_teams(teams: &[&[Skill]], rules: &InputRules) -> Result<(), RatingError> {
    if teams.len() < 2 {
        return Err(RatingError::InvalidShape {
            field: "teams".into(),
            rule: format!("need at least 2 teams (got {})", teams.len()),
        });
    }
    for (t, team) in teams.iter().enumerate() {
        if team.is_empty() {
            return Err(RatingError::InvalidShape {
                field: format!("teams[{t}]"),
                rule: "a team needs at least one player".into(),
            });
        }
        for (p, s) in team.iter().enumerate() {
            validate_skill(s, rules, || format!("teams[{t}][{p}]"))?;
        }
    }
    Ok(())
}

/// Turns pairwise win probabilities into the probability that each team finishes first, for any
/// number of teams. Each team's strength is the geometric mean of its pairwise odds against every
/// other team, s_i = Π_j (p_ij / p_ji)^(1/n), and P(first) = s_i / Σ s_k (Luce's choice axiom).
/// For Bradley-Terry-type pairwise models (p_ij = s_i / (s_i + s_j): Elo, Glicko, Weng-Lin BT/PL)
/// this recovers the strengths exactly; for two teams it is exactly P(a beats b).
///
/// Why not the mean of P(i beats j) over opponents (openskill's `predict_win`): that is each
/// team's expected share of pairwise wins, not its chance of finishing first; it gives a player
/// who beats every one of seven opponents for certain only 7/28 = 0.25 to win an eight-player
/// free-for-all, and `simulate` measures it as badly calibrated (ECE 0.15 on ffa8).
pub(crate) fn win_shares(n: usize, pairwise: impl Fn(usize, usize) -> f64) -> Vec<f64> {
    if n == 0 {
        return Vec::new();
    }
    // Work in log-odds; clamp so a certain pairwise outcome stays finite.
    const EPS: f64 = 1e-12;
    let mut log_strength = vec![0.0; n];
    for i in 0..n {
        for j in (i + 1)..n {
            let p = pairwise(i, j).clamp(EPS, 1.0 - EPS);
            let log_odds = (p / (1.0 - p)).ln();
            log_strength[i] += log_odds;
            log_strength[j] -= log_odds;
        }
    }
    let max = log_strength
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = log_strength
        .iter()
        .map(|l| ((l - max) / n as f64).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    weights.iter().map(|w| w / total).collect()
}

/// Returns `Err(NonFinite)` unless every field of every skill is finite: the last guard before a
/// result leaves the module.
pub(crate) fn ensure_finite(
    what: &'static str,
    teams: Vec<Vec<Skill>>,
) -> Result<Vec<Vec<Skill>>, RatingError> {
    let ok = teams
        .iter()
        .flatten()
        .all(|s| s.mean.is_finite() && s.deviation.is_finite() && s.volatility.is_finite());
    if ok {
        Ok(teams)
    } else {
        Err(RatingError::NonFinite(what))
    }
}

/// Score of team `a` against team `b` from placements: 1 ahead, ½ tied, 0 behind.
#[must_use]
#[inline]
pub fn pair_outcome(placement_a: u32, placement_b: u32) -> f64 {
    pair_score(placement_a, placement_b)
}

/// Score of team `a` against team `b` from placements: 1 ahead, ½ tied, 0 behind.
#[must_use]
#[inline]
pub(crate) fn pair_score(placement_a: u32, placement_b: u32) -> f64 {
    match placement_a.cmp(&placement_b) {
        std::cmp::Ordering::Less => 1.0,
        std::cmp::Ordering::Equal => 0.5,
        std::cmp::Ordering::Greater => 0.0,
    }
}

/// x limited to [lo, hi] without `f64::clamp`'s panic on lo > hi or NaN bounds (a pure
/// function may be handed an unvalidated config) and without its NaN branches on the hot path:
/// plain compare-and-select, two `maxsd`/`minsd`.
#[must_use]
#[inline]
pub(crate) fn bound(x: f64, lo: f64, hi: f64) -> f64 {
    let x = if x > lo { x } else { lo };
    if x < hi { x } else { hi }
}

/// Checks a stored period result's margin weight: finite and >= 0 (the margin rules give
/// weights in [0, 15]).
pub(crate) fn check_weight(weight: f64, k: usize) -> Result<(), RatingError> {
    if weight.is_finite() && (0.0..=1e3).contains(&weight) {
        Ok(())
    } else {
        Err(invalid(
            format!("results[{k}].weight"),
            "must be finite and in [0, 1000]",
            weight,
        ))
    }
}

/// Checks a config number that must be finite and > 0; the error names `key`.
pub(crate) fn check_positive(key: &str, v: f64) -> Result<(), FieldError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(FieldError::new(
            key,
            format!("must be finite and > 0 (got {v})"),
        ))
    }
}

/// Checks a config number that must be finite and >= 0; the error names `key`.
pub(crate) fn check_non_negative(key: &str, v: f64) -> Result<(), FieldError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(FieldError::new(
            key,
            format!("must be finite and >= 0 (got {v})"),
        ))
    }
}

#[cfg(test)]
pub(crate) mod test_util;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod vs_skillratings;

#[cfg(test)]
mod properties;
