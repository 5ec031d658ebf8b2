//! A match history in the JSONL format of `docs/match-history.md`, parsed into flat arrays.
//!
//! One JSON object per line, in play order:
//! `{"time":"2010-05-09","teams":[["a","b"],["c","d"]],"placements":[1,2],"scores":[12,7]}`.
//! `time` is a date (`YYYY-MM-DD`, optionally followed by a time of day, which is ignored) or a
//! number of unix seconds; `placements` are 1 = first, equal = tie; `scores` (optional: one
//! non-negative number per team, or `null`) are the margin a system's margin option reads; any
//! other key is ignored. Blank lines are skipped.
//!
//! Player ids are interned to dense indices while parsing, and every match lives in flat
//! vectors, so the replay loop indexes plain slices and allocates nothing. Parsing goes through
//! `serde_json` with a visitor that writes straight into those vectors (no per-line `Vec`s).
//!
//! This module reads bytes it is given; opening files is [`History::read_file`]'s only I/O.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Seconds in a day: history times are kept in whole days since 1970-01-01.
pub const DAY: f64 = 86_400.0;

/// Why a history could not be read. Line numbers are 1-based, as an editor shows them.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a valid match.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// One match's place in the flat arrays of a [`History`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchRecord {
    /// Days since 1970-01-01 (the tournament's start date in the ATP files).
    pub day: i32,
    /// Index of the first team in [`History::team_ends`] / [`History::placements`].
    pub first_team: u32,
    /// Number of teams (at least 2).
    pub teams: u32,
}

/// A parsed history: interned players and flat match arrays.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// External id of each dense player index.
    pub ids: Vec<Box<str>>,
    /// The matches in play order.
    pub matches: Vec<MatchRecord>,
    /// Player indices of every team of every match, back to back.
    pub players: Vec<u32>,
    /// For each team (global team index), the end of its players in [`History::players`].
    pub team_ends: Vec<u32>,
    /// For each team (global team index), its placement.
    pub placements: Vec<u32>,
    /// For each team (global team index), its score, or NaN for a match without scores.
    pub scores: Vec<f64>,
}

impl History {
    /// Reads and parses a JSONL file.
    pub fn read_file(path: &Path) -> Result<History, HistoryError> {
        let text = std::fs::read_to_string(path).map_err(|source| HistoryError::Io {
            path: path.display().to_string(),
            source,
        })?;
        History::parse(&text)
    }

    /// Parses JSONL text.
    pub fn parse(text: &str) -> Result<History, HistoryError> {
        let mut b = Builder {
            h: History::default(),
            index: HashMap::default(),
        };
        let lines = text.len() / 80 + 1;
        b.h.matches.reserve(lines);
        b.h.players.reserve(lines * 2);
        b.h.team_ends.reserve(lines * 2);
        b.h.placements.reserve(lines * 2);
        b.h.scores.reserve(lines * 2);
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            b.line(line).map_err(|message| HistoryError::Line {
                line: i + 1,
                message,
            })?;
        }
        Ok(b.h)
    }

    /// Number of distinct players.
    #[must_use]
    pub fn player_count(&self) -> usize {
        self.ids.len()
    }

    /// The players of global team `t`.
    #[must_use]
    #[inline]
    pub fn team(&self, t: usize) -> &[u32] {
        let start = if t == 0 {
            0
        } else {
            self.team_ends[t - 1] as usize
        };
        &self.players[start..self.team_ends[t] as usize]
    }

    /// The scores of `teams` teams from global team `first`, when the match has them.
    #[must_use]
    #[inline]
    pub fn scores(&self, first: usize, teams: usize) -> Option<&[f64]> {
        let s = self.scores.get(first..first + teams)?;
        (!s[0].is_nan()).then_some(s)
    }

    /// Index of the first match on or after `day` (matches are in time order), or the number of
    /// matches if there is none.
    #[must_use]
    pub fn first_on_or_after(&self, day: i32) -> usize {
        self.matches.partition_point(|m| m.day < day)
    }
}

