"""Output paths checked before any work: a report, an export or a plot onto a path that cannot be
written says so in one line, rather than failing with the raw OS error after the work is done."""

from __future__ import annotations

import os
from pathlib import Path

from tracker.errors import TrackerError


def _existing_ancestor(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def check_dir(out: str | Path) -> Path:
    """``out`` as a directory that exists or can be created, and can be written."""
    out = Path(out)
    probe = _existing_ancestor(out)
    if not probe.is_dir():
        raise TrackerError(f"cannot write to {out}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise TrackerError(f"cannot write to {out}: {probe} is not writable")
    return out


def check_file(path: str | Path, suffixes: tuple[str, ...]) -> Path:
    """``path`` as a file of one of ``suffixes`` ('.png') whose directory exists and can be written."""
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise TrackerError(f"cannot write {path}: name a {', '.join(suffixes)} file")
    if path.is_dir():
        raise TrackerError(f"cannot write {path}: it is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise TrackerError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise TrackerError(f"cannot write {path}: not writable")
    return path
