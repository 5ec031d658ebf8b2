//! A synthetic match history generated from known true skills, in the format of
//! `docs/match-history.md`: the repository's own test data for `replay` (the committed
//! `tests/data/history.jsonl` is [`generate`]`(&`[`SyntheticParams::fixture`]`())`, and
//! `tests/replay.rs` checks that it still is).
//!
//! The model is the simulator's: each player has a fixed true skill on the 1500 scale, performs
//! at true skill + noise in every match, a team's performance is the sum of its members', and
//! teams are placed by performance (two teams within `draw_margin` of each other tie). Players
//! meet at random, not by rating, so every skill gap is represented (Menke's calibration test
//! asks for matches that were not matchmade). A rating system that learns anything beats a coin
//! flip on it; one that knew the true skills would do best.
//!
//! Pure and portable: the output is a function of the parameters alone. The random numbers come
//! from a SplitMix64 generator written here, and the noise is the Irwin–Hall approximation of a
//! standard normal (the sum of twelve uniforms minus six), so only IEEE additions,
//! multiplications, divisions and square roots are involved: the same bytes on every platform
//! and with every version of the `rand` crates.

use super::history::{format_date, parse_date};
use crate::math::SplitMix64;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticParams {
    /// Seed of the generator.
    pub seed: u64,
    /// Number of players (ids `p000`, `p001`, ...).
    pub players: usize,
    /// Number of matches.
    pub matches: usize,
    /// Date of the first match, `YYYY-MM-DD`.
    pub start: &'static str,
    /// Days the matches are spread over, evenly and in order.
    pub days: u32,
    /// Mean true skill.
    pub skill_mean: f64,
    /// Standard deviation of true skill.
    pub skill_sd: f64,
    /// Standard deviation of one player's performance around their true skill in one match.
    pub performance_sd: f64,
    /// Fraction of matches that are 2v2.
    pub team_fraction: f64,
    /// Fraction of matches that are free-for-alls of three or four players.
    pub free_for_all_fraction: f64,
    /// Two teams whose performances are closer than this tie (placements `[1, 1]`).
    pub draw_margin: f64,
}

impl SyntheticParams {
    /// The parameters of the committed fixture `tests/data/history.jsonl`: 2,400 matches of 160
    /// players over 120 days from 2021-01-04 (70% 1v1, 20% 2v2, 10% free-for-all, about 2% of
    /// two-team matches tied).
    #[must_use]
    pub fn fixture() -> Self {
        SyntheticParams {
            seed: 7,
            players: 160,
            matches: 2400,
            start: "2021-01-04",
            days: 120,
            skill_mean: 1500.0,
            skill_sd: 200.0,
            performance_sd: 200.0,
            team_fraction: 0.2,
            free_for_all_fraction: 0.1,
            draw_margin: 10.0,
        }
    }
}

/// A generated history and the truth behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticHistory {
    /// The history, one JSON object per line, each line ending in `\n`.
    pub jsonl: String,
    /// Every player's id and true skill, in id order.
    pub true_skills: Vec<(String, f64)>,
}

/// Generates the history `params` describe. Panics only on parameters no caller would pass
/// (`start` not a date, fewer than four players).
#[must_use]
pub fn generate(params: &SyntheticParams) -> SyntheticHistory {
    assert!(params.players >= 4, "synthetic: need at least 4 players");
    let start = parse_date(params.start).expect("synthetic: start must be YYYY-MM-DD");
    let mut rng = SplitMix64(params.seed);
    let true_skills: Vec<(String, f64)> = (0..params.players)
        .map(|i| {
            let skill = params.skill_mean + params.skill_sd * rng.normal();
            (format!("p{i:03}"), skill)
        })
        .collect();
    let mut jsonl = String::with_capacity(params.matches * 96);
    for m in 0..params.matches {
        let day = start + (m as u64 * u64::from(params.days) / params.matches.max(1) as u64) as i32;
        let kind = rng.uniform();
        let shape: &[usize] = if kind < params.free_for_all_fraction {
            if rng.uniform() < 0.5 {
                &[1, 1, 1]
            } else {
                &[1, 1, 1, 1]
            }
        } else if kind < params.free_for_all_fraction + params.team_fraction {
            &[2, 2]
        } else {
            &[1, 1]
        };
        let mut chosen: Vec<usize> = Vec::with_capacity(4);
        let teams: Vec<Vec<usize>> = shape
            .iter()
            .map(|&size| {
                (0..size)
                    .map(|_| {
                        loop {
                            let p = rng.below(params.players);
                            if !chosen.contains(&p) {
                                chosen.push(p);
                                break p;
                            }
                        }
                    })
                    .collect()
            })
            .collect();
        let performance: Vec<f64> = teams
            .iter()
            .map(|team| {
                team.iter()
                    .map(|&p| true_skills[p].1 + params.performance_sd * rng.normal())
                    .sum()
            })
            .collect();
        let placements = place(&performance, params.draw_margin);
        let mut line = format!("{{\"time\":\"{}\",\"teams\":[", format_date(day));
        for (t, team) in teams.iter().enumerate() {
            line.push_str(if t == 0 { "[" } else { ",[" });
            for (k, &p) in team.iter().enumerate() {
                if k > 0 {
                    line.push(',');
                }
                line.push('"');
                line.push_str(&true_skills[p].0);
                line.push('"');
            }
            line.push(']');
        }
        line.push_str("],\"placements\":[");
        line.push_str(&join(&placements));
        line.push(']');
        if let [a, b] = performance[..] {
            let players = (teams[0].len() + teams[1].len()) as f64;
            let scores = first_to_ten(&placements, a - b, params.performance_sd * players.sqrt());
            line.push_str(",\"scores\":[");
            line.push_str(&join(&scores));
            line.push(']');
        }
        line.push_str("}\n");
        jsonl.push_str(&line);
    }
    SyntheticHistory { jsonl, true_skills }
}

