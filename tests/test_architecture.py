"""The map tells the truth: every import in tracker/ (at the top of a module or inside a function)
goes to its own layer or one below, as docs/ARCHITECTURE.md's layer table says, and CuPy and torch
are imported only where that page says, only inside functions. The table is read from the page
itself, so the page and this test cannot drift apart."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "tracker"
CUPY_IN = ("gpu",)  # the units that may import CuPy (inside functions)
TORCH_IN = ("library", "ops")  # ... and torch: the library arm, the ops' PyTorch hooks
# The modules that are the CuPy or PyTorch code itself, which import it when they load; everything
# else imports them inside the functions that run on a GPU or with PyTorch.
ENGINES = {
    "cupy": ("tracker/gpu/cupy_backend.py",),
    "torch": (
        "tracker/library/accuracy.py",
        "tracker/library/torch_module.py",
        "tracker/library/torch_net.py",
        "tracker/library/torch_run.py",
    ),
}


def layers() -> dict[str, int]:
    """{unit: its layer's height}, from the page's table: a unit is a top-level module ('errors')
    or subpackage ('nets') of tracker."""
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = page[page.index("## The layers") : page.index("## The path of a profile")]
    found: dict[str, int] = {}
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    for height, row in enumerate(rows):
        modules = row.split("|")[2]
        for name in re.findall(r"`([\w]+)(?:\.py|/)`", modules):
            found[name] = height
    return found


def unit(module: str) -> str:
    """tracker.gpu.network -> gpu; tracker.errors -> errors."""
    return module.split(".")[1]


def imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, at the top of the module) of every absolute import in a file."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, id(node) in top))
    return found


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")  # the lazy public face


def test_the_table_places_every_module_of_tracker_once():
    placed = layers()
    units = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in sources()}
    assert units == set(placed), (sorted(units - set(placed)), sorted(set(placed) - units))


def test_every_import_goes_to_its_own_layer_or_below():
    placed = layers()
    upward = []
    for path in sources():
        source = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for line, module, _ in imports(path):
            if not module.startswith("tracker."):
                continue
            target = unit(module)
            where = str(path.relative_to(ROOT))
            if placed[target] > placed[source]:
                upward.append(f"{where}:{line} imports {module} ({source} is below {target})")
    assert upward == []


@pytest.mark.parametrize("library, allowed", [("cupy", CUPY_IN), ("torch", TORCH_IN)])
def test_cupy_and_torch_are_imported_only_where_the_page_says_and_only_inside_functions(library, allowed):
    wrong = []
    engines = {engine.removesuffix(".py").replace("/", ".") for engine in ENGINES[library]}
    for path in sources():  # and the other modules import an engine inside functions only
        if str(path.relative_to(ROOT)) not in ENGINES[library]:
            wrong += [
                f"{path.relative_to(ROOT)}:{line} imports {module} when the module loads"
                for line, module, at_top in imports(path)
                if at_top and module in engines
            ]
    for path in sources():
        source = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        engine = str(path.relative_to(ROOT)) in ENGINES[library]
        for line, module, at_top in imports(path):
            if module.split(".")[0] == library and ((at_top and not engine) or source not in allowed):
                wrong.append(
                    f"{path.relative_to(ROOT)}:{line} imports {module}" + (" when the module loads" if at_top else "")
                )
    assert wrong == []


def test_test_modules_share_helpers_through_helper_modules_not_each_other():
    """A test module imported by another is collected twice over and couples their fixtures: shared
    helpers live in tests/ modules not named test_* (samples.py, recorded.py, ...) or conftest.py."""
    tests = ROOT / "tests"
    found = [
        f"{path.name}:{line} imports {module}"
        for path in sorted(tests.glob("test_*.py"))
        for line, module, _ in imports(path)
        if module.split(".")[0].startswith("test_")
    ]
    assert found == []


# The module graph: which module's code runs another's. An import inside a function counts (it runs
# when the function does); one under `if TYPE_CHECKING` does not (it never runs). `from a import b`
# where b is a module imports a.b; importing a.b does not count as importing its package a.
Sources = dict[str, tuple[str, bool]]  # module name -> (its source, whether it is a package's __init__)
Graph = dict[str, dict[str, int]]  # module -> {module it imports: the line of the first such import}
MODEL_ORDER = ("devices", "algorithms", "costs", "roofline", "memory")  # each model module calls only those before it
LAZY = ("cupy", "cupyx", "torch")  # imported inside the functions that run on a GPU or with PyTorch, never on load


def tracker_sources() -> Sources:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path.read_text(), package)
    return found


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"
    )


def _statements(nodes, into_functions: bool):
    """Every import statement in or under ``nodes`` that can run: none under `if TYPE_CHECKING`, and
    with ``into_functions`` False only those that run when the module loads."""
    for node in nodes:
        if _type_checking(node):
            yield from _statements(node.orelse, into_functions)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not into_functions:
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        else:
            yield from _statements(ast.iter_child_nodes(node), into_functions)


def _absolute(module: str, package: bool, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, its dots resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + package]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, package: bool, node: ast.Import | ast.ImportFrom, known) -> list[str]:
    """The modules of ``known`` that an import statement runs (a name inside one: that module)."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        origin = _absolute(module, package, node)
        named = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known else origin for alias in node.names]
    found = []
    for name in named:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


