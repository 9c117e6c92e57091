"""tracker: what each layer of a CNN does to an NVIDIA GPU's microarchitecture.

The public surface, what a notebook imports (loaded on first use, so ``import tracker`` costs
nothing):

    import tracker

    store = tracker.open_store("trace.db", write=False)  # write=True creates or upgrades it
    run = tracker.find_run(store, "latest").id       # a run by 'latest' or its ID ('3')
    tracker.list_runs(store)                         # every run, newest last
    tracker.view(store, "stall_breakdown", run)      # a view or table (schema/views.sql) as a
                                                     # DataFrame, in layer order
    tracker.run_sql(store, "SELECT layer, phase, ops FROM layer_phase")  # (columns, rows)
    from tracker.analysis import runtime             # the analyses, a module each: runtime, stalls,
    runtime.runtime(store, run)                      # caches, traffic, fp, utilization, roofline,
                                                     # speedup, experiments, reconcile
    tracker.model.predict(tracker.nets.build("alexnet"), 128, tracker.model.lookup("h100"))
    tracker.profile.profile("trace.db", tracker.nets.build("alexnet"), 128)  # ncu, events or model
    tracker.report.report(store, str(run), "report")  # its pages and figures, into report/

tests/test_public_surface.py runs these lines against a real store.

The pure-Python core (nets, model, store, analysis) never imports CuPy; GPU code lives in
``tracker.gpu`` and is imported only when a GPU backend runs.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it; a name that is its own module maps to None
_PUBLIC: dict[str, str | None] = {
    "open_store": "tracker.store",
    "find_run": "tracker.store",
    "find_experiment": "tracker.store",
    "list_runs": "tracker.store",
    "run_sql": "tracker.store",
    "view": "tracker.analysis",
    "analysis": None,
    "model": None,
    "nets": None,
    "profile": None,
    "report": None,
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'tracker' has no attribute {name!r}")
    home = _PUBLIC[name]
    value = importlib.import_module(f"tracker.{name}") if home is None else getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
