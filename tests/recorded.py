"""The committed recordings of our kernels (tests/data/RECORDINGS.md): AlexNet on an NVIDIA H100
80GB HBM3 (tools/gpu_stage.sh, 2026-11-22, and the GEMM core on 2026-11-23), by file
name, and ``recording``, a private copy of one to open."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

DATA = Path(__file__).parent / "data"
GPU = "nvidia-h100-80gb-hbm3"
B16 = f"alexnet-b16-{GPU}.db"  # --backend ncu, batch 16, one measured iteration
B128_NCU = f"alexnet-b128-ncu-{GPU}.db"  # --backend ncu, batch 128
EXPERIMENTS = f"experiments-b128-events-{GPU}.db.gz"  # e1 l1-bypass, e2 fusion, e3 variants, e4 batch
L1_BYPASS = f"l1-bypass-b128-events-{GPU}.db.gz"  # e1 l1-bypass with the real bypass (7791b43)
FUSION_NCU = f"fusion-ncu-b128-{GPU}.db"  # e1 fusion under ncu
# The GEMM core of kernels 903ea16, recorded 2026-11-23:
CORE_NCU = f"alexnet-b128-ncu-{GPU}-2026-11-23.db.gz"  # --backend ncu, batch 128, the default tile
CORE_EXPERIMENTS = f"experiments-b128-events-{GPU}-2026-11-23.db.gz"  # e1 l1-bypass, e2 fusion, e3, e4
TUNING = f"tuning-alexnet-b128-{GPU}.db.gz"  # tracker tune alexnet --batch 128: 1,253 candidates
LAYER_PHASES = 49  # AlexNet: 21 layers, conv1 has no bwd_data


def recording(name: str, folder: Path, data: Path = DATA) -> str:
    """A private copy of a recording (decompressed if .gz): tests never touch the committed file."""
    target = folder / name.removesuffix(".gz")
    if not target.exists():
        with (gzip.open if name.endswith(".gz") else open)(data / name, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return str(target)
