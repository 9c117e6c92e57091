"""Analytic model: FLOPs, bytes, arithmetic intensity, roofline and memory per layer and device.

Pure Python: works with no GPU and imports nothing heavy.
"""

from tracker.model.costs import CONVENTIONS, Cost, costs
from tracker.model.devices import CATALOG, Device, lookup
from tracker.model.memory import Memory, memory
from tracker.model.roofline import DTYPE_BITS, Prediction, predict, roofline

__all__ = [
    "CATALOG", "CONVENTIONS", "DTYPE_BITS", "Cost", "Device", "Memory",
    "Prediction", "costs", "lookup", "memory", "predict", "roofline",
]
