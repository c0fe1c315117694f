//! Default locations of the socket and the state directory, shared by daemon and client.

use std::path::PathBuf;

/// The system unit's socket (systemd `RuntimeDirectory=kerneld`).
pub const SYSTEM_SOCKET: &str = "/run/kerneld/kerneld.sock";
/// The system unit's state (systemd `StateDirectory=kerneld`).
pub const SYSTEM_STATE_DIR: &str = "/var/lib/kerneld";

/// The socket a client talks to when neither `--socket` nor `KERNELD_SOCKET` says:
/// a user daemon's `$XDG_RUNTIME_DIR/kerneld.sock` when that exists, else the system one.
pub fn default_socket() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        let user = PathBuf::from(dir).join("kerneld.sock");
        if user.exists() || user_daemon_expected() {
            return user;
        }
    }
    PathBuf::from(SYSTEM_SOCKET)
}

/// A user daemon (not root) defaults to its runtime directory even before it exists.
fn user_daemon_expected() -> bool {
    !nix::unistd::Uid::effective().is_root() && !std::path::Path::new(SYSTEM_SOCKET).exists()
}

/// The state directory of a daemon started without `--state-dir`.
pub fn default_state_dir() -> PathBuf {
    if nix::unistd::Uid::effective().is_root() {
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
