"""Who runs a workload, as one strategy: our kernels (``ours``, tracker/gpu) or a framework's
libraries (``torch``: PyTorch's cuDNN and cuBLAS, tracker/library); and who ran a stored run, which
may also be another tool's profile (``imported``: `tracker import`, tracker/importers). ``IMPLEMENTATIONS`` names each
strategy's module; ``implementation(name)`` is the strategy; ``checked(workload)`` the one that runs
a workload, its options checked. Everything that differs between them (the options each takes,
what a machine needs, the plan, pass 1, the child a collector profiles, CUPTI's replay, the
versions recorded on a run, the selftest) is a method of the strategy, and nothing above asks
which one runs. The one child process (``child.py``) serves both."""

from tracker.implementations.registry import IMPLEMENTATIONS, PROFILED, Implementation, checked, implementation, of_run

__all__ = ["IMPLEMENTATIONS", "PROFILED", "Implementation", "checked", "implementation", "of_run"]
