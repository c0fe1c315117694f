//! Who holds the control socket's connections (issues #18, #30): at most
//! `Limits::max_connections` in all and `Limits::max_per_user` per uid (root's too); the
//! last eighth kept for root and kerneld's own user (`shares`). When every connection
//! is taken, a newcomer below its fair share (what its kind of user may fill, divided by
//! the users holding connections, itself included) takes one from the user holding the
//! most, if that user holds more than the newcomer would: that user's connection that
//! has waited longest for a request (else its oldest follower, else its oldest) is told
//! why and closed. So no set of users can lock another out: a newcomer always gets at
//! least `room / users`, and one user costs everyone else at most its fair share.
//! rpc.rs asks here; this is the one place connections are counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// What keeps local clients from growing the daemon without bound: every connection may
/// buffer up to `wire::MAX_LINE` (given back when it closes), so their number is capped;
/// a line must be finished in time, and a request must come within `idle`; a client must
/// read what it is sent.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections open at once; one more is answered with an error and closed.
    pub max_connections: usize,
    /// Connections one uid may hold, root and kerneld's own user too, so that no one
    /// user's idle clients (root's neither) lock everyone else out.
    pub max_per_user: usize,
    /// From a line's first byte to its newline.
    pub partial_line: Duration,
    /// From a connection's start, or its last answer, to its next request's first byte.
    /// `events --follow` sends nothing and is not bound by it.
    pub idle: Duration,
    /// How long one reply or notification may wait for the client to read.
    pub write: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_per_user: 16,
            partial_line: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            write: Duration::from_secs(30),
        }
    }
}

impl Limits {
    /// Connections only root and kerneld's own user may take (`shares::kept`): other
    /// users together fill at most the rest.
    pub fn reserved(&self) -> usize {
        crate::shares::kept(self.max_connections)
    }

    /// The defaults, with `KERNELD_RPC_MAX_CONNECTIONS`, `KERNELD_RPC_MAX_PER_USER`,
    /// `KERNELD_RPC_LINE_TIMEOUT_MS` and `KERNELD_RPC_IDLE_TIMEOUT_MS` (tests, unusual
    /// deployments) applied when they parse.
    pub fn from_env() -> Limits {
        let mut limits = Limits::default();
        let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        if let Some(n) = env("KERNELD_RPC_MAX_CONNECTIONS").filter(|&n| n > 0) {
            limits.max_connections = n as usize;
        }
        if let Some(n) = env("KERNELD_RPC_MAX_PER_USER").filter(|&n| n > 0) {
            limits.max_per_user = n as usize;
        }
        limits.max_per_user = limits.max_per_user.min(limits.max_connections);
        if let Some(ms) = env("KERNELD_RPC_LINE_TIMEOUT_MS").filter(|&ms| ms > 0) {
            limits.partial_line = Duration::from_millis(ms);
        }
        if let Some(ms) = env("KERNELD_RPC_IDLE_TIMEOUT_MS").filter(|&ms| ms > 0) {
            limits.idle = Duration::from_millis(ms);
        }
        limits
    }
}

/// What a connection is doing, in the order connections are taken from a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Waiting for a request (or reading one).
    Waiting,
    /// `events --follow`: sending events.
    Following,
    /// Answering a request.
    Busy,
}

struct Entry {
    uid: u32,
    since: Instant,
    phase: Phase,
    evict: CancellationToken,
    /// Told to close for a newcomer: no longer counted as the user's.
    evicted: bool,
}

#[derive(Default)]
struct Open {
    next: u64,
    by_id: HashMap<u64, Entry>,
}

impl Open {
    fn live(&self) -> impl Iterator<Item = &Entry> {
        self.by_id.values().filter(|e| !e.evicted)
    }

    fn held_by(&self, uid: u32) -> usize {
        self.live().filter(|e| e.uid == uid).count()
    }
}

/// Why a connection is not taken.
#[derive(Debug, PartialEq)]
pub(crate) enum Refusal {
    /// Its uid holds `max_per_user` already.
    User,
    /// The daemon holds this many, all it takes from this uid, and no user holds more
    /// than its fair share.
    Full(usize),
}

/// The open connections, counted in all and per uid.
pub(crate) struct Table {
    open: Arc<Mutex<Open>>,
    limits: Limits,
    privileged: Vec<u32>,
}

/// A newcomer's connection, and whose connection it took (uid) when the daemon was full.
pub(crate) struct Admitted {
    pub ticket: Ticket,
    pub took_from: Option<u32>,
}

impl Table {
    pub fn new(limits: Limits, privileged: &[u32]) -> Table {
        Table {
            open: Arc::default(),
            limits,
            privileged: privileged.to_vec(),
        }
    }

    /// A connection for `uid`, or why not (see the module's rule).
    pub fn take(&self, uid: u32) -> Result<Admitted, Refusal> {
        let mut open = self.open.lock().unwrap();
        let mine = open.held_by(uid);
        if mine >= self.limits.max_per_user {
            return Err(Refusal::User);
        }
        let privileged = self.privileged.contains(&uid);
        let room = crate::shares::room(self.limits.max_connections, privileged);
        let used = open.live().count();
        let mut took_from = None;
        if used >= room {
            let (victim, owner) = self
                .victim(&open, uid, mine, privileged, room)
                .ok_or(Refusal::Full(used))?;
            let e = open.by_id.get_mut(&victim).expect("a live entry");
            e.evicted = true;
            e.evict.cancel();
            took_from = Some(owner);
        }
        open.next += 1;
        let id = open.next;
        let evict = CancellationToken::new();
        open.by_id.insert(
            id,
            Entry {
                uid,
                since: Instant::now(),
                phase: Phase::Waiting,
                evict: evict.clone(),
                evicted: false,
            },
        );
        Ok(Admitted {
            ticket: Ticket {
                open: self.open.clone(),
                id,
                evict,
            },
            took_from,
        })
    }