/// Placements by performance, highest first; with two teams, a gap below `draw_margin` ties.
fn place(performance: &[f64], draw_margin: f64) -> Vec<u32> {
    if let [a, b] = performance[..]
        && (a - b).abs() < draw_margin
    {
        return vec![1, 1];
    }
    let mut order: Vec<usize> = (0..performance.len()).collect();
    order.sort_by(|&x, &y| performance[y].total_cmp(&performance[x]));
    let mut placements = vec![0; performance.len()];
    for (rank, &team) in order.iter().enumerate() {
        placements[team] = rank as u32 + 1;
    }
    placements
}

/// Illustrative scores of a two-team match played to ten points, agreeing with its
/// `placements`: a tie is 9–9; otherwise the winner has 10 and the loser the fewer, the wider
/// the performance `gap` (every third of `spread` costs a point). Consumers may ignore scores;
/// `replay` does.
fn first_to_ten(placements: &[u32], gap: f64, spread: f64) -> [u32; 2] {
    let lost_by = 1.0 + (gap.abs() * 3.0 / spread).floor().min(9.0);
    let loser = (10.0 - lost_by) as u32;
    match placements {
        [1, 2] => [10, loser],
        [2, 1] => [loser, 10],
        _ => [9, 9],
    }
}

fn join(values: &[u32]) -> String {
    values
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::history::History;

    fn small() -> SyntheticParams {
        SyntheticParams {
            matches: 300,
            players: 20,
            days: 10,
            ..SyntheticParams::fixture()
        }
    }

    #[test]
    fn the_generator_is_a_function_of_its_parameters() {
        assert_eq!(generate(&small()), generate(&small()));
        let other = generate(&SyntheticParams { seed: 8, ..small() });
        assert_ne!(generate(&small()).jsonl, other.jsonl);
    }

    #[test]
    fn the_output_parses_as_a_history_with_every_shape() {
        let g = generate(&small());
        let h = History::parse(&g.jsonl).unwrap();
        assert_eq!(h.matches.len(), 300);
        assert!(h.player_count() <= 20);
        let sizes: Vec<u32> = h.matches.iter().map(|m| m.teams).collect();
        assert!(sizes.contains(&2) && (sizes.contains(&3) || sizes.contains(&4)));
        assert!(h.team_ends.windows(2).any(|w| w[1] - w[0] == 2), "no 2v2");
        // Days run from the start date, in order, over `days` days.
        let first = parse_date("2021-01-04").unwrap();
        assert_eq!(h.matches[0].day, first);
        assert_eq!(h.matches[299].day, first + 9);
        // Ties happen, in two-team matches only.
        let ties = g.jsonl.matches("\"placements\":[1,1]}").count()
            + g.jsonl.matches("\"placements\":[1,1],").count();
        assert!(ties > 0, "no ties in 300 matches");
    }

    #[test]
    fn the_noise_is_roughly_standard_normal() {
        let mut rng = SplitMix64(1);
        let n = 20_000;
        let draws: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let mean = draws.iter().sum::<f64>() / f64::from(n);
        let var = draws.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
    }

    #[test]
    fn scores_agree_with_placements() {
        assert_eq!(first_to_ten(&[1, 2], 300.0, 300.0), [10, 6]);
        assert_eq!(first_to_ten(&[2, 1], -11.0, 300.0), [9, 10]);
        assert_eq!(first_to_ten(&[2, 1], -5000.0, 300.0), [0, 10]);
        assert_eq!(first_to_ten(&[1, 1], 3.0, 300.0), [9, 9]);
        assert_eq!(place(&[1.0, 5.0], 10.0), vec![1, 1]);
        assert_eq!(place(&[1.0, 50.0], 10.0), vec![2, 1]);
        assert_eq!(place(&[1.0, 50.0, 20.0], 100.0), vec![3, 1, 2]);
    }
}
