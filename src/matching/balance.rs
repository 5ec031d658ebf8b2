//! Splitting one candidate group of tickets into balanced teams: parties stay whole, every team
//! gets exactly `team_size` players and meets the role minimums.
//!
//! Balance means the smallest spread (strongest minus weakest team strength, strength = sum of
//! member means); the caller then asks the injected model for the real win probabilities.
//! Small groups (≤ [`EXACT_MAX_UNITS`] tickets, ≤ 4 teams) get an exact search (a Gray-code walk
//! over subsets for two teams without roles, a pruned depth-first search otherwise); larger ones a
//! Karmarkar-Karp-style heuristic: strongest-first greedy into the weakest team with room (the
//! differencing idea of always offsetting the largest remaining number), then pairwise swap
//! descent between teams. Plain KK differencing ignores team capacities and party sizes, which
//! this variant respects. The heuristic's fill looks at strength alone; when it leaves a team
//! short of a role, exchanges seat the roles (each one filling as many empty seats as any
//! exchange can, as many exchanges as it takes) and the swap descent runs again among the
//! exchanges that keep every team's roles. Pure functions, no allocation beyond the result and
//! small scratch.

use super::config::RoleRequirement;

/// Groups up to this many tickets are split exactly (2^11 = 2048 leaves for two teams).
pub const EXACT_MAX_UNITS: usize = 12;

/// One ticket as the balancer sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    /// Players on the ticket.
    pub size: u32,
    /// Sum of its members' means.
    pub strength: f64,
    /// Per player, a bit set over the queue's roles (bit i = `roles[i]`) it can fill; may be
    /// empty when the queue has no roles.
    pub role_masks: Vec<u64>,
}

/// Splits `units` into `teams` teams of `team_size` players each, returning unit indices per
/// team, or `None` if no split keeps parties whole and satisfies the roles (for the heuristic:
/// if it found none).
#[must_use]
pub fn split(
    units: &[Unit],
    teams: u32,
    team_size: u32,
    roles: &[RoleRequirement],
) -> Option<Vec<Vec<usize>>> {
    split_where(units, teams, team_size, roles, None)
}

/// Which splits the match rules allow, unit indices per team.
pub type Allowed<'a> = &'a mut dyn FnMut(&[Vec<usize>]) -> bool;

/// [`split`] among the splits `allowed` accepts too (the match rules that look at each team):
/// the most balanced such split, not the most balanced split if `allowed` refuses it, so a
/// group that some split of it allows is never refused for the one it does not.
pub fn split_where(
    units: &[Unit],
    teams: u32,
    team_size: u32,
    roles: &[RoleRequirement],
    mut allowed: Option<Allowed<'_>>,
) -> Option<Vec<Vec<usize>>> {
    let t = teams as usize;
    let total: u32 = units.iter().map(|u| u.size).sum();
    if total != teams * team_size {
        return None;
    }
    if units.len() <= EXACT_MAX_UNITS && t == 2 && roles.is_empty() && team_size > 1 {
        return exact_two(units, team_size, allowed);
    }
    let mut legal = |split: &[Vec<usize>]| {
        split.iter().all(|team| roles_ok(units, team, roles))
            && allowed.as_mut().is_none_or(|allowed| allowed(split))
    };
    if team_size == 1 {
        // Free-for-all: every ticket is its own team.
        let out: Vec<Vec<usize>> = (0..units.len()).map(|i| vec![i]).collect();
        return legal(&out).then_some(out);
    }
    if units.len() <= EXACT_MAX_UNITS && t <= 4 {
        exact(units, t, team_size, &mut legal)
    } else {
        heuristic(units, t, team_size, roles, &mut legal)
    }
}

/// Strongest minus weakest team strength.
#[must_use]
pub fn spread(units: &[Unit], split: &[Vec<usize>]) -> f64 {
    let sums = split
        .iter()
        .map(|team| team.iter().map(|&u| units[u].strength).sum::<f64>());
    let (lo, hi) = sums.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), s| {
        (lo.min(s), hi.max(s))
    });
    hi - lo
}

