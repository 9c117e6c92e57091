"""The GPU suite (tests/test_gpu*.py, `pytest -m gpu`) keeps up with the code: it runs every
command, backend, implementation, experiment kind and GPU benchmark that needs a GPU, as read
from its source. This test needs no GPU: CI has none, so a GPU path missing from the suite would first run
in front of a person on a lent GPU (2026-11-25: every one added since the previous GPU session
broke there at first contact)."""

from __future__ import annotations

import ast
import inspect
import re
from itertools import pairwise
from pathlib import Path

from tracker.cli import cli
from tracker.experiment import KINDS
from tracker.implementations import PROFILED
from tracker.profile import BACKENDS
from tracker.profilers import COLLECTORS

HERE = Path(__file__).parent
# The suite's source: its files, and report_check.py, where it runs `tracker report` (check_report,
# shared with test_library_evidence)
SUITE = [path for path in sorted(HERE.glob("test_gpu*.py")) if path.name != Path(__file__).name] + [
    HERE / "report_check.py"
]

# Commands that never touch a GPU, whatever the store holds: the catalogs and the analytic model,
# NVRTC compiling with no GPU (CI runs it), and the store's SQL, reader role and schema. Every other command
# runs on a GPU or reads what a GPU run stored, so the suite runs it.
# serve too: its pages are the analyses the suite runs through show, report and compare, and its
# libraries are not on the GPU machine (tests/test_serve*.py drive it on recordings of GPU runs)
NO_GPU = {"devices", "import", "metrics", "model", "networks", "kernels", "sql", "reader-role", "upgrade", "serve"}


def calls() -> list[tuple[str, list[str | None]]]:
    """Every call in the suite's source: the called name, and its positional arguments with a
    list argument spread in place (`runner.invoke(cli, ["report", ...])`), each literal string
    as such and anything else None."""
    assert SUITE, "no tests/test_gpu*.py"
    found = []
    for path in SUITE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                items = [item for arg in node.args for item in (arg.elts if isinstance(arg, ast.List) else [arg])]
                found.append(
                    (
                        getattr(node.func, "id", getattr(node.func, "attr", "")),
                        [i.value if isinstance(i, ast.Constant) and isinstance(i.value, str) else None for i in items],
                    )
                )
    return found


def commands_run() -> set[str]:
    """What the suite runs: `tracker(COMMAND, ...)` in a child, `runner.invoke(cli, [COMMAND, ...])` here."""
    return {
        args[0] if name == "tracker" else args[1]
        for name, args in calls()
        if (name == "tracker" and args) or (name == "invoke" and len(args) > 1)
    }


def arguments() -> set[str]:
    return {arg for _, args in calls() for arg in args if arg is not None}


def values_of(option: str) -> set[str]:
    """Every literal value the suite passes to ``option`` (--backend events)."""
    return {args[i + 1] for _, args in calls() for i in range(len(args) - 1) if args[i] == option}


def experiment_kinds() -> set[str]:
    """The keys of the suite's EXPERIMENTS table: the kinds its experiment test runs."""
    return {
        key.value
        for path in SUITE
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["EXPERIMENTS"]
        for key in node.value.keys
    }


def test_every_command_but_the_gpu_free_ones_is_run_by_the_gpu_suite():
    assert NO_GPU <= set(cli.commands), NO_GPU - set(cli.commands)  # a renamed command is noticed
    assert sorted(set(cli.commands) - NO_GPU - commands_run()) == []


def test_no_command_said_to_need_no_gpu_asks_for_one():
    for name in sorted(NO_GPU):
        command = cli.commands[name]
        assert "backend" not in {p.name for p in command.params}, name
        assert "require_gpu" not in inspect.getsource(command.callback), name


def test_every_experiment_kind_gpu_backend_and_implementation_is_run_by_the_gpu_suite():
    assert sorted(set(KINDS) - experiment_kinds()) == []
    assert sorted(set(BACKENDS) - {"auto", "model"} - values_of("--backend")) == []  # auto picks one of the others
    default = next(p.default for p in cli.commands["profile"].params if p.name == "implementation")
    assert sorted(set(PROFILED) - {default} - values_of("--impl")) == []
    assert "--torch" in arguments()


def test_every_benchmark_that_needs_a_gpu_is_run_by_the_gpu_suite():
    root = HERE.parent
    gpu = {
        path.relative_to(root).as_posix()
        for path in sorted((root / "benchmarks").glob("*.py"))
        if re.search(r"^\s*(import|from) cupy\b", path.read_text(), re.MULTILINE)
    }
    assert gpu, "no benchmark imports CuPy: this test looks for the wrong thing"
    assert sorted(gpu - arguments()) == []


def counting_tests(path: Path) -> dict[str, tuple[bool, bool]]:
    """Each test of ``path``: (whether it reads the counters, whether it is marked ``counters``).
    It reads them where it, a fixture it takes, or a fixture it is parametrized over (and gets by
    request.getfixturevalue) passes `--backend` a collector (ncu, cupti, nvprof) or runs the
    CUPTI probe."""
    tree = ast.parse(path.read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    tuples = {
        node.targets[0].id: [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and isinstance(node.targets[0], ast.Name)
    }

    def own(node: ast.FunctionDef) -> bool:
        strings = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        return any("cupti_probe" in s for s in strings) or any(
            a == "--backend" and b in COLLECTORS for a, b in pairwise(strings)
        )

    def taken(node: ast.FunctionDef) -> list[str]:
        names = [a.arg for a in node.args.args]
        for decorator in node.decorator_list:  # @pytest.mark.parametrize("fixture", RUNS)
            if isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize":
                values = decorator.args[1]
                names += tuples.get(getattr(values, "id", ""), [])
        return names

    def reads(name: str) -> bool:
        node = functions.get(name)
        return node is not None and (own(node) or any(reads(n) for n in taken(node) if n != name))

    def marked(node: ast.FunctionDef) -> bool:
        return any(getattr(d, "id", getattr(d, "attr", "")) == "counters" for d in node.decorator_list)

    return {name: (reads(name), marked(node)) for name, node in functions.items() if name.startswith("test_")}


def test_every_gpu_test_that_reads_the_counters_is_marked_to_run_alone():
    """tools/gpu_stage.sh runs the suite's ``counters`` tests one at a time, after the rest in
    parallel: a test that profiles under a collector without the mark would count beside another
    (a driver resource taken, or another process's kernels counted), and one marked that needs no
    counters would only wait."""
    found = {
        f"{path.name}::{name}": flags
        for path in SUITE
        if path.name.startswith("test_gpu")
        for name, flags in counting_tests(path).items()
    }
    assert sum(reads for reads, _ in found.values()) >= 10, found  # the ncu, CUPTI and nvprof tests are seen
    assert {name: flags for name, flags in found.items() if flags[0] != flags[1]} == {}
