//! Slurm: evaluation slots on GPUs that a Slurm cluster allocates. Only this module runs
//! Slurm's commands (salloc, srun, squeue, scancel).
//!
//! kerneld does not schedule the cluster: it asks Slurm for one allocation per slot
//! (`salloc --no-shell --gres=gpu:1`), and runs the harness worker in it as a job step
//! (`srun --jobid=N -- <the worker's argv>`), whose stdin/stdout carry the worker
//! protocol. Why `salloc --no-shell` rather than an `sbatch` holder job: the allocation
//! holds nothing but the resources (no batch step whose lifetime and resource share the
//! worker's steps would have to work around), it is granted or pending at once with its
//! job id on salloc's stderr, and the job ends only when kerneld cancels it or Slurm
//! takes it (time limit, preemption, node failure).
//!
//! Every job is named `kerneld-<tag>-<slot>`: the tag comes from the daemon's state
//! directory, so after a restart the daemon finds its own jobs (`squeue --name`) even
//! one whose id never reached the log (killed between salloc and the commit), and two
//! daemons on one cluster never take each other's.
//!
//! An allocation is not a batch job, so Slurm never requeues it (`scontrol requeue`
//! refuses, and preemption in REQUEUE mode cancels it): a job Slurm takes ends, and the
//! slot asks for a new one. Still, a job that kerneld stops using is always `scancel`led
//! first, so that nothing of ours can come back holding a GPU.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Most time one squeue/scancel may take (slurmctld busy or down).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// `[slurm]` in kerneld.toml. A partition turns Slurm slots on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSlurmConfig {
    pub partition: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub constraint: Option<String>,
    /// Each job's time limit, e.g. "2h" (Slurm counts whole minutes; rounded up).
    pub time_limit: Option<String>,
    /// The most jobs (slots) held at once.
    pub max_jobs: Option<u32>,
    /// An allocation without an evaluation for this long is given back, e.g. "10m".
    pub idle_release: Option<String>,
    /// What each job asks for, `--gres=<gres>`.
    pub gres: Option<String>,
    /// Where salloc, srun, squeue and scancel are (default: PATH).
    pub bin_dir: Option<PathBuf>,
    /// Whether this host's own devices serve goals too. Default: yes when it has GPUs,
    /// no when it would be the CPU fallback (a login node must not run evaluations).
    pub local: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SlurmConfig {
    pub partition: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub constraint: Option<String>,
    pub time_limit: Option<Duration>,
    pub max_jobs: u32,
    pub idle_release: Duration,
    pub gres: String,
    pub bin_dir: Option<PathBuf>,
    pub local: Option<bool>,
}

impl SlurmConfig {
    /// Checks and fills defaults; `dur` parses durations like the rest of kerneld.toml.
    pub fn from_raw(
        raw: RawSlurmConfig,
        dur: impl Fn(&str, &str) -> Result<Duration, String>,
    ) -> Result<SlurmConfig, String> {
        if raw.partition.trim().is_empty() {
            return Err("[slurm] partition is empty; name the partition kerneld may use".into());
        }
        let max_jobs = raw.max_jobs.unwrap_or(1);
        if max_jobs == 0 || max_jobs > 256 {
            return Err(format!(
                "[slurm] max_jobs = {max_jobs}: must be 1..=256 (remove [slurm] to use no cluster)"
            ));
        }
        Ok(SlurmConfig {
            partition: raw.partition,
            account: raw.account,
            qos: raw.qos,
            constraint: raw.constraint,
            time_limit: raw
                .time_limit
                .as_deref()
                .map(|s| dur(s, "slurm.time_limit"))
                .transpose()?,
            max_jobs,
            idle_release: raw
                .idle_release
                .as_deref()
                .map(|s| dur(s, "slurm.idle_release"))
                .transpose()?
                .unwrap_or(Duration::from_secs(600)),
            gres: raw.gres.unwrap_or_else(|| "gpu:1".into()),
            bin_dir: raw.bin_dir,
            local: raw.local,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("could not run `{0}`: {1}; is Slurm installed (salloc, srun, squeue, scancel on PATH, or [slurm] bin_dir)?")]
    Spawn(String, std::io::Error),
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("`{0}` did not answer within {1:?}; is slurmctld up (`scontrol ping`)?")]
    Timeout(String, Duration),
    #[error("`{cmd}` printed no job id: {stderr}")]
    NoJobId { cmd: String, stderr: String },
}

/// A job as squeue shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub id: u64,
    pub name: String,
    /// RUNNING, PENDING, COMPLETING, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, ...
    pub state: String,
    pub node: Option<String>,
    /// Seconds left before its time limit (None: no limit, or not running).
    pub time_left_s: Option<u64>,
    /// squeue's reason (why pending, or why it ended).
    pub reason: String,
}

