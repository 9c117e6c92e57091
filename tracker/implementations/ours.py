"""Our kernels: the network run by tracker's own CUDA kernels through CuPy (tracker/gpu), in the
variants, L1 builds and GEMM tiles the user or `tracker tune` chose. CuPy is imported only inside
the methods that run on a GPU."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracker.errors import TrackerError
from tracker.gpu.workload import is_module_spec

if TYPE_CHECKING:
    from tracker.gpu.runner import Measured
    from tracker.gpu.workload import Workload
    from tracker.nets import Network
    from tracker.profilers.cupti_collector import Ranges
    from tracker.store import Store
    from tracker.tune import Tuned

Echo = Callable[[str], None]
LIBRARY_OPTIONS = (("--tf32", "tf32"), ("--cudnn-benchmark", "cudnn_benchmark"))  # a library's, not ours


def _cupy(l1_policy: str) -> Any:
    from tracker.gpu.cupy_backend import CupyBackend

    return CupyBackend(l1_policy, timed=False)


def _session(metrics: list[str], most: int) -> Any:
    from tracker.profilers.cupti_session import RangeSession

    return RangeSession(metrics, max_ranges=most)


@dataclass(frozen=True)
class OurKernels:
    name: str = "ours"
    by: str = ""
    # what CUPTI's replay runs on and counts with: CuPy and a range session (tests: the emulation, stand-ins)
    backend: Callable[[str], Any] = field(default=_cupy, compare=False)
    session: Callable[[list[str], int], Any] = field(default=_session, compare=False)

    def check(self, workload: Workload) -> None:
        if is_module_spec(workload.network):
            raise TrackerError(f"{workload.network} is a PyTorch model: it takes --impl torch, not --impl ours")
        given = [option for option, attribute in LIBRARY_OPTIONS if getattr(workload, attribute)]
        if given:
            verb = "chooses" if len(given) == 1 else "choose"
            raise TrackerError(f"{' and '.join(given)} {verb} how PyTorch runs: add --impl torch")
        if workload.staged and workload.l1_bypass:
            raise TrackerError(
                "--staged runs our kernels with the L1-bypass build's loaders and L1 cached: "
                "not with --l1-bypass (staged already)"
            )

    def installed(self, what: str) -> None:
        return None  # CuPy: the GPU backends check for it with the GPU (tracker.profile.require_gpu)

    def on_gpu(self, what: str) -> str:
        return ""

    def check_network(self, net: Network, batch: int | None = None) -> None:
        from tracker.gpu.network import check_indexing, resolve

        resolve(net, {})
        if batch is not None:
            check_indexing(net, batch)

    def loaders(self, workload: Workload) -> str:
        return "async" if workload.l1_policy == "ca" else "staged"

    def recorded(self, workload: Workload, backend: str) -> dict | None:
        return None

    def plan(self, store: Store, workload: Workload, untuned: bool, echo: Echo) -> Workload:
        """The plan's variant for each layer phase (the conv rule's, tracker/ops/conv_rule.py), with
        the variants and tiles `tracker tune` found fastest on this GPU, and elsewhere the GEMM
        tile fitted to the shape of a variant's batched GEMM (``network.fitted_tiles``);
        ``untuned``: none of these, each op's default variant and the default tiles."""
        from tracker.gpu.network import fitted_tiles, plan, plan_of

        steps = plan(workload.net, workload.variants, workload.phases, workload.batch, by_rule=not untuned)
        if untuned:
            return workload.planned(steps, {})
        tuned = _tuned(store, workload, steps, echo)
        steps = tuned.applied(steps)
        tiles = tuned.over(fitted_tiles(workload.net, plan_of(steps), workload.batch))
        fitted = {key: tile for key, tile in tiles.items() if key not in tuned.chosen}
        if fitted:
            echo(
                f"GEMM tiles fitted to their shapes ({len(fitted)} layer phases; --untuned runs the defaults): "
                + ", ".join(f"{key} {tile}" for key, tile in fitted.items())
            )
        return workload.planned(steps, tiles, tuned.variants)

    def planned(self, workload: Workload, untuned: bool) -> dict[str, str] | None:
        from tracker.gpu.network import plan, plan_of

        if workload.steps:
            return {f"{s.layer}/{s.phase}": s.variant for s in workload.steps}
        try:
            return plan_of(plan(workload.net, workload.variants, workload.phases, workload.batch, by_rule=not untuned))
        except TrackerError:  # a layer no kernel of ours runs: the model predicts it all the same
            return None

    def pass1(self, workload: Workload, echo: Echo) -> Measured:
        from tracker.gpu.runner import profile_events

        return profile_events(workload, echo)

    def child(self, workload: Workload) -> None:
        from tracker.gpu.runner import run_child

        run_child(workload)

    def in_child(self, work: Callable[[], None]) -> None:
        work()

    def ranges(self, workload: Workload, metrics: list[str], most: int, echo: Echo) -> Ranges:
        return self.replay(workload, metrics, most, echo)  # CuPy and libcupti share this process

    def replay(self, workload: Workload, metrics: list[str], most: int, echo: Echo) -> Ranges:
        from tracker.gpu.network import PlanRunner
        from tracker.gpu.replay import replay_iteration
        from tracker.profilers.cupti_session import PhasePasses

        runner = PlanRunner.of(self.backend(workload.l1_policy), workload)
        runner.iteration()  # compiled and run once before anything is counted, as pass 1's warm-up
        with self.session(metrics, most) as session:
            passes = PhasePasses(session)
            for _ in range(workload.repeat):
                replay_iteration(runner, passes)
            return passes.phases, list(session.skipped), dict(session.settings)

    def refused_in_selftest(self, record: bool, tile: object, l1: str) -> str | None:
        return None

    def selftest(self, cases: tuple, l1: str, tile: Any, echo: Echo) -> tuple[list[dict], str, dict | None]:
        """Every variant on this GPU, in the L1 builds ``l1`` names ('both': ca and cg)."""
        from tracker.gpu.detect import require_gpu
        from tracker.gpu.runner import selftest, summarize

        require_gpu("tracker selftest")
        results, info = selftest(cases, ("ca", "cg") if l1 == "both" else (l1,), echo, tile)
        return summarize(results), info["device_name"], info

    def ran_by(self, run: Mapping) -> str | None:
        return None

    def legend(self, run: Mapping) -> str:
        """'ours', or 'ours, tuned' where it ran `tracker tune`'s variants, or a tile other than the
        one its plan fits by itself (``network.fitted_tiles``: what runs without a tuning)."""
        return "ours, tuned" if _tuned_tiles(run) or run.get("tuned_variants") else "ours"

    def fill_command(self, run: Mapping, network_flags: str) -> str:
        return f"tracker profile {run['network']} --batch {run['batch']}{network_flags} --backend ncu"


