"""PyTorch's libraries (cuDNN, cuBLAS): the same network, or a user's own model (``--torch``), run
layer phase by layer phase in our training order and range names (tracker/library), with the
library's choices (TF32, cuDNN's benchmark mode) recorded on the run. PyTorch is imported only
inside the methods that run it; pass 1 and CUPTI's count run in child processes of their own
(tracker/library/torch_run.py says why)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracker.errors import TrackerError

if TYPE_CHECKING:
    from tracker.gpu.runner import Measured
    from tracker.gpu.workload import Workload
    from tracker.nets import Network
    from tracker.profilers.cupti_collector import Ranges
    from tracker.store import Store

Echo = Callable[[str], None]
OUR_OPTIONS = (("--variant", "variants"), ("--l1-bypass", "l1_bypass"), ("--staged", "staged"))  # ours, not its


@dataclass(frozen=True)
class PyTorch:
    name: str = "torch"
    by: str = " run by torch"

    def check(self, workload: Workload) -> None:
        given = [option for option, attribute in OUR_OPTIONS if getattr(workload, attribute)]
        if given:
            verb = "chooses" if len(given) == 1 else "choose"
            raise TrackerError(f"{' and '.join(given)} {verb} among our kernels; --impl {self.name} runs the library's")

    def installed(self, what: str) -> None:
        from tracker.library import require_torch

        require_torch(what)

    def on_gpu(self, what: str) -> str:
        from tracker.library import require_torch_cuda

        return f", {require_torch_cuda(what)}"

    def check_network(self, net: Network, batch: int | None = None) -> None:
        return None  # the libraries run every layer kind tracker defines, at any batch that fits

    def loaders(self, workload: Workload) -> str:
        return "library"

    def recorded(self, workload: Workload, backend: str) -> dict | None:
        """The versions it ran with and its two choices; the model backend predicts the same
        network without PyTorch, so records the choices and no versions."""
        if backend == "model":
            return {"tf32": workload.tf32, "cudnn_benchmark": workload.cudnn_benchmark}
        from tracker.library import versions

        self.installed(f"--impl {self.name}")
        return versions(workload.tf32, workload.cudnn_benchmark)

    def plan(self, store: Store, workload: Workload, untuned: bool, echo: Echo) -> Workload:
        return workload.planned_in_training_order()  # the library has no variants and no tiles to choose

    def planned(self, workload: Workload, untuned: bool) -> dict[str, str] | None:
        return None  # cuDNN's and cuBLAS's own choices: the library's kernel names say which

    def pass1(self, workload: Workload, echo: Echo) -> Measured:
        from tracker.library.torch_run import profile_events

        return profile_events(workload, echo)

    def child(self, workload: Workload) -> None:
        from tracker.library.torch_run import run_child

        run_child(workload)

    def in_child(self, work: Callable[[], None]) -> None:
        from tracker.library.torch_run import child_main

        child_main(work)

    def ranges(self, workload: Workload, metrics: list[str], most: int, echo: Echo) -> Ranges:
        """Counted in a child that loads libcupti before PyTorch loads its own, so that the
        process holds one (``replay``, run by ``child.py counted``)."""
        import json
        import tempfile
        from pathlib import Path

        from tracker.implementations.child import RANGES, command
        from tracker.library.torch_run import run_child_process

        with tempfile.TemporaryDirectory(prefix="tracker-cupti-") as tmp:
            run_child_process(command("counted", workload, json.dumps(metrics), str(most), tmp), echo)
            found = json.loads((Path(tmp) / RANGES).read_text())
        phases = [(phase, [(name, values) for name, values in ranges]) for phase, ranges in found["phases"]]
        return phases, found["skipped"], found["settings"]

    def replay(self, workload: Workload, metrics: list[str], most: int, echo: Echo) -> Ranges:
        """Warm up, then each measured iteration runs every layer phase once per counter pass
        (``TorchStep.iteration(passes)``, ``ModuleStep``'s)."""
        from tracker.profilers import cupti_range

        cupti_range.library()  # before PyTorch loads its own
        from tracker.library.torch_run import step_of, warm_up
        from tracker.profilers.cupti_session import PhasePasses, RangeSession

        step = step_of(workload)
        warm_up(step, workload.warmup, echo)
        with RangeSession(metrics, most) as session:
            passes = PhasePasses(session)
            for r in range(workload.repeat):
                step.iteration(passes)
                echo(f"iteration {r + 1}/{workload.repeat}: {sum(len(ranges) for _, ranges in passes.phases)} ranges")
            return passes.phases, list(session.skipped), dict(session.settings)

    def refused_in_selftest(self, record: bool, tile: object, l1: str) -> str | None:
        """The options about our kernels' builds mean nothing to PyTorch's phases."""
        if record:
            return f"--record vouches for our kernels' builds; --impl {self.name} checks PyTorch's: drop --record"
        if tile is not None:
            return f"--tile picks our GEMM kernels' tile; --impl {self.name} runs PyTorch's: drop --tile"
        if l1 != "both":
            return f"--l1 {l1} picks our kernels' L1 policy; --impl {self.name} runs PyTorch's: drop --l1"
        return None

    def selftest(self, cases: tuple, l1: str, tile: object, echo: Echo) -> tuple[list[dict], str, dict | None]:
        """PyTorch's layer phases on its GPU, else the CPU, to our kernels' bounds."""
        from tracker.gpu.runner import summarize

        self.installed(f"tracker selftest --impl {self.name}")
        from tracker.library.accuracy import selftest

        results, device = selftest(cases, echo)
        return summarize([(None, r) for r in results]), device, None  # no L1 policy: the libraries choose their own

    def ran_by(self, run: Mapping) -> str | None:
        """'PyTorch 2.9.1 (CUDA 12.8, cuDNN 91002, cuBLAS 12.8.4.1; TF32 off, cuDNN benchmark off)'."""
        lib = run.get("library") or {}
        if not lib.get("torch"):  # the model backend: the same network predicted, nothing ran
            return "PyTorch (as the model predicts the same network)"
        on = lambda key: "on" if lib.get(key) else "off"  # noqa: E731
        return (
            f"PyTorch {lib.get('torch')} (CUDA {lib.get('cuda')}, cuDNN {lib.get('cudnn')}, "
            f"cuBLAS {lib.get('cublas')}; TF32 {on('tf32')}, cuDNN benchmark {on('cudnn_benchmark')})"
        )

    def legend(self, run: Mapping) -> str:
        version = (run.get("library") or {}).get("torch")
        return f"PyTorch {version} (cuDNN, cuBLAS)" if version else "PyTorch (predicted)"

    def fill_command(self, run: Mapping, network_flags: str) -> str:
        from tracker.gpu.workload import is_module_spec

        if is_module_spec(run["network"]):
            return f"tracker profile --torch {run['network']} --backend ncu"
        return (
            f"tracker profile {run['network']} --batch {run['batch']}{network_flags} --backend ncu --impl {self.name}"
        )


IMPLEMENTATION = PyTorch()
