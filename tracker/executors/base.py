"""What every executor is given and what it does: the ``Sweep`` it runs and the ``Executor``
interface (``check``, ``reconcile``, ``run``). The executors import these from here, below the
package's ``__init__``, which only hands the names on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

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
