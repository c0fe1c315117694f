//! The `command` agent: any external program (a coding agent's CLI, a script) proposes
//! the next candidate by writing a file.
//!
//! Each iteration gets a fresh working directory, `<state>/agents/<goal>/<iteration>/`:
//!
//!   GOAL.md           the goal restated, the candidate contract, what to write
//!   CONTEXT.md        the compacted memory (exactly `kernelctl context`)
//!   best.py           the best candidate so far, with its configuration (if any)
//!   last_report.json  the last evaluation, in full (if any)
//!   seeds/            the goal's seed sources
//!
//! The program runs there (its own process group, stdin closed, output in `agent.log`)
//! and must leave `candidate.py`; it may leave `config.json` (a JSON object: the
//! configuration to evaluate; default: the candidate's DEFAULT) and `NOTE.md` (why).
//! A program that fails, times out, or proposes something already evaluated is an agent
//! failure; the engine retries and gives up after a few in a row.
//!
//! When kerneld runs as root the program runs as the goal's owner (uid, primary group and
//! supplementary groups; HOME, USER and LOGNAME of that account), in a working directory
//! handed over to that user; the files it leaves are read back without following links.
//! Otherwise it runs as kerneld's user, which `goal::parse` allows only trusted requesters.
//! Either way its environment is only `command_env` from kerneld.toml (default PATH, HOME,
//! LANG), the KERNELD_* variables below and the account's HOME/USER/LOGNAME: never
//! kerneld's API keys, NOTIFY_SOCKET or settings.

use std::ffi::CString;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::{Agent, AgentEnv, Proposal};
use crate::context;
use crate::projection::GoalProjection;
use crate::wire::{CommandSettings, EvaluationRecord};

/// Default wall-clock limit of one run of the program.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Largest candidate accepted.
const MAX_SOURCE: u64 = 1 << 20;
/// Lines of `agent.log` quoted in an error.
const LOG_TAIL: usize = 20;
/// Largest `config.json`, `NOTE.md` or `agent.log` tail read back.
const MAX_SIDE_FILE: u64 = 1 << 20;

/// The account a program runs as when kerneld, as root, drops to the goal's owner.
struct RunAs {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    name: String,
    home: PathBuf,
}

impl RunAs {
    /// None when no switch is needed: kerneld is not root, or the owner is root.
    fn for_owner(owner: u32) -> anyhow::Result<Option<RunAs>> {
        if !nix::unistd::geteuid().is_root() || owner == 0 {
            return Ok(None);
        }
        let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(owner))
            .with_context(|| format!("looking up the account of uid {owner}"))?
            .with_context(|| {
                format!(
                    "the goal's owner, uid {owner}, has no account (passwd entry); the command \
                     agent runs as the goal's owner and cannot start: enqueue it from an account"
                )
            })?;
        let cname = CString::new(user.name.clone()).context("account name holds a NUL")?;
        let groups = nix::unistd::getgrouplist(&cname, user.gid)
            .with_context(|| format!("listing the groups of {}", user.name))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        Ok(Some(RunAs {
            uid: owner,
            gid: user.gid.as_raw(),
            groups,
            name: user.name,
            home: user.dir,
        }))
    }

    /// Hands the working directory (and what `prepare` wrote in it) to the user.
    fn hand_over(&self, dir: &Path) -> anyhow::Result<()> {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(path) = stack.pop() {
            std::os::unix::fs::lchown(&path, Some(self.uid), Some(self.gid))
                .with_context(|| format!("handing {} to uid {}", path.display(), self.uid))?;
            if std::fs::symlink_metadata(&path)?.is_dir() {
                for entry in std::fs::read_dir(&path)? {
                    stack.push(entry?.path());
                }
            }
        }
        Ok(())
    }
}

/// Reads a file the program left, at most `limit` bytes (one more tells "too large"),
/// without following a symbolic link or reading a hard link to another file: the
/// directory belongs to the program's user, and kerneld may be root.
fn read_left_file(path: &Path, limit: u64) -> std::io::Result<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a plain file", path.display()),
        ));
    }
    let mut text = String::new();
    file.take(limit + 1).read_to_string(&mut text)?;
    Ok(text)
}

pub struct CommandAgent {
    argv: Vec<String>,
    timeout: Duration,
    env: AgentEnv,
}

impl CommandAgent {
    pub fn new(settings: &CommandSettings, env: AgentEnv) -> anyhow::Result<CommandAgent> {
        let argv = settings.command.clone();
        if argv.is_empty() {
            bail!("agent `command` has no command to run");
        }
        let timeout = settings
            .timeout_s
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        Ok(CommandAgent { argv, timeout, env })
    }

    fn prepare(
        &self,
        dir: &Path,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
    ) -> anyhow::Result<()> {
        if dir.exists() {
            // A restart re-runs the iteration from scratch.
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir.join("seeds"))
            .with_context(|| format!("creating {}", dir.display()))?;
        for (name, contents) in workdir_files(goal, history, self.env.best_source.as_deref())? {
            std::fs::write(dir.join(&name), contents)
                .with_context(|| format!("writing {}", dir.join(&name).display()))?;
        }
        Ok(())
    }