def _tuned(store: Store, workload: Workload, steps, echo: Echo) -> Tuned:
    """The variants and tiles `tracker tune` found fastest on this GPU for the planned layer phases."""
    from tracker.gpu.detect import device_name
    from tracker.tune import Tuned, best

    name = device_name()
    tuned = best(store, name, workload.net, workload.batch, workload.variants, steps) if name else Tuned()
    if tuned.variants:
        echo(
            f"tuned variants for {name} ({len(tuned.variants)} layer phases; --untuned runs each op's default): "
            + ", ".join(f"{key} {variant}" for key, variant in tuned.variants.items())
        )
    if tuned.tiles:
        echo(
            f"tuned GEMM tiles for {name} ({len(tuned.tiles)} layer phases; --untuned runs the defaults): "
            + ", ".join(f"{key} {tile}" for key, tile in tuned.tiles.items())
        )
    return tuned


def _tuned_tiles(run: Mapping) -> dict[str, str]:
    """The tiles a run of ours ran that its plan does not fit by itself: `tracker tune`'s."""
    from tracker.gpu.network import fitted_tiles
    from tracker.nets import build

    tiles, plan = run.get("tiles") or {}, run.get("plan")
    if not (tiles and plan):  # nothing ran but defaults, or no plan to fit (before schema v17)
        return tiles
    fitted = fitted_tiles(build(run["network"], **run["network_options"]), plan, run["batch"])
    return {key: tile for key, tile in tiles.items() if fitted.get(key) != tile}


IMPLEMENTATION = OurKernels()
