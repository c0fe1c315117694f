"""The judge's own compile caches on disk (issue #12): torch.compile of a task's baseline
(max-autotune: ~60 s for MLA's four shapes) is paid once per machine, not once per judge.

The daemon sets KERNELD_JUDGE_CACHE_DIR (docs/PROCESS_MODEL.md): a directory only judges
write. The judge points its own TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR there before
importing torch. Runners never see it: spawn.runner_env builds their environment from a
fixed list, with their caches inside their scratch, so a candidate cannot plant a compiled
artifact that a later judge's baseline would load. Without the variable nothing changes.
"""
from __future__ import annotations

import os
import sys

ENV = "KERNELD_JUDGE_CACHE_DIR"


def apply(environ=os.environ) -> str | None:
    """Points this process's compile caches into the judge cache; returns the directory
    used, or None (unset, or unusable: then the caches stay where they were, and the reason
    goes to stderr, since a missing cache only costs time)."""
    root = environ.get(ENV)
    if not root:
        return None
    if not os.path.isabs(root):
        print(f"judge_cache: {ENV}={root!r} is not absolute; compile caches not kept", file=sys.stderr, flush=True)
        return None
    try:
        # Only judges (the daemon's user or the runner user it runs judges as) read it.
        os.makedirs(root, mode=0o700, exist_ok=True)
        os.chmod(root, 0o700)
        for sub in ("inductor", "triton"):
            os.makedirs(os.path.join(root, sub), mode=0o700, exist_ok=True)
    except OSError as e:
        print(f"judge_cache: cannot use {root}: {e}; compile caches not kept", file=sys.stderr, flush=True)
        return None
    environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
    environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
    return root
