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

from tracker.executors.base import Executor, Sweep
from tracker.executors.local import Local
from tracker.executors.slurm import Slurm

EXECUTORS = (Local.name, Slurm.name)  # --executor reads these

__all__ = ["EXECUTORS", "Executor", "Local", "Slurm", "Sweep"]