struct Builder {
    h: History,
    /// Ids to dense indices, with the fast multiplicative hasher of the matcher's id maps (a
    /// history is the user's own file: no need for SipHash's resistance to chosen keys).
    index: HashMap<Box<str>, u32, crate::matching::IdHash>,
}

impl Builder {
    /// Parses one line into the flat arrays; on error, rolls the arrays back to before the line.
    fn line(&mut self, line: &str) -> Result<(), String> {
        let mark = (
            self.h.players.len(),
            self.h.team_ends.len(),
            self.h.placements.len(),
            self.h.scores.len(),
        );
        let mut de = serde_json::Deserializer::from_str(line);
        let parsed = LineSeed { b: self }
            .deserialize(&mut de)
            .and_then(|v| de.end().map(|()| v));
        let result = match parsed {
            Ok(fields) => self.finish(fields, mark.1),
            Err(e) => Err(e.to_string()),
        };
        if result.is_err() {
            self.h.players.truncate(mark.0);
            self.h.team_ends.truncate(mark.1);
            self.h.placements.truncate(mark.2);
            self.h.scores.truncate(mark.3);
        }
        result
    }

    fn finish(&mut self, f: LineFields, first_team: usize) -> Result<(), String> {
        let day = f.day.ok_or("time: missing")?;
        if !f.saw_teams {
            return Err("teams: missing".into());
        }
        let teams = self.h.team_ends.len() - first_team;
        if teams < 2 {
            return Err(format!("teams: need at least 2 teams (got {teams})"));
        }
        let placements = self.h.placements.len() - first_team;
        if placements != teams {
            return Err(format!(
                "placements: need one per team ({teams} teams, {placements} placements)"
            ));
        }
        let scores = self.h.scores.len() - first_team;
        if scores == 0 {
            self.h.scores.resize(first_team + teams, f64::NAN);
        } else if scores != teams {
            return Err(format!(
                "scores: need one per team or none ({teams} teams, {scores} scores)"
            ));
        }
        let start = if first_team == 0 {
            0
        } else {
            self.h.team_ends[first_team - 1] as usize
        };
        let players = &self.h.players[start..];
        for (i, p) in players.iter().enumerate() {
            if players[..i].contains(p) {
                return Err(format!(
                    "teams: player {:?} appears twice in one match",
                    self.h.ids[*p as usize]
                ));
            }
        }
        if let Some(prev) = self.h.matches.last()
            && day < prev.day
        {
            return Err(format!(
                "time: lines must be in time order (day {day} after day {})",
                prev.day
            ));
        }
        self.h.matches.push(MatchRecord {
            day,
            first_team: first_team as u32,
            teams: teams as u32,
        });
        Ok(())
    }

    fn intern(&mut self, id: &str) -> u32 {
        if let Some(&i) = self.index.get(id) {
            return i;
        }
        let i = self.h.ids.len() as u32;
        self.h.ids.push(id.into());
        self.index.insert(id.into(), i);
        i
    }
}

#[derive(Default)]
struct LineFields {
    day: Option<i32>,
    saw_teams: bool,
}

