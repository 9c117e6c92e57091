"""GPU idle time between launches, from the launches' real start times (imported traces, the library
arm, our kernels on a GPU), as a DataFrame for the report and notebooks: per layer phase, the idle
time before its launches and the time they ran, medians over measured iterations
(``tracker.store.queries.idle_per_phase``, which `tracker show` reads too). A run that records
durations alone has none."""

from __future__ import annotations

import pandas as pd

from tracker.analysis import in_layer_order
from tracker.store import Store
from tracker.store.queries import idle_per_phase

NO_STARTS = (
    "the run records no launch start times (ours record them on a GPU; the library arm and imported "
    "traces and exports from their own; the model and Nsight Compute have none)"
)


def per_phase(store: Store, run_id: int) -> pd.DataFrame:
    """Per layer phase: idle_ms and busy_ms, medians over iterations, in layer and phase order."""
    rows = idle_per_phase(store, run_id)
    return in_layer_order(pd.DataFrame(rows)) if rows else pd.DataFrame()
