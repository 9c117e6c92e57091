"""A training step an Executor ran, against the float64 NumPy reference (tracker/reference.py),
read back through the backend as a GPU's arrays must be (``asnumpy``)."""

from __future__ import annotations

import numpy as np

from tracker.reference import network_step


def step_errors(run) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """(the step's mean loss, the reference's, {layer: relative error of dw and of db})."""
    t, host = run.t, run.b.asnumpy
    params = {name: tuple(host(a) for a in pair) for name, pair in t.params.items()}
    loss, grads = network_step(run.net, params, host(t.act["input"]), host(t.labels))
    errors = {}
    for name, (dw, db) in grads.items():
        got_dw, got_db = (host(a).astype(np.float64) for a in t.param_grads[name])
        errors[name] = (float(np.linalg.norm(got_dw - dw) / np.linalg.norm(dw)),
                        float(np.linalg.norm(got_db - db) / np.linalg.norm(db)))
    return float(host(t.loss).mean()), loss, errors
