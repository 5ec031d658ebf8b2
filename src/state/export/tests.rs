//! The export order against a state on an in-memory store: pages after a cursor, every player
//! once, with players rated and erased between pages and while the order is built.

use std::collections::BTreeSet;

use super::*;

fn id(s: &str) -> PlayerId {
    PlayerId::new(s)
}

/// Rates `players` in the 1v1 pool (their first record there, for a new one).
fn rate(state: &State, players: &[&str]) {
    let queue = state.queue("queue", "1v1").unwrap();
    let records = players
        .iter()
        .map(|p| (id(p), state.initial_record(&queue)))
        .collect();
    state.apply_admin(&State::admin_entry("test:rate".into(), "1v1", records));
}

fn erase(state: &State, player: &str) {
    state.erase_player(&id(player)).unwrap().unwrap();
}

/// Every page of `limit` until an empty one, each after the last id of the one before, with
/// `between` run before each page after the first (its index given).
fn pages(state: &State, limit: usize, mut between: impl FnMut(usize)) -> Vec<Vec<PlayerId>> {
    let queue = state.queue("queue", "1v1").unwrap();
    let mut pages = Vec::new();
    let mut after: Option<PlayerId> = None;
    loop {
        if !pages.is_empty() {
            between(pages.len());
        }
        let page = state.export_ids(&queue, after.as_ref(), limit);
        if page.is_empty() {
            return pages;
        }
        after = page.last().cloned();
        pages.push(page);
    }
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i:03}")).collect()
}

#[test]
fn pages_give_every_player_once_in_id_order() {
    let state = crate::state::test_util::state();
    let all = names(25);
    rate(&state, &all.iter().map(String::as_str).collect::<Vec<_>>());
    // A player rated in another pool only is not in this one's export.
    let queue_2v2 = state.queue("queue", "2v2").unwrap();
    state.apply_admin(&State::admin_entry(
        "test:rate".into(),
        "2v2",
        vec![(id("elsewhere"), state.initial_record(&queue_2v2))],
    ));
    let got: Vec<PlayerId> = pages(&state, 7, |_| {}).concat();
    let want: Vec<PlayerId> = all.iter().map(|p| id(p)).collect();
    assert_eq!(got, want);
    // No limit: all of them after the cursor.
    let queue = state.queue("queue", "1v1").unwrap();
    assert_eq!(
        state
            .export_ids(&queue, Some(&id("p020")), usize::MAX)
            .len(),
        4
    );
}

#[test]
fn players_rated_or_erased_between_pages_are_exported_as_they_are_when_their_page_is_read() {
    let state = crate::state::test_util::state();
    let all = names(30);
    rate(&state, &all.iter().map(String::as_str).collect::<Vec<_>>());
    let got: Vec<PlayerId> = pages(&state, 8, |page| match page {
        1 => {
            // Ahead of the cursor (p007): one new, one erased; behind it: one new, one erased.
            rate(&state, &["p0155", "p0005"]);
            erase(&state, "p020");
            erase(&state, "p003");
        }
        2 => {
            // Erased and rated again ahead of the cursor: exported once.
            erase(&state, "p025");
            rate(&state, &["p025", "zz-last"]);
        }
        _ => {}
    })
    .concat();
    let unique: BTreeSet<&PlayerId> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "a player exported twice: {got:?}");
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in id order: {got:?}");
    let mut want: BTreeSet<PlayerId> = all.iter().map(|p| id(p)).collect();
    want.remove(&id("p020"));
    want.extend([id("p0155"), id("zz-last")]);
    // p003 and p0005 were behind the cursor when they changed: the export had passed them.
    assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want);
    assert!(got.contains(&id("p003")), "read before its erasure");
}

#[test]
fn changes_made_while_the_order_is_built_are_not_lost() {
    let state = crate::state::test_util::state();
    let all = names(10);
    rate(&state, &all.iter().map(String::as_str).collect::<Vec<_>>());
    let during = state.clone();
    // Between the walk and its install: one the walk missed, one it saw, erased, and one it
    // saw, erased and rated again.
    state.inner.hooks.export_walked.set(move || {
        rate(&during, &["p0035"]);
        erase(&during, "p006");
        erase(&during, "p008");
        rate(&during, &["p008"]);
    });
    let got: Vec<PlayerId> = pages(&state, 4, |_| {}).concat();
    let mut want: Vec<PlayerId> = all.iter().map(|p| id(p)).collect();
    want.retain(|p| p != &id("p006"));
    want.push(id("p0035"));
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn the_order_is_kept_only_while_exports_read_it() {
    let state = crate::state::test_util::state();
    rate(&state, &["a", "b", "c"]);
    let queue = state.queue("queue", "1v1").unwrap();
    let kept = |state: &State| {
        matches!(
            *state.inner.exports.lock("1v1").unwrap(),
            ExportIds::Ready { .. }
        )
    };
    assert!(!kept(&state), "nothing kept before an export");
    assert_eq!(state.export_ids(&queue, None, 2), [id("a"), id("b")]);
    assert!(kept(&state));
    for _ in 1..IDLE_SWEEPS {
        state.drop_idle_export_orders();
    }
    // A page read resets the count.
    assert_eq!(state.export_ids(&queue, Some(&id("b")), 2), [id("c")]);
    for _ in 1..IDLE_SWEEPS {
        state.drop_idle_export_orders();
    }
    assert!(kept(&state));
    state.drop_idle_export_orders();
    assert!(!kept(&state), "dropped after {IDLE_SWEEPS} idle sweeps");
    // Changes while none is kept are not noted anywhere; the next export walks again.
    rate(&state, &["d"]);
    erase(&state, "a");
    assert_eq!(
        state.export_ids(&queue, None, 10),
        [id("b"), id("c"), id("d")]
    );
}