def import_graph(sources: Sources) -> Graph:
    graph: Graph = {}
    for module, (source, package) in sources.items():
        edges = graph.setdefault(module, {})
        for node in _statements(ast.parse(source).body, into_functions=True):
            for target in _targets(module, package, node, sources):
                edges[target] = min(edges.get(target, node.lineno), node.lineno)
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def describe(circle: list[str], graph: Graph) -> str:
    """'a, b: a:12 imports b; b:3 imports a'."""
    lines = [f"{a}:{line} imports {b}" for a in circle for b, line in sorted(graph[a].items()) if b in circle]
    return f"{', '.join(circle)}: {'; '.join(lines)}"


def out_of_order(graph: Graph, package: str, order: tuple[str, ...]) -> list[str]:
    """The imports between ``package``'s modules that call a module not before them in ``order``."""
    rank = {f"{package}.{name}": i for i, name in enumerate(order)}
    return [
        f"{module}:{line} imports {target}"
        for module in sorted(rank)
        for target, line in graph.get(module, {}).items()
        if target in rank and rank[target] >= rank[module]
    ]


def loaded_eagerly(sources: Sources, libraries: tuple[str, ...]) -> list[str]:
    """The imports of ``libraries`` that run when a module loads (outside functions and TYPE_CHECKING)."""
    found = []
    for module, (source, _) in sorted(sources.items()):
        for node in _statements(ast.parse(source).body, into_functions=False):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [
                f"{module}:{node.lineno} imports {name}"
                for name in names
                if not getattr(node, "level", 0) and name.split(".")[0] in libraries
            ]
    return found


def private_imports(sources: Sources) -> list[str]:
    """Every `from x import _name`: a module reaching for another's private name."""
    found = []
    for module, (source, _) in sorted(sources.items()):
        for node in _statements(ast.parse(source).body, into_functions=True):
            if isinstance(node, ast.ImportFrom):
                found += [
                    f"{module}:{node.lineno} imports {alias.name} from {node.module or '.'}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    return found


def test_no_modules_import_each_other_round_a_circle():
    graph = import_graph(tracker_sources())
    found = [describe(circle, graph) for circle in circles(graph)]
    assert not found, "modules in a circle:\n" + "\n".join(found)


def test_the_model_modules_call_only_those_before_them():
    model = {p.stem for p in (PACKAGE / "model").glob("*.py")} - {"__init__"}
    assert model == set(MODEL_ORDER)  # a new model module takes its place in the order
    found = out_of_order(import_graph(tracker_sources()), "tracker.model", MODEL_ORDER)
    assert not found, f"the model's order is {' <- '.join(MODEL_ORDER)}:\n" + "\n".join(found)


def test_no_module_but_an_engine_imports_cupy_or_torch_when_it_loads():
    """Loading any module but the engines loads neither CuPy nor torch: the engines are imported only
    inside functions (the test above), and no other module imports CuPy or torch at its top."""
    engines = {path.removesuffix(".py").replace("/", ".") for paths in ENGINES.values() for path in paths}
    pure = {module: source for module, source in tracker_sources().items() if module not in engines}
    found = loaded_eagerly(pure, LAZY)
    assert not found, "import these inside the functions that use them:\n" + "\n".join(found)


def test_no_module_imports_another_modules_private_name():
    found = private_imports(tracker_sources())
    assert not found, "make these public, or move them where both modules can share them:\n" + "\n".join(found)


PLANTED: Sources = {
    "pkg": ("from pkg.shapes import Shape\n", True),
    "pkg.shapes": ("from pkg import helpers\n\nShape = 1\n", False),
    "pkg.helpers": ("def late():\n    from pkg.costs import cost\n", False),
    "pkg.costs": (
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.shapes import Shape\n"
            "from . import helpers\n"
        ),
        False,
    ),
    "pkg.plots": ("import pkg.shapes\n", False),
}


