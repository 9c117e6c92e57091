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
ENGINES = {"cupy": ("tracker/gpu/cupy_backend.py",),
           "torch": ("tracker/library/accuracy.py", "tracker/library/torch_module.py",
                     "tracker/library/torch_net.py", "tracker/library/torch_run.py")}


def layers() -> dict[str, int]:
    """{unit: its layer's height}, from the page's table: a unit is a top-level module ('errors')
    or subpackage ('nets') of tracker."""
    page = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = page[page.index("## The layers"):page.index("## The path of a profile")]
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
            wrong += [f"{path.relative_to(ROOT)}:{line} imports {module} when the module loads"
                      for line, module, at_top in imports(path) if at_top and module in engines]
    for path in sources():
        source = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        engine = str(path.relative_to(ROOT)) in ENGINES[library]
        for line, module, at_top in imports(path):
            if module.split(".")[0] == library and ((at_top and not engine) or source not in allowed):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}"
                             + (" when the module loads" if at_top else ""))
    assert wrong == []


def test_test_modules_share_helpers_through_helper_modules_not_each_other():
    """A test module imported by another is collected twice over and couples their fixtures: shared
    helpers live in tests/ modules not named test_* (samples.py, recorded.py, ...) or conftest.py."""
    tests = ROOT / "tests"
    found = [f"{path.name}:{line} imports {module}" for path in sorted(tests.glob("test_*.py"))
             for line, module, _ in imports(path) if module.split(".")[0].startswith("test_")]
    assert found == []
