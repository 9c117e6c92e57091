"""The local executor: this process runs the arms one after another (``tracker experiment``'s
default, as it always ran)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from tracker.errors import ArmTaken, OutOfMemory, TrackerError
from tracker.executors.base import Sweep
from tracker.nets import Network


class Local:
    name: ClassVar[str] = "local"

    def check(self, db: str | None, net: Network, backend: str) -> None:
        """Nothing to check: the arms run here, with the network this process holds."""

    def reconcile(self, store, experiment_id: int, echo: Callable[[str], None]) -> None:
        """Refuse an experiment whose arm still runs in a live process; mark one whose process is gone."""
        from tracker.store.experiments import end_arm
        from tracker.store.queries import arm_rows
        from tracker.store.states import arm_state

        for arm in arm_rows(store, experiment_id):
            if arm.state != "running":
                continue
            if arm_state(arm) == "running":
                raise TrackerError(
                    f"experiment e{experiment_id} is still running: arm '{arm.label}' runs in pid "
                    f"{arm.pid} on {arm.node}; wait for it, or give --fresh for a new experiment"
                )
            end_arm(
                store,
                experiment_id,
                arm.position,
                "interrupted",
                "its process ended without reporting",
                only_if=("running",),
            )
            echo(f"arm {arm.label}: its process ended without reporting; marked interrupted")

    def run(self, sweep: Sweep) -> None:
        from tracker.store.queries import arm_rows

        queued = [arm for arm in arm_rows(sweep.store, sweep.experiment_id) if arm.state == "queued"]
        runs_on = sweep.backend  # the first arm chooses as profile does (auto may fall back); the rest follow it
        for i, arm in enumerate(queued, 1):
            sweep.echo(f"[{i}/{len(queued)}] {arm.label}")
            try:
                result = sweep.run_arm(
                    sweep.db,
                    sweep.experiment_id,
                    arm.position,
                    net=sweep.net,
                    backend=runs_on,
                    echo=lambda line: sweep.echo(f"    {line}"),
                )
            except ArmTaken as taken:  # a process that joined from another host claimed it first: it runs it
                sweep.echo(f"    {taken}")
                continue
            except OutOfMemory as exc:  # an answer, recorded on the arm (failed, its reason): the sweep goes on
                sweep.echo(f"    {exc}: recorded, and the next arm runs")
                continue
            runs_on = result.backend
