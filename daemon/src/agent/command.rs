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

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde_json::Value;

use super::{Agent, AgentEnv, Proposal};
use crate::context;
use crate::projection::GoalProjection;
use crate::wire::EvaluationRecord;

/// Default wall-clock limit of one run of the program.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Largest candidate accepted.
const MAX_SOURCE: u64 = 1 << 20;
/// Lines of `agent.log` quoted in an error.
const LOG_TAIL: usize = 20;

pub struct CommandAgent {
    argv: Vec<String>,
    timeout: Duration,
    env: AgentEnv,
}

impl CommandAgent {
    pub fn new(settings: &Value, env: AgentEnv) -> anyhow::Result<CommandAgent> {
        let argv: Vec<String> = settings
            .get("command")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if argv.is_empty() {
            bail!("agent `command` has no command to run");
        }
        let timeout = settings
            .get("timeout_s")
            .and_then(Value::as_u64)
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
        std::fs::write(dir.join("GOAL.md"), goal_md)?;
        std::fs::write(
            dir.join("CONTEXT.md"),
            context::compact(goal, history, context::budget(spec)),
        )?;
        if let Some(best) = &self.env.best_source {
            std::fs::write(dir.join("best.py"), best)?;
        }
        if let Some(last) = history.last() {
            std::fs::write(
                dir.join("last_report.json"),
                serde_json::to_vec_pretty(last)?,
            )?;
        }
        for seed in &spec.seeds {
            let name = Path::new(&seed.name)
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_else(|| "seed.py".into());
            std::fs::write(dir.join("seeds").join(name), &seed.source)?;
        }
        Ok(())
    }

    /// Runs the program; Ok(false) when it was cancelled.
    fn run(&self, dir: &Path, goal: &GoalProjection, iteration: u64) -> anyhow::Result<bool> {
        let log = std::fs::File::create(dir.join("agent.log"))?;
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .env("KERNELD_GOAL", &goal.id)
            .env("KERNELD_GOAL_NAME", &goal.spec.name)
            .env("KERNELD_ITERATION", iteration.to_string())
            .env("KERNELD_TASK_DIR", &goal.spec.task_dir)
            .env_remove("NOTIFY_SOCKET")
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start agent command `{}`", self.argv[0]))?;
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
    let text = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n")
}

impl Agent for CommandAgent {
    fn name(&self) -> &'static str {
        "command"
    }

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
        self.prepare(&dir, goal, history)?;
        if !self.run(&dir, goal, iteration)? {
            bail!("cancelled");
        }
        let path = dir.join("candidate.py");
        let mut source = String::new();
        std::fs::File::open(&path)
            .with_context(|| {
                format!(
                    "the agent command wrote no candidate.py in {}",
                    dir.display()
                )
            })?
            .take(MAX_SOURCE + 1)
            .read_to_string(&mut source)
            .with_context(|| format!("reading {}", path.display()))?;
        if source.trim().is_empty() || source.len() as u64 > MAX_SOURCE {
            bail!(
                "candidate.py in {} is empty or larger than {MAX_SOURCE} bytes",
                dir.display()
            );
        }
        let config_text = std::fs::read_to_string(dir.join("config.json")).ok();
        let config = super::parse_config(config_text.as_deref(), "config.json")?;
        super::check_new(goal, history, &source, &config)?;
        let note = std::fs::read_to_string(dir.join("NOTE.md"))
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
        }))
    }
}
