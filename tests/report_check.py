"""What every `tracker report` must write, checked alike by the GPU suite (tests/test_gpu.py) and
by the tests that report a GPU's stored runs without one."""

from __future__ import annotations

import re
from pathlib import Path

from tracker.cli import cli


def check_report(runner, db: str, target: str, out: Path, counters: bool | None = None) -> None:
    """`tracker report TARGET`: index.html shows every figure written (each as PNG and SVG) and
    report.md; a run's counter sections all drawn where it has ``counters``, else left out."""
    result = runner.invoke(cli, ["report", target, "--db", db, "--out", str(out)])
    assert result.exit_code == 0, result.output
    svg, png = ({p.stem for p in out.glob(f"*.{ext}")} for ext in ("svg", "png"))
    shown = re.findall(r"<img src='([^']+)\.svg'", (out / "index.html").read_text())
    assert sorted(shown) == sorted(svg) == sorted(png) != [], f"each figure in files of its own: {sorted(shown)}"
    assert result.stdout.startswith(f"{len(shown)} figure{'s' if len(shown) != 1 else ''} of "), result.output
    assert (out / "report.md").read_text().startswith("#")
    if counters is not None:
        assert ("not collected (no counters)" in result.stdout) is not counters
