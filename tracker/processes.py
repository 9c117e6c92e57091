"""Child processes in a process group of their own (a profiler and the workload it starts, pass 1's
PyTorch child): ``stop`` reaches all of them, and a Ctrl-C at the terminal reaches tracker alone,
which then stops them. And a profiler's short commands (its version, its metric listing, an
export) run to completion by ``output``. One place for every collector and child. And whether the
process that wrote a stored run or experiment still lives (``process_alive``), pid reuse told apart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tracker.errors import BackendUnavailable, ProfilerFailed

STOP_GRACE_S = 10  # a child told to stop (SIGTERM) gets this long before SIGKILL
OUTPUT_TIMEOUT_S = 600  # a listing or an export of a large report takes minutes at most


def output(
    cmd: list[str],
    what: str,
    failed: type[ProfilerFailed] = ProfilerFailed,
    explain: Callable[[str], None] | None = None,
) -> subprocess.CompletedProcess:
    """``cmd`` run to completion (``what`` names it in errors): BackendUnavailable where it cannot
    start; ``failed`` where it times out or exits non-zero, after ``explain`` has seen its output
    (to raise a more telling error, a missing permission, say)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=OUTPUT_TIMEOUT_S)
    except OSError as exc:
        raise BackendUnavailable(f"cannot run {what}: {exc}") from None
    except subprocess.TimeoutExpired:
        raise failed(f"{what} did not finish in {OUTPUT_TIMEOUT_S // 60} minutes") from None
    if done.returncode != 0:
        if explain:
            explain(done.stdout + done.stderr)
        message = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise failed(f"{what} failed with status {done.returncode}: {message[0]}")
    return done


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


# Who wrote a stored row: a run's or an experiment's process, told alive or gone by a later reader.


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of proc(5), counted after the comm field


def process_alive(host: str, pid: int, started: str | None) -> bool | None:
    """True or False for a process on this host; None when it ran elsewhere and we cannot tell."""
    if host != socket.gethostname():
        return None
    if started is not None and Path("/proc").is_dir():
        return process_start(pid) == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def started_at() -> datetime:
    """When this process started, on the wall clock (UTC): its start in clock ticks since boot,
    where /proc tells it, else now."""
    ticks = process_start(os.getpid())
    now = datetime.now(UTC)
    if ticks is None:
        return now
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(ticks) / os.sysconf("SC_CLK_TCK")
    return now - timedelta(seconds=max(age, 0.0))


def this_process() -> dict:
    """host, pid and process_start of this process, as a run or an experiment records who writes it."""
    pid = os.getpid()
    return dict(host=socket.gethostname(), pid=pid, process_start=process_start(pid))
