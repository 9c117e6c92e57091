"""Which code made a run: the commit of tracker's source and of its CUDA kernels (``kernels/``), and
whether either tree had changes not committed, read from the git checkout tracker runs from.

Once a process (a run's figures do not change with a commit made while it runs); nothing where
tracker is not run from a git checkout (an installed wheel) or git is not on the PATH: the version
alone then says which tracker it was.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from tracker import __version__

ROOT = Path(__file__).resolve().parents[1]
KERNELS = "kernels"


@functools.cache
def provenance() -> dict:
    """{'version', 'commit', 'dirty', 'kernels_commit', 'kernels_dirty'}: the last two name the
    newest commit that changed kernels/ and whether kernels/ differs from it."""
    found: dict = {"version": __version__}
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return found
    commit = _git(git, "rev-parse", "HEAD")
    if commit is None:
        return found
    changed = _git(git, "status", "--porcelain", "--untracked-files=no", "--", "tracker", KERNELS) or ""
    return found | {
        "commit": commit,
        "dirty": any(line[3:].startswith("tracker/") for line in changed.splitlines()),
        "kernels_commit": _git(git, "log", "-1", "--format=%H", "--", KERNELS),
        "kernels_dirty": any(line[3:].startswith(f"{KERNELS}/") for line in changed.splitlines()),
    }


def _git(git: str, *args: str) -> str | None:
    try:
        done = subprocess.run([git, "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
