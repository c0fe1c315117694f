//! One run of a hook's command: its own process group, a cleared environment, the event
//! as JSON on stdin, its output captured up to a bound, and a time limit after which the
//! whole group is killed. Nothing here can make kerneld wait longer than the limit (plus
//! a second's grace) or hold more than `KEEP` bytes of a hook's output.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// How much of a hook's output (stdout and stderr together) is kept for the log: the
/// end, where a failing program says why. A hook that floods its output costs this, not
/// what it wrote.
pub const KEEP: usize = 4096;
/// After SIGTERM at the time limit, how long the group has before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(1);
/// After the hook exits, how long its output is still read (a child it left behind may
/// hold the pipe open; it is not waited for).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    Exit(i32),
    Signal(i32),
    /// Killed (with its process group) at its time limit.
    TimedOut,
    /// The program could not be started (not found, not executable, ...).
    NotStarted(String),
}

/// The end of a hook's output and how much it wrote.
#[derive(Debug, Default)]
pub struct Captured {
    tail: Vec<u8>,
    pub total: u64,
}

impl Captured {
    fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 2 * KEEP {
            let cut = self.tail.len() - KEEP;
            self.tail.drain(..cut);
        }
    }

    /// The last `KEEP` bytes, as text.
    pub fn text(&self) -> String {
        let start = self.tail.len().saturating_sub(KEEP);
        String::from_utf8_lossy(&self.tail[start..])
            .trim()
            .to_string()
    }
}

#[derive(Debug)]
pub struct Outcome {
    pub ended: Ended,
    pub elapsed: Duration,
    pub output: Captured,
}

#[cfg(test)]
impl Outcome {
    pub fn ok(&self) -> bool {
        self.ended == Ended::Exit(0)
    }
}

/// Runs `command` (program and arguments) with exactly `env`, `input` on its stdin and
/// `limit` to finish in.
pub async fn run(
    command: &[String],
    env: &BTreeMap<String, String>,
    input: Vec<u8>,
    limit: Duration,
) -> Outcome {
    let t0 = Instant::now();
    let not_started = |why: String| Outcome {
        ended: Ended::NotStarted(why),
        elapsed: t0.elapsed(),
        output: Captured::default(),
    };
    let Some((program, args)) = command.split_first() else {
        return not_started("no command".into());
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: the time limit kills whatever it started, too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return not_started(format!("cannot start {program}: {e}")),
    };
    let pgid = child.id().map(|p| Pid::from_raw(p as i32));
    // stdin on a task of its own: a hook that never reads it must not block us (the
    // write ends with the run, whatever it got through).
    let writer = child.stdin.take().map(|mut stdin| {
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
        })
    });
    let captured = Arc::new(Mutex::new(Captured::default()));
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    .map(|r| tokio::spawn(read_into(r, captured.clone())))
    .collect();

    let ended = match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => Ended::Exit(code),
            (None, Some(sig)) => Ended::Signal(sig),
            (None, None) => Ended::Exit(-1),
        },
        Ok(Err(e)) => Ended::NotStarted(format!("cannot wait for {program}: {e}")),
        Err(_) => {
            if let Some(g) = pgid {
                let _ = killpg(g, Signal::SIGTERM);
                if tokio::time::timeout(TERM_GRACE, child.wait())
                    .await
                    .is_err()
                {
                    let _ = killpg(g, Signal::SIGKILL);
                }
                // Whatever of the group outlived SIGTERM's grace goes too.
                let _ = killpg(g, Signal::SIGKILL);
            }
            let _ = child.kill().await;
            Ended::TimedOut
        }
    };
    let elapsed = t0.elapsed();
    let _ = tokio::time::timeout(DRAIN_GRACE, async {
        for r in readers.iter() {
            while !r.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    })
    .await;
    for r in &readers {
        r.abort();
    }
    if let Some(w) = writer {
        w.abort();
    }
    let output = std::mem::take(&mut *captured.lock().unwrap_or_else(|e| e.into_inner()));
    Outcome {
        ended,
        elapsed,
        output,
    }
}

async fn read_into(mut r: Box<dyn AsyncRead + Send + Unpin>, into: Arc<Mutex<Captured>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => into
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    #[tokio::test]
    async fn a_hook_gets_its_environment_and_stdin_and_nothing_else() {
        let env = BTreeMap::from([("KERNELD_EVENT".to_string(), "new_best".to_string())]);
        let o = run(
            &sh("echo \"$KERNELD_EVENT|${HOME:-unset}|$(cat)\""),
            &env,
            b"{\"x\":1}".to_vec(),
            Duration::from_secs(10),
        )
        .await;
        assert!(o.ok(), "{o:?}");
        assert_eq!(o.output.text(), "new_best|unset|{\"x\":1}");
    }

    #[tokio::test]
    async fn a_hung_hook_and_its_children_are_killed_at_the_limit() {
        let marker = format!("sleep 37{}", std::process::id() % 1000);
        let o = run(
            &sh(&format!("{marker} & {marker}; echo never")),
            &BTreeMap::new(),
            Vec::new(),
            Duration::from_secs(1),
        )
        .await;
        assert_eq!(o.ended, Ended::TimedOut);
        assert!(
            o.elapsed >= Duration::from_secs(1) && o.elapsed < Duration::from_secs(4),
            "{o:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
        let alive = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == marker);
        assert!(!alive, "a child of the hung hook outlived it");
    }

    #[tokio::test]
    async fn a_flood_of_output_keeps_only_its_end() {
        let o = run(
            &sh("head -c 20000000 /dev/zero | tr '\\0' x; echo; echo the end >&2; exit 3"),
            &BTreeMap::new(),
            Vec::new(),
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(o.ended, Ended::Exit(3));
        assert_eq!(o.output.total, 20_000_000 + 1 + 8);
        assert!(o.output.text().len() <= KEEP && o.output.text().ends_with("the end"));
    }

    #[tokio::test]
    async fn a_missing_program_says_so() {
        let o = run(
            &["/nonexistent/hook".to_string()],
            &BTreeMap::new(),
            Vec::new(),
            Duration::from_secs(1),
        )
        .await;
        assert!(
            matches!(&o.ended, Ended::NotStarted(m) if m.contains("/nonexistent/hook") && m.contains("No such file")),
            "{o:?}"
        );
    }
}
