//! The daemon's side of the sandbox: what the judge (kernels/harness/worker.py) and the
//! runners it starts may read, write, execute and open, written as `kerneld-sandbox`
//! arguments. Paths are only the ones the evaluation needs: system libraries, the
//! Python environment, the kernels directory, the toolchain Triton runs, the leased
//! GPU's device nodes, and one scratch directory per slot. Never the state directory,
//! the configuration, the spool or a home directory (checked: `Policy::check`).

use std::path::{Path, PathBuf};

use super::options::{Options, ProcWrite};

/// Harness settings the daemon's environment may pass on to the judge (none secret).
pub const HARNESS_ENV: &[&str] = &[
    "KERNELD_STATIC_ALLOW_IMPORTS",
    "KERNELD_UNSAFE_SKIP_STATIC_CHECKS",
    "KERNELD_PEAK_GBPS",
    "KERNELD_PEAK_TFLOPS",
    "KERNELD_COMMIT",
];

/// Files under /etc that Python, glibc and the compilers read (never all of /etc: the
/// daemon's configuration lives there).
const ETC_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/alternatives",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/hosts",
];

/// System trees read (not executed) by everything: libraries, Python's stdlib when it
/// comes from the system, headers gcc needs for Triton's launcher stub.
const SYSTEM_RO: &[&str] = &[
    "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/proc", "/sys",
];

/// Programs Triton runs: a C compiler for its launcher stub (first use of a kernel),
/// ldconfig to find libcuda.
const TOOLS: &[&str] = &[
    "/usr/bin/cc",
    "/usr/bin/gcc",
    "/usr/bin/c++",
    "/usr/bin/g++",
    "/usr/bin/as",
    "/usr/bin/ld",
    "/usr/bin/ld.bfd",
    "/sbin/ldconfig",
    "/sbin/ldconfig.real",
    "/usr/sbin/ldconfig",
];
/// What the judge may execute beyond that: the system's program directories. The judge runs
/// the task's own code (reference, baselines), and a baseline such as torch.compile runs
/// system tools (`openssl sha512` over its precompiled C++ headers: refused, every mla
/// evaluation in the sandboxed judge failed so). Execute widens nothing its Python could not
/// do: a program it starts stays inside its Landlock domain and seccomp filter, and
/// no_new_privs voids setuid bits. Runners, which hold the candidate, keep `TOOLS` only.
const JUDGE_EXEC_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"];
/// The compilers' own helpers (cc1, collect2, lto-wrapper, ...).
const TOOL_DIRS: &[&str] = &["/usr/lib/gcc", "/usr/libexec/gcc"];
/// The dynamic loader: the kernel checks Execute on the ELF interpreter of every exec.
const LOADERS: &[&str] = &["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"];

/// Device nodes every evaluation gets.
const COMMON_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The GPU nodes a slot's sandbox opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuNodes {
    /// CPU mode: none.
    None,
    /// A local GPU: its node, `/dev/nvidia<minor>` (NVML's minor number).
    Local(PathBuf),
    /// A Slurm slot's GPU, known only on the compute node: `/dev/nvidia<N>` for each N in
    /// the step's `SLURM_STEP_GPUS`, read there by kerneld-sandbox (`--dev-from-env`),
    /// which also passes on the CUDA_VISIBLE_DEVICES Slurm set.
    Slurm,
}

/// The variable Slurm names a step's GPUs in (their device numbers, as in gres.conf's File=).
pub const SLURM_GPUS_VAR: &str = "SLURM_STEP_GPUS";

/// What a policy is built from (the daemon's configuration and the slot).
#[derive(Debug, Clone)]
pub struct PolicyInputs {
    pub sandbox_bin: PathBuf,
    pub python: PathBuf,
    pub kernels_dir: PathBuf,
    /// The slot's scratch root (the judge's only writable directory).
    pub scratch: PathBuf,
    /// Where the daemon puts the candidate file for the judge (read-only to it).
    pub inbox: PathBuf,
    /// The leased GPU's device nodes (GpuNodes::None: CPU mode).
    pub gpu: GpuNodes,
    /// Switch to this uid/gid (a root daemon's runner user).
    pub run_as: Option<(u32, u32)>,
    pub max_files: u64,
    pub max_procs: u64,
    /// Address-space limit (CPU mode; 0 = none).
    pub max_address_space: u64,
    pub extra_ro: Vec<PathBuf>,
    pub extra_exec: Vec<PathBuf>,
    /// Paths no grant may contain: state directory, configuration, spool.
    pub forbidden: Vec<PathBuf>,
    /// Sockets reach nothing (`--no-connect`): the daemon's own socket would otherwise be
    /// reachable. kerneld.toml's `sandbox_unix_sockets = true` turns it off.
    pub no_connect: bool,
    pub best_effort: bool,
}

