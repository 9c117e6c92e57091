"""What a run, an experiment and an experiment's arm can be, and what one is now: a row left
``running`` by a process that died (killed outright, so it could not mark its row) is interrupted."""

from __future__ import annotations

from tracker.processes import process_alive

STATUSES = ("running", "complete", "failed", "interrupted")  # a run's and an experiment's
ARM_STATES = ("queued", "running", "complete", "failed", "interrupted")  # an experiment arm's, in order
OPEN = ARM_STATES[:2]  # queued, running: an arm that has not ended
FINAL = ARM_STATES[2:]  # complete, failed, interrupted: an arm that has ended
SHORT = FINAL[1:]  # failed, interrupted: an arm that ended without its run; a resume queues it again


def effective_status(row) -> str:
    """The stored status of a run or an experiment, except that a ``running`` one whose process is
    gone is ``interrupted``."""
    if row.status == "running" and row.pid is not None and process_alive(row.host, row.pid, row.process_start) is False:
        return "interrupted"
    return row.status


def arm_state(arm) -> str:
    """The stored state, except that a running arm whose process on this host is gone is
    interrupted (as ``effective_status`` says of a run)."""
    if (
        arm.state == "running"
        and arm.pid is not None
        and arm.node is not None
        and process_alive(arm.node, arm.pid, arm.process_start) is False
    ):
        return "interrupted"
    return arm.state
