"""A training step an Executor ran, against the float64 NumPy reference (tracker/reference.py),
read back through the backend as a GPU's arrays must be (``asnumpy``)."""

from __future__ import annotations

import numpy as np

from tracker.reference import network_step


def relative(got, want) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def step_errors(run) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """(the step's mean loss, the reference's, {layer: relative error of dw and of db (0 without
    a bias)})."""
    t, host = run.t, run.b.asnumpy
    params = {name: tuple(None if a is None else host(a) for a in pair) for name, pair in t.params.items()}
    loss, grads = network_step(run.net, params, host(t.act["input"]), host(t.labels))
    errors = {}
    for name, (dw, db) in grads.items():
        got_dw, got_db = t.param_grads[name]
        assert (got_db is None) == (db is None), name
        errors[name] = (relative(host(got_dw), dw), 0.0 if db is None else relative(host(got_db), db))
    return float(host(t.loss).mean()), loss, errors
