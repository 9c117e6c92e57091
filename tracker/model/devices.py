"""Device catalog: the GPUs of the papers and current ones, each figure with its source.

FP32 peak is the CUDA-core rate, FP32 lanes x 2 (FMA) x the clock the source quotes; it is the
roof the analytic model uses for every ``--dtype-bits`` (paper 000 varies bits per value against
the same roof). Bandwidth is the DRAM figure of the datasheet. The roofs of the faster levels are
derived per clock: L1/shared moves 128 B per clock per SM (32 banks x 4 B, CUDA guide), and L2 the
bytes per clock a whitepaper states (none is published for the others, so they have no L2 roof);
the clock is the one the FP32 peak implies (peak / (2 x FP32 lanes x SMs)). Look a device up with ``lookup``:
it forgives case, spaces, dashes and vendor prefixes and knows the CUDA device name strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracker.errors import UnknownName, unknown

SOURCES = {
    "paper000": "paper 000 (Salim et al. 2022), Table 1",
    "paper003": "paper 003 (Dong et al. ICPE'18), Table 2",
    "cuda-guide": "CUDA C++ Programming Guide, technical specifications per compute capability",
    "nv-k40": "NVIDIA Tesla K40 GPU accelerator board specification (BD-06902-001)",
    "nv-k20": "NVIDIA Tesla Kepler family overview (Tesla-KSeries-Overview): Tesla K20, 2496 cores, 3.52 TFLOPS "
    "single precision, 208 GB/s",
    "nv-gk110": "NVIDIA Kepler GK110 architecture whitepaper: 15 SMX on the full chip, 13 or 14 in Tesla products "
    "(192 FP32 cores each); 1536 KB of L2",
    "nv-gtx1080": "NVIDIA GeForce GTX 1080 whitepaper (GP104)",
    "nv-gm200": "NVIDIA GeForce GTX TITAN X product specifications (GM200)",
    "nv-titanx-pascal": "NVIDIA TITAN X (Pascal) product specifications (GP102)",
    "nv-turing": "NVIDIA Turing GPU architecture whitepaper (TU106)",
    "nv-pascal-gp108": "NVIDIA GP108 (GeForce MX230 / MX250 family) chip specifications",
    "nv-maxwell-gm107": "NVIDIA GeForce GTX 750 Ti whitepaper (GM107, as in the 940MX)",
    "nv-volta": "NVIDIA Tesla V100 GPU architecture whitepaper (SXM2)",
    "nv-ampere": "NVIDIA A100 Tensor Core GPU architecture whitepaper; A100 80GB datasheet (SXM4)",
    "nv-hopper": "NVIDIA H100 Tensor Core GPU architecture whitepaper; H100 datasheet",
    "nv-h200": "NVIDIA H200 Tensor Core GPU datasheet",
    "nv-ada": "NVIDIA Ada GPU architecture whitepaper; L4 and RTX 4090 datasheets",
    "seen-h100": "device properties PyTorch reported on an H100 80GB HBM3 "
    "(torch.cuda.get_device_properties, 2026-11-13)",
    "seen-h200": "device properties PyTorch reported on an H200 (torch.cuda.get_device_properties, 2026-10-28)",
}


# FP32 add/multiply/FMA results per clock per SM (CUDA guide, arithmetic instruction throughput).
FP32_LANES_PER_SM = {
    "3.5": 192,
    "5.0": 128,
    "5.2": 128,
    "6.0": 64,
    "6.1": 128,
    "7.0": 64,
    "7.5": 64,
    "8.0": 64,
    "8.6": 128,
    "8.9": 128,
    "9.0": 128,
}
L1_BYTES_PER_CLOCK_PER_SM = 128  # 32 shared-memory banks x 4 bytes (CUDA guide); Kepler's 8-byte mode not counted


@dataclass(frozen=True)
class Device:
    key: str
    name: str
    compute_capability: str
    sm_count: int
    fp32_tflops: float
    dram_gbps: float
    l2_kib: int
    shared_kib_per_sm: int
    sources: dict[str, str]
    aliases: tuple[str, ...] = ()
    notes: str = ""
    year: int = 0
    l2_bytes_per_clock: int | None = None  # the whole L2's read bandwidth per clock, where a source gives it
    memory_gb: float | None = None  # DRAM capacity (1e9 bytes), where the source names one board's; the
    # memory study's finding reads it (the largest batch that fits)

    @property
    def clock_hz(self) -> float:
        """The SM clock the FP32 peak is quoted at."""
        return self.peak_flops / (2 * FP32_LANES_PER_SM[self.compute_capability] * self.sm_count)

    @property
    def l1_bandwidth(self) -> float:
        """L1/shared bytes per second over all SMs: 128 B per clock per SM."""
        return L1_BYTES_PER_CLOCK_PER_SM * self.sm_count * self.clock_hz

    @property
    def l2_bandwidth(self) -> float | None:
        return self.l2_bytes_per_clock * self.clock_hz if self.l2_bytes_per_clock else None

    @property
    def peak_flops(self) -> float:
        return self.fp32_tflops * 1e12

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.dram_gbps * 1e9

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound."""
        return self.peak_flops / self.bandwidth

    def to_dict(self) -> dict:
        return {
            "device": self.key,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "sm_count": self.sm_count,
            "fp32_tflops": self.fp32_tflops,
            "dram_gbps": self.dram_gbps,
            "l2_kib": self.l2_kib,
            "shared_kib_per_sm": self.shared_kib_per_sm,
            "ridge_flop_per_byte": round(self.ridge, 2),
            "l1_gbps": round(self.l1_bandwidth / 1e9),
            "l2_gbps": round(self.l2_bandwidth / 1e9) if self.l2_bandwidth else None,
            "memory_gb": self.memory_gb,
            "sources": {k: SOURCES[v] for k, v in self.sources.items()},
            "aliases": list(self.aliases),
            "notes": self.notes,
        }


