//! Default locations of the socket and the state directory, shared by daemon and client.

use std::path::{Path, PathBuf};

/// The system unit's socket (systemd `RuntimeDirectory=kerneld`).
pub const SYSTEM_SOCKET: &str = "/run/kerneld/kerneld.sock";
/// The system unit's state (systemd `StateDirectory=kerneld`).
pub const SYSTEM_STATE_DIR: &str = "/var/lib/kerneld";
/// The socket's file name inside a user's runtime directory.
const USER_SOCKET_NAME: &str = "kerneld.sock";

/// Where the default socket was looked for, and which one was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketChoice {
    pub chosen: PathBuf,
    /// Every candidate, in the order they were considered (`chosen` is one of them).
    pub tried: Vec<PathBuf>,
}

/// What the choice of the default socket depends on, gathered once so the rule is testable.
#[derive(Debug, Clone)]
pub struct SocketEnv {
    pub xdg_runtime_dir: Option<PathBuf>,
    pub uid: u32,
    /// Whether a path exists (a socket, or a runtime directory).
    pub exists: fn(&Path) -> bool,
}

impl SocketEnv {
    /// This process's environment and file system.
    pub fn current() -> SocketEnv {
        SocketEnv {
            xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            uid: effective_uid(),
            exists: |p| p.exists(),
        }
    }
}

/// The socket used when neither `--socket` nor `KERNELD_SOCKET` says. Daemon and client
/// both call this, so a user daemon and its client agree even under cron.
pub fn default_socket() -> PathBuf {
    choose_socket(&SocketEnv::current()).chosen
}

/// Candidates in order: `$XDG_RUNTIME_DIR/kerneld.sock`; for a user without that variable
/// (cron does not set it) `/run/user/$UID/kerneld.sock` when that directory exists; then the
/// system socket. The first that exists wins. When none does, a user (not root) gets the
/// first user candidate, where their own daemon would listen; root gets the system socket.
pub fn choose_socket(env: &SocketEnv) -> SocketChoice {
    let is_root = env.uid == 0;
    let mut user = Vec::new();
    if let Some(dir) = &env.xdg_runtime_dir {
        user.push(dir.join(USER_SOCKET_NAME));
    } else if !is_root {
        let runtime_dir = PathBuf::from(format!("/run/user/{}", env.uid));
        if (env.exists)(&runtime_dir) {
            user.push(runtime_dir.join(USER_SOCKET_NAME));
        }
    }
    let system = PathBuf::from(SYSTEM_SOCKET);
    let mut tried = user.clone();
    tried.push(system.clone());
    let chosen = match tried.iter().find(|p| (env.exists)(p)) {
        Some(existing) => existing.clone(),
        None if !is_root => user.first().cloned().unwrap_or(system),
        None => system,
    };
    SocketChoice { chosen, tried }
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The state directory of a daemon started without `--state-dir`.
pub fn default_state_dir() -> PathBuf {
    if effective_uid() == 0 {
        return PathBuf::from(SYSTEM_STATE_DIR);
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("kerneld");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".local/state/kerneld");
    }
    PathBuf::from(".kerneld-state")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(xdg: Option<&str>, uid: u32, exists: fn(&Path) -> bool) -> SocketEnv {
        SocketEnv {
            xdg_runtime_dir: xdg.map(PathBuf::from),
            uid,
            exists,
        }
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn a_user_under_cron_finds_the_runtime_dir_without_xdg() {
        // cron: no XDG_RUNTIME_DIR, but logind made /run/user/1000 and the daemon listens there.
        let c = choose_socket(&env(None, 1000, |p| p.starts_with("/run/user/1000")));
        assert_eq!(c.chosen, PathBuf::from("/run/user/1000/kerneld.sock"));
        assert_eq!(
            c.tried,
            paths(&["/run/user/1000/kerneld.sock", SYSTEM_SOCKET])
        );
        // The daemon itself, before its socket exists, picks the same path.
        let c = choose_socket(&env(None, 1000, |p| p == Path::new("/run/user/1000")));
        assert_eq!(c.chosen, PathBuf::from("/run/user/1000/kerneld.sock"));
    }

    #[test]
    fn xdg_comes_before_run_user_and_the_system_socket() {
        let c = choose_socket(&env(Some("/tmp/xdg"), 1000, |_| false));
        assert_eq!(c.chosen, PathBuf::from("/tmp/xdg/kerneld.sock"));
        assert_eq!(c.tried, paths(&["/tmp/xdg/kerneld.sock", SYSTEM_SOCKET]));
        // A running system daemon wins over a user socket that is not there.
        let c = choose_socket(&env(Some("/tmp/xdg"), 1000, |p| {
            p == Path::new(SYSTEM_SOCKET)
        }));
        assert_eq!(c.chosen, PathBuf::from(SYSTEM_SOCKET));
    }

    #[test]
    fn without_a_runtime_dir_a_user_falls_back_to_the_system_socket() {
        let c = choose_socket(&env(None, 1000, |_| false));
        assert_eq!(c.chosen, PathBuf::from(SYSTEM_SOCKET));
        assert_eq!(c.tried, paths(&[SYSTEM_SOCKET]));
    }

    #[test]
    fn root_uses_the_system_socket_unless_its_xdg_socket_exists() {
        let c = choose_socket(&env(None, 0, |_| true));
        assert_eq!(c.chosen, PathBuf::from(SYSTEM_SOCKET));
        assert_eq!(c.tried, paths(&[SYSTEM_SOCKET]));
        let c = choose_socket(&env(Some("/run/user/0"), 0, |_| false));
        assert_eq!(c.chosen, PathBuf::from(SYSTEM_SOCKET));
        let c = choose_socket(&env(Some("/run/user/0"), 0, |p| {
            p == Path::new("/run/user/0/kerneld.sock")
        }));
        assert_eq!(c.chosen, PathBuf::from("/run/user/0/kerneld.sock"));
    }
}
