//! Checks that the published figures of `docs/replay-results.md` are reproduced on the real ATP
//! histories, which are not in the repository.
//!
//! ```sh
//! cargo run --release --example replay_atp [-- DATA_DIR]
//! ```
//!
//! `DATA_DIR` holds `atp_singles_2000_2014.jsonl` and `atp_doubles_2000_2014.jsonl`: the first
//! argument, else the `ATP_DATA_DIR` environment variable, else `../shared/data` next to the
//! repository. For each table of the document marked `<!-- replay-atp: file=... -->`, it runs
//! what `matchmaker replay FILE --system all --score-from DATE --reference REF.toml --baseline
//! REF` runs (`tools::sim::replay_reports`), once as is and once with `--tune --calibrate`, where
//! REF is the marker's `baseline`: our plain Elo K = 32 (`elo-k32`, or `elo-k32-mean` with the
//! mean team for doubles), whose predictions are the best peer's. It compares every cell with
//! the published value: numbers within one unit of their last printed digit, the paired
//! difference and its interval likewise, tuned parameters exactly. Rows of the Python peers
//! (`peer: ...`, from `scripts/peers_replay.py`) are reported, not re-run. It also checks the
//! document's claim: the best of ours has a lower log loss than the best peer, its interval
//! against it is entirely below zero, and its ECE is at most 0.015.
//!
//! Exit status: 0 when everything is reproduced, 1 when a figure differs, 2 when the data or the
//! document cannot be read (the message names the missing path).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use matchmaker::sim::bootstrap::PairedDifference;
use matchmaker::tools::sim::{ReplayArgs, ReplayReport, replay_reports};

/// Where the data is looked for when neither an argument nor `ATP_DATA_DIR` names it.
const DEFAULT_DATA_DIR: &str = "../shared/data";

/// The `--reference` files a marker's `baseline` may name: plain Elo K = 32 (no rounding, no
/// inflation), with White's √N team or with the mean team of the peer's Elo.
const REFERENCES: [(&str, &str); 2] = [
    (
        "elo-k32",
        "system = \"elo\"\nk = 32.0\nround_adjustment = false\ninflation_per_win = 0.0\n",
    ),
    (
        "elo-k32-mean",
        "system = \"elo\"\nk = 32.0\nround_adjustment = false\ninflation_per_win = 0.0\n\
         normalization_exponent = 1.0\n",
    ),
];

/// Largest ECE the document's headline claim allows.
const CLAIM_ECE: f64 = 0.015;

/// One marked table of the document.
struct Figure {
    /// Line of the marker (1-based).
    line: usize,
    file: String,
    score_from: String,
    matches: usize,
    players: usize,
    scored: u64,
    /// The `--reference` row every other row is compared with.
    baseline: String,
    rows: Vec<Row>,
}

/// One row: the system's label, its numbers, the paired difference with its interval (or
/// `baseline`), and parameters as printed.
struct Row {
    line: usize,
    label: String,
    numbers: [String; 6],
    difference: String,
    parameters: String,
}

const COLUMNS: [&str; 6] = [
    "log loss",
    "Brier",
    "accuracy",
    "ECE",
    "own log loss",
    "own ECE",
];

fn main() -> ExitCode {
    let started = Instant::now();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data_dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("ATP_DATA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| repo.join(DEFAULT_DATA_DIR));
    let doc = repo.join("docs/replay-results.md");
    let figures = match std::fs::read_to_string(&doc)
        .map_err(|e| format!("{}: {e}", doc.display()))
        .and_then(|text| parse_figures(&text).map_err(|e| format!("{}: {e}", doc.display())))
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("replay_atp: {e}");
            return ExitCode::from(2);
        }
    };
    for f in &figures {
        let path = data_dir.join(&f.file);
        if !path.is_file() {
            eprintln!(
                "replay_atp: {} is missing. The ATP histories are not in the repository; pass \
                 the folder that holds them as the first argument or in ATP_DATA_DIR (see \
                 docs/replay-results.md).",
                path.display()
            );
            return ExitCode::from(2);
        }
    }
    let rating_dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("replay_atp: a temporary folder: {e}");
            return ExitCode::from(2);
        }
    };
    for (name, toml) in REFERENCES {
        let path = rating_dir.path().join(format!("{name}.toml"));
        if let Err(e) = std::fs::write(&path, toml) {
            eprintln!("replay_atp: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }

    let mut failures = 0;
    for f in &figures {
        let path = data_dir.join(&f.file);
        println!(
            "{} from {} (docs/replay-results.md line {}):",
            path.display(),
            f.score_from,
            f.line
        );
        let t = Instant::now();
        let reference = rating_dir.path().join(format!("{}.toml", f.baseline));
        if !REFERENCES.iter().any(|(name, _)| *name == f.baseline) {
            eprintln!(
                "replay_atp: docs/replay-results.md line {}: unknown baseline {:?}",
                f.line, f.baseline
            );
            return ExitCode::from(2);
        }
        let measured = match measure(&path, &f.score_from, &reference, &f.baseline) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("replay_atp: {}: {e:#}", path.display());
                return ExitCode::from(2);
            }
        };
        failures += check(f, &measured);
        println!("  ({:.1} s)", t.elapsed().as_secs_f64());
    }
    let seconds = started.elapsed().as_secs_f64();
    if failures == 0 {
        println!("every published figure reproduced ({seconds:.1} s)");
        ExitCode::SUCCESS
    } else {
        println!(
            "{failures} published figure(s) not reproduced ({seconds:.1} s): rerun the commands \
             of docs/replay-results.md and update its tables"
        );
        ExitCode::from(1)
    }
}