def _sources(default: str, **overrides: str) -> dict[str, str]:
    figures = ("compute_capability", "sm_count", "fp32_tflops", "dram_gbps", "l2_kib", "shared_kib_per_sm")
    return {f: overrides.get(f, default) for f in figures} | {k: v for k, v in overrides.items() if k not in figures}


CATALOG: tuple[Device, ...] = (
    Device(
        "mx230",
        "GeForce MX230",
        "6.1",
        2,
        0.784,
        56.08,
        512,
        96,
        _sources("paper000", l2_kib="nv-pascal-gp108", shared_kib_per_sm="cuda-guide"),
        aliases=("NVIDIA GeForce MX230", "GeForce MX230"),
        notes="256 cores at 1.531 GHz (paper 000)",
        year=2019,
    ),
    Device(
        "940mx",
        "GeForce 940MX",
        "5.0",
        3,
        0.953472,
        14.4,
        2048,
        64,
        _sources("paper000", l2_kib="nv-maxwell-gm107", shared_kib_per_sm="cuda-guide"),
        aliases=("NVIDIA GeForce 940MX", "GeForce 940MX"),
        notes="DDR3 variant, 384 cores at 1.242 GHz (paper 000)",
        year=2016,
    ),
    Device(
        "rtx2060-super",
        "GeForce RTX 2060 SUPER",
        "7.5",
        34,
        7.181,
        448.0,
        4096,
        64,
        _sources("paper000", l2_kib="nv-turing", shared_kib_per_sm="cuda-guide"),
        aliases=("NVIDIA GeForce RTX 2060 SUPER", "2060 super", "rtx 2060s"),
        notes="paper 000 prints 1.68 GHz and 7.181 TFLOPS (= 2176 cores x 2 x 1.65 GHz boost)",
        year=2019,
    ),
    Device(
        "k20c",
        "Tesla K20c",
        "3.5",
        13,
        3.52,
        208.0,
        1280,
        48,
        _sources("nv-k20", sm_count="nv-gk110", l2_kib="nv-gk110", shared_kib_per_sm="cuda-guide"),
        aliases=("Tesla K20c", "Tesla K20m", "Tesla K20"),
        notes="GK110 with 13 of 15 SMX: 2496 cores at the 706 MHz base clock; 320-bit GDDR5, so 5 of the "
        "chip's six 256 KB L2 slices (1280 KB); the GPU of the public nvprof samples",
        year=2012,
    ),
    Device(
        "k40",
        "Tesla K40",
        "3.5",
        15,
        4.29,
        288.0,
        1536,
        48,
        _sources("nv-k40", l2_kib="paper003", shared_kib_per_sm="cuda-guide"),
        aliases=("Tesla K40c", "Tesla K40m", "Tesla K40"),
        notes="2880 cores at the 745 MHz base clock of paper 003; its Table 2 prints 208 GB/s, "
        "the board specification 288 GB/s (384-bit GDDR5 at 3004 MHz)",
        year=2013,
    ),
    Device(
        "gtx1080",
        "GeForce GTX 1080",
        "6.1",
        20,
        8.873,
        320.0,
        2048,
        96,
        _sources("nv-gtx1080", dram_gbps="paper003", l2_kib="paper003", shared_kib_per_sm="cuda-guide"),
        aliases=("NVIDIA GeForce GTX 1080", "GeForce GTX 1080", "gtx 1080"),
        notes="2560 cores at the 1733 MHz boost clock",
        year=2016,
    ),
    Device(
        "gtx-titan-x",
        "GeForce GTX TITAN X",
        "5.2",
        24,
        6.605,
        336.5,
        3072,
        96,
        _sources("nv-gm200", shared_kib_per_sm="cuda-guide"),
        aliases=("NVIDIA GeForce GTX TITAN X", "GeForce GTX TITAN X", "titan x maxwell"),
        notes="Maxwell GM200: 3072 cores at the 1075 MHz boost clock",
        year=2015,
    ),
    Device(
        "titan-x-pascal",
        "TITAN X (Pascal)",
        "6.1",
        28,
        10.974,
        480.0,
        3072,
        96,
        _sources("nv-titanx-pascal", shared_kib_per_sm="cuda-guide"),
        aliases=("NVIDIA TITAN X (Pascal)", "TITAN X (Pascal)"),
        notes="GP102: 3584 cores at the 1531 MHz boost clock; paper 001's 'TITAN X ... 11 TFLOPs'",
        year=2016,
    ),
    Device(
        "v100",
        "Tesla V100-SXM2",
        "7.0",
        80,
        15.7,
        900.0,
        6144,
        96,
        _sources("nv-volta", shared_kib_per_sm="cuda-guide", l2_bytes_per_clock="nv-ampere"),
        aliases=("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "V100 SXM2"),
        notes="5120 cores at the 1530 MHz boost clock; L2 2048 B/clock (A100 whitepaper)",
        year=2017,
        l2_bytes_per_clock=2048,
    ),
    Device(
        "a100",
        "A100-SXM4-80GB",
        "8.0",
        108,
        19.5,
        2039.0,
        40960,
        164,
        _sources("nv-ampere", shared_kib_per_sm="cuda-guide", l2_bytes_per_clock="nv-ampere", memory_gb="nv-ampere"),
        aliases=("NVIDIA A100-SXM4-80GB", "A100 SXM4", "A100 SXM"),
        notes="6912 cores at the 1410 MHz boost clock; HBM2e 80 GB; L2 5120 B/clock (whitepaper)",
        year=2020,
        l2_bytes_per_clock=5120,
        memory_gb=80,
    ),
    Device(
        "h100-sxm",
        "H100 SXM5 80GB",
        "9.0",
        132,
        66.9,
        3350.0,
        51200,
        228,
        _sources(
            "nv-hopper", shared_kib_per_sm="cuda-guide", sm_count="seen-h100", l2_kib="seen-h100", memory_gb="nv-hopper"
        ),
        aliases=("NVIDIA H100 80GB HBM3", "H100 SXM", "H100", "h100 sxm5"),
        notes="16896 cores at the 1980 MHz boost clock; HBM3",
        year=2022,
        memory_gb=80,
    ),
    Device(
        "h100-pcie",
        "H100 PCIe",
        "9.0",
        114,
        51.2,
        2000.0,
        51200,
        228,
        _sources("nv-hopper", shared_kib_per_sm="cuda-guide", memory_gb="nv-hopper"),
        aliases=("NVIDIA H100 PCIe",),
        notes="14592 cores at the 1755 MHz boost clock; HBM2e",
        year=2022,
        memory_gb=80,
    ),
    Device(
        "h200",
        "H200 SXM 141GB",
        "9.0",
        132,
        66.9,
        4800.0,
        61440,
        228,
        _sources(
            "nv-h200", shared_kib_per_sm="cuda-guide", sm_count="seen-h200", l2_kib="seen-h200", memory_gb="nv-h200"
        ),
        aliases=("NVIDIA H200", "H200 SXM"),
        notes="GH100 as in the H100 SXM with 141 GB HBM3e; an H200 reported 60 MB of L2",
        year=2024,
        memory_gb=141,
    ),
    Device(
        "l4",
        "L4",
        "8.9",
        58,
        30.3,
        300.0,
        49152,
        100,
        _sources("nv-ada", shared_kib_per_sm="cuda-guide", memory_gb="nv-ada"),
        aliases=("NVIDIA L4",),
        notes="7424 cores at the 2040 MHz boost clock; GDDR6",
        year=2023,
        memory_gb=24,
    ),
    Device(
        "rtx4090",
        "GeForce RTX 4090",
        "8.9",
        128,
        82.6,
        1008.0,
        73728,
        100,
        _sources("nv-ada", shared_kib_per_sm="cuda-guide", memory_gb="nv-ada"),
        aliases=("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "rtx 4090"),
        notes="16384 cores at the 2520 MHz boost clock; GDDR6X",
        year=2022,
        memory_gb=24,
    ),
)

_PREFIXES = ("nvidia", "geforce", "tesla")


def _norm(name: str) -> str:
    """'NVIDIA GeForce GTX TITAN X' -> 'gtxtitanx'; 'H100-SXM' -> 'h100sxm'."""
    text = re.sub(r"[^a-z0-9]", "", name.lower())
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if text.startswith(prefix) and len(text) > len(prefix):
                text, changed = text[len(prefix) :], True
    return text


def _index() -> dict[str, list[Device]]:
    index: dict[str, list[Device]] = {}
    for device in CATALOG:
        for name in {device.key, device.name, *device.aliases}:
            entries = index.setdefault(_norm(name), [])
            if device not in entries:
                entries.append(device)
    return index


AMBIGUOUS = {"titanx": ("gtx-titan-x", "titan-x-pascal")}


# The catalog GPU `tracker profile` predicts for when no GPU runs the workload and --device names
# none: the GPU this project's recordings come from, so the first command's report is whole.
MODEL_DEFAULT = "h100-sxm"


def lookup(name: str) -> Device:
    """The device called ``name``: a catalog key, a marketing name or a CUDA device name."""
    if not name.strip():
        raise UnknownName("the device name is empty: name a catalog GPU (see `tracker devices`)")
    key = _norm(name)
    if key in AMBIGUOUS:
        raise UnknownName(f"device '{name}' is ambiguous: say {' or '.join(AMBIGUOUS[key])}")
    found = _index().get(key)
    if found:
        return found[0]
    raise unknown("device", name, [d.key for d in CATALOG])