def test_a_circle_through_a_function_and_a_relative_import_is_found_and_typing_imports_are_not():
    graph = import_graph(PLANTED)
    assert circles(graph) == [["pkg.costs", "pkg.helpers"]]
    assert (
        describe(["pkg.costs", "pkg.helpers"], graph)
        == "pkg.costs, pkg.helpers: pkg.costs:4 imports pkg.helpers; pkg.helpers:2 imports pkg.costs"
    )
    assert "pkg.shapes" not in graph["pkg.costs"] and graph["pkg.plots"] == {"pkg.shapes": 1}


def test_a_package_and_its_module_importing_each_other_is_a_circle():
    planted = dict(PLANTED, **{"pkg.shapes": ("from pkg import Shape\n", False)})
    assert ["pkg", "pkg.shapes"] in circles(import_graph(planted))


def test_a_model_module_calling_one_after_it_is_out_of_order():
    planted = {"m.low": ("def f():\n    from m.high import g\n", False), "m.high": ("from m.low import f\n", False)}
    assert out_of_order(import_graph(planted), "m", ("low", "high")) == ["m.low:2 imports m.high"]


def test_a_top_level_import_of_cupy_in_a_pure_module_is_found():
    planted = {
        "pkg.pure": ("import numpy\nimport cupy\n", False),
        "pkg.guarded": ("try:\n    from torch.nn import Module\nexcept ImportError:\n    pass\n", False),
        "pkg.lazy": (
            (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
                "def run():\n    import cupyx.scipy\n    import torch\n"
            ),
            False,
        ),
    }
    assert loaded_eagerly(planted, LAZY) == ["pkg.guarded:2 imports torch.nn", "pkg.pure:2 imports cupy"]


def test_an_import_of_a_private_name_is_found():
    planted = {"pkg.a": ("from pkg.b import _check, public\ndef f():\n    from .b import _hidden\n", False)}
    assert private_imports(planted) == ["pkg.a:1 imports _check from pkg.b", "pkg.a:3 imports _hidden from b"]


def test_a_cycle_and_an_eager_cupy_planted_in_tracker_itself_are_found():
    sources = tracker_sources()
    source, package = sources["tracker.units"]  # pure, and imported by tracker.model.memory
    sources["tracker.units"] = (
        "import cupy\n" + source + "\n\ndef late():\n    from tracker.model import memory\n",
        package,
    )
    assert "tracker.units:1 imports cupy" in loaded_eagerly(sources, LAZY)
    assert any({"tracker.units", "tracker.model.memory"} <= set(circle) for circle in circles(import_graph(sources)))


# Who runs a workload is one strategy (tracker/implementations): outside it, and outside the code
# each implementation drives (gpu/ for ours, library/ for PyTorch's), nothing asks which one runs.
STRATEGIES = ("tracker.implementations", "tracker.gpu", "tracker.library")
NAMES = ("ours", "torch", "imported")  # tracker.implementations.IMPLEMENTATIONS, read without importing tracker