    /// Runs the program; Ok(false) when it was cancelled.
    fn run(
        &self,
        dir: &Path,
        goal: &GoalProjection,
        iteration: u64,
        run_as: Option<&RunAs>,
    ) -> anyhow::Result<bool> {
        let log = std::fs::File::create(dir.join("agent.log"))?;
        let mut command = Command::new(&self.argv[0]);
        // Only the allow-listed variables of kerneld's environment (never its API keys,
        // NOTIFY_SOCKET or settings), then the goal's own below.
        command.env_clear();
        for name in &self.env.command_env {
            if let Some(v) = std::env::var_os(name) {
                command.env(name, v);
            }
        }
        if let Some(user) = run_as {
            user.hand_over(dir)?;
            let (uid, gid, groups) = (user.uid, user.gid, user.groups.clone());
            command
                .env("HOME", &user.home)
                .env("USER", &user.name)
                .env("LOGNAME", &user.name);
            // SAFETY: between fork and exec only async-signal-safe calls (setgroups,
            // setgid, setuid), on data prepared before the fork. Groups first: after
            // setuid the process may no longer change them.
            unsafe {
                command.pre_exec(move || {
                    if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command
            .args(&self.argv[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .env("KERNELD_GOAL", &goal.id)
            .env("KERNELD_GOAL_NAME", &goal.spec.name)
            .env("KERNELD_ITERATION", iteration.to_string())
            .env("KERNELD_TASK_DIR", &goal.spec.task_dir)
            .process_group(0)
            .spawn()
            .with_context(|| match run_as {
                Some(u) => format!(
                    "cannot start agent command `{}` as {} (uid {})",
                    self.argv[0], u.name, u.uid
                ),
                None => format!("cannot start agent command `{}`", self.argv[0]),
            })?;
        let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
        let kill = || {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        };
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                if status.success() {
                    return Ok(true);
                }
                bail!(
                    "agent command exited with {status}; agent.log ends with:\n{}",
                    log_tail(dir)
                );
            }
            if self.env.cancel.is_cancelled() {
                kill();
                let _ = child.wait();
                return Ok(false);
            }
            if started.elapsed() > self.timeout {
                kill();
                let _ = child.wait();
                bail!(
                    "agent command ran past its {}s limit and was killed",
                    self.timeout.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn log_tail(dir: &Path) -> String {
    let path = dir.join("agent.log");
    // The end of a large log: skip all but its last MAX_SIDE_FILE bytes.
    let text = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.len() > MAX_SIDE_FILE => String::from("(agent.log is larger than 1 MiB)"),
        _ => read_left_file(&path, MAX_SIDE_FILE).unwrap_or_default(),
    };
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n")
}

/// The files a command agent's directory gets, by path relative to it (see the module
/// docs): what `prepare` writes, and what `kernelctl context` names.
pub fn workdir_files(
    goal: &GoalProjection,
    history: &[EvaluationRecord],
    best_source: Option<&str>,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let spec = &goal.spec;
    let goal_md = format!(
        "{}\n## What to write\n\
         Write `candidate.py` in this directory (the module above). Optionally write\n\
         `config.json` (an object: the configuration to evaluate; default: DEFAULT) and\n\
         `NOTE.md` (one line: what you changed and why).\n\n\
         `CONTEXT.md` is what was tried and measured; `best.py` the best so far; \
         `last_report.json` the last evaluation; `seeds/` the starting points.\n",
        super::brief(goal)
    );
    let mut files = vec![
        ("GOAL.md".to_string(), goal_md.into_bytes()),
        (
            "CONTEXT.md".to_string(),
            context::compact(goal, history, context::budget(spec)).into_bytes(),
        ),
    ];
    if let Some(best) = best_source {
        files.push(("best.py".into(), best.as_bytes().to_vec()));
    }
    if let Some(last) = history.last() {
        files.push(("last_report.json".into(), serde_json::to_vec_pretty(last)?));
    }
    for seed in &spec.seeds {
        let name = Path::new(&seed.name)
            .file_name()
            .map_or("seed.py".into(), |n| n.to_string_lossy().into_owned());
        files.push((format!("seeds/{name}"), seed.source.as_bytes().to_vec()));
    }
    Ok(files)
}

impl Agent for CommandAgent {
    fn slow(&self) -> bool {
        true
    }

    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
    ) -> anyhow::Result<Option<Proposal>> {
        let dir = self
            .env
            .work_root
            .join(&goal.id)
            .join(iteration.to_string());
        let run_as = RunAs::for_owner(goal.owner_uid)?;
        self.prepare(&dir, goal, history)?;
        if !self.run(&dir, goal, iteration, run_as.as_ref())? {
            bail!("cancelled");
        }
        let path = dir.join("candidate.py");
        let source = read_left_file(&path, MAX_SOURCE).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                anyhow::anyhow!(
                    "the agent command wrote no candidate.py in {}",
                    dir.display()
                )
            } else {
                anyhow::anyhow!("reading {}: {e}", path.display())
            }
        })?;
        if source.trim().is_empty() || source.len() as u64 > MAX_SOURCE {
            bail!(
                "candidate.py in {} is empty or larger than {MAX_SOURCE} bytes",
                dir.display()
            );
        }
        let config_text = match read_left_file(&dir.join("config.json"), MAX_SIDE_FILE) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => bail!("reading config.json in {}: {e}", dir.display()),
        };
        let config = super::parse_config(config_text.as_deref(), "config.json")?;
        super::check_new(goal, history, &source, &config)?;
        let note = read_left_file(&dir.join("NOTE.md"), MAX_SIDE_FILE)
            .ok()
            .and_then(|n| {
                n.lines()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| l.trim().chars().take(300).collect())
            });
        Ok(Some(Proposal {
            seed: "command".into(),
            config,
            source: Some(source),
            note,
            tokens: None,
            by: None,
        }))
    }
}