struct LineSeed<'b> {
    b: &'b mut Builder,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_> {
    type Value = LineFields;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<LineFields, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_> {
    type Value = LineFields;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a match object {\"time\", \"teams\", \"placements\"}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LineFields, A::Error> {
        let mut fields = LineFields::default();
        let mut saw_placements = false;
        let mut saw_scores = false;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "time" => fields.day = Some(map.next_value::<TimeValue>()?.0),
                "teams" => {
                    if fields.saw_teams {
                        return Err(de::Error::duplicate_field("teams"));
                    }
                    fields.saw_teams = true;
                    map.next_value_seed(TeamsSeed { b: self.b })?;
                }
                "placements" => {
                    if saw_placements {
                        return Err(de::Error::duplicate_field("placements"));
                    }
                    saw_placements = true;
                    map.next_value_seed(PlacementsSeed {
                        out: &mut self.b.h.placements,
                    })?;
                }
                "scores" => {
                    if saw_scores {
                        return Err(de::Error::duplicate_field("scores"));
                    }
                    saw_scores = true;
                    map.next_value_seed(ScoresSeed {
                        out: &mut self.b.h.scores,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !saw_placements {
            return Err(de::Error::missing_field("placements"));
        }
        Ok(fields)
    }
}

/// Days since 1970-01-01 from a `YYYY-MM-DD...` string or unix seconds.
struct TimeValue(i32);

impl<'de> de::Deserialize<'de> for TimeValue {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<TimeValue, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TimeValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a date \"YYYY-MM-DD\" or unix seconds")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TimeValue, E> {
                parse_date(s).map(TimeValue).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TimeValue, E> {
                if v.is_finite() && v.abs() < 1e12 {
                    Ok(TimeValue((v / DAY).floor() as i32))
                } else {
                    Err(E::custom(format!("time: unix seconds out of range ({v})")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimeValue, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimeValue, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_any(V)
    }
}

struct TeamsSeed<'b> {
    b: &'b mut Builder,
}

impl<'de> DeserializeSeed<'de> for TeamsSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TeamsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("teams: a list of lists of player ids")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(TeamSeed { b: self.b })?.is_some() {}
        Ok(())
    }
}

struct TeamSeed<'b> {
    b: &'b mut Builder,
}

impl<'de> DeserializeSeed<'de> for TeamSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TeamSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a team: a list of player ids")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let before = self.b.h.players.len();
        while let Some(id) = seq.next_element::<Id<'de>>()? {
            let i = self.b.intern(&id.0);
            self.b.h.players.push(i);
        }
        if self.b.h.players.len() == before {
            return Err(de::Error::custom("teams: a team needs at least one player"));
        }
        self.b.h.team_ends.push(self.b.h.players.len() as u32);
        Ok(())
    }
}

