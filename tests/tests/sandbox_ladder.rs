//! The GPU start-up ladder (sandbox::widen over sandbox::trial::GpuTrial) with the real
//! kerneld-sandbox, a judge starting a runner through its launcher as worker.py does,
//! and a stand-in for CUDA's start that does what cuInit was measured to do on an H200
//! (two AF_UNIX SOCK_SEQPACKET sockets, a new thread named through
//! /proc/self/task/<tid>/comm), plus one more need per case. The ladder must pick the
//! strict policy when it works (one trial), and otherwise widen only the layer the need
//! is in, as little as it works, and name it.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use kerneld::config::Config;
use kerneld::gpu::DeviceInfo;
use kerneld::sandbox::policy::{GpuNodes, PolicyInputs};
use kerneld::sandbox::trial::{GpuCode, GpuTrial};
use kerneld::sandbox::widen::{Finding, Layer, Variant};
use kerneld_e2e::*;

mod sbx;
use sbx::landlock_here;

/// What cuInit does that the sandbox has to allow (cuda_calls.txt of the 2026-12-03 probe).
const CUINIT: &str = r#"
import socket, threading
keep = [socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC) for _ in range(2)]
tid, go = [], threading.Event()
t = threading.Thread(target=lambda: (tid.append(threading.get_native_id()), go.wait()))
t.start()
while not tid:
    pass
with open("/proc/self/task/%d/comm" % tid[0], "wb") as f:
    f.write(b"cuda-EvtHandlr")
go.set(); t.join()
"#;

struct Setup {
    _dir: TempDir,
    cfg: Config,
    inputs: PolicyInputs,
    gpu: DeviceInfo,
}

fn setup(tag: &str) -> Setup {
    let dir = TempDir::new(tag);
    let mut cfg = Config::new(dir.path().join("state"), dir.path().join("sock"));
    cfg.python = python();
    cfg.kernels_dir = repo_root().join("kernels");
    let inputs = PolicyInputs {
        sandbox_bin: binary("kerneld-sandbox"),
        python: cfg.python.clone(),
        kernels_dir: cfg.kernels_dir.clone(),
        scratch: PathBuf::from("/"),
        inbox: PathBuf::from("/"),
        // The GPU's node: any character device will do for a stand-in that opens none.
        gpu: GpuNodes::Local(PathBuf::from("/dev/zero")),
        run_as: None,
        max_files: 4096,
        max_procs: 4096,
        max_address_space: 0,
        extra_ro: vec![],
        extra_exec: vec![],
        forbidden: vec![cfg.state_dir.clone()],
        no_connect: true,
        best_effort: false,
    };
    let gpu = DeviceInfo {
        uuid: "GPU-stand-in".into(),
        name: "stand-in".into(),
        compute_capability: None,
        memory_total_mib: None,
        is_gpu: true,
        minor: None,
    };
    Setup {
        _dir: dir,
        cfg,
        inputs,
        gpu,
    }
}

fn ladder(s: &Setup, code: &str) -> Finding {
    GpuTrial {
        cfg: &s.cfg,
        bin: &binary("kerneld-sandbox"),
        inputs: s.inputs.clone(),
        gpu: &s.gpu,
        code: GpuCode {
            judge: code,
            runner: code,
        },
    }
    .ladder()
}

fn widened(f: &Finding) -> Vec<(&'static str, u8)> {
    f.variant
        .expect("a variant")
        .widened()
        .into_iter()
        .map(|(l, level)| (l.name(), level))
        .collect()
}

#[test]
fn the_strict_policy_passes_what_cuinit_does_in_one_trial() {
    if !landlock_here() {
        return;
    }
    let s = setup("ladder-strict");
    let f = ladder(&s, CUINIT);
    assert_eq!(f.variant, Some(Variant::STRICT), "{:#?}", f.trials);
    assert_eq!(f.trials.len(), 1);
    assert!(f.problem().is_none());
}

#[test]
fn a_driver_that_connects_gets_only_unix_sockets_widened() {
    if !landlock_here() {
        return;
    }
    let s = setup("ladder-connect");
    let path = s._dir.path().join("daemon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let code = format!(
        "{CUINIT}\nc = socket.socket(socket.AF_UNIX); c.connect({:?})\n",
        path.display().to_string()
    );
    let f = ladder(&s, &code);
    assert_eq!(widened(&f), [("unix-sockets", 1)], "{:#?}", f.trials);
    assert_eq!(f.reasons[0].0, Layer::UnixSockets);
    assert!(
        f.reasons[0].1.contains("Permission denied"),
        "the reason is the strict level's error: {:?}",
        f.reasons
    );
    let p = f.problem().unwrap();
    assert!(p.contains("unix-sockets: AF_UNIX sockets connect"), "{p}");
}

#[test]
fn a_driver_that_writes_its_oom_score_gets_its_own_proc_directory_not_all_of_proc() {
    if !landlock_here() {
        return;
    }
    let s = setup("ladder-proc");
    let code = format!("{CUINIT}\nopen('/proc/self/oom_score_adj', 'w').write('0')\n");
    let f = ladder(&s, &code);
    assert_eq!(widened(&f), [("proc-write", 1)], "{:#?}", f.trials);
    assert!(f.trials.len() <= 12, "{}", f.trials.len());
}

#[test]
fn a_driver_that_writes_outside_scratch_gets_the_filesystem_rung_named() {
    if !landlock_here() {
        return;
    }
    let s = setup("ladder-fs");
    let target = std::env::temp_dir().join(format!("kd-ladder-{}", std::process::id()));
    let code = format!(
        "{CUINIT}\nopen({:?}, 'w').write('x')\n",
        target.display().to_string()
    );
    let f = ladder(&s, &code);
    let _ = std::fs::remove_file(&target);
    assert_eq!(widened(&f), [("filesystem", 2)], "{:#?}", f.trials);
}

#[test]
fn a_driver_that_never_starts_leaves_no_sandbox_and_says_why() {
    if !landlock_here() {
        return;
    }
    let s = setup("ladder-none");
    let f = ladder(&s, "raise RuntimeError('Error 304: OS call failed')");
    assert_eq!(f.variant, None);
    assert_eq!(f.trials.len(), 2);
    let p = f.problem().unwrap();
    assert!(
        p.contains("the judge: RuntimeError: Error 304") && p.contains("without the sandbox"),
        "{p}"
    );
    assert!(
        !Path::new(&s.cfg.scratch_dir().join("trial")).exists(),
        "trial dir left"
    );
}
