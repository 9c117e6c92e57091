"""Kernel variants per op (DESIGN.md), and parsing ``--variant``.

``--variant shared`` picks ``shared`` for every op that has it; ``--variant conv=fused,lrn=shared``
picks per op. An empty map means each op's default (the fastest verified variant, issue 4).
"""

from __future__ import annotations

from tracker.errors import TrackerError, unknown

VARIANTS: dict[str, tuple[str, ...]] = {
    "conv": ("global", "constant", "shared", "gemm", "fused"),
    "linear": ("global", "shared", "fused"),
    "relu": ("global",),
    "maxpool": ("global", "shared"),
    "lrn": ("global", "shared"),
    "softmax": ("global", "shared"),
}


def parse_variants(spec: str | None) -> dict[str, str]:
    if not spec:
        return {}
    if "=" not in spec:
        name = spec.strip()
        chosen = {op: name for op, names in VARIANTS.items() if name in names}
        if not chosen:
            known = sorted({n for names in VARIANTS.values() for n in names})
            raise unknown("variant", name, known)
        return chosen
    chosen = {}
    for item in spec.split(","):
        op, _, name = (part.strip() for part in item.partition("="))
        if op not in VARIANTS:
            raise unknown("op", op, list(VARIANTS))
        if name not in VARIANTS[op]:
            raise TrackerError(f"{op} has no variant '{name}'; it has {', '.join(VARIANTS[op])}")
        chosen[op] = name
    return chosen
