"""The report as a person sees it: rendered in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium), every figure must load, every link of the table of contents
must land on a section, and no cell may read None or nan. Reports of a model run (no counters) and
of the real H100 recording (ncu counters) are checked; screenshots go to TRACKER_SCREENSHOTS if set.
CI installs the browser (.ci/run) and sets TRACKER_REQUIRE_BROWSER, so there a skip is a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tracker.model import lookup
from tracker.nets import build
from tracker.profile import profile
from tracker.report import report
from tracker.store import open_store

DATA = Path(__file__).parent / "data"


def _model_run(tmp_path: Path) -> tuple[object, str]:
    path = str(tmp_path / "model.db")
    profile(path, build("alexnet"), 128, backend="model", device=lookup("h100"))
    return open_store(path, write=False), "last"


def _h100_run(tmp_path: Path) -> tuple[object, str]:
    path = tmp_path / "h100.db"
    shutil.copy(DATA / "alexnet-b16-nvidia-h100-80gb-hbm3.db", path)
    return open_store(str(path), write=True), "1"


def _page_problems(driver, page: Path) -> dict:
    driver.get(page.as_uri())
    driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
    return driver.execute_script("""
        const images = [...document.images];
        const links = [...document.querySelectorAll('nav a')].map(a => a.getAttribute('href'));
        const cells = [...document.querySelectorAll('td')].map(td => td.textContent.trim());
        return {
          complete: images.every(i => i.complete),
          images: images.length,
          broken: images.filter(i => !(i.naturalWidth > 0)).map(i => i.getAttribute('src')),
          links: links.length,
          dangling: links.filter(h => !h.startsWith('#') || !document.getElementById(h.slice(1))),
          bad_cells: cells.filter(t => ['none', 'nan', 'null', 'undefined'].includes(t.toLowerCase())),
          cells: cells.length,
          height: document.body.scrollHeight,
        };""")


def _screenshot(driver, height: int, name: str) -> None:
    where = os.environ.get("TRACKER_SCREENSHOTS")
    if where:
        driver.set_window_size(1400, min(height + 100, 16000))
        driver.save_screenshot(str(Path(where) / f"{name}.png"))
        driver.set_window_size(1400, 1000)


@pytest.mark.parametrize(
    "make, figures",
    [
        (_model_run, {"runtime", "roofline", "efficiency", "memory"}),
        (
            _h100_run,
            {
                "runtime",
                "roofline",
                "efficiency",
                "fp_instructions",
                "stalls",
                "alu_utilization",
                "cache_hit_rates",
                "traffic",
                "level_utilization",
            },
        ),
    ],
    ids=["model-run", "h100-ncu-recording"],
)
@pytest.mark.slow  # starts Chromium
def test_the_report_renders_in_a_real_browser(browser, tmp_path, make, figures):
    store, target = make(tmp_path)
    out = tmp_path / "report"
    _, built, _ = report(store, target, out)
    assert {s.key for s in built.sections if s.figure is not None} == figures
    found = _page_problems(browser, out / "index.html")
    assert found["complete"] and found["images"] == len(figures) and found["broken"] == [], found
    assert found["links"] >= len(figures) and found["dangling"] == [], found
    assert found["cells"] > 0 and found["bad_cells"] == [], found
    _screenshot(browser, found["height"], make.__name__.strip("_"))