/// The two teams `mask` (bit i − 1 set: unit i with unit 0) makes.
fn two_teams(n: usize, mask: u32) -> Vec<Vec<usize>> {
    let mut a = vec![0];
    let mut b = Vec::with_capacity(n / 2);
    for i in 1..n {
        if mask >> (i - 1) & 1 == 1 {
            a.push(i);
        } else {
            b.push(i);
        }
    }
    vec![a, b]
}

/// Exact split into two teams without roles: walks every subset holding unit 0 in Gray-code
/// order, so each step updates the side's size and strength in O(1) (at most 2^11 steps).
/// Only a split more balanced than the best allowed one so far is checked against `allowed`.
fn exact_two(
    units: &[Unit],
    team_size: u32,
    mut allowed: Option<Allowed<'_>>,
) -> Option<Vec<Vec<usize>>> {
    let n = units.len();
    let total: f64 = units.iter().map(|u| u.strength).sum();
    let (mut size, mut sum) = (units[0].size, units[0].strength);
    let mut mask: u32 = 0;
    let mut best: Option<(f64, u32)> = None;
    let mut consider = |size: u32, sum: f64, mask: u32, best: &mut Option<(f64, u32)>| {
        if size == team_size {
            let d = (2.0 * sum - total).abs();
            if best.is_none_or(|(b, _)| d < b)
                && allowed
                    .as_mut()
                    .is_none_or(|allowed| allowed(&two_teams(n, mask)))
            {
                *best = Some((d, mask));
            }
        }
    };
    consider(size, sum, mask, &mut best);
    for step in 1u32..(1 << (n - 1)) {
        let bit = step.trailing_zeros();
        let u = &units[bit as usize + 1];
        mask ^= 1 << bit;
        if mask >> bit & 1 == 1 {
            size += u.size;
            sum += u.strength;
        } else {
            size -= u.size;
            sum -= u.strength;
        }
        consider(size, sum, mask, &mut best);
    }
    best.map(|(_, mask)| two_teams(n, mask))
}

struct Search<'a> {
    units: &'a [Unit],
    order: Vec<usize>,
    legal: &'a mut dyn FnMut(&[Vec<usize>]) -> bool,
    cap: u32,
    fill: Vec<u32>,
    sums: Vec<f64>,
    assign: Vec<usize>,
    best: f64,
    best_assign: Option<Vec<usize>>,
}

/// Unit indices per team, from each unit's team.
fn teams_of(assign: &[usize], t: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); t];
    for (u, &team) in assign.iter().enumerate() {
        out[team].push(u);
    }
    out
}

fn exact(
    units: &[Unit],
    t: usize,
    team_size: u32,
    legal: &mut dyn FnMut(&[Vec<usize>]) -> bool,
) -> Option<Vec<Vec<usize>>> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    // Big parties first prunes capacity early; strong first finds a good bound early.
    order.sort_by(|&a, &b| {
        units[b]
            .size
            .cmp(&units[a].size)
            .then(units[b].strength.total_cmp(&units[a].strength))
    });
    let mut s = Search {
        units,
        order,
        legal,
        cap: team_size,
        fill: vec![0; t],
        sums: vec![0.0; t],
        assign: vec![0; units.len()],
        best: f64::INFINITY,
        best_assign: None,
    };
    s.go(0);
    let assign = s.best_assign?;
    Some(teams_of(&assign, t))
}

