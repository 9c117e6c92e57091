"""tools/gpu_stage.sh on a machine without a GPU: every stage stops at once with a one-line
reason, a summary and a non-zero exit, and leaves at most the two files the device tool can
bring back (it returns at most 8 from $OUT)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tracker.gpu.detect import cuda_devices

ROOT = Path(__file__).resolve().parents[1]


def stage(arg: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "tools/gpu_stage.sh", arg], cwd=ROOT, env={**os.environ, "OUT": str(out)},
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(cuda_devices()[0] > 0, reason="this machine has a GPU: the stage would run")
@pytest.mark.parametrize("number", ["1", "2", "3"])
def test_every_stage_refuses_cleanly_without_a_gpu(number, tmp_path):
    done = stage(number, tmp_path)
    assert done.returncode == 1
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == sorted(["summary.txt", f"stage{number}.tar.gz"])
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary[1].startswith("preflight") and " rc=1 " in summary[1] and "FAIL GPU:" in summary[1]
    assert summary[-1].startswith(f"stage {number} stopped: preflight failed")
    with tarfile.open(tmp_path / f"stage{number}.tar.gz") as tar:
        assert f"stage{number}/preflight.log" in tar.getnames()


def test_an_unknown_stage_is_a_usage_error(tmp_path):
    done = stage("7", tmp_path)
    assert done.returncode == 2
    assert (tmp_path / "summary.txt").read_text() == "usage: tools/gpu_stage.sh 1|2|3|4|5 (got '7')\n"
