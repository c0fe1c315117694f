"""Processes a candidate left behind: a runner's descendants that escaped its process group.

A runner is SIGKILLed as a process group, but code that gets past the static rules can fork a
child that calls setsid()/setpgid() and outlives the group, keeping a CPU (or, after an exec,
a GPU) busy while later candidates and the baselines are timed. The judge makes itself a child
subreaper (PR_SET_CHILD_SUBREAPER), so every orphan below it is re-parented to it instead of
init; after each runner's death it SIGKILLs its children that are in another session than its
own and are no live runner (runners lead their own sessions; the judge's own helpers, such as
Inductor's compile workers, stay in the judge's session).
"""
from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
_subreaper = None


def become_subreaper(on: bool = True) -> bool:
    """The judge (worker.py) calls this at start. False where the kernel or platform has no such
    thing (then a stray re-parents to init and only the sandbox's limits bound it). Only a
    process whose children in other sessions are all runners may be one: kill_strays kills the
    rest (a test process that also drives worker.py subprocesses in their own sessions is not)."""
    global _subreaper
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        ok = False
    _subreaper = ok and on
    return ok


def _children() -> dict[int, int]:
    """pid -> session id of this process's children (from /proc)."""
    me, out = os.getpid(), {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for n in names:
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and int(fields[1]) == me:
            out[int(n)] = int(fields[3])
    return out


def kill_strays(live: set[int], settle_s: float = 0.3) -> list[int]:
    """SIGKILL and reap the children that are in another session and not in `live`, until
    none has appeared for settle_s (a killed stray's own children re-parent here in turn)."""
    if not _subreaper:
        return []
    mine = os.getsid(0)
    killed: list[int] = []
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < settle_s:
        found = [p for p, sid in _children().items() if sid != mine and p not in live]
        if not found and not killed:
            return killed  # the usual case: one scan (a runner's escaped children re-parent at its exit)
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
                killed.append(p)
            except OSError:
                pass
        for p in found:
            try:
                os.waitpid(p, 0)
            except (ChildProcessError, OSError):
                pass
        if found:
            quiet_since = time.monotonic()
        else:
            time.sleep(0.05)
    return killed
