"""Executors: who runs an experiment's arms, and where.

``local`` (the default) runs them in this process, one after another, as ``tracker experiment``
always has. ``slurm`` submits them to an existing Slurm cluster as a job array (one task per arm,
``sbatch --array``): each task runs ``tracker arm`` on the node it lands on, which profiles the arm
into the one store given by URL (PostgreSQL) and records its state, node and GPU there. tracker
schedules nothing itself: placement, queues and GPUs are the engine's.

An executor checks what it needs before anything is written (``check``), reconciles a resumed
experiment's arms with what the engine still runs (``reconcile``: an arm whose job is gone without
reporting is marked), then runs or submits the queued arms and waits for them (``run``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

if TYPE_CHECKING:
    from tracker.nets import Network
    from tracker.store import Store


@dataclass(frozen=True)
class Sweep:
    """An experiment being run: where its store is, and what the planning process holds."""

    db: str | None
    store: Store
    experiment_id: int
    net: Network
    backend: str  # as asked for (--backend): a local run's first arm may fall back, the rest follow it
    echo: Callable[[str], None]
    run_arm: Callable[..., Any]  # tracker.experiment.run_arm, handed down: executors sit below the experiment


class Executor(Protocol):
    name: ClassVar[str]

    def check(self, db: str | None, net: Network, backend: str) -> None: ...

    def reconcile(self, store: Store, experiment_id: int, echo: Callable[[str], None]) -> None: ...

    def run(self, sweep: Sweep) -> None: ...


from tracker.executors.local import Local  # noqa: E402  (they import Sweep from here)
from tracker.executors.slurm import Slurm  # noqa: E402

EXECUTORS = (Local.name, Slurm.name)  # --executor reads these

__all__ = ["EXECUTORS", "Executor", "Local", "Slurm", "Sweep"]
