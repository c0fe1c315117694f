//! The GPU ladder (issue #24): which layers of the sandbox CUDA cannot live with, found at
//! start by CUDA trials, so that only those are widened, each as little as it works.
//!
//! History: on an H200 (driver 580) `cuInit` failed with "Error 304: OS call failed or
//! operation not supported on this OS" under the runner policy. Two causes were measured:
//! the seccomp rule refusing socket(AF_UNIX) (cuInit creates two SOCK_SEQPACKET sockets)
//! and Landlock refusing its writes to /proc/self/task/<tid>/comm (thread names). The
//! policy now allows both, narrowly (`--no-connect`; `--proc-write task`), so the strict
//! policy is expected to pass; this ladder is for the next driver that needs something
//! else, and says which layer it is.
//!
//! The search: the strict policy first (one trial when it works, the expected case). If it
//! fails, every layer at its widest (if that fails too, no sandbox lets CUDA start: the
//! workers run without one). Then, layer by layer in `Layer::ALL`'s order, the layer is
//! tightened back to its narrowest level that still works, the others as found so far.
//! The filesystem rung comes first: "everything" also opens /proc, which would hide the
//! /proc grant's own verdict. Each layer left wider than strict is named with the error
//! its stricter level gave. At most 2 + 10 trials.

use std::path::PathBuf;

use super::options::{Options, ProcWrite, Relax};

/// A layer of the sandbox that a trial can widen, in the order the search tightens them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Filesystem,
    ProcWrite,
    UnixSockets,
    Network,
    ProcessRules,
    Scoping,
    Limits,
    User,
}

impl Layer {
    pub const ALL: [Layer; 8] = [
        Layer::Filesystem,
        Layer::ProcWrite,
        Layer::UnixSockets,
        Layer::Network,
        Layer::ProcessRules,
        Layer::Scoping,
        Layer::Limits,
        Layer::User,
    ];

    fn index(self) -> usize {
        Layer::ALL.iter().position(|l| *l == self).unwrap_or(0)
    }

    /// The layer's name (the wire's `layer`).
    pub fn name(self) -> &'static str {
        match self {
            Layer::Filesystem => "filesystem",
            Layer::ProcWrite => "proc-write",
            Layer::UnixSockets => "unix-sockets",
            Layer::Network => "network",
            Layer::ProcessRules => "process-rules",
            Layer::Scoping => "scoping",
            Layer::Limits => "limits",
            Layer::User => "user",
        }
    }

    /// What each level allows, strict first.
    pub fn levels(self) -> &'static [&'static str] {
        match self {
            Layer::Filesystem => &[
                "the policy's paths",
                "read and execute everywhere, every device under /dev (writes only in scratch)",
                "read, write and execute everywhere (Landlock's filesystem rules off)",
            ],
            Layer::ProcWrite => &[
                "a runner writes only its own /proc/<pid>/task (thread names)",
                "a runner writes its own /proc/<pid>",
                "a runner writes all of /proc (what its uid may)",
            ],
            Layer::UnixSockets => &[
                "sockets created but reaching nothing (no connect, bind, listen, accept, sendmsg, sendto with an address)",
                "AF_UNIX sockets connect, bind and send freely",
            ],
            Layer::Network => &[
                "no IP sockets (seccomp), no TCP (Landlock)",
                "IP sockets allowed",
            ],
            Layer::ProcessRules => &[
                "no ptrace, process_vm_readv/writev or io_uring (seccomp)",
                "ptrace, process_vm_* and io_uring allowed",
            ],
            Layer::Scoping => &[
                "signals and abstract unix sockets scoped to the sandbox (Landlock)",
                "no scoping",
            ],
            Layer::Limits => &[
                "open files and processes limited",
                "open files and processes unlimited",
            ],
            Layer::User => &[
                "the runner user",
                "the daemon's own uid",
            ],
        }
    }

    fn widest(self) -> u8 {
        (self.levels().len() - 1) as u8
    }

    /// Widens `judge` and `runner` (both as the policy built them) to `level`.
    fn apply(self, level: u8, judge: &mut Options, runner: &mut Options) {
        if level == 0 {
            return;
        }
        if self == Layer::ProcWrite {
            // The judge already writes /proc (policy.rs says why).
            runner.proc_write = [ProcWrite::Task, ProcWrite::Pid, ProcWrite::All][level as usize];
            return;
        }
        for o in [judge, runner] {
            match self {
                Layer::Filesystem => {
                    o.ro = vec![PathBuf::from("/")];
                    o.exec = vec![PathBuf::from("/")];
                    o.dev = vec![PathBuf::from("/dev")];
                    if level >= 2 {
                        o.rw = vec![PathBuf::from("/")];
                    }
                }
                Layer::UnixSockets => o.no_connect = false,
                Layer::Network => o.no_net = false,
                Layer::ProcessRules => o.relax.push(Relax::ProcessRules),
                Layer::Scoping => o.relax.push(Relax::Scoping),
                Layer::Limits => (o.nofile, o.nproc) = (None, None),
                Layer::User => (o.uid, o.gid) = (None, None),
                Layer::ProcWrite => unreachable!("handled above"),
            }
        }
    }
}

