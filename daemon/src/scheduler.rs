//! The scheduling policy, as a pure function so tests can state it exactly.
//!
//! A free, healthy slot goes to the runnable goal with, in order:
//! 1. the highest priority;
//! 2. the fewest evaluations served (fair share among equal priorities);
//! 3. the oldest enqueue (age).
//!
//! A goal is runnable while it has fewer evaluations in flight than its `gpus`.
//! "Served" is virtual time: a goal that joins the competition starts at the
//! smallest count among those already competing (`join_served`), so a newcomer
//! shares from then on instead of taking every slot until it has "caught up".

/// One goal as the policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Contender {
    pub goal: String,
    pub priority: i32,
    pub in_flight: u32,
    pub max_in_flight: u32,
    pub served: u64,
    /// Enqueue order (the goal's creation time, then its number).
    pub age_key: (u64, u64),
}

/// The goal that gets the next free slot, if any is runnable.
pub fn pick(contenders: &[Contender]) -> Option<&Contender> {
    contenders
        .iter()
        .filter(|c| c.in_flight < c.max_in_flight)
        .min_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.served.cmp(&b.served))
                .then(a.age_key.cmp(&b.age_key))
        })
}

/// The served count a goal starts from when it joins `others` in competition.
pub fn join_served(own: u64, others: impl Iterator<Item = u64>) -> u64 {
    others.min().map_or(own, |m| own.max(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(goal: &str, priority: i32, in_flight: u32, max: u32, served: u64, age: u64) -> Contender {
        Contender {
            goal: goal.into(),
            priority,
            in_flight,
            max_in_flight: max,
            served,
            age_key: (age, 0),
        }
    }

    #[test]
    fn priority_first() {
        let cs = [c("low", 0, 0, 1, 0, 1), c("high", 5, 0, 1, 100, 2)];
        assert_eq!(pick(&cs).unwrap().goal, "high");
    }

    #[test]
    fn fair_share_among_equal_priority() {
        let cs = [c("a", 0, 0, 1, 7, 1), c("b", 0, 0, 1, 3, 2)];
        assert_eq!(pick(&cs).unwrap().goal, "b");
    }

    #[test]
    fn age_breaks_ties() {
        let cs = [c("young", 0, 0, 1, 3, 9), c("old", 0, 0, 1, 3, 1)];
        assert_eq!(pick(&cs).unwrap().goal, "old");
    }

    #[test]
    fn goals_at_their_gpu_limit_wait() {
        let cs = [c("full", 9, 2, 2, 0, 1), c("other", 0, 0, 1, 50, 2)];
        assert_eq!(pick(&cs).unwrap().goal, "other");
        let cs = [c("full", 9, 1, 1, 0, 1)];
        assert!(pick(&cs).is_none());
    }

    #[test]
    fn fair_share_alternates_over_many_picks() {
        // Two equal goals on one slot: simulate 100 dispatches and count.
        let mut cs = vec![c("a", 0, 0, 1, 0, 1), c("b", 0, 0, 1, 0, 2)];
        let mut counts = [0u32; 2];
        for _ in 0..100 {
            let g = pick(&cs).unwrap().goal.clone();
            let i = if g == "a" { 0 } else { 1 };
            counts[i] += 1;
            cs[i].served += 1;
        }
        assert_eq!(counts, [50, 50]);
    }

    #[test]
    fn newcomer_joins_at_the_minimum() {
        assert_eq!(join_served(0, [40, 55].into_iter()), 40);
        assert_eq!(join_served(60, [40, 55].into_iter()), 60);
        assert_eq!(join_served(3, std::iter::empty()), 3);
    }
}
