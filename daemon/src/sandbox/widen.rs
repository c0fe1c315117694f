//! The GPU ladder: how far the filesystem rules are widened when CUDA does not initialise
//! under the full policy.
//!
//! Found on an H200 (issue #10 follow-up): under the runner policy `torch.ones(1,
//! device="cuda")` failed with "Error 304: OS call failed or operation not supported on
//! this OS", whichever single dimension was relaxed (all of /dev, sockets, extra reads,
//! writes on /dev/shm and /tmp, root); it worked with Landlock granting everything. So the
//! driver needs some combination of reads, execs and writes outside the list, and which
//! one is not known. At start, in GPU mode, the daemon tries the levels in order over a
//! real CUDA init and uses the first that works; everything else (environment, uid,
//! rlimits, no_new_privs, seccomp, Landlock's network rules and scoping) is kept at every
//! level. A widened sandbox is *incomplete* and says what was widened and why.

use std::path::PathBuf;

use super::options::Options;

/// One rung of the ladder, from the full policy to Landlock's filesystem rules off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widening {
    /// The policy as built (`Policy::build`): nothing widened.
    None,
    /// Read and execute everywhere, open every device under /dev; writes still only in
    /// the scratch directory.
    ReadExecDev,
    /// Also write everywhere: Landlock's filesystem rules are effectively off.
    Everything,
}

impl Widening {
    /// The levels in the order they are tried.
    pub const LADDER: [Widening; 3] = [Widening::None, Widening::ReadExecDev, Widening::Everything];

    /// Widens `o`'s filesystem rules (only those) to this level.
    pub fn apply(self, o: &mut Options) {
        if self == Widening::None {
            return;
        }
        o.ro = vec![PathBuf::from("/")];
        o.exec = vec![PathBuf::from("/")];
        o.dev = vec![PathBuf::from("/dev")];
        if self == Widening::Everything {
            o.rw = vec![PathBuf::from("/")];
        }
    }

    /// What this level grants beyond the policy, for the status.
    pub fn describe(self) -> &'static str {
        match self {
            Widening::None => "the full filesystem policy",
            Widening::ReadExecDev => {
                "filesystem widened: read and execute everywhere, every device under /dev; \
                 writes still only in the slot's scratch directory"
            }
            Widening::Everything => {
                "filesystem widened: read, execute and write everywhere (Landlock's \
                 filesystem rules off; network, scoping, seccomp, uid and limits kept)"
            }
        }
    }
}

/// What the ladder found: the first level that works (None: none did), and each
/// failed level's error.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub level: Option<Widening>,
    pub failures: Vec<(Widening, String)>,
}

impl Choice {
    /// Tries the levels in order with `trial` and stops at the first that works.
    pub fn find(mut trial: impl FnMut(Widening) -> Result<(), String>) -> Choice {
        let mut failures = Vec::new();
        for level in Widening::LADDER {
            match trial(level) {
                Ok(()) => {
                    return Choice {
                        level: Some(level),
                        failures,
                    }
                }
                Err(e) => failures.push((level, e)),
            }
        }
        Choice {
            level: None,
            failures,
        }
    }

    /// The status's problem line; None when the full policy worked.
    pub fn problem(&self) -> Option<String> {
        let why = self
            .failures
            .iter()
            .map(|(l, e)| format!("under {}: {e}", l.describe()))
            .collect::<Vec<_>>()
            .join("; ");
        match self.level {
            Some(Widening::None) => None,
            Some(level) => Some(format!(
                "CUDA does not initialise under the evaluation sandbox's filesystem policy \
                 ({why}); GPU workers run with the {level_text}",
                level_text = level.describe()
            )),
            None => Some(format!(
                "CUDA does not initialise under the evaluation sandbox even with Landlock's \
                 filesystem rules off ({why}); GPU workers run without the sandbox (cleared \
                 environment only)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Options {
        Options {
            ro: vec!["/usr".into()],
            exec: vec!["/usr/bin/python3".into()],
            dev: vec!["/dev/nvidia0".into()],
            rw: vec!["/scratch/slot0".into()],
            uid: Some(990),
            no_net: true,
            no_unix: true,
            nofile: Some(4096),
            env: vec![("PATH".into(), "/usr/bin".into())],
            ..Options::default()
        }
    }

    #[test]
    fn the_full_policy_is_used_when_cuda_works_under_it() {
        let mut tried = Vec::new();
        let c = Choice::find(|l| {
            tried.push(l);
            Ok(())
        });
        assert_eq!(c.level, Some(Widening::None));
        assert_eq!(tried, vec![Widening::None], "no wider level is tried");
        assert_eq!(c.problem(), None, "the sandbox stays complete");
    }

    #[test]
    fn the_first_level_that_works_is_chosen_and_the_status_says_why() {
        let c = Choice::find(|l| match l {
            Widening::None => Err("Error 304: OS call failed".into()),
            _ => Ok(()),
        });
        assert_eq!(c.level, Some(Widening::ReadExecDev));
        let p = c.problem().unwrap();
        assert!(
            p.contains("Error 304") && p.contains("read and execute everywhere"),
            "{p}"
        );
        assert!(p.contains("writes still only in the slot's scratch"), "{p}");

        let c = Choice::find(|l| match l {
            Widening::Everything => Ok(()),
            _ => Err(format!("fails at {l:?}")),
        });
        assert_eq!(c.level, Some(Widening::Everything));
        assert_eq!(c.failures.len(), 2);
        let p = c.problem().unwrap();
        assert!(
            p.contains("fails at None") && p.contains("fails at ReadExecDev"),
            "{p}"
        );
        assert!(p.contains("Landlock's filesystem rules off"), "{p}");
    }

    #[test]
    fn when_no_level_works_workers_run_without_the_sandbox() {
        let c = Choice::find(|_| Err("Error 304".into()));
        assert_eq!(c.level, None);
        assert_eq!(c.failures.len(), 3);
        assert!(c.problem().unwrap().contains("without the sandbox"));
    }

    #[test]
    fn widening_touches_only_the_filesystem_rules() {
        let base = policy();
        let mut o = base.clone();
        Widening::None.apply(&mut o);
        assert_eq!(o, base);

        let mut o = base.clone();
        Widening::ReadExecDev.apply(&mut o);
        assert_eq!(o.ro, vec![PathBuf::from("/")]);
        assert_eq!(o.exec, vec![PathBuf::from("/")]);
        assert_eq!(o.dev, vec![PathBuf::from("/dev")]);
        assert_eq!(o.rw, base.rw, "writes stay in scratch");
        let keep = |x: &Options| {
            (
                x.uid,
                x.gid,
                x.no_net,
                x.no_unix,
                x.nofile,
                x.env.clone(),
                x.best_effort,
            )
        };
        assert_eq!(keep(&o), keep(&base));

        let mut o = base.clone();
        Widening::Everything.apply(&mut o);
        assert_eq!(o.rw, vec![PathBuf::from("/")]);
        assert_eq!(keep(&o), keep(&base));
    }
}