/// A level for every layer: 0 is the policy as built, higher is wider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    levels: [u8; 8],
}

impl Variant {
    /// The policy as built.
    pub const STRICT: Variant = Variant { levels: [0; 8] };

    pub fn widest() -> Variant {
        let mut v = Variant::STRICT;
        for l in Layer::ALL {
            v.levels[l.index()] = l.widest();
        }
        v
    }

    pub fn level(&self, layer: Layer) -> u8 {
        self.levels[layer.index()]
    }

    pub fn with(mut self, layer: Layer, level: u8) -> Variant {
        self.levels[layer.index()] = level;
        self
    }

    /// Widens the judge's and runner's options to this variant.
    pub fn apply(&self, judge: &mut Options, runner: &mut Options) {
        for l in Layer::ALL {
            l.apply(self.level(l), judge, runner);
        }
    }

    /// Whether runners keep the runner user (the `user` layer is strict).
    pub fn keeps_user(&self) -> bool {
        self.level(Layer::User) == 0
    }

    /// The layers wider than strict, with their level.
    pub fn widened(&self) -> Vec<(Layer, u8)> {
        Layer::ALL
            .into_iter()
            .filter(|l| self.level(*l) > 0)
            .map(|l| (l, self.level(l)))
            .collect()
    }

    /// "strict", or the widened layers: "filesystem: read and execute everywhere, ...".
    pub fn describe(&self) -> String {
        let w = self.widened();
        if w.is_empty() {
            return "strict".into();
        }
        w.iter()
            .map(|(l, level)| format!("{}: {}", l.name(), l.levels()[*level as usize]))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// One CUDA trial: the variant and how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub variant: Variant,
    pub result: Result<(), String>,
}

/// What the ladder found.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// The variant workers run under; None: CUDA starts under no sandbox at all.
    pub variant: Option<Variant>,
    /// Every trial, in order.
    pub trials: Vec<Trial>,
    /// Each widened layer and the error CUDA gave with it strict.
    pub reasons: Vec<(Layer, String)>,
}

impl Finding {
    /// Runs the search (module docs) with `trial`.
    pub fn find(mut trial: impl FnMut(&Variant) -> Result<(), String>) -> Finding {
        let mut trials = Vec::new();
        let mut run = |v: Variant| {
            let result = trial(&v);
            trials.push(Trial {
                variant: v,
                result: result.clone(),
            });
            result
        };
        if run(Variant::STRICT).is_ok() {
            return Finding {
                variant: Some(Variant::STRICT),
                trials,
                reasons: Vec::new(),
            };
        }
        if run(Variant::widest()).is_err() {
            return Finding {
                variant: None,
                trials,
                reasons: Vec::new(),
            };
        }
        let mut current = Variant::widest();
        let mut reasons = Vec::new();
        for layer in Layer::ALL {
            let mut strict_error = None;
            for level in 0..layer.widest() {
                let v = current.with(layer, level);
                match run(v) {
                    Ok(()) => {
                        current = v;
                        break;
                    }
                    Err(e) => {
                        strict_error.get_or_insert(e);
                    }
                }
            }
            if current.level(layer) > 0 {
                reasons.push((layer, strict_error.unwrap_or_default()));
            }
        }
        Finding {
            variant: Some(current),
            trials,
            reasons,
        }
    }

    /// The status's problem line; None when the strict policy works.
    pub fn problem(&self) -> Option<String> {
        match self.variant {
            Some(v) if v == Variant::STRICT => None,
            Some(v) => {
                let why = self
                    .reasons
                    .iter()
                    .map(|(l, e)| format!("{} strict: {e}", l.name()))
                    .collect::<Vec<_>>()
                    .join("; ");
                Some(format!(
                    "CUDA does not initialise under the strict evaluation sandbox; the GPU \
                     trial widened {} ({why})",
                    v.describe()
                ))
            }
            None => {
                let why = self
                    .trials
                    .iter()
                    .filter_map(|t| t.result.as_ref().err().map(|e| (t.variant, e)))
                    .map(|(v, e)| format!("{}: {e}", v.describe()))
                    .collect::<Vec<_>>()
                    .join("; ");
                Some(format!(
                    "CUDA does not initialise under the evaluation sandbox even with every \
                     layer widened ({why}); GPU workers run without the sandbox (cleared \
                     environment only)"
                ))
            }
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
            gid: Some(990),
            no_net: true,
            no_connect: true,
            nofile: Some(4096),
            nproc: Some(4096),
            env: vec![("PATH".into(), "/usr/bin".into())],
            ..Options::default()
        }
    }