/// The judge's and the runners' sandbox options for one slot.
#[derive(Debug, Clone)]
pub struct Policy {
    pub judge: Options,
    /// KERNELD_RUNNER_LAUNCHER: the sandbox binary, then these options.
    pub runner: Options,
}

fn push_existing(v: &mut Vec<PathBuf>, p: impl AsRef<Path>) {
    let p = p.as_ref();
    if p.exists() && !v.iter().any(|q| q == p) {
        v.push(p.to_path_buf());
    }
}

/// `python` as an absolute path: itself when it has a slash, else looked up on PATH.
pub fn resolve_python(python: &Path) -> PathBuf {
    if python.components().count() > 1 {
        return std::path::absolute(python).unwrap_or_else(|_| python.to_path_buf());
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(python))
                .find(|c| c.is_file())
        })
        .unwrap_or_else(|| python.to_path_buf())
}

/// The directories a Python installation reads: its venv (if any) and the prefix of
/// the interpreter it runs, plus the Triton binaries (ptxas) inside them.
pub fn python_dirs(python: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut ro = Vec::new();
    let mut exec = Vec::new();
    let python = resolve_python(python);
    // bin/python → the prefix two levels up; a venv has pyvenv.cfg there.
    if let Some(prefix) = python.parent().and_then(Path::parent) {
        if prefix.join("pyvenv.cfg").is_file() {
            push_existing(&mut ro, prefix);
        }
    }
    if let Ok(real) = std::fs::canonicalize(&python) {
        if let Some(prefix) = real.parent().and_then(Path::parent) {
            if prefix != Path::new("/usr") && prefix != Path::new("/") {
                push_existing(&mut ro, prefix);
            }
        }
        push_existing(&mut exec, &real);
    }
    // A system-wide install (/usr/bin/python3) keeps its packages in /usr/local or /usr
    // (readable as part of /usr); Triton's ptxas there must be executable too.
    let mut roots = ro.clone();
    roots.extend(["/usr/local", "/usr"].map(PathBuf::from));
    for bin in triton_bins(&roots) {
        push_existing(&mut exec, bin);
    }
    (ro, exec)
}

/// `<root>/lib*/python3*/{site,dist}-packages/triton/backends/nvidia/bin` that exist.
fn triton_bins(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots {
        for lib in ["lib", "lib64"] {
            let Ok(entries) = std::fs::read_dir(root.join(lib)) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_name().to_string_lossy().starts_with("python3") {
                    continue;
                }
                for packages in ["site-packages", "dist-packages"] {
                    let bin = e.path().join(packages).join("triton/backends/nvidia/bin");
                    if bin.is_dir() {
                        out.push(bin);
                    }
                }
            }
        }
    }
    out
}