impl Search<'_> {
    fn go(&mut self, k: usize) {
        if self.best == 0.0 {
            return;
        }
        if k == self.order.len() {
            let (lo, hi) = self
                .sums
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &s| {
                    (lo.min(s), hi.max(s))
                });
            let spread = hi - lo;
            if spread < self.best && (self.legal)(&teams_of(&self.assign, self.fill.len())) {
                self.best = spread;
                self.best_assign = Some(self.assign.clone());
            }
            return;
        }
        let u = self.order[k];
        let size = self.units[u].size;
        let mut tried_empty = false;
        for team in 0..self.fill.len() {
            if self.fill[team] + size > self.cap {
                continue;
            }
            if self.fill[team] == 0 {
                // Empty teams are interchangeable: try only one of them.
                if tried_empty {
                    continue;
                }
                tried_empty = true;
            }
            self.fill[team] += size;
            self.sums[team] += self.units[u].strength;
            self.assign[u] = team;
            self.go(k + 1);
            self.fill[team] -= size;
            self.sums[team] -= self.units[u].strength;
        }
    }
}

fn heuristic(
    units: &[Unit],
    t: usize,
    team_size: u32,
    roles: &[RoleRequirement],
    legal: &mut dyn FnMut(&[Vec<usize>]) -> bool,
) -> Option<Vec<Vec<usize>>> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| {
        units[b]
            .size
            .cmp(&units[a].size)
            .then(units[b].strength.total_cmp(&units[a].strength))
    });
    let mut fill = vec![0u32; t];
    let mut sums = vec![0.0f64; t];
    let mut assign = vec![usize::MAX; units.len()];
    for &u in &order {
        let size = units[u].size;
        let team = (0..t)
            .filter(|&team| fill[team] + size <= team_size)
            .min_by(|&a, &b| sums[a].total_cmp(&sums[b]))?;
        fill[team] += size;
        sums[team] += units[u].strength;
        assign[u] = team;
    }
    descend(units, &mut assign, &mut sums, &mut |_, _, _| true);
    let out = teams_of(&assign, t);
    if legal(&out) {
        return Some(out);
    }
    // The balanced fill looks at strength alone, so it may leave teams short of a role. Seat
    // the roles by exchanges, then balance again among the exchanges that keep every team's
    // roles.
    if !roles.is_empty() && seat_roles(units, t, roles, &mut assign, &mut sums) {
        descend(units, &mut assign, &mut sums, &mut |assign, a, b| {
            unseated(units, members(assign, assign[a]), roles) == 0
                && unseated(units, members(assign, assign[b]), roles) == 0
        });
        let out = teams_of(&assign, t);
        if legal(&out) {
            return Some(out);
        }
    }
    // The split breaks a team rule (or roles could not be seated by exchanges): the most
    // balanced split one exchange of two equally sized tickets away that keeps them all.
    let mut best: Option<(f64, Vec<Vec<usize>>)> = None;
    for a in 0..units.len() {
        for b in a + 1..units.len() {
            if assign[a] == assign[b] || units[a].size != units[b].size {
                continue;
            }
            assign.swap(a, b);
            let teams = teams_of(&assign, t);
            assign.swap(a, b);
            let d = spread(units, &teams);
            if best.as_ref().is_none_or(|(b, _)| d < *b) && legal(&teams) {
                best = Some((d, teams));
            }
        }
    }
    best.map(|(_, teams)| teams)
}

/// Swap descent: exchanges two equally sized tickets between teams while that narrows the
/// spread between those two teams (which can never widen the overall spread), among the
/// exchanges `keeps` accepts (given the assignment after the exchange and the two tickets).
fn descend(
    units: &[Unit],
    assign: &mut [usize],
    sums: &mut [f64],
    keeps: &mut dyn FnMut(&[usize], usize, usize) -> bool,
) {
    for _round in 0..8 {
        let mut improved = false;
        for a in 0..units.len() {
            for b in a + 1..units.len() {
                let (ta, tb) = (assign[a], assign[b]);
                if ta == tb || units[a].size != units[b].size {
                    continue;
                }
                let d = units[a].strength - units[b].strength;
                let before = (sums[ta] - sums[tb]).abs();
                let after = (sums[ta] - d - (sums[tb] + d)).abs();
                if after + 1e-9 >= before {
                    continue;
                }
                assign.swap(a, b);
                if keeps(assign, a, b) {
                    sums[ta] -= d;
                    sums[tb] += d;
                    improved = true;
                } else {
                    assign.swap(a, b);
                }
            }
        }
        if !improved {
            break;
        }
    }
}