    /// The connection a newcomer below its fair share takes, and its uid: one of the user
    /// holding the most, if that is more than the newcomer would hold. Root's and
    /// kerneld's connections are taken only for one of them (the reserve is theirs).
    fn victim(
        &self,
        open: &Open,
        uid: u32,
        mine: usize,
        privileged: bool,
        room: usize,
    ) -> Option<(u64, u32)> {
        let mut held: HashMap<u32, usize> = HashMap::new();
        for e in open.live() {
            if e.uid != uid && (privileged || !self.privileged.contains(&e.uid)) {
                *held.entry(e.uid).or_default() += 1;
            }
        }
        let fair = room / (held.len() + 1);
        let (&top, &most) = held
            .iter()
            .max_by_key(|(&u, &n)| (n, std::cmp::Reverse(u)))?;
        if mine >= fair || most <= mine + 1 {
            return None;
        }
        open.by_id
            .iter()
            .filter(|(_, e)| !e.evicted && e.uid == top)
            .min_by_key(|(_, e)| (e.phase, e.since))
            .map(|(&id, _)| (id, top))
    }
}

/// One open connection; it leaves the table when dropped.
pub(crate) struct Ticket {
    open: Arc<Mutex<Open>>,
    id: u64,
    evict: CancellationToken,
}

impl Ticket {
    pub fn set_phase(&self, phase: Phase) {
        if let Some(e) = self.open.lock().unwrap().by_id.get_mut(&self.id) {
            e.phase = phase;
        }
    }

    /// Fires when the connection was taken for a newcomer.
    pub fn evicted(&self) -> CancellationToken {
        self.evict.clone()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.open.lock().unwrap().by_id.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max_connections: usize, max_per_user: usize) -> Table {
        let limits = Limits {
            max_connections,
            max_per_user,
            ..Limits::default()
        };
        Table::new(limits, &[0, 999])
    }

    #[test]
    fn no_uid_holds_more_than_its_share_and_the_reserve_is_for_root() {
        let t = table(16, 4);
        let take = |uid| t.take(uid).map(|a| a.ticket);
        let held: Vec<Ticket> = (0..4).map(|_| take(1000).unwrap()).collect();
        assert_eq!(take(1000).err(), Some(Refusal::User));
        // root is capped like anyone: its idle clients cannot fill the daemon either
        let root: Vec<Ticket> = (0..4).map(|_| take(0).unwrap()).collect();
        assert_eq!(take(0).err(), Some(Refusal::User));
        // other users fill what is left but the reserve (16 / 8 = 2)
        let others: Vec<Ticket> = (1001..1003)
            .flat_map(|uid| (0..3).map(move |_| uid))
            .map(|uid| take(uid).unwrap())
            .collect();
        // full for them: a newcomer below its share (14 / 4 = 3) takes from the user
        // holding the most, while that one holds more than the newcomer would
        let newcomer = t.take(1005).unwrap();
        assert_eq!(newcomer.took_from, Some(1000));
        let daemon_user: Vec<Ticket> = (0..2).map(|_| take(999).unwrap()).collect();
        assert_eq!(take(999).err(), Some(Refusal::Full(16)));
        drop(held);
        assert!(take(1000).is_ok());
        drop((root, others, daemon_user, newcomer));
        assert_eq!(t.open.lock().unwrap().by_id.len(), 0);
    }

    fn live_per_uid(t: &Table) -> HashMap<u32, usize> {
        let mut per_uid = HashMap::new();
        for e in t.open.lock().unwrap().live() {
            *per_uid.entry(e.uid).or_default() += 1;
        }
        per_uid
    }

    #[test]
    fn users_holding_every_connection_cannot_lock_out_another() {
        let t = table(64, 16);
        // Four users take all they can of the 56 not kept for root: they end even.
        let mut held = Vec::new();
        for uid in 1001..=1004 {
            while let Ok(a) = t.take(uid) {
                held.push(a.ticket);
            }
        }
        let four = live_per_uid(&t);
        assert_eq!(four.values().sum::<usize>(), 56, "{four:?}");
        assert!(four.values().all(|&n| n == 14), "{four:?}");
        // A fifth gets in, each time from one holding the most, up to its fair share.
        let mut fifth = Vec::new();
        let refused = loop {
            match t.take(1005) {
                Ok(a) => {
                    assert!(a.took_from.is_some());
                    fifth.push(a.ticket);
                }
                Err(r) => break r,
            }
        };
        assert_eq!(refused, Refusal::Full(56));
        assert_eq!(fifth.len(), 56 / 5, "the fifth user's fair share");
        let five = live_per_uid(&t);
        assert!(five.values().all(|&n| (11..=12).contains(&n)), "{five:?}");
        // root's reserve was never touched
        assert!(t.take(0).is_ok_and(|a| a.took_from.is_none()));
    }

    #[test]
    fn the_connection_taken_is_the_one_that_waited_longest_for_a_request() {
        let t = table(2, 2);
        let busy = t.take(1000).unwrap().ticket;
        busy.set_phase(Phase::Busy);
        let waiting = t.take(1000).unwrap().ticket;
        let a = t.take(0).unwrap();
        assert_eq!(a.took_from, Some(1000));
        assert!(waiting.evicted().is_cancelled() && !busy.evicted().is_cancelled());
    }
}