impl JobInfo {
    pub fn is_running(&self) -> bool {
        self.state == "RUNNING"
    }
    pub fn is_pending(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING" | "CONFIGURING" | "REQUEUED" | "RESIZING"
        )
    }
}

/// The cluster as one daemon sees it: its configuration and the tag of its jobs.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub cfg: SlurmConfig,
    tag: String,
}

/// A job asked for: its id (to record) and the salloc still waiting for the grant.
pub struct Request {
    pub id: u64,
    salloc: tokio::process::Child,
    stderr: Vec<String>,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
}

impl Cluster {
    /// `state_dir` names the daemon: its jobs' names carry a hash of it.
    pub fn new(cfg: SlurmConfig, state_dir: &Path) -> Cluster {
        let canon = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
        let hash = Sha256::digest(canon.to_string_lossy().as_bytes());
        Cluster {
            cfg,
            tag: hex::encode(&hash[..4]),
        }
    }

    /// The name of slot `slot`'s job.
    pub fn job_name(&self, slot: usize) -> String {
        format!("kerneld-{}-{slot}", self.tag)
    }

    /// The slot a job of ours serves, from its name (None: not one of ours).
    pub fn slot_of(&self, name: &str) -> Option<usize> {
        name.strip_prefix(&format!("kerneld-{}-", self.tag))?
            .parse()
            .ok()
    }