/// The document's marked tables.
fn parse_figures(text: &str) -> Result<Vec<Figure>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut figures = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(spec) = lines[i]
            .trim()
            .strip_prefix("<!-- replay-atp:")
            .and_then(|s| s.strip_suffix("-->"))
        else {
            i += 1;
            continue;
        };
        let marker_line = i + 1;
        let fields: BTreeMap<&str, &str> = spec
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let get = |k: &str| {
            fields
                .get(k)
                .copied()
                .ok_or_else(|| format!("line {marker_line}: the marker lacks {k}="))
        };
        let number = |k: &str| -> Result<u64, String> {
            get(k)?
                .replace(',', "")
                .parse()
                .map_err(|_| format!("line {marker_line}: {k}= is not a number"))
        };
        let mut figure = Figure {
            line: marker_line,
            file: get("file")?.to_string(),
            score_from: get("score-from")?.to_string(),
            matches: number("matches")? as usize,
            players: number("players")? as usize,
            scored: number("scored")?,
            baseline: get("baseline")?.to_string(),
            rows: Vec::new(),
        };
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with('|') {
            i += 1;
        }
        // Header and separator, then the rows.
        i += 2;
        while i < lines.len() && lines[i].trim_start().starts_with('|') {
            let cells: Vec<String> = lines[i]
                .trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace(['*', '`'], ""))
                .collect();
            if cells.len() != 9 {
                return Err(format!(
                    "line {}: expected 9 cells (system, {}, vs best peer, parameters), got {}",
                    i + 1,
                    COLUMNS.join(", "),
                    cells.len()
                ));
            }
            figure.rows.push(Row {
                line: i + 1,
                label: cells[0].clone(),
                numbers: [
                    cells[1].clone(),
                    cells[2].clone(),
                    cells[3].clone(),
                    cells[4].clone(),
                    cells[5].clone(),
                    cells[6].clone(),
                ],
                difference: cells[7].clone(),
                parameters: cells[8].clone(),
            });
            i += 1;
        }
        if figure.rows.is_empty() {
            return Err(format!("line {marker_line}: no table after the marker"));
        }
        figures.push(figure);
    }
    if figures.is_empty() {
        return Err("no table is marked <!-- replay-atp: ... -->".into());
    }
    Ok(figures)
}

/// Every report of one history by the label the document uses: the systems as published and
/// the reference, then the systems tuned for calibrated predictions, each compared with the
/// reference.
fn measure(
    path: &Path,
    score_from: &str,
    reference: &Path,
    baseline: &str,
) -> anyhow::Result<BTreeMap<String, ReplayReport>> {
    let args = |tune: bool| ReplayArgs {
        systems: vec!["all".into()],
        references: vec![reference.to_path_buf()],
        score_from: Some(score_from.into()),
        tune,
        calibrate: tune,
        baseline: Some(baseline.to_string()),
        json: true,
        ..ReplayArgs::new(path.to_path_buf())
    };
    let mut out = BTreeMap::new();
    for tune in [false, true] {
        for r in replay_reports(&args(tune), &mut |_| Ok(()))? {
            out.insert(r.label(), r);
        }
    }
    Ok(out)
}

/// The `k=v k=v` list `--tune` prints.
fn chosen(r: &ReplayReport) -> Option<String> {
    Some(r.tuned.as_ref()?.printed())
}

/// A difference of exactly nothing (the baseline against itself).
fn sim_zero() -> PairedDifference {
    PairedDifference {
        baseline: String::new(),
        mean: 0.0,
        low: 0.0,
        high: 0.0,
        matches: 0,
        weeks: 0,
        resamples: 0,
    }
}

/// The three numbers of a `-0.0066 [-0.0090, -0.0042]` cell.
fn difference_cell(cell: &str) -> Option<[String; 3]> {
    let (mean, rest) = cell.split_once(" [")?;
    let (low, high) = rest.strip_suffix(']')?.split_once(", ")?;
    Some([mean.to_string(), low.to_string(), high.to_string()])
}

