//! Which goals a `status` reply lists, so that its size and time follow the active goals,
//! not every goal ever enqueued: by default the active ones (queued, running, paused) and
//! the newest `RECENT_FINISHED` finished ones; with `all`, a page of the whole history
//! after a cursor (`kernelctl status --all` pages through it).

use crate::wire::GoalState;

/// Finished goals a plain `status` still lists (the newest), so what just ended shows.
pub const RECENT_FINISHED: usize = 20;
/// Goals in one page of `status --all` (a summary is ~400 bytes: far below a line).
pub const PAGE: usize = 500;

/// What selection needs of a goal.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub id: &'a str,
    pub state: GoalState,
    pub created_ms: u64,
}

/// The creation order of goals: time, then id number (ids are g1, g2, …).
pub fn order_key(id: &str, created_ms: u64) -> (u64, u64) {
    (created_ms, id.trim_start_matches('g').parse().unwrap_or(0))
}

/// The ids to list, in creation order. Without `all` it is one pass that keeps the
/// active goals and the `RECENT_FINISHED` newest finished ones, then sorts only those:
/// no sort of the whole history on every call.
pub fn select<'a>(
    rows: impl Iterator<Item = Row<'a>>,
    all: bool,
    after: Option<&str>,
    limit: Option<usize>,
) -> Vec<&'a str> {
    let key = |r: &Row| order_key(r.id, r.created_ms);
    if all {
        let mut rows: Vec<Row<'a>> = rows.collect();
        rows.sort_by_key(key);
        let start = after
            .and_then(|a| rows.iter().position(|r| r.id == a).map(|i| i + 1))
            .unwrap_or(0);
        let n = limit.unwrap_or(PAGE).clamp(1, PAGE);
        return rows[start.min(rows.len())..]
            .iter()
            .take(n)
            .map(|r| r.id)
            .collect();
    }
    let mut listed: Vec<Row<'a>> = Vec::new();
    // The newest finished so far, as a min-heap on the order key.
    let mut newest = std::collections::BinaryHeap::new();
    for r in rows {
        if !r.state.is_terminal() {
            listed.push(r);
            continue;
        }
        newest.push(std::cmp::Reverse((key(&r), r.id)));
        if newest.len() > RECENT_FINISHED {
            newest.pop();
        }
    }
    let mut ids: Vec<((u64, u64), &'a str)> = listed.iter().map(|r| (key(r), r.id)).collect();
    ids.extend(newest.into_iter().map(|std::cmp::Reverse(k)| k));
    ids.sort_unstable();
    ids.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_status_lists_active_goals_and_the_newest_finished_and_all_pages() {
        let ids: Vec<String> = (1..=100).map(|i| format!("g{i}")).collect();
        let rows = || {
            ids.iter().enumerate().map(|(i, id)| Row {
                id,
                state: if i % 10 == 0 {
                    GoalState::Running
                } else {
                    GoalState::Completed
                },
                created_ms: i as u64,
            })
        };
        let plain = select(rows(), false, None, None);
        assert_eq!(plain.len(), 10 + RECENT_FINISHED);
        assert_eq!(plain[0], "g1"); // active, however old
        assert_eq!(*plain.last().unwrap(), "g100");
        assert!(!plain.contains(&"g2"));
        let mut paged = Vec::new();
        let mut after: Option<&str> = None;
        loop {
            let page = select(rows(), true, after, Some(30));
            if page.is_empty() {
                break;
            }
            after = page.last().copied();
            paged.extend(page);
        }
        assert_eq!(paged.len(), 100);
        assert_eq!(paged[99], "g100");
    }
}
