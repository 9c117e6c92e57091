"""Every kernel module compiles with the oldest NVRTC the ``[compile]`` extra allows, not only with
constraints.txt's pin (NVRTC 13.0 rejected a generic lambda that 13.5 accepts).

.ci/run installs that release into a directory of its own (``pip install --no-deps --target``) and
names it in TRACKER_NVRTC_FLOOR; without it this skips, unless TRACKER_REQUIRE_NVRTC_FLOOR is set,
as in CI. The compile runs in a child process: a process holds one libnvrtc, and this one's may
already be the pinned one. Run as a script, this module prints the floor (.ci/run reads it so)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def floor_version() -> str:
    """The lower bound of nvidia-cuda-nvrtc in pyproject's [compile] extra: the one place it is written."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["compile"]
    found = [m.group(1) for r in extra if (m := re.fullmatch(r"nvidia-cuda-nvrtc>=([\d.]+),.*", r))]
    assert len(found) == 1, f"no single nvidia-cuda-nvrtc>=X lower bound in the [compile] extra: {extra}"
    return found[0]


def compile_all(floor: Path) -> dict:
    """In the child: load the floor's libnvrtc, then compile what the registry launches, as ``tracker
    kernels`` does, in every build (tracker.gpu.kernels.BUILDS) and architecture, to PTX
    (``compile.front_end``): what an older NVRTC refused was source (a generic lambda), and
    ptxas, most of the time, compiles the pinned NVRTC's SASS in tests/test_kernels.py."""
    lib = floor / "nvidia" / "cu13" / "lib"
    # cuda-pathfinder takes a libnvrtc already in the process over the venv's wheel; libnvrtc opens its
    # builtins by name (it has no RPATH), so they are loaded first.
    for name in sorted(p.name for p in lib.glob("libnvrtc-builtins.so.*")) + ["libnvrtc.so.13"]:
        ctypes.CDLL(str(lib / name), mode=os.RTLD_GLOBAL)
    from cuda.bindings import nvrtc

    from tracker.errors import TrackerError
    from tracker.gpu.compile import front_end
    from tracker.gpu.kernels import ARCHS, BUILDS
    from tracker.ops import OPS

    jobs = sorted(
        {
            (k.source, arch, policy, v.defines)
            for v in OPS.launches()
            for k in v.kernels
            for arch in ARCHS
            for policy in BUILDS
        }
    )

    def failure(job) -> str | None:
        try:
            front_end(*job)
        except TrackerError as e:
            return f"{job}: {e}"
        return None

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        failed = [f for f in pool.map(failure, jobs) if f]
    loaded = {
        line.split()[-1]
        for line in Path("/proc/self/maps").read_text().splitlines()
        if re.search(r"/libnvrtc\.so", line)
    }
    return {"version": list(nvrtc.nvrtcVersion()[1:]), "loaded": sorted(loaded), "jobs": len(jobs), "failed": failed}


@pytest.mark.slow  # compiles every kernel module with NVRTC: minutes on 2 cores
def test_every_kernel_compiles_with_the_lowest_nvrtc_allowed():
    floor, version = os.environ.get("TRACKER_NVRTC_FLOOR"), floor_version()
    if not floor:
        if os.environ.get("TRACKER_REQUIRE_NVRTC_FLOOR"):
            pytest.fail("TRACKER_REQUIRE_NVRTC_FLOOR is set but TRACKER_NVRTC_FLOOR is not")
        pytest.skip(
            f"no NVRTC {version} to compile with: set TRACKER_NVRTC_FLOOR to a directory made by "
            f"pip install --no-deps --target DIR nvidia-cuda-nvrtc=={version} (.ci/run does)"
        )
    installed = [p.name for p in Path(floor).glob("nvidia_cuda_nvrtc-*.dist-info")]
    assert installed == [f"nvidia_cuda_nvrtc-{version}.dist-info"], (floor, installed)
    done = subprocess.run([sys.executable, __file__, "compile", floor], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["loaded"] and all(Path(p).is_relative_to(Path(floor).resolve()) for p in result["loaded"]), result
    assert result["version"] == [int(n) for n in version.split(".")[:2]], result
    assert result["jobs"] > 0 and not result["failed"], "\n\n".join(result["failed"])[:20000]


if __name__ == "__main__":
    if sys.argv[1:] == ["version"]:
        print(floor_version())
    else:
        print(json.dumps(compile_all(Path(sys.argv[2]).resolve())))
