"""Process plumbing shared by the judge (worker.py) and its runners (runner.py): never outlive
the parent, keep stdout for protocol lines, resource limits, OOM preference, non-dumpable."""
from __future__ import annotations

import os
import signal
import sys

EXIT_ORPHANED = 4
# called before an orphaned process exits: the judge kills its runners' process groups here
EXIT_HOOKS: list = []

MAX_LINE = 4 * 2**20
ORPHAN_POLL_S = 0.2


def _exit_with_group(reason: str) -> None:
    """Exit now, taking along whatever this worker started (a compiler, a forked candidate)."""
    try:
        print(f"{os.path.basename(sys.argv[0] or 'harness')}: {reason}; exiting", file=sys.stderr, flush=True)
    except Exception:
        pass  # stderr is the dead daemon's pipe too
    for hook in list(EXIT_HOOKS):
        try:
            hook()
        except Exception:
            pass
    pgid = os.getpgrp()
    # Only when we lead our own group (the daemon starts us so): otherwise the group is
    # whoever ran us by hand, and it is not ours to kill. SIGKILL reaches us as well.
    if pgid == os.getpid():
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(EXIT_ORPHANED)


def _watch_for_orphaning(stdin_fd: int | None) -> None:
    """Exit when the daemon is gone: the write end of our stdin closed (EOF), or we were
    re-parented (the daemon died; its children go to init or a subreaper).

    A daemon thread, so it runs while the main thread is stuck in a candidate: a pure-Python
    endless loop hands the GIL over every switch interval (5 ms), and CUDA synchronisation
    releases it. PR_SET_PDEATHSIG is no substitute: it fires when the *thread* that forked
    us exits, and the daemon's runtime retires its blocking threads. (A C extension that
    spins holding the GIL starves this thread too; only the daemon's kill helps then.)
    """
    import select
    import threading
    import time

    parent = os.getppid()
    poller = select.poll()
    if stdin_fd is not None:
        # Event mask 0: report only hang-up and errors, not data waiting for the main thread.
        poller.register(stdin_fd, 0)
    gone = select.POLLHUP | select.POLLERR | select.POLLNVAL

    def stdin_hung_up() -> bool:
        if stdin_fd is None:
            time.sleep(ORPHAN_POLL_S)
            return False
        return any(ev & gone for _, ev in poller.poll(ORPHAN_POLL_S * 1000))

    def watch():
        while True:
            if stdin_hung_up():
                _exit_with_group("stdin closed (the daemon is gone or let go of this worker)")
            if os.getppid() != parent:
                _exit_with_group(f"parent process {parent} is gone")

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it exits (PR_SET_PDEATHSIG). For a
    runner that is the judge's main thread, which lives as long as the judge: it covers the case
    the orphan watch cannot, a runner the judge stopped (SIGSTOP while another is timed) when
    the judge died. Set by the runner itself, after the sandbox's uid switch (which clears it)."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _prefer_oom_kill() -> None:
    """Under memory pressure the kernel should take a worker (a crashed evaluation, a fresh
    worker next) rather than the daemon. Raising one's own score needs no privilege."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass


def _protocol_stream():
    """Keep the real stdout for protocol lines; everything else written to fd 1 goes to stderr."""
    sys.stdout.flush()
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    proto = os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8", newline="\n")
    sys.stdout = sys.stderr
    return proto


def _limits():
    """Resource limits from env (KERNELD_WORKER_MAX_FILES, _MAX_PROCS, _MAX_AS_MB); AS only in CPU mode."""
    try:
        import resource
    except ImportError:
        return {}
    applied = {}

    def setlim(res, env, default, scale=1):
        v = os.environ.get(env, default)
        if v in (None, "", "0", "unlimited"):
            return
        soft, hard = resource.getrlimit(res)
        want = int(v) * scale
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        try:
            resource.setrlimit(res, (want, hard))
            applied[env] = want
        except (ValueError, OSError):
            pass

    setlim(resource.RLIMIT_NOFILE, "KERNELD_WORKER_MAX_FILES", "4096")
    setlim(resource.RLIMIT_NPROC, "KERNELD_WORKER_MAX_PROCS", None)
    if os.environ.get("TRITON_INTERPRET") == "1" or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        setlim(resource.RLIMIT_AS, "KERNELD_WORKER_MAX_AS_MB", None, 2**20)
    setlim(resource.RLIMIT_CORE, "KERNELD_WORKER_MAX_CORE", "0")
    return applied




def set_nondumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): processes of the same uid (runners) can no longer read our
    /proc/<pid>/mem, environ or fds, nor ptrace us. The judge calls it on itself."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:
        return False