    /// A stand-in CUDA that needs each of `needs` at least at the level given.
    fn cuda(needs: &[(Layer, u8)]) -> impl FnMut(&Variant) -> Result<(), String> + '_ {
        move |v| match needs.iter().find(|(l, min)| v.level(*l) < *min) {
            Some((l, _)) => Err(format!("Error 304 ({} too strict)", l.name())),
            None => Ok(()),
        }
    }

    #[test]
    fn the_strict_policy_is_used_when_cuda_works_under_it() {
        let f = Finding::find(cuda(&[]));
        assert_eq!(f.variant, Some(Variant::STRICT));
        assert_eq!(f.trials.len(), 1, "no wider variant is tried");
        assert_eq!(f.problem(), None, "the sandbox stays complete");
    }

    #[test]
    fn one_layer_that_fails_is_named_and_widened_only_as_far_as_needed() {
        let f = Finding::find(cuda(&[(Layer::ProcWrite, 1)]));
        let v = f.variant.unwrap();
        assert_eq!(v.widened(), vec![(Layer::ProcWrite, 1)]);
        assert_eq!(f.reasons.len(), 1);
        assert!(f.reasons[0].1.contains("proc-write too strict"));
        let p = f.problem().unwrap();
        assert!(
            p.contains("proc-write: a runner writes its own /proc/<pid>"),
            "{p}"
        );
        assert!(f.trials.len() <= 12, "{}", f.trials.len());
    }

    #[test]
    fn two_causes_together_are_both_found() {
        // The H200 before the fix: sockets and /proc writes, neither enough alone.
        let f = Finding::find(cuda(&[(Layer::UnixSockets, 1), (Layer::ProcWrite, 2)]));
        let v = f.variant.unwrap();
        assert_eq!(
            v.widened(),
            vec![(Layer::ProcWrite, 2), (Layer::UnixSockets, 1)]
        );
        let named: Vec<&str> = f.reasons.iter().map(|(l, _)| l.name()).collect();
        assert_eq!(named, ["proc-write", "unix-sockets"]);
        assert!(v.keeps_user());
    }

    #[test]
    fn the_filesystem_rung_is_tightened_before_the_proc_grant_it_would_hide() {
        // Needs /proc writes only: "everything" would pass too, but must not be kept.
        let f = Finding::find(|v: &Variant| {
            let proc_ok = v.level(Layer::ProcWrite) >= 2 || v.level(Layer::Filesystem) >= 2;
            proc_ok.then_some(()).ok_or_else(|| "304".to_string())
        });
        assert_eq!(f.variant.unwrap().widened(), vec![(Layer::ProcWrite, 2)]);
    }

    #[test]
    fn when_nothing_works_workers_run_without_the_sandbox() {
        let f = Finding::find(|_| Err("Error 304".into()));
        assert_eq!(f.variant, None);
        assert_eq!(f.trials.len(), 2, "strict and widest only");
        assert!(f.problem().unwrap().contains("without the sandbox"));
    }

    #[test]
    fn each_layer_widens_only_its_own_options() {
        let base = policy();
        for layer in Layer::ALL {
            let (mut j, mut r) = (base.clone(), base.clone());
            Variant::STRICT.apply(&mut j, &mut r);
            assert_eq!((&j, &r), (&base, &base));
            let (mut j, mut r) = (base.clone(), base.clone());
            Variant::STRICT
                .with(layer, layer.widest())
                .apply(&mut j, &mut r);
            let changed = |o: &Options| {
                let mut fields = Vec::new();
                if o.ro != base.ro || o.exec != base.exec || o.dev != base.dev || o.rw != base.rw {
                    fields.push("paths");
                }
                if o.proc_write != base.proc_write {
                    fields.push("proc");
                }
                if o.no_connect != base.no_connect {
                    fields.push("connect");
                }
                if o.no_net != base.no_net {
                    fields.push("net");
                }
                if o.relax != base.relax {
                    fields.push("relax");
                }
                if (o.nofile, o.nproc) != (base.nofile, base.nproc) {
                    fields.push("limits");
                }
                if (o.uid, o.gid) != (base.uid, base.gid) {
                    fields.push("user");
                }
                assert_eq!(o.env, base.env, "{layer:?}: the environment never widens");
                fields
            };
            let want: &[&str] = match layer {
                Layer::Filesystem => &["paths"],
                Layer::ProcWrite => &["proc"],
                Layer::UnixSockets => &["connect"],
                Layer::Network => &["net"],
                Layer::ProcessRules | Layer::Scoping => &["relax"],
                Layer::Limits => &["limits"],
                Layer::User => &["user"],
            };
            assert_eq!(changed(&r), want, "{layer:?} (runner)");
            let judge_want: &[&str] = if layer == Layer::ProcWrite { &[] } else { want };
            assert_eq!(changed(&j), judge_want, "{layer:?} (judge)");
        }
        let (mut j, mut r) = (base.clone(), base.clone());
        Variant::STRICT
            .with(Layer::Filesystem, 1)
            .apply(&mut j, &mut r);
        assert_eq!(r.rw, base.rw, "read-and-execute keeps writes in scratch");
    }
}
