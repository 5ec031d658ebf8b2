//! Event cursors that compare across shards. With the queues split over shards, each shard
//! writes its own event log, and a `WatchEvents` stream merges them into one, in cursor order
//! (`cluster::front::events`). A shard's cursors then come from a hybrid logical clock (Kulkarni
//! et al., "Logical Physical Clocks", 2014): the wall clock's milliseconds in the high bits, a
//! count within the millisecond, and the shard's number in the lowest four bits, so two shards
//! never give the same cursor and a cursor says roughly when its event was written. A shard
//! also tells how far its log is closed: no event it writes later takes a cursor at or below
//! [`EventClock::closed`], which lets the merge pass another shard's event once every shard is
//! closed past it.
//!
//! Without shards the cursors stay 1, 2, 3, ...

/// The bits below the milliseconds: a count within the millisecond, then the shard.
const MS_SHIFT: u32 = 20;
/// The bits of the shard's number.
const SHARD_BITS: u32 = 4;

/// How many shards cursors can tell apart.
pub const MAX_SHARDS: usize = 1 << SHARD_BITS;

/// How far ahead of its own clock a new owner of a shard starts its cursors, so that they stay
/// above what an earlier owner whose clock ran ahead (by less than this) said was closed. The
/// clocks are Redis's as each owner reads it (a reading runs ahead by at most its round trip),
/// and the new owner starts a lease after the old one last could say anything.
pub const TAKEOVER_LEAD_MS: u64 = 250;

/// One shard's event clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventClock {
    /// The shard's number (below [`MAX_SHARDS`]).
    shard: u64,
    /// The highest milliseconds used so far: a clock that steps back never gives a cursor
    /// below what was closed.
    floor_ms: u64,
}

impl EventClock {
    /// Shard number `shard`'s clock for an owner starting at `now_ms`, after cursor `last`.
    #[must_use]
    pub fn new(shard: usize, now_ms: u64, last: u64) -> Self {
        Self {
            shard: (shard % MAX_SHARDS) as u64,
            floor_ms: (now_ms + TAKEOVER_LEAD_MS).max(last >> MS_SHIFT),
        }
    }

    fn advance(&mut self, now_ms: u64) -> u64 {
        self.floor_ms = self.floor_ms.max(now_ms);
        self.floor_ms << MS_SHIFT
    }

    /// The cursor of the next event at `now_ms`, after `last`: above both, ending in the
    /// shard's number.
    pub fn next(&mut self, last: u64, now_ms: u64) -> u64 {
        let base = last.saturating_add(1).max(self.advance(now_ms));
        let mask = (1u64 << SHARD_BITS) - 1;
        let up = (self.shard + (1 << SHARD_BITS) - (base & mask)) & mask;
        base + up
    }

    /// At `now_ms`, after cursor `last`: the highest cursor no later event will take.
    pub fn closed(&mut self, last: u64, now_ms: u64) -> u64 {
        last.max(self.advance(now_ms).saturating_sub(1))
    }
}

/// The wall clock in milliseconds since the Unix epoch.
#[must_use]
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_increase_end_in_the_shard_and_follow_the_clock() {
        let mut eu = EventClock::new(3, 5_000, 0);
        let first = eu.next(0, 5_000);
        assert_eq!(first & 0xF, 3);
        assert_eq!(
            first >> MS_SHIFT,
            5_000 + TAKEOVER_LEAD_MS,
            "a new owner starts ahead"
        );
        let mut last = first;
        for now in [5_000, 5_000, 6_000, 6_000, 7_000] {
            let c = eu.next(last, now);
            assert!(c > last);
            assert_eq!(c & 0xF, 3);
            last = c;
        }
        let later = eu.next(last, 9_000);
        assert_eq!(
            later >> MS_SHIFT,
            9_000,
            "the clock caught up with the lead"
        );
        // Two shards never give the same cursor, even in the same millisecond after the same
        // last cursor.
        let mut home = EventClock::new(0, 9_000, 0);
        let mut us = EventClock::new(1, 9_000, 0);
        assert_ne!(home.next(later, 12_000), us.next(later, 12_000));
    }

    #[test]
    fn nothing_later_takes_a_cursor_at_or_below_what_was_closed_even_if_the_clock_steps_back() {
        let mut clock = EventClock::new(2, 10_000, 0);
        let mut last = clock.next(0, 11_000);
        let closed = clock.closed(last, 20_000);
        assert!(closed >= last);
        // The wall clock steps back ten seconds.
        for now in [10_000, 10_001, 20_000] {
            last = clock.next(last, now);
            assert!(last > closed, "{last} after {closed} closed");
        }
        // A new owner whose clock is a little behind the old one's, even before it read the
        // old one's last cursor.
        let mut next_owner = EventClock::new(2, 19_800, 0);
        assert!(next_owner.next(0, 19_800) > closed);
    }
}
