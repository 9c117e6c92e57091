"""Child processes in a process group of their own (a profiler and the workload it starts, pass 1's
PyTorch child): ``stop`` reaches all of them, and a Ctrl-C at the terminal reaches tracker alone,
which then stops them. One place for every collector and child."""

from __future__ import annotations

import os
import signal
import subprocess

from tracker.errors import BackendUnavailable

STOP_GRACE_S = 10  # a child told to stop (SIGTERM) gets this long before SIGKILL


def start(cmd: list[str], **pipes) -> subprocess.Popen:
    """A profiler in a process group of its own, so that ``stop`` reaches the workload child it
    starts too, and a Ctrl-C at the terminal reaches tracker alone, which then stops them."""
    try:
        return subprocess.Popen(cmd, text=True, process_group=0, **pipes)
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {cmd[0]}: {exc}") from None


def stop(proc: subprocess.Popen) -> None:
    """End a profiler started by ``start`` and everything in its group: SIGTERM, and after
    ``STOP_GRACE_S`` SIGKILL to whatever is left (a workload the profiler did not end). A
    profiler left running would hold the GPU for minutes after tracker is gone."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:  # the whole group is gone
        pass