/// The tickets `assign` puts on team `k`.
fn members(assign: &[usize], k: usize) -> impl Iterator<Item = usize> + '_ {
    (0..assign.len()).filter(move |&u| assign[u] == k)
}

/// Role seats a team's players leave empty (0 when they cover every role minimum).
fn unseated(
    units: &[Unit],
    members: impl Iterator<Item = usize>,
    roles: &[RoleRequirement],
) -> usize {
    let mut seats = Seats::new(roles, 1);
    for u in members {
        for &mask in &units[u].role_masks {
            if seats.full() {
                return 0;
            }
            seats.add(mask);
        }
    }
    seats.len() - seats.filled
}

/// Exchanges equally sized tickets between teams until every team covers its role minimums:
/// each exchange is the one that fills the most empty seats, the most balanced of those. Each
/// fills at least one seat, so there are at most as many exchanges as seats. With solos and
/// one role it always succeeds when the group holds enough players for the role: a team short
/// of it holds none, so swapping one of its players for a spare one of a team with more than
/// its minimum fills a seat and empties none. With several roles it is a local search and may
/// stop short. True if every seat is filled.
fn seat_roles(
    units: &[Unit],
    t: usize,
    roles: &[RoleRequirement],
    assign: &mut [usize],
    sums: &mut [f64],
) -> bool {
    let mut empty: Vec<usize> = (0..t)
        .map(|k| unseated(units, members(assign, k), roles))
        .collect();
    let seats = Seats::new(roles, t as u32).len();
    for _ in 0..seats {
        if empty.iter().all(|&e| e == 0) {
            return true;
        }
        // (seats filled, imbalance of the two teams after, a, b, empty seats of each after)
        let mut best: Option<(usize, f64, usize, usize, usize, usize)> = None;
        for a in 0..units.len() {
            for b in a + 1..units.len() {
                let (ta, tb) = (assign[a], assign[b]);
                if ta == tb || units[a].size != units[b].size || empty[ta] + empty[tb] == 0 {
                    continue;
                }
                assign.swap(a, b);
                let (ea, eb) = (
                    unseated(units, members(assign, ta), roles),
                    unseated(units, members(assign, tb), roles),
                );
                assign.swap(a, b);
                let Some(gain) = (empty[ta] + empty[tb]).checked_sub(ea + eb) else {
                    continue;
                };
                let d = units[a].strength - units[b].strength;
                let imbalance = (sums[ta] - d - (sums[tb] + d)).abs();
                if gain > 0
                    && best.is_none_or(|(g, i, ..)| gain > g || (gain == g && imbalance < i))
                {
                    best = Some((gain, imbalance, a, b, ea, eb));
                }
            }
        }
        let Some((_, _, a, b, ea, eb)) = best else {
            return false;
        };
        let (ta, tb) = (assign[a], assign[b]);
        let d = units[a].strength - units[b].strength;
        sums[ta] -= d;
        sums[tb] += d;
        assign.swap(a, b);
        (empty[ta], empty[tb]) = (ea, eb);
    }
    empty.iter().all(|&e| e == 0)
}

/// True if the players of `members` can cover every role minimum, each player filling at most
/// one required slot (bipartite matching, Kuhn's augmenting paths; teams are small).
#[must_use]
pub fn roles_ok(units: &[Unit], members: &[usize], roles: &[RoleRequirement]) -> bool {
    if roles.is_empty() {
        return true;
    }
    let mut seats = Seats::new(roles, 1);
    let players: usize = members.iter().map(|&u| units[u].role_masks.len()).sum();
    if seats.len() > players {
        return false;
    }
    for &u in members {
        for &mask in &units[u].role_masks {
            if seats.full() {
                return true;
            }
            seats.add(mask);
        }
    }
    seats.full()
}

