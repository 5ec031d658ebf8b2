//! A repeated report of a match: answered from the acknowledgement only when it reports what
//! was applied.

use std::collections::BTreeMap;

use super::validate_scored;
use crate::ids::MatchId;
use crate::records::ResultAck;
use crate::rejection::{MatchRefusal, Rejection};

/// Checks a repeated report of a match whose result `ack` acknowledges: the shape of its
/// `placements` and `team_scores` as for a first report (INVALID_ARGUMENT naming the field),
/// then that they are the ones applied (a different outcome is refused, naming the field
/// that differs: the result stays as first applied). An acknowledgement that kept no report
/// (written before it was kept) passes any repeat.
pub fn check_repeat(
    match_id: &MatchId,
    ack: &ResultAck,
    placements: &[u32],
    team_scores: &[f64],
) -> Result<(), Rejection> {
    let Some(applied) = &ack.report else {
        return Ok(());
    };
    let teams = vec![Vec::new(); applied.placements.len()];
    validate_scored(&teams, placements, team_scores, &BTreeMap::new(), &[])?;
    let field = if applied.placements != placements {
        "placements"
    } else if applied.team_scores != team_scores {
        "team_scores"
    } else {
        return Ok(());
    };
    Err(Rejection::for_match(
        match_id,
        MatchRefusal::OtherReport {
            field,
            applied: if applied.team_scores.is_empty() {
                format!("placements {:?}", applied.placements)
            } else {
                format!(
                    "placements {:?} and team_scores {:?}",
                    applied.placements, applied.team_scores
                )
            },
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::ReportDigest;

    /// A repeated report passes only with the applied outcome; one malformed is refused as a first
    /// report would be; an acknowledgement that kept no report passes any repeat.
    #[test]
    fn a_repeated_report_must_give_the_applied_outcome() {
        let id = MatchId::new("m1");
        let ack = |report| ResultAck {
            queue: "2v2".into(),
            changes: Vec::new(),
            report,
        };
        let applied = ack(Some(ReportDigest {
            placements: vec![2, 1],
            team_scores: vec![3.0, 16.0],
        }));
        assert_eq!(check_repeat(&id, &applied, &[2, 1], &[3.0, 16.0]), Ok(()));
        let refused = |placements: &[u32], scores: &[f64]| match check_repeat(
            &id, &applied, placements, scores,
        ) {
            Err(Rejection::Match {
                refusal: MatchRefusal::OtherReport { field, applied },
                ..
            }) => (field.to_string(), applied),
            Err(Rejection::Invalid(e)) => (format!("invalid {}", e.field), String::new()),
            other => panic!("{placements:?} {scores:?}: {other:?}"),
        };
        let told = "placements [2, 1] and team_scores [3.0, 16.0]".to_string();
        assert_eq!(
            refused(&[1, 2], &[3.0, 16.0]),
            ("placements".into(), told.clone())
        );
        assert_eq!(refused(&[1, 1], &[3.0, 16.0]).0, "placements");
        assert_eq!(refused(&[2, 1], &[]), ("team_scores".into(), told.clone()));
        assert_eq!(refused(&[2, 1], &[16.0, 3.0]).0, "team_scores");
        assert_eq!(refused(&[], &[3.0, 16.0]).0, "invalid placements");
        assert_eq!(refused(&[2, 3], &[]).0, "invalid placements[1]");
        assert_eq!(
            refused(&[2, 1], &[f64::NAN, 1.0]).0,
            "invalid team_scores[0]"
        );
        let unkept = ack(None);
        assert_eq!(check_repeat(&id, &unkept, &[1, 2], &[]), Ok(()));
        assert_eq!(check_repeat(&id, &unkept, &[], &[]), Ok(()));
    }
}
