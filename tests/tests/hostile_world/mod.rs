//! The hostile suite's world (tests/tests/isolation.rs): the hostile files with their
//! expectations, what the daemon's user has that candidates must never see (a root-only
//! file, an environment variable, the config file, another slot's scratch), where they
//! must not write, and the listeners (TCP, named and abstract unix sockets) that must get
//! nothing; what a user or the log can see of a goal.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};

use kerneld::wire::{Event, EventKind};
use kerneld_e2e::*;

/// Left by a hostile candidate's attack when it worked (in its error message).
pub const SUCCESS_MARK: &str = "HOSTILE-SUCCEEDED";
/// Files the write attacks aim at outside the test directory.
pub const OUTSIDE: &[&str] = &[
    "/tmp/kerneld-hostile-write",
    "/var/tmp/kerneld-hostile-write",
    "/root/kerneld-hostile-write",
];

#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    NoEffect,
    Verdict { class: String, rule: String },
}

pub struct Hostile {
    pub name: String,
    pub what: String,
    pub text: String,
    pub expect: Expect,
    /// `# expect-sandboxed:`: the verdict with the static rules skipped, so that the
    /// attack really runs and only the operating system stands in its way.
    pub sandboxed: Option<Expect>,
}

pub fn parse_expect(v: &str, path: &Path) -> Expect {
    match v {
        "no-effect" => Expect::NoEffect,
        v => {
            let kv: BTreeMap<&str, &str> = v
                .split_whitespace()
                .filter_map(|p| p.split_once('='))
                .collect();
            Expect::Verdict {
                class: kv
                    .get("class")
                    .unwrap_or_else(|| panic!("{}: expect without class", path.display()))
                    .to_string(),
                rule: kv.get("rule").map(|r| r.to_string()).unwrap_or_default(),
            }
        }
    }
}

/// Every file of the shared hostile directory, with its header parsed.
pub fn hostile_files() -> Vec<Hostile> {
    let dir = repo_root().join("kernels/harness/tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let header = |key: &str| {
                text.lines()
                    .take(6)
                    .find_map(|l| l.strip_prefix(&format!("# {key}:")))
                    .map(|v| v.trim().to_string())
            };
            let field = |key: &str| {
                header(key).unwrap_or_else(|| {
                    panic!("{}: no `# {key}:` line in its header", path.display())
                })
            };
            Hostile {
                name: path.file_name().unwrap().to_string_lossy().into_owned(),
                what: field("hostile"),
                expect: parse_expect(&field("expect"), &path),
                sandboxed: header("expect-sandboxed").map(|v| parse_expect(&v, &path)),
                text,
            }
        })
        .collect()
}

/// What the daemon's user has that candidates must never see, and where they must not write.
pub struct World {
    pub dir: TempDir,
    pub secret_file: PathBuf,
    pub marker: PathBuf,
    pub config: PathBuf,
    pub env_name: String,
    pub tokens: Vec<String>,
    pub listener: TcpListener,
    /// Sockets of "another local service" (issue #24): named stream and datagram sockets
    /// anyone may write to, and an abstract one.
    pub unix: UnixListener,
    pub dgram: UnixDatagram,
    pub abstract_name: String,
    pub abstract_socket: UnixListener,
}

pub fn token(tag: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("KDTOKEN-{tag}-{:x}{:x}", t.as_nanos(), std::process::id())
}