/// The seats the role minimums make (`min_per_team × teams` per role) and a maximum matching
/// of the players added so far to them, grown one player at a time by augmenting paths
/// (Kuhn's): a player able to fill two roles still fills one seat.
#[derive(Clone, Debug, Default)]
pub struct Seats {
    /// The role (bit index) of each seat.
    role: Vec<u32>,
    /// The player (index into `players`) filling each seat, or `usize::MAX`.
    owner: Vec<usize>,
    /// The role mask of every player added.
    players: Vec<u64>,
    /// Seats filled.
    filled: usize,
    /// Seats visited by the current augmenting search.
    seen: Vec<bool>,
}

impl Seats {
    /// Empty seats for `teams` teams' role minimums.
    #[must_use]
    pub fn new(roles: &[RoleRequirement], teams: u32) -> Self {
        let role: Vec<u32> = (0u32..)
            .zip(roles)
            .flat_map(|(i, r)| std::iter::repeat_n(i, (r.min_per_team * teams) as usize))
            .collect();
        Seats {
            owner: vec![usize::MAX; role.len()],
            seen: vec![false; role.len()],
            role,
            players: Vec::new(),
            filled: 0,
        }
    }

    /// Seats in all.
    #[must_use]
    pub fn len(&self) -> usize {
        self.role.len()
    }

