"""Analytic model: FLOPs, bytes, arithmetic intensity, roofline and memory per layer and device.

Pure Python: works with no GPU and imports nothing heavy.

Each module calls only those before it (tests/test_architecture.py holds the order):
devices (the GPU catalog), algorithms (each convolution algorithm's cost, the im2col chunk),
costs (a layer phase's FLOPs and bytes), roofline (predictions, and algorithms compared side by
side), memory (a training step's peak).
"""

from tracker.model.costs import CONVENTIONS, Cost, costs
from tracker.model.devices import CATALOG, Device, lookup
from tracker.model.memory import Memory, memory
from tracker.model.roofline import DTYPE_BITS, Prediction, predict, roofline

__all__ = [
    "CATALOG",
    "CONVENTIONS",
    "DTYPE_BITS",
    "Cost",
    "Device",
    "Memory",
    "Prediction",
    "costs",
    "lookup",
    "memory",
    "predict",
    "roofline",
]
