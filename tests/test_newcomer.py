"""A newcomer's path, hint by hint, in a folder of their own: profile, then every command the
printed 'next:' line names; a second profile and its hints; a batch experiment and its hints.
No report is written over another: each lands in its own folder and keeps its figures, and a
report aimed at another run's folder is refused unless --force."""

from __future__ import annotations

import json
import subprocess

import pytest
from hints import TRACKER, follow


@pytest.mark.slow
def test_following_every_printed_hint_loses_no_report(tmp_path):
    ran = follow(["profile", "alexnet", "--batch", "128"], tmp_path)
    ran += follow(["profile", "alexnet", "--batch", "64"], tmp_path)
    ran += follow(["experiment", "batch", "alexnet", "--backend", "model", "--batches", "16,64"], tmp_path)
    assert ran == [
        "tracker profile alexnet --batch 128",
        "tracker show 1",
        "tracker report 1",
        "tracker profile alexnet --batch 64",
        "tracker show 2",
        "tracker report 2",
        "tracker experiment batch alexnet --backend model --batches 16,64",
        "tracker report e1",
    ]
    db = str(tmp_path / "trace.db")
    for folder, what in (
        ("report-1", "run 1's report"),
        ("report-2", "run 2's report"),
        ("report-e1", "experiment e1's report"),
    ):
        marker = json.loads((tmp_path / folder / ".tracker-output.json").read_text())
        assert (marker["what"], marker["db"]) == (what, db)
        assert "index.html" in marker["files"] and any(name.endswith(".png") for name in marker["files"])
        assert all((tmp_path / folder / name).is_file() for name in marker["files"])
    before = sorted(p.name for p in (tmp_path / "report-1").iterdir())
    refused = subprocess.run(
        [str(TRACKER), "report", "2", "--out", "report-1"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"Error: report-1 holds run 1's report of {db}: name another --out, or add --force "
        "to write run 2's report there\n"
    )
    assert sorted(p.name for p in (tmp_path / "report-1").iterdir()) == before
