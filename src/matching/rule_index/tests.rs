//! The compact rule values against the reference definition on tickets: intersect masks past
//! the interned values and their rebuilt tables, and the attributes a match reports.

use super::*;
use crate::matching::test_util::solo;

fn with(t: Ticket, key: &str, value: AttributeValue) -> Ticket {
    let mut t = t;
    t.attributes.insert(key.into(), value);
    t
}

fn tags(n: std::ops::Range<usize>) -> AttributeValue {
    let mut v: Vec<String> = n.map(|i| format!("v{i:03}")).collect();
    v.sort();
    AttributeValue::Tags(v)
}

#[test]
fn intersect_masks_stay_exact_past_the_interned_values() {
    let rules = vec![MatchRule::new(RuleKind::Intersect, "maps")];
    let mut index = RuleIndex::new(&rules);
    // Fill the 63 bits, then two tickets sharing only values past them.
    let tickets = [
        with(solo("a", 1500.0, 0.0), "maps", tags(0..63)),
        with(solo("b", 1500.0, 0.0), "maps", tags(100..102)),
        with(solo("c", 1500.0, 0.0), "maps", tags(101..103)),
        with(solo("d", 1500.0, 0.0), "maps", tags(200..201)),
    ];
    let mut slots: Vec<crate::matching::candidates::Slot> = Vec::new();
    for (i, t) in tickets.iter().enumerate() {
        index.store(i, t);
        slots.push(crate::matching::candidates::Slot {
            ticket: Some(Box::new(t.clone())),
            generation: 1,
        });
    }
    let cand = |i: u32| Cand {
        slot: i,
        size: 1,
        key: 1500.0,
        dev: 50.0,
        wait: 0.0,
        lim: crate::matching::MatchingConfig::default().limits(0.0),
        regions: 1,
    };
    let cands: Vec<Cand> = (0..4).map(cand).collect();
    let values = index.tick_values(0..4);
    let checker = Checker::new(&index, &slots, &values);
    assert!(checker.pair_ok(&cands, 1, 2), "share v101");
    assert!(!checker.pair_ok(&cands, 1, 3));
    assert!(!checker.pair_ok(&cands, 0, 1));
    for (a, b) in [(0, 1), (1, 2), (1, 3), (2, 3)] {
        let want = holds(
            &rules,
            &[
                vec![Member::of(&tickets[a], 0.0)],
                vec![Member::of(&tickets[b], 0.0)],
            ],
        );
        assert_eq!(checker.pair_ok(&cands, a, b), want);
    }
    // The compact attributes agree with the tickets' where the common tags are interned,
    // and defer to the tickets where they may not be.
    assert_eq!(
        index.attributes_of(&values, &[0, 1]),
        Some(match_attributes(&rules, &[&tickets[0], &tickets[1]]))
    );
    assert_eq!(index.attributes_of(&values, &[1, 2]), None);
    assert_eq!(
        match_attributes(&rules, &[&tickets[1], &tickets[2]])["maps"],
        tags(101..102)
    );
}

#[test]
fn match_attributes_report_the_common_values() {
    let rules = vec![
        MatchRule {
            groups: vec![vec!["xbox".into(), "playstation".into()]],
            ..MatchRule::new(RuleKind::Equal, "platform")
        },
        MatchRule::new(RuleKind::Intersect, "maps"),
        MatchRule::new(RuleKind::Equal, "mode"),
    ];
    let text = |s: &str| AttributeValue::Text(s.into());
    let a = with(
        with(
            with(solo("a", 1.0, 0.0), "platform", text("xbox")),
            "maps",
            tags(0..3),
        ),
        "mode",
        text("ranked"),
    );
    let b = with(
        with(
            with(solo("b", 1.0, 0.0), "platform", text("playstation")),
            "maps",
            tags(2..5),
        ),
        "mode",
        text("ranked"),
    );
    let got = match_attributes(&rules, &[&a, &b]);
    let mut index = RuleIndex::new(&rules);
    index.store(0, &a);
    index.store(1, &b);
    // In candidate order: the second candidate is slot 0.
    let values = index.tick_values([1, 0].into_iter());
    assert_eq!(index.attributes_of(&values, &[1, 0]).as_ref(), Some(&got));
    assert_eq!(got["mode"], text("ranked"));
    assert_eq!(got["maps"], tags(2..3));
    assert_eq!(
        got["platform"],
        AttributeValue::Tags(vec!["playstation".into(), "xbox".into()])
    );
    assert!(holds(
        &rules,
        &[vec![Member::of(&a, 0.0)], vec![Member::of(&b, 0.0)]]
    ));
}

/// A ticket whose `maps` tags are `maps`.
fn mapped(id: &str, maps: &[&str]) -> Ticket {
    let mut v: Vec<String> = maps.iter().map(|m| (*m).to_owned()).collect();
    v.sort();
    with(solo(id, 1500.0, 0.0), "maps", AttributeValue::Tags(v))
}

/// A pool's slots and rule index, driven as the pool drives them.
struct Stored {
    index: RuleIndex,
    slots: Vec<crate::matching::candidates::Slot>,
}