/// A player id: a string (borrowed when it has no escapes) or an integer.
struct Id<'a>(std::borrow::Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Id<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Id<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a player id (string or integer)")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Id<'de>, E> {
                Ok(Id(std::borrow::Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Id<'de>, E> {
                Ok(Id(std::borrow::Cow::Owned(s.to_owned())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id<'de>, E> {
                Ok(Id(std::borrow::Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id<'de>, E> {
                Ok(Id(std::borrow::Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

struct PlacementsSeed<'o> {
    out: &'o mut Vec<u32>,
}

impl<'de> DeserializeSeed<'de> for PlacementsSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for PlacementsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("placements: a list of positive integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(p) = seq.next_element::<u32>()? {
            if p == 0 {
                return Err(de::Error::custom("placements: 1 = first, 0 is not allowed"));
            }
            self.out.push(p);
        }
        Ok(())
    }
}

/// `scores`: `null`, or a list of non-negative numbers (checked against the teams in `finish`).
struct ScoresSeed<'o> {
    out: &'o mut Vec<f64>,
}

impl<'de> DeserializeSeed<'de> for ScoresSeed<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ScoresSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("scores: a list of non-negative numbers, one per team, or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(s) = seq.next_element::<f64>()? {
            if !(s.is_finite() && s >= 0.0) {
                return Err(de::Error::custom(format!(
                    "scores: must be non-negative numbers (got {s})"
                )));
            }
            self.out.push(s);
        }
        Ok(())
    }
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date (anything after the tenth character, such as a
/// time of day, is ignored). Howard Hinnant's `days_from_civil`.
pub fn parse_date(s: &str) -> Result<i32, String> {
    let bad = || format!("time: expected YYYY-MM-DD (got {s:?})");
    let b = s.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i32, String> {
        s.get(r)
            .filter(|t| t.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|t| t.parse().ok())
            .ok_or_else(bad)
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok(era * 146_097 + doe - 719_468)
}

/// The `YYYY-MM-DD` date of `days` since 1970-01-01: the inverse of [`parse_date`] (Howard
/// Hinnant's `civil_from_days`).
#[must_use]
pub fn format_date(days: i32) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i32::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_days_since_the_epoch() {
        assert_eq!(parse_date("1970-01-01"), Ok(0));
        assert_eq!(parse_date("2000-03-01"), Ok(11_017));
        assert_eq!(parse_date("2010-01-01"), Ok(14_610));
        assert_eq!(parse_date("2010-01-01T12:00:00Z"), Ok(14_610));
        assert!(parse_date("2010-13-01").is_err());
        for day in [-1, 0, 59, 60, 11_017, 14_610, 18_628, 19_000, 20_000] {
            assert_eq!(
                parse_date(&format_date(day)),
                Ok(day),
                "{}",
                format_date(day)
            );
        }
        assert_eq!(format_date(11_016), "2000-02-29");
        assert!(parse_date("10-01-01").is_err());
    }

    #[test]
    fn parses_and_interns_players() {
        let text = r#"{"time":"2010-05-09","teams":[["a","b"],["c","d"]],"placements":[1,2],"scores":[12,7]}

{"placements":[2,1],"teams":[["c"],["a"]],"time":"2010-05-10","extra":{"x":[1]}}
{"time":1273536000,"teams":[[7],["a"],["e"]],"placements":[1,1,3]}
"#;
        let h = History::parse(text).unwrap();
        assert_eq!(h.matches.len(), 3);
        assert_eq!(h.player_count(), 6);
        assert_eq!(&*h.ids[4], "7");
        assert_eq!(h.team(0), &[0, 1]);
        assert_eq!(h.team(1), &[2, 3]);
        assert_eq!(h.team(2), &[2]);
        assert_eq!(h.team(3), &[0]);
        assert_eq!(h.matches[1].day, h.matches[0].day + 1);
        assert_eq!(h.matches[2].day, h.matches[0].day + 2);
        assert_eq!(h.matches[2].teams, 3);
        assert_eq!(&h.placements[4..7], &[1, 1, 3]);
        assert_eq!(h.first_on_or_after(h.matches[0].day + 1), 1);
        assert_eq!(h.scores(0, 2), Some(&[12.0, 7.0][..]));
        assert_eq!(h.scores(2, 2), None);
        assert_eq!(h.scores(4, 3), None);
        assert_eq!(h.scores.len(), h.placements.len());
    }

    #[test]
    fn bad_lines_name_the_line_and_the_field() {
        let cases = [
            (
                r#"{"time":"2010-05-09","teams":[["a"]],"placements":[1]}"#,
                "at least 2 teams",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["b"]],"placements":[1]}"#,
                "placements",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],[]],"placements":[1,2]}"#,
                "at least one player",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["a"]],"placements":[1,2]}"#,
                "twice",
            ),
            (
                r#"{"time":"nope","teams":[["a"],["b"]],"placements":[1,2]}"#,
                "YYYY-MM-DD",
            ),
            (
                r#"{"teams":[["a"],["b"]],"placements":[1,2]}"#,
                "time: missing",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["b"]],"placements":[0,2]}"#,
                "0 is not",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["b"]],"placements":[1,2]} x"#,
                "trailing",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["b"]],"placements":[1,2],"scores":[3]}"#,
                "scores: need one per team",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["b"]],"placements":[1,2],"scores":[3,-1]}"#,
                "scores: must be non-negative",
            ),
            (
                r#"{"time":"2010-05-09","teams":[["a"],["b"]],"placements":[1,2],"scores":"6-3"}"#,
                "scores",
            ),
        ];
        for (line, want) in cases {
            let text = format!(
                "{{\"time\":\"2010-01-01\",\"teams\":[[\"z\"],[\"y\"]],\"placements\":[1,2]}}\n{line}\n"
            );
            let err = History::parse(&text).unwrap_err().to_string();
            assert!(err.starts_with("line 2: "), "{err}");
            assert!(err.contains(want), "{err} lacks {want}");
        }
        let err = History::parse(
            "{\"time\":\"2010-01-02\",\"teams\":[[\"z\"],[\"y\"]],\"placements\":[1,2]}\n\
             {\"time\":\"2010-01-01\",\"teams\":[[\"z\"],[\"y\"]],\"placements\":[1,2]}",
        )
        .unwrap_err();
        assert!(err.to_string().contains("time order"), "{err}");
    }
}
