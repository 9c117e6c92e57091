"""Figures (seaborn/matplotlib, imported only when drawing)."""

from __future__ import annotations

from collections import defaultdict

from tracker.model import Device, Prediction

PHASE_MARKERS = {"fwd": "o", "bwd_data": "s", "bwd_weight": "^"}


def roofline_plot(rows: list[Prediction], device: Device, path: str, title: str = "") -> None:
    """Log-log roofline of ``device`` with one labelled point per layer and phase.

    Points that land on the same spot (every ReLU forward; a convolution's three phases) share one
    label. Phases with no
    arithmetic (copies: up-sampling, concatenation) have no place on a log axis and are listed
    in a note instead.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns
    from adjustText import adjust_text

    sns.set_theme(style="whitegrid", context="notebook")
    points = [r for r in rows if r.ops > 0]
    if not points:
        from tracker.errors import TrackerError

        raise TrackerError("nothing to plot: no layer phase does arithmetic")
    spots: dict[float, list[Prediction]] = defaultdict(list)
    for r in points:
        spots[round(r.intensity, 6)].append(r)

    lo = min(min(r.intensity for r in points), device.ridge) / 4
    hi = max(max(r.intensity for r in points), device.ridge) * 4
    x = np.geomspace(lo, hi, 256)
    fig, ax = plt.subplots(figsize=(12, 7.5), dpi=120)
    ax.plot(x, np.minimum(device.peak_flops, x * device.bandwidth) / 1e9, color="black", lw=2,
            label=f"{device.name}: {device.fp32_tflops:g} TFLOP/s FP32, {device.dram_gbps:g} GB/s")
    bottom = lo * device.bandwidth / 1e9 / 2
    ax.axvline(device.ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge point {device.ridge:.1f} FLOP/B", (device.ridge, bottom),
                xytext=(6, 8), textcoords="offset points", fontsize=9, color="grey")

    palette = dict(zip(PHASE_MARKERS, sns.color_palette("deep", 3)))
    texts = []
    for group in spots.values():
        for r in group:
            ax.scatter(r.intensity, r.attainable_gflops, marker=PHASE_MARKERS[r.phase], s=46,
                       color=palette[r.phase], edgecolor="white", linewidth=0.6, zorder=3)
        r = group[0]
        color = palette[r.phase] if len({g.phase for g in group}) == 1 else "black"
        texts.append(ax.text(r.intensity, r.attainable_gflops, _label(group), fontsize=7.5, color=color))
    for phase, marker in PHASE_MARKERS.items():
        if any(r.phase == phase for r in points):
            ax.scatter([], [], marker=marker, color=palette[phase], label=f"{phase} ({PHASE_SHORT[phase]})")

    ax.set(xscale="log", yscale="log", xlim=(lo, hi), title=title,
           xlabel="arithmetic intensity (FLOP / compulsory byte)", ylabel="attainable GFLOP/s")
    ax.set_ylim(bottom=bottom, top=device.peak_flops / 1e9 * 6)  # room above the roof for labels
    ax.legend(loc="upper left", fontsize=9)
    skipped = sorted({r.layer for r in rows if r.ops == 0})
    if skipped:
        fig.text(0.01, 0.01, "not shown (no arithmetic): " + ", ".join(skipped), fontsize=7, color="grey")
    adjust_text(texts, ax=ax, arrowprops=dict(arrowstyle="-", color="grey", lw=0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


PHASE_SHORT = {"fwd": "F", "bwd_data": "Bd", "bwd_weight": "Bw"}


def _label(group: list[Prediction]) -> str:
    """'conv2 F/Bd/Bw', 'relu1 ... relu7 (7) F'."""
    names = list(dict.fromkeys(r.layer for r in group))
    phases = "/".join(PHASE_SHORT[p] for p in dict.fromkeys(r.phase for r in group))
    text = ", ".join(names) if len(names) <= 2 else f"{names[0]} ... {names[-1]} ({len(names)})"
    return f"{text} {phases}"