    /// True if there are no seats (no role minimums).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.role.is_empty()
    }

    /// True once every seat is filled.
    #[must_use]
    pub fn full(&self) -> bool {
        self.filled == self.role.len()
    }

    /// Adds a player able to fill the roles of `mask`; true if the matching grew (the player,
    /// or one it moved aside, took an empty seat).
    pub fn add(&mut self, mask: u64) -> bool {
        let p = self.players.len();
        self.players.push(mask);
        if self.full() {
            return false;
        }
        self.seen.fill(false);
        let grew = self.seat(p);
        self.filled += usize::from(grew);
        grew
    }

    /// Adds a ticket's players (their role masks); if none of them grows the matching they
    /// are taken out again and false is returned, so the seats hold only the tickets kept.
    pub fn add_ticket(&mut self, masks: &[u64]) -> bool {
        let before = self.players.len();
        let mut grew = false;
        for &m in masks {
            grew |= self.add(m);
        }
        if !grew {
            // No seat changed owner (a search that fails moves nobody).
            self.players.truncate(before);
        }
        grew
    }

    /// Augmenting path from player `p`: an empty seat it can fill, or a filled one whose owner
    /// can move to another.
    fn seat(&mut self, p: usize) -> bool {
        for s in 0..self.role.len() {
            if self.players[p] >> self.role[s] & 1 == 0 || self.seen[s] {
                continue;
            }
            self.seen[s] = true;
            let o = self.owner[s];
            if o == usize::MAX || self.seat(o) {
                self.owner[s] = p;
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn solo(strength: f64) -> Unit {
        Unit {
            size: 1,
            strength,
            role_masks: vec![u64::MAX],
        }
    }

    fn brute_spread(units: &[Unit], team_size: u32) -> f64 {
        let n = units.len();
        let mut best = f64::INFINITY;
        for mask in 0u32..(1 << n) {
            let size: u32 = (0..n)
                .filter(|i| mask >> i & 1 == 1)
                .map(|i| units[i].size)
                .sum();
            if size != team_size {
                continue;
            }
            let a: Vec<usize> = (0..n).filter(|i| mask >> i & 1 == 1).collect();
            let b: Vec<usize> = (0..n).filter(|i| mask >> i & 1 == 0).collect();
            best = best.min(spread(units, &[a, b]));
        }
        best
    }

    #[test]
    fn five_v_five_exact_split_is_as_even_as_possible() {
        // 1..=10 sums to 55, so the best split is 27 vs 28.
        let units: Vec<Unit> = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
            .map(solo)
            .to_vec();
        let s = split(&units, 2, 5, &[]).unwrap();
        assert!(s.iter().all(|t| t.len() == 5));
        assert!((spread(&units, &s) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn parties_stay_whole_and_impossible_packings_are_refused() {
        let party = |size, strength| Unit {
            size,
            strength,
            role_masks: vec![u64::MAX; size as usize],
        };
        // 3 + 3 + 4 players cannot fill two teams of five.
        assert_eq!(
            split(&[party(3, 1.0), party(3, 1.0), party(4, 1.0)], 2, 5, &[]),
            None
        );
        let units = [
            party(3, 30.0),
            party(2, 20.0),
            party(2, 22.0),
            party(3, 33.0),
        ];
        let s = split(&units, 2, 5, &[]).unwrap();
        for team in &s {
            assert_eq!(team.iter().map(|&u| units[u].size).sum::<u32>(), 5);
        }
    }

    #[test]
    fn roles_are_satisfied_or_the_split_is_refused() {
        let roles = [RoleRequirement {
            name: "healer".into(),
            min_per_team: 1,
        }];
        let healer = Unit {
            size: 1,
            strength: 10.0,
            role_masks: vec![1],
        };
        let dps = Unit {
            size: 1,
            strength: 10.0,
            role_masks: vec![0],
        };
        let units = vec![healer.clone(), healer, dps.clone(), dps];
        let s = split(&units, 2, 2, &roles).unwrap();
        for team in &s {
            assert!(team.contains(&0) || team.contains(&1));
        }
        let no_healers = vec![units[2].clone(); 4];
        assert_eq!(split(&no_healers, 2, 2, &roles), None);
    }

    #[test]
    fn a_player_able_to_fill_two_roles_takes_one_seat() {
        let role = |name: &str| RoleRequirement {
            name: name.into(),
            min_per_team: 1,
        };
        let (tank, support, damage) = (0b001, 0b010, 0b100);
        // A tank and a support for each of two teams: four seats.
        let mut seats = Seats::new(&[role("tank"), role("support")], 2);
        assert_eq!(seats.len(), 4);
        assert!(seats.add_ticket(&[tank | support]));
        assert!(seats.add_ticket(&[tank | support]));
        // Two players able to tank or support fill two seats, not all four.
        assert!(!seats.full());
        assert!(!seats.add_ticket(&[damage]));
        // Two supports fill the rest.
        assert!(seats.add_ticket(&[support]));
        assert!(seats.add_ticket(&[support]));
        assert!(seats.full());
        assert!(!seats.add_ticket(&[tank | support]));
    }

    #[test]
    fn the_most_balanced_split_the_team_rules_allow_is_taken_when_the_best_is_refused() {
        // Two speak "de" (units 0 and 2), two "en" (1 and 3); teammates must share one. The most
        // balanced split, {0, 3} against {1, 2}, is refused; {0, 2} against {1, 3} is allowed.
        let units = vec![solo(1490.0), solo(1500.0), solo(1500.0), solo(1510.0)];
        let language = ["de", "en", "de", "en"];
        let mut shares = |split: &[Vec<usize>]| {
            split
                .iter()
                .all(|team| team.iter().all(|&u| language[u] == language[team[0]]))
        };
        let s = split_where(&units, 2, 2, &[], Some(&mut shares)).unwrap();
        let mut teams: Vec<Vec<usize>> = s
            .into_iter()
            .map(|mut t| {
                t.sort_unstable();
                t
            })
            .collect();
        teams.sort();
        assert_eq!(teams, [vec![0, 2], vec![1, 3]]);
        // With roles (the exhaustive search over up to four teams) the same holds.
        let roles = [RoleRequirement {
            name: "any".into(),
            min_per_team: 1,
        }];
        assert!(split_where(&units, 2, 2, &roles, Some(&mut shares)).is_some());
        assert_eq!(split_where(&units, 2, 2, &[], Some(&mut |_| false)), None);
    }

    #[test]
    fn a_large_group_whose_balanced_fill_breaks_a_role_is_repaired_by_an_exchange() {
        // Twenty solos in two teams of ten: too many for the exhaustive search. The two
        // healers are the strongest and the fourth strongest, which the balancing fill puts on
        // one team.
        let roles = [
            RoleRequirement {
                name: "tank".into(),
                min_per_team: 1,
            },
            RoleRequirement {
                name: "healer".into(),
                min_per_team: 1,
            },
        ];
        let units: Vec<Unit> = (0..20)
            .map(|i| Unit {
                size: 1,
                strength: 2000.0 - 10.0 * f64::from(i),
                role_masks: vec![if i == 0 || i == 3 { 0b10 } else { 0b01 }],
            })
            .collect();
        let s = split(&units, 2, 10, &roles).expect("a split that keeps every role");
        for team in &s {
            assert_eq!(team.len(), 10);
            assert!(roles_ok(&units, team, &roles), "{s:?}");
        }
    }

    proptest! {
        #[test]
        fn exact_split_matches_brute_force(
            strengths in prop::collection::vec(0.0..100.0f64, 10)
        ) {
            let units: Vec<Unit> = strengths.into_iter().map(solo).collect();
            let s = split(&units, 2, 5, &[]).unwrap();
            prop_assert!((spread(&units, &s) - brute_spread(&units, 5)).abs() < 1e-9);
        }

        #[test]
        fn both_exact_searches_agree_with_parties(
            parties in prop::collection::vec((1u32..=3, 0.0..100.0f64), 1..10)
        ) {
            let mut units: Vec<Unit> = parties
                .iter()
                .map(|&(size, s)| Unit { size, strength: s * f64::from(size), role_masks: Vec::new() })
                .collect();
            // An odd player count cannot split evenly; a solo makes it even.
            let mut total: u32 = units.iter().map(|u| u.size).sum();
            if !total.is_multiple_of(2) {
                units.push(Unit { size: 1, strength: 50.0, role_masks: Vec::new() });
                total += 1;
            }
            let fast = exact_two(&units, total / 2, None);
            let full = exact(&units, 2, total / 2, &mut |_| true);
            prop_assert_eq!(fast.is_some(), full.is_some());
            if let (Some(f), Some(g)) = (fast, full) {
                for team in &f {
                    prop_assert_eq!(team.iter().map(|&u| units[u].size).sum::<u32>(), total / 2);
                }
                prop_assert!((spread(&units, &f) - spread(&units, &g)).abs() < 1e-9);
            }
        }

        /// Five squads of four (too many teams for the exhaustive search) with a medic each:
        /// whenever the solos hold five medics or more, a legal split exists, and the
        /// heuristic finds one, however the medics' strengths fall.
        #[test]
        fn heuristic_seats_every_role_whenever_the_solos_can(
            strengths in prop::collection::vec(1000.0..2000.0f64, 20),
            medics in prop::sample::subsequence((0..20).collect::<Vec<usize>>(), 5..=8),
        ) {
            let roles = [RoleRequirement { name: "medic".into(), min_per_team: 1 }];
            let units: Vec<Unit> = strengths
                .iter()
                .enumerate()
                .map(|(i, &strength)| Unit {
                    size: 1,
                    strength,
                    role_masks: vec![if medics.contains(&i) { 0b1 } else { 0b0 }],
                })
                .collect();
            let s = split(&units, 5, 4, &roles);
            prop_assert!(s.is_some(), "no split for medics {:?}", medics);
            for team in s.unwrap() {
                prop_assert_eq!(team.len(), 4);
                prop_assert!(roles_ok(&units, &team, &roles));
            }
        }

        #[test]
        fn heuristic_split_is_legal_and_close(
            strengths in prop::collection::vec(1000.0..2000.0f64, 20)
        ) {
            let units: Vec<Unit> = strengths.into_iter().map(solo).collect();
            let s = split(&units, 2, 10, &[]).unwrap();
            prop_assert!(s.iter().all(|t| t.len() == 10));
            let mut all: Vec<usize> = s.concat();
            all.sort_unstable();
            prop_assert_eq!(all, (0..20).collect::<Vec<_>>());
            // Greedy + swaps is within one player's range of perfect.
            prop_assert!(spread(&units, &s) <= 1000.0);
        }
    }
}