impl Policy {
    pub fn build(i: &PolicyInputs) -> Result<Policy, String> {
        let mut ro: Vec<PathBuf> = Vec::new();
        let mut exec: Vec<PathBuf> = Vec::new();
        let mut dev: Vec<PathBuf> = Vec::new();
        for p in SYSTEM_RO.iter().chain(ETC_FILES) {
            push_existing(&mut ro, p);
        }
        // Debian's Python reads /etc/python3.X/sitecustomize.py through a link in /usr.
        if let Ok(entries) = std::fs::read_dir("/etc") {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("python3") {
                    push_existing(&mut ro, e.path());
                }
            }
        }
        let (py_ro, py_exec) = python_dirs(&i.python);
        for p in py_ro.iter().chain(&i.extra_ro) {
            push_existing(&mut ro, p);
        }
        push_existing(&mut ro, &i.kernels_dir);
        for p in py_exec.iter().chain(&i.extra_exec) {
            push_existing(&mut exec, p);
        }
        for t in TOOLS.iter().chain(LOADERS) {
            // Landlock checks the file a link resolves to.
            if let Ok(real) = std::fs::canonicalize(t) {
                push_existing(&mut exec, real);
            }
        }
        for d in TOOL_DIRS {
            push_existing(&mut exec, d);
        }
        for d in COMMON_DEVICES {
            push_existing(&mut dev, d);
        }
        let gpu = i.gpu != GpuNodes::None;
        match i.gpu {
            GpuNodes::None => {}
            GpuNodes::Local(_) => {
                for d in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] {
                    push_existing(&mut dev, d);
                }
            }
            // Checked on the compute node (kerneld-sandbox refuses a missing path): the two
            // every CUDA node has (uvm-tools is for profilers; cuInit never opened it).
            GpuNodes::Slurm => dev.extend(["/dev/nvidiactl", "/dev/nvidia-uvm"].map(PathBuf::from)),
        }
        if let GpuNodes::Local(node) = &i.gpu {
            if !node.exists() {
                return Err(format!(
                    "{} does not exist (the leased GPU's device node, from NVML's minor number)",
                    node.display()
                ));
            }
            push_existing(&mut dev, node);
        }
        let base = Options {
            nofile: Some(i.max_files),
            nproc: (i.max_procs > 0).then_some(i.max_procs),
            as_bytes: (!gpu && i.max_address_space > 0).then_some(i.max_address_space),
            uid: i.run_as.map(|(u, _)| u),
            gid: i.run_as.map(|(_, g)| g),
            ro,
            exec,
            dev,
            no_net: true,
            no_connect: i.no_connect,
            best_effort: i.best_effort,
            ..Options::default()
        };
        let mut base = base;
        if i.gpu == GpuNodes::Slurm {
            base.dev_from_env = vec![(SLURM_GPUS_VAR.into(), PathBuf::from("/dev/nvidia"))];
            base.pass_env = vec!["CUDA_VISIBLE_DEVICES".into(), SLURM_GPUS_VAR.into()];
        }
        let mut runner = base.clone();
        let mut judge = base;
        if gpu {
            // CUDA names its threads through /proc/<pid>/task/<tid>/comm (Error 304 when
            // refused). A runner may write only its own task directory. Its judge's
            // Landlock layer stays in force over it (layers stack, and each must allow),
            // and a runner's pid is not known when the judge starts: the judge gets
            // write (WriteFile and Truncate only) on /proc, which for its uid means the
            // files of its own uid's processes; never /proc/sys, which is root's.
            runner.proc_write = ProcWrite::Task;
            judge.proc_write = ProcWrite::All;
        }
        judge.rw.push(i.scratch.clone());
        push_existing(&mut judge.ro, &i.inbox);
        push_existing(&mut judge.exec, &i.sandbox_bin);
        for d in JUDGE_EXEC_DIRS {
            // Landlock checks the directory a link (/bin -> usr/bin) resolves to.
            if let Ok(real) = std::fs::canonicalize(d) {
                if !judge.exec.contains(&real) {
                    push_existing(&mut judge.exec, real);
                }
            }
        }
        let policy = Policy { judge, runner };
        policy.check(&i.forbidden)?;
        Ok(policy)
    }

    /// No grant may hold a forbidden path (the state directory, the configuration, the
    /// spool): Landlock cannot carve an exception out of a granted tree.
    fn check(&self, forbidden: &[PathBuf]) -> Result<(), String> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        for f in forbidden {
            let f = canon(f);
            for (kind, grants) in self.judge.paths() {
                for g in grants {
                    let g = canon(g);
                    // /proc and /sys are not where files are kept.
                    if g == Path::new("/proc") || g == Path::new("/sys") {
                        continue;
                    }
                    if f.starts_with(&g) {
                        return Err(format!(
                            "{} lies beneath {} (granted --{kind} to the evaluation sandbox), so \
                             candidates could read it; move it elsewhere (state_dir, config, \
                             spool_dir) or the granted directory",
                            f.display(),
                            g.display()
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// KERNELD_RUNNER_LAUNCHER: the JSON array of the sandbox binary and the runner options.
    pub fn launcher_json(&self, sandbox_bin: &Path) -> String {
        let mut argv = vec![sandbox_bin.display().to_string()];
        argv.extend(self.runner.to_args());
        serde_json::to_string(&argv).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(dir: &Path) -> PolicyInputs {
        PolicyInputs {
            sandbox_bin: PathBuf::from("/bin/true"),
            python: PathBuf::from("/usr/bin/env"),
            kernels_dir: dir.join("kernels"),
            scratch: dir.join("scratch"),
            inbox: dir.join("inbox"),
            gpu: GpuNodes::None,
            run_as: Some((990, 991)),
            max_files: 4096,
            max_procs: 512,
            max_address_space: 1 << 30,
            extra_ro: vec![],
            extra_exec: vec![],
            forbidden: vec![dir.join("state")],
            no_connect: true,
            best_effort: false,
        }
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kd-policy-{tag}-{}", std::process::id()));
        for sub in ["kernels", "scratch", "inbox", "state"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        d
    }

    #[test]
    fn the_judge_writes_only_its_scratch_and_runners_get_no_write_at_all() {
        let d = tmp("rw");
        let p = Policy::build(&inputs(&d)).unwrap();
        assert_eq!(p.judge.rw, vec![d.join("scratch")]);
        assert!(
            p.runner.rw.is_empty(),
            "the judge appends the runner's own scratch"
        );
        assert!(p.judge.ro.contains(&d.join("kernels")) && p.judge.ro.contains(&d.join("inbox")));
        assert!(!p.runner.ro.contains(&d.join("inbox")));
        assert!(p.judge.exec.contains(&PathBuf::from("/bin/true")));
        assert!(!p.runner.exec.contains(&PathBuf::from("/bin/true")));
        // the judge runs the task's baselines, which run system tools; runners do not
        let usr_bin = std::fs::canonicalize("/usr/bin").unwrap();
        assert!(p.judge.exec.contains(&usr_bin));
        assert!(!p.runner.exec.contains(&usr_bin));
        assert!(p.judge.no_net && p.runner.no_net && p.runner.no_connect && !p.runner.no_unix);
        assert_eq!(
            (p.judge.proc_write, p.runner.proc_write),
            (ProcWrite::None, ProcWrite::None),
            "CPU mode writes nothing under /proc"
        );
        assert_eq!((p.runner.uid, p.runner.gid), (Some(990), Some(991)));
        assert_eq!(
            p.runner.as_bytes,
            Some(1 << 30),
            "CPU mode limits the address space"
        );
        assert!(
            !p.judge.ro.iter().any(|r| r == Path::new("/etc")),
            "never all of /etc"
        );
        assert!(!p
            .judge
            .dev
            .iter()
            .any(|r| r.to_string_lossy().contains("nvidia")));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn triton_binaries_are_found_in_site_and_dist_packages() {
        let d = tmp("triton");
        for p in [
            "venv/lib/python3.12/site-packages/triton/backends/nvidia/bin",
            "local/lib/python3.12/dist-packages/triton/backends/nvidia/bin",
            "local/lib/perl5/site-packages/triton/backends/nvidia/bin",
        ] {
            std::fs::create_dir_all(d.join(p)).unwrap();
        }
        let found = triton_bins(&[d.join("venv"), d.join("local"), d.join("none")]);
        assert_eq!(
            found,
            [
                d.join("venv/lib/python3.12/site-packages/triton/backends/nvidia/bin"),
                d.join("local/lib/python3.12/dist-packages/triton/backends/nvidia/bin"),
            ]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_launcher_is_json_that_parses_back_to_the_runner_options() {
        let d = tmp("json");
        let p = Policy::build(&inputs(&d)).unwrap();
        let argv: Vec<String> =
            serde_json::from_str(&p.launcher_json(Path::new("/x/kerneld-sandbox"))).unwrap();
        assert_eq!(argv[0], "/x/kerneld-sandbox");
        let mut rest: Vec<std::ffi::OsString> = argv[1..].iter().map(Into::into).collect();
        rest.extend(["--".into(), "/bin/true".into()]);
        let mut back = Options::parse(rest).unwrap();
        back.program.clear();
        assert_eq!(back, p.runner);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_state_dir_beneath_a_grant_is_refused() {
        let d = tmp("forbidden");
        let mut i = inputs(&d);
        i.forbidden = vec![d.join("kernels/state")];
        let e = Policy::build(&i).unwrap_err();
        assert!(e.contains("lies beneath") && e.contains("kernels"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn gpu_mode_opens_only_the_leased_gpus_node() {
        let d = tmp("gpu");
        let mut i = inputs(&d);
        i.gpu = GpuNodes::Local(PathBuf::from("/dev/nvidia250"));
        // No such node on a test machine: a clear error, not a policy without the GPU.
        let e = Policy::build(&i).unwrap_err();
        assert!(
            e.contains("/dev/nvidia250 does not exist") && e.contains("minor number"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_slurm_gpu_is_named_on_the_node_and_proc_is_written_only_for_thread_names() {
        let d = tmp("slurm");
        let mut i = inputs(&d);
        i.gpu = GpuNodes::Slurm;
        let p = Policy::build(&i).unwrap();
        for o in [&p.judge, &p.runner] {
            assert_eq!(
                o.dev_from_env,
                vec![("SLURM_STEP_GPUS".into(), PathBuf::from("/dev/nvidia"))]
            );
            assert!(o.pass_env.contains(&"CUDA_VISIBLE_DEVICES".to_string()));
            assert!(o.dev.contains(&PathBuf::from("/dev/nvidiactl")));
            assert_eq!(o.as_bytes, None, "GPU mode: no address-space limit");
        }
        assert_eq!(p.runner.proc_write, ProcWrite::Task);
        assert_eq!(p.judge.proc_write, ProcWrite::All);
        let _ = std::fs::remove_dir_all(&d);
    }
}