impl Stored {
    fn new(rules: &[MatchRule]) -> Stored {
        Stored {
            index: RuleIndex::new(rules),
            slots: Vec::new(),
        }
    }

    fn put(&mut self, slot: usize, t: Ticket) {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, Default::default);
        }
        self.index.store(slot, &t);
        let s = &mut self.slots[slot];
        s.ticket = Some(Box::new(t));
        s.generation = s.generation.wrapping_add(1);
    }

    fn take(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.ticket = None;
        s.generation = s.generation.wrapping_add(1);
        self.index.release(slot);
    }

    /// What a tick does first: the index compacts with the tickets still waiting.
    fn compact(&mut self) {
        let waiting = self.slots.iter().filter(|s| s.occupied()).count();
        self.index.compact(&self.slots, waiting);
    }

    /// The `maps` mask of the ticket in `slot`.
    fn mask(&self, slot: usize) -> u64 {
        self.index.tags[slot]
    }

    /// For every pair of the tickets in `live`: the compact check answers as [`holds`] does on
    /// the tickets, and the compact attributes, where they do not defer to the tickets, are
    /// [`match_attributes`].
    fn assert_agrees_with_the_tickets(&self, live: &[usize]) {
        let rules = &self.index.rules;
        let values = self.index.tick_values(live.iter().copied());
        let cands: Vec<Cand> = live
            .iter()
            .map(|&s| Cand {
                slot: s as u32,
                size: 1,
                key: 1500.0,
                dev: 50.0,
                wait: 0.0,
                lim: crate::matching::MatchingConfig::default().limits(0.0),
                regions: 1,
            })
            .collect();
        let checker = Checker::new(&self.index, &self.slots, &values);
        let ticket = |c: usize| self.slots[live[c]].ticket().unwrap();
        for a in 0..live.len() {
            for b in (0..live.len()).filter(|&b| b != a) {
                let (ta, tb) = (ticket(a), ticket(b));
                let teams = [vec![Member::of(ta, 0.0)], vec![Member::of(tb, 0.0)]];
                assert_eq!(
                    checker.pair_ok(&cands, a, b),
                    holds(rules, &teams),
                    "{} and {}",
                    ta.id,
                    tb.id
                );
                if let Some(got) = self.index.attributes_of(&values, &[a, b]) {
                    assert_eq!(got, match_attributes(rules, &[ta, tb]));
                }
            }
        }
    }
}

#[test]
fn values_that_left_the_pool_give_their_bits_to_fresh_ones() {
    let mut pool = Stored::new(&[MatchRule::new(RuleKind::Intersect, "maps")]);
    // Round after round, tickets with values no other ticket uses come and go, one tick each.
    for round in 0..3 {
        for i in 0..100 {
            let id = format!("j{round}-{i}");
            pool.put(i, mapped(&id, &[&format!("junk-{round}-{i:03}")]));
        }
        for i in 0..100 {
            pool.take(i);
        }
        pool.compact();
    }
    let fresh = [
        mapped("a", &["dust", "nuke"]),
        mapped("b", &["inferno", "nuke"]),
        mapped("c", &["inferno"]),
        mapped("d", &["vertigo"]),
    ];
    for (slot, t) in fresh.into_iter().enumerate() {
        pool.put(slot, t);
    }
    for slot in 0..4 {
        assert_eq!(
            pool.mask(slot) & OVERFLOW,
            0,
            "slot {slot}: a fresh value has a bit of its own"
        );
    }
    assert!(pool.index.tag_names[0].len() <= 5, "only live values");
    pool.assert_agrees_with_the_tickets(&[0, 1, 2, 3]);
}

#[test]
fn live_overflowing_values_get_the_bits_of_departed_ones_once_enough_tickets_left() {
    let mut pool = Stored::new(&[MatchRule::new(RuleKind::Intersect, "maps")]);
    // 70 junk values fill the table (the last 7 overflow), then two tickets share a value
    // past it.
    for i in 0..70 {
        pool.put(i, mapped(&format!("j{i}"), &[&format!("junk-{i:03}")]));
    }
    pool.put(70, mapped("late-1", &["late", "later"]));
    pool.put(71, mapped("late-2", &["late"]));
    pool.put(72, mapped("junk-keeper", &["junk-000"]));
    assert_eq!(pool.mask(70), OVERFLOW);
    // Fewer departures than the spacing: the table is not looked at yet.
    for i in 1..40 {
        pool.take(i);
    }
    pool.compact();
    assert_eq!(pool.mask(70), OVERFLOW);
    pool.assert_agrees_with_the_tickets(&[0, 40, 70, 71, 72]);
    for i in (0..70).filter(|&i| i == 0 || i >= 40) {
        pool.take(i);
    }
    pool.compact();
    for slot in [70, 71, 72] {
        assert_eq!(pool.mask(slot) & OVERFLOW, 0, "slot {slot}");
    }
    assert_ne!(pool.mask(70) & pool.mask(71), 0, "they share a bit");
    assert_eq!(pool.mask(71) & pool.mask(72), 0);
    assert_eq!(
        pool.index.tag_names[0],
        ["late", "junk-000", "later"],
        "the most held values first"
    );
    pool.assert_agrees_with_the_tickets(&[70, 71, 72]);
}