def implementation_branches(sources: Sources) -> list[str]:
    """Comparisons with an implementation's name or with a value named ``implementation`` or
    ``library``, and dicts keyed by implementation names: a module choosing by who runs."""

    def asks(node: ast.AST) -> bool:
        """An implementation's name, or a value that holds one: x.implementation, x["implementation"],
        x.get("implementation"), a tuple or list with a name in it."""
        named = getattr(node, "attr", getattr(node, "id", None))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
            named = getattr(node.args[0], "value", None)
        elif isinstance(node, ast.Subscript):
            named = getattr(node.slice, "value", None)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(asks(element) for element in node.elts)
        return named in ("implementation", "library") or (isinstance(node, ast.Constant) and node.value in NAMES)

    found = []
    for module, (source, _) in sorted(sources.items()):
        if module.startswith(STRATEGIES):
            continue
        for node in ast.walk(ast.parse(source)):
            compared = (
                isinstance(node, ast.Compare)
                and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
                and any(asks(side) for side in (node.left, *node.comparators))
            )
            keys = [key for key in getattr(node, "keys", ()) if key is not None]  # a dict's, less its **spreads
            keyed = isinstance(node, ast.Dict) and bool(keys) and all(asks(key) for key in keys)
            if compared or keyed:
                found.append(f"{module}:{node.lineno}")
    return found


def test_no_module_outside_the_strategies_asks_which_implementation_runs():
    from tracker.implementations import IMPLEMENTATIONS

    assert tuple(IMPLEMENTATIONS) == NAMES
    found = implementation_branches(tracker_sources())
    assert not found, "ask the implementation (tracker.implementations.implementation(name)):\n" + "\n".join(found)


def test_a_branch_on_the_implementation_is_found():
    planted = {
        "tracker.cli.x": ('def f(w):\n    if w.implementation == "ours":\n        pass\n', False),
        "tracker.profile": ("def g(implementation):\n    return implementation != 'x'\n", False),
        "tracker.report.y": ("HOW = {'ours': 1, 'torch': 2}\nSAME = 'torch' in ('a',)\n", False),
        "tracker.report.z": ("def f(run):\n    return run.get('implementation') not in (None, 'ours')\n", False),
        "tracker.report.w": ("def f(run):\n    return run['implementation'] == x or y in (1, 'torch')\n", False),
        "tracker.experiment": ("def h(arm, library):\n    return arm.library, library is None, {**arm}\n", False),
        "tracker.implementations.ours": ("X = 'ours' == 'ours'\n", False),
    }
    assert implementation_branches(planted) == [
        "tracker.cli.x:2",
        "tracker.profile:2",
        "tracker.report.w:2",
        "tracker.report.w:2",
        "tracker.report.y:1",
        "tracker.report.y:2",
        "tracker.report.z:2",
    ]


COMMAND_LINES = 40  # a command parses, calls the library and prints: the work lives below the CLI


def long_commands(sources: Sources, most: int = COMMAND_LINES) -> list[str]:
    """The click commands whose body (less its docstring, which is its --help) runs past ``most`` lines."""
    found = []
    for module, (source, _) in sorted(sources.items()):
        for node in ast.parse(source).body:
            decorated = [ast.unparse(d) for d in getattr(node, "decorator_list", ())]
            if not isinstance(node, ast.FunctionDef) or not any("command" in d for d in decorated):
                continue
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            lines = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1
            if lines > most:
                found.append(f"{module}.{node.name}: {lines} lines")
    return found


def test_no_command_is_longer_than_the_cli_needs():
    cli = {module: source for module, source in tracker_sources().items() if module.startswith("tracker.cli")}
    found = long_commands(cli)
    assert not found, f"move the work into the library (at most {COMMAND_LINES} lines a command):\n" + "\n".join(found)


def test_a_long_command_is_found():
    body = "".join(f"    x{i} = {i}\n" for i in range(3))
    planted = {"pkg.cli": (f'@click.command()\ndef run():\n    """Help."""\n{body}\ndef helper():\n{body}', False)}
    assert long_commands(planted, most=2) == ["pkg.cli.run: 3 lines"] and long_commands(planted, most=3) == []