    /// Slurm's `name` command: in `bin_dir`, else the first on the daemon's PATH, as an
    /// absolute path (a worker's environment may be cleared; srun must still be found).
    fn program(&self, name: &str) -> PathBuf {
        if let Some(d) = &self.cfg.bin_dir {
            return d.join(name);
        }
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from(name))
    }

    /// Runs a short Slurm command and returns its stdout.
    async fn run(&self, program: &str, args: &[String]) -> Result<String, SlurmError> {
        let cmd_text = format!("{program} {}", args.join(" "));
        let mut cmd = Command::new(self.program(program));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| SlurmError::Spawn(cmd_text.clone(), e))?;
        let out = tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| SlurmError::Timeout(cmd_text.clone(), COMMAND_TIMEOUT))?
            .map_err(|e| SlurmError::Spawn(cmd_text.clone(), e))?;
        if !out.status.success() {
            return Err(SlurmError::Failed {
                cmd: cmd_text,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// salloc's arguments for slot `slot` (everything the configuration asks of a job).
    pub fn salloc_args(&self, slot: usize) -> Vec<String> {
        let c = &self.cfg;
        let mut a = vec![
            "--no-shell".to_string(),
            format!("--job-name={}", self.job_name(slot)),
            format!("--partition={}", c.partition),
            format!("--gres={}", c.gres),
            "--nodes=1".into(),
            "--ntasks=1".into(),
        ];
        if let Some(v) = &c.account {
            a.push(format!("--account={v}"));
        }
        if let Some(v) = &c.qos {
            a.push(format!("--qos={v}"));
        }
        if let Some(v) = &c.constraint {
            a.push(format!("--constraint={v}"));
        }
        if let Some(t) = c.time_limit {
            // Slurm's limits are whole minutes.
            a.push(format!("--time={}", t.as_secs().div_ceil(60).max(1)));
        }
        a
    }

    /// Asks for slot `slot`'s allocation. Returns as soon as Slurm named the job (granted
    /// or pending), so the caller can record the id before waiting for the grant.
    pub async fn request(&self, slot: usize) -> Result<Request, SlurmError> {
        let args = self.salloc_args(slot);
        let cmd_text = format!("salloc {}", args.join(" "));
        let mut child = Command::new(self.program("salloc"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| SlurmError::Spawn(cmd_text.clone(), e))?;
        let mut lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let mut seen = Vec::new();
        let read_id = async {
            while let Ok(Some(line)) = lines.next_line().await {
                // "salloc: Granted job allocation 17" / "salloc: Pending job allocation 17"
                if let Some(id) = line
                    .split("job allocation ")
                    .nth(1)
                    .and_then(|r| r.trim().parse::<u64>().ok())
                {
                    return Some(id);
                }
                seen.push(line);
            }
            None
        };
        let id = tokio::time::timeout(COMMAND_TIMEOUT, read_id)
            .await
            .map_err(|_| SlurmError::Timeout(cmd_text.clone(), COMMAND_TIMEOUT))?;
        match id {
            Some(id) => Ok(Request {
                id,
                salloc: child,
                stderr: seen,
                lines,
            }),
            None => {
                let status = child
                    .wait()
                    .await
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                Err(SlurmError::Failed {
                    cmd: cmd_text,
                    status,
                    stderr: seen.join("\n"),
                })
            }
        }
    }

    /// Waits until the requested job runs and returns it as squeue shows it. The caller
    /// bounds the wait (a pending job may wait for hours); dropping the future leaves the
    /// job to the caller to cancel.
    pub async fn granted(&self, mut req: Request) -> Result<JobInfo, SlurmError> {
        // salloc --no-shell exits once the allocation is granted (0) or refused.
        while let Ok(Some(line)) = req.lines.next_line().await {
            req.stderr.push(line);
        }
        let status = req
            .salloc
            .wait()
            .await
            .map_err(|e| SlurmError::Spawn("salloc".into(), e))?;
        if !status.success() {
            return Err(SlurmError::Failed {
                cmd: format!("salloc (job {})", req.id),
                status: status.to_string(),
                stderr: req.stderr.join("\n"),
            });
        }
        match self.job(req.id).await? {
            Some(j) if j.is_running() => Ok(j),
            Some(j) => Err(SlurmError::Failed {
                cmd: format!("salloc (job {})", req.id),
                status: format!("granted, but the job is {}", j.state),
                stderr: j.reason,
            }),
            None => Err(SlurmError::Failed {
                cmd: format!("salloc (job {})", req.id),
                status: "granted, but squeue no longer knows the job".into(),
                stderr: req.stderr.join("\n"),
            }),
        }
    }

    const FORMAT: &'static str = "%i|%j|%T|%N|%L|%r";

    fn parse_jobs(text: &str) -> Vec<JobInfo> {
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.trim().splitn(6, '|').collect();
                if f.len() < 6 {
                    return None;
                }
                Some(JobInfo {
                    id: f[0].parse().ok()?,
                    name: f[1].to_string(),
                    state: f[2].to_string(),
                    node: (!f[3].is_empty() && f[3] != "(null)").then(|| f[3].to_string()),
                    time_left_s: parse_slurm_time(f[4]),
                    reason: f[5].to_string(),
                })
            })
            .collect()
    }

    /// One job, running or recently ended (None: Slurm no longer knows it).
    pub async fn job(&self, id: u64) -> Result<Option<JobInfo>, SlurmError> {
        let args = vec![
            "-h".into(),
            "-t".into(),
            "all".into(),
            format!("--jobs={id}"),
            format!("--format={}", Self::FORMAT),
        ];
        match self.run("squeue", &args).await {
            Ok(out) => Ok(Self::parse_jobs(&out).into_iter().find(|j| j.id == id)),
            // squeue refuses an id it has purged ("Invalid job id specified").
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every job of this daemon Slurm knows (running, pending, or recently ended), with
    /// the slot its name gives. Ended ones are included so a caller can say how they ended.
    pub async fn our_jobs(&self) -> Result<Vec<(usize, JobInfo)>, SlurmError> {
        // By user, then by name prefix: a slot beyond today's max_jobs (the config
        // shrank) is still found.
        let args = vec![
            "-h".into(),
            "-t".into(),
            "all".into(),
            format!("--user={}", nix::unistd::geteuid()),
            format!("--format={}", Self::FORMAT),
        ];
        let out = self.run("squeue", &args).await?;
        Ok(Self::parse_jobs(&out)
            .into_iter()
            .filter_map(|j| self.slot_of(&j.name).map(|s| (s, j)))
            .collect())
    }

    /// Ends a job (idempotent: one that already ended is not an error).
    pub async fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        match self.run("scancel", &[id.to_string()]).await {
            Ok(_) => Ok(()),
            Err(SlurmError::Failed { stderr, .. })
                if stderr.contains("already completing or completed")
                    || stderr.contains("Invalid job id") =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Ends every step of a job (a worker left from before a kill or a restart), keeping
    /// the allocation: the next worker step must not wait for, or share with, an old one.
    pub async fn cancel_steps(&self, id: u64) -> Result<usize, SlurmError> {
        let args = vec![
            "-h".into(),
            "-s".into(),
            format!("--jobs={id}"),
            "--format=%i".into(),
        ];
        let out = match self.run("squeue", &args).await {
            Ok(o) => o,
            Err(SlurmError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => {
                return Ok(0)
            }
            Err(e) => return Err(e),
        };
        let steps: Vec<String> = out
            .split_whitespace()
            .filter(|s| s.contains('.') && !s.ends_with(".extern") && !s.ends_with(".batch"))
            .map(str::to_string)
            .collect();
        if !steps.is_empty() {
            self.run("scancel", &steps).await?;
        }
        Ok(steps.len())
    }

    /// The argv prefix that runs a worker as a step of job `id`: `srun ... --`, to which
    /// the caller appends the worker's own argv (a sandbox wrapper included), so all of
    /// it runs on the compute node. stdin/stdout are the worker protocol.
    pub fn srun_prefix(&self, id: u64) -> Vec<String> {
        vec![
            self.program("srun").to_string_lossy().into_owned(),
            format!("--jobid={id}"),
            "--nodes=1".into(),
            "--ntasks=1".into(),
            // The step takes the job's GPU (gres) as it is; the worker sees it as
            // CUDA_VISIBLE_DEVICES set by Slurm.
            "--quiet".into(),
            // The worker's own environment (TRITON_INTERPRET, PYTHONUNBUFFERED, limits).
            "--export=ALL".into(),
            // The step dies with the worker, and the worker with a lost srun (stdin EOF).
            "--kill-on-bad-exit=1".into(),
            "--".into(),
        ]
    }
}

/// squeue's time ("1-02:03:04", "02:03:04", "03:04", "UNLIMITED", "INVALID") in seconds.
pub fn parse_slurm_time(s: &str) -> Option<u64> {
    let s = s.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts.as_slice() {
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3600 + m * 60 + s,
        [m] => m * 60,
        _ => return None,
    };
    Some(days * 86400 + secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SlurmConfig {
        SlurmConfig::from_raw(
            RawSlurmConfig {
                partition: "gpu".into(),
                account: Some("lab".into()),
                qos: None,
                constraint: Some("h200".into()),
                time_limit: Some("90s".into()),
                max_jobs: Some(2),
                idle_release: None,
                gres: None,
                bin_dir: None,
                local: None,
            },
            |s, _| {
                crate::goal::parse_duration(s)
                    .map(Duration::from_secs)
                    .map_err(|e| e.to_string())
            },
        )
        .unwrap()
    }

    #[test]
    fn salloc_asks_for_what_the_config_says() {
        let c = Cluster::new(cfg(), Path::new("/nonexistent/state"));
        let a = c.salloc_args(1);
        assert!(a.contains(&"--no-shell".to_string()));
        assert!(a.contains(&"--partition=gpu".to_string()));
        assert!(a.contains(&"--gres=gpu:1".to_string()));
        assert!(a.contains(&"--account=lab".to_string()));
        assert!(a.contains(&"--constraint=h200".to_string()));
        assert!(
            a.contains(&"--time=2".to_string()),
            "90 s rounds up to 2 minutes: {a:?}"
        );
        assert!(a.contains(&format!("--job-name={}", c.job_name(1))));
        assert_eq!(c.slot_of(&c.job_name(1)), Some(1));
        assert_eq!(c.slot_of("kerneld-other-1"), None);
        assert_eq!(c.cfg.idle_release, Duration::from_secs(600));
    }

    #[test]
    fn two_state_dirs_have_two_tags() {
        let a = Cluster::new(cfg(), Path::new("/a/state"));
        let b = Cluster::new(cfg(), Path::new("/b/state"));
        assert_ne!(a.job_name(0), b.job_name(0));
        assert_eq!(a.slot_of(&b.job_name(0)), None);
    }

    #[test]
    fn squeue_lines_and_times_parse() {
        let jobs = Cluster::parse_jobs(
            "17|kerneld-ab-0|RUNNING|node3|1:59:30|None\n18|kerneld-ab-1|PENDING||UNLIMITED|Resources\nbad line\n",
        );
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].node.as_deref(), Some("node3"));
        assert_eq!(jobs[0].time_left_s, Some(7170));
        assert!(jobs[0].is_running());
        assert!(jobs[1].is_pending());
        assert_eq!(jobs[1].node, None);
        assert_eq!(jobs[1].time_left_s, None);
        assert_eq!(parse_slurm_time("1-00:00:01"), Some(86401));
        assert_eq!(parse_slurm_time("INVALID"), None);
    }

    #[test]
    fn bad_configs_say_what_to_do() {
        let raw = |max| RawSlurmConfig {
            partition: "gpu".into(),
            account: None,
            qos: None,
            constraint: None,
            time_limit: None,
            max_jobs: Some(max),
            idle_release: None,
            gres: None,
            bin_dir: None,
            local: None,
        };
        let e = SlurmConfig::from_raw(raw(0), |_, _| Ok(Duration::ZERO)).unwrap_err();
        assert!(e.contains("max_jobs"), "{e}");
    }
}