/// Whether `value` prints as `published` to within one unit of its last digit.
fn agrees(published: &str, value: f64) -> Option<bool> {
    let p = published.parse::<f64>().ok()?;
    let decimals = published.split_once('.').map_or(0, |(_, d)| d.len());
    let unit = 10f64.powi(-(decimals as i32));
    Some((value - p).abs() <= unit + 1e-12)
}

/// Compares one figure with the measurements; returns the number of failures.
fn check(f: &Figure, measured: &BTreeMap<String, ReplayReport>) -> usize {
    let mut failures = 0;
    let mut fail = |what: String| {
        println!("  FAIL {what}");
        failures += 1;
    };
    if let Some(r) = measured.values().next()
        && (r.matches != f.matches || r.players != f.players || r.n != f.scored)
    {
        fail(format!(
            "line {}: published {} matches, {} players, {} scored; measured {}, {}, {}",
            f.line, f.matches, f.players, f.scored, r.matches, r.players, r.n
        ));
    }
    println!(
        "  {:<36} {:>17} {:>17} {:>17} {:>17} {:>17} {:>17}",
        "system", COLUMNS[0], COLUMNS[1], COLUMNS[2], COLUMNS[3], COLUMNS[4], COLUMNS[5]
    );
    let mut best_peer = f64::INFINITY;
    for row in &f.rows {
        if row.label.starts_with("peer:")
            && let Ok(v) = row.numbers[0].parse::<f64>()
        {
            best_peer = best_peer.min(v);
        }
        let Some(m) = measured.get(&row.label) else {
            if row.label.starts_with("peer:") {
                println!("  {:<36} (Python peer, not re-run)", row.label);
            } else {
                fail(format!(
                    "line {}: no run is labelled {:?}",
                    row.line, row.label
                ));
            }
            continue;
        };
        let values = [
            m.log_loss,
            m.brier,
            m.accuracy,
            m.ece,
            m.uncalibrated.log_loss,
            m.uncalibrated.ece,
        ];
        let mut cells = Vec::new();
        for ((published, value), column) in row.numbers.iter().zip(values).zip(COLUMNS) {
            let Some(ok) = agrees(published, value) else {
                fail(format!(
                    "line {}: {column} {published:?} is not a number",
                    row.line
                ));
                continue;
            };
            let decimals = published.split_once('.').map_or(0, |(_, d)| d.len());
            cells.push(format!(
                "{published} {}{value:.prec$}",
                if ok { "= " } else { "≠ " },
                prec = decimals + 1
            ));
            if !ok {
                fail(format!(
                    "line {}: {} {column}: published {published}, measured {value:.6}",
                    row.line, row.label
                ));
            }
        }
        println!(
            "  {:<36} {}",
            row.label,
            cells
                .iter()
                .map(|c| format!("{c:>17}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        // The reference is the baseline here (its predictions are the best peer's): the
        // document's difference for it must be zero.
        let vs_baseline = if row.label == f.baseline {
            Some(sim_zero())
        } else {
            m.vs_baseline.clone()
        };
        match (difference_cell(&row.difference), &vs_baseline) {
            (Some(published), Some(d)) => {
                for (p, v) in published.iter().zip([d.mean, d.low, d.high]) {
                    if agrees(p, v) != Some(true) {
                        fail(format!(
                            "line {}: {} vs the best peer: published {}, measured {:+.4} \
                             [{:+.4}, {:+.4}]",
                            row.line, row.label, row.difference, d.mean, d.low, d.high
                        ));
                        break;
                    }
                }
            }
            (None, None) => {}
            _ => fail(format!(
                "line {}: {} vs the best peer: published {:?}, measured {:?}",
                row.line,
                row.label,
                row.difference,
                vs_baseline.as_ref().map(|d| d.mean)
            )),
        }
        if let Some(c) = chosen(m)
            && c != row.parameters
        {
            fail(format!(
                "line {}: {} parameters: published {:?}, --tune chose {c:?}",
                row.line, row.label, row.parameters
            ));
        }
    }
    for label in measured.keys() {
        if !f.rows.iter().any(|r| &r.label == label) {
            fail(format!("{label}: measured but not published"));
        }
    }
    let best = measured
        .iter()
        .filter(|(label, _)| !label.starts_with("peer:"))
        .min_by(|a, b| a.1.log_loss.total_cmp(&b.1.log_loss));
    if let Some((label, r)) = best {
        let high = r.vs_baseline.as_ref().map_or(f64::INFINITY, |d| d.high);
        let holds = r.log_loss < best_peer && high < 0.0 && r.ece <= CLAIM_ECE;
        println!(
            "  claim: best of ours {label} {:.4} (ECE {:.3}, interval up to {high:+.4}) beats the \
             best peer {best_peer:.4} outside the noise with ECE <= {CLAIM_ECE}: {}",
            r.log_loss,
            r.ece,
            if holds { "holds" } else { "FAILS" }
        );
        if !holds {
            failures += 1;
        }
    }
    failures
}
