"""The phases of a layer in a training step, in the order reports list them: the one place their
names and order are written. Ground floor: imports nothing of tracker.

``fwd`` is the forward pass; ``bwd_data`` the gradient with respect to the layer's input;
``bwd_weight`` the gradient with respect to its weights (layers with weights only). A step runs
every layer forward, then backward in reverse, each layer's ``bwd_weight`` before its ``bwd_data``
(``BACKWARD_ORDER``).
"""

from __future__ import annotations

PHASES: tuple[str, ...] = ("fwd", "bwd_data", "bwd_weight")
ORDER: dict[str, int] = {phase: i for i, phase in enumerate(PHASES)}
BACKWARD_ORDER: tuple[str, ...] = ("bwd_weight", "bwd_data")
# What ``--phases`` selects.
PHASE_SETS: dict[str, tuple[str, ...]] = {"fwd": ("fwd",), "bwd": ("bwd_data", "bwd_weight"), "both": PHASES}


def order_sql(column: str = "phase") -> str:
    """SQL that sorts by ``column`` in ``PHASES``' order (a plain ORDER BY would put bwd_weight first)."""
    return f"CASE {column} " + " ".join(f"WHEN '{phase}' THEN {i}" for phase, i in ORDER.items()) + " END"