impl World {
    pub fn new(tag: &str) -> World {
        let dir = TempDir::new(tag);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret_file = dir.path().join("secret.txt");
        let file_token = token("file");
        std::fs::write(&secret_file, format!("{file_token}\n")).unwrap();
        std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let marker = dir.path().join("marker");
        std::fs::create_dir_all(&marker).unwrap();
        std::fs::write(marker.join("keep"), "keep").unwrap();
        let config_token = token("config");
        let config = dir.path().join("kerneld.toml");
        std::fs::write(
            &config,
            format!("# {config_token}\nworker_max_files = 4096\n"),
        )
        .unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let unix = UnixListener::bind(dir.path().join("service.sock")).unwrap();
        let dgram = UnixDatagram::bind(dir.path().join("dgram.sock")).unwrap();
        for name in ["service.sock", "dgram.sock"] {
            let p = dir.path().join(name);
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        unix.set_nonblocking(true).unwrap();
        dgram.set_nonblocking(true).unwrap();
        let abstract_name = format!("kd-{tag}-{}", std::process::id());
        let abstract_socket = {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                .unwrap();
            UnixListener::bind_addr(&addr).unwrap()
        };
        abstract_socket.set_nonblocking(true).unwrap();
        World {
            dir,
            secret_file,
            marker,
            config,
            env_name: "KD_HOSTILE_API_KEY".into(),
            tokens: vec![file_token, config_token, token("env")],
            listener,
            unix,
            dgram,
            abstract_name,
            abstract_socket,
        }
    }

    /// A file in a scratch directory of "another slot" under the daemon's scratch root,
    /// readable to anyone: only the sandbox keeps a runner out of it.
    pub fn plant_other_slot(&mut self, d: &Daemon) {
        let slot = scratch_root(d).join("slot9");
        std::fs::create_dir_all(&slot).unwrap();
        std::fs::set_permissions(&slot, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = token("slot");
        std::fs::write(slot.join("other-slot.txt"), &t).unwrap();
        self.tokens.push(t);
    }

    /// What reached the unix sockets of "another service" since the last look.
    pub fn unix_reached(&self) -> Vec<&'static str> {
        let mut got = Vec::new();
        if self.unix.accept().is_ok() {
            got.push("the named stream socket accepted a connection");
        }
        if self.dgram.recv(&mut [0u8; 64]).is_ok() {
            got.push("the named datagram socket got a datagram");
        }
        if self.abstract_socket.accept().is_ok() {
            got.push("the abstract socket accepted a connection");
        }
        got
    }

    pub fn env_token(&self) -> &str {
        &self.tokens[2]
    }

    pub fn start(&self) -> Daemon {
        self.start_env(&[])
    }

    /// Starts the daemon with the secret in its environment, and `env` on top.
    pub fn start_env(&self, env: &[(&str, &str)]) -> Daemon {
        let args = [
            "--config",
            self.config.to_str().unwrap(),
            "--eval-timeout",
            "120s",
        ];
        let mut all = vec![
            (self.env_name.as_str(), self.env_token()),
            // The workers' stderr reaches the daemon's log: a leak there counts too.
            ("KERNELD_LOG", "info,worker=debug"),
        ];
        all.extend_from_slice(env);
        Daemon::start_env(self.dir.path(), &args, &all)
    }

    pub fn substitute(&self, text: &str, d: &Daemon) -> String {
        let path = |p: &Path| p.to_str().unwrap().to_string();
        text.replace("@@SECRET_FILE@@", self.secret_file.to_str().unwrap())
            .replace("@@SECRET_ENV@@", &self.env_name)
            .replace("@@MARKER_DIR@@", self.marker.to_str().unwrap())
            .replace("@@STATE_DIR@@", &path(&d.state_dir))
            .replace("@@DAEMON_SOCKET@@", &path(&d.socket))
            .replace(
                "@@UNIX_SOCKET@@",
                &path(&self.dir.path().join("service.sock")),
            )
            .replace("@@UNIX_DGRAM@@", &path(&self.dir.path().join("dgram.sock")))
            .replace("@@ABSTRACT_SOCKET@@", &self.abstract_name)
            .replace("@@SCRATCH_ROOT@@", &path(&scratch_root(d)))
            .replace(
                "@@TCP_PORT@@",
                &self.listener.local_addr().unwrap().port().to_string(),
            )
    }

    /// A goal on the installed demo task whose seeds (sent with it) are `seeds`.
    pub fn goal(&self, name: &str, seeds: &[(&str, String)]) -> PathBuf {
        let sub = self.dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        for (file, text) in seeds {
            std::fs::write(sub.join(file), text).unwrap();
        }
        let list: Vec<String> = seeds.iter().map(|(f, _)| format!("\"{f}\"")).collect();
        let path = sub.join("goal.toml");
        std::fs::write(
            &path,
            format!(
                "name = \"{name}\"\ntask = \"demo\"\nseed = [{}]\n[budget]\niterations = {}\n",
                list.join(", "),
                seeds.len()
            ),
        )
        .unwrap();
        path
    }
}

/// Processes named `kd-survivor`: what fork_setsid_survivor.py's grandchild calls itself
/// (PR_SET_NAME), so that its survival shows where the sandbox refuses its marker file.
pub fn survivors() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "kd-survivor")
        })
        .collect()
}

/// The daemon's scratch root (`Config::scratch_dir`'s default: beside the state directory).
pub fn scratch_root(d: &Daemon) -> PathBuf {
    let mut name = d.state_dir.file_name().unwrap().to_os_string();
    name.push(".scratch");
    d.state_dir.with_file_name(name)
}

pub fn honest_seed() -> String {
    std::fs::read_to_string(repo_root().join("kernels/demo/seeds/tiled.py")).unwrap()
}

/// Each seed's verdict in a finished goal: (class, rule, message).
pub fn verdicts(events: &[Event], goal: &str) -> BTreeMap<String, (String, String, String)> {
    let mut seed_of = BTreeMap::new();
    let mut out = BTreeMap::new();
    for e in events.iter().filter(|e| e.goal.as_deref() == Some(goal)) {
        match &e.kind {
            EventKind::SeedDescribed {
                seed,
                rejected: Some(why),
                ..
            } => {
                // `rejected [rule] ...`: the static checks refused it before any import.
                let rule = why
                    .split_once('[')
                    .and_then(|(_, r)| r.split_once(']'))
                    .map_or(String::new(), |(r, _)| r.to_string());
                out.insert(seed.clone(), ("rejected".into(), rule, why.clone()));
            }
            EventKind::CandidateProposed {
                candidate, seed, ..
            } => {
                seed_of.insert(candidate.clone(), seed.clone());
            }
            EventKind::EvaluationFinished {
                candidate, result, ..
            } => {
                if let Some(seed) = seed_of.get(candidate) {
                    out.insert(
                        seed.clone(),
                        (
                            result.class.as_str().to_string(),
                            result.rule.clone().unwrap_or_default(),
                            result.message.clone().unwrap_or_default(),
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    out
}

/// Files under `dir`, relative, recursively.
pub fn tree(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.insert(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out
}

/// Everything a user or an administrator can see of a goal, and the daemon's log.
pub fn visible(d: &Daemon, goal: &str) -> String {
    let mut all = serde_json::to_string(&d.events(0)).unwrap();
    for args in [
        vec!["show", goal],
        vec!["events", "--goal", goal],
        vec!["best", goal],
        vec!["status"],
    ] {
        let o = kernelctl(&d.socket, &args);
        all.push_str(&String::from_utf8_lossy(&o.stdout));
        all.push_str(&String::from_utf8_lossy(&o.stderr));
    }
    all.push_str(&d.log_text());
    all
}
