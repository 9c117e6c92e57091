"""Figures (seaborn/matplotlib, imported only when drawing)."""

from __future__ import annotations

from collections import defaultdict

from tracker.model import Device, Prediction

PHASE_MARKERS = {"fwd": "o", "bwd_data": "s", "bwd_weight": "^"}


def roofline_plot(rows: list[Prediction], device: Device, path: str, title: str = "") -> None:
    """Log-log roofline of ``device`` with one labelled point per layer and phase.

    Points that land on the same spot (every ReLU forward, say) share one label. Phases with no
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
    spots: dict[tuple, list[Prediction]] = defaultdict(list)
    for r in points:
        spots[(round(r.intensity, 6), r.phase)].append(r)

    lo = min(min(r.intensity for r in points), device.ridge) / 4
    hi = max(max(r.intensity for r in points), device.ridge) * 4
    x = np.geomspace(lo, hi, 256)
    fig, ax = plt.subplots(figsize=(12, 7.5), dpi=120)
    ax.plot(x, np.minimum(device.peak_flops, x * device.bandwidth) / 1e9, color="black", lw=2,
            label=f"{device.name}: {device.fp32_tflops:g} TFLOP/s FP32, {device.dram_gbps:g} GB/s")
    ax.axvline(device.ridge, color="grey", ls=":", lw=1)
    ax.annotate(f"ridge {device.ridge:.1f} FLOP/B", (device.ridge, device.peak_flops / 1e9),
                xytext=(6, -16), textcoords="offset points", fontsize=9, color="grey")

    palette = dict(zip(PHASE_MARKERS, sns.color_palette("deep", 3)))
    texts = []
    for (_, phase), group in spots.items():
        r = group[0]
        ax.scatter(r.intensity, r.attainable_gflops, marker=PHASE_MARKERS[phase], s=46, color=palette[phase],
                   edgecolor="white", linewidth=0.6, zorder=3)
        texts.append(ax.text(r.intensity, r.attainable_gflops, _label(group), fontsize=7.5, color=palette[phase]))
    for phase, marker in PHASE_MARKERS.items():
        if any(r.phase == phase for r in points):
            ax.scatter([], [], marker=marker, color=palette[phase], label=phase)

    ax.set(xscale="log", yscale="log", xlim=(lo, hi), title=title,
           xlabel="arithmetic intensity (FLOP / compulsory byte)", ylabel="attainable GFLOP/s")
    ax.set_ylim(bottom=lo * device.bandwidth / 1e9 / 2, top=device.peak_flops / 1e9 * 3)
    ax.legend(loc="lower right", fontsize=9)
    skipped = sorted({r.layer for r in rows if r.ops == 0})
    if skipped:
        fig.text(0.01, 0.01, "not shown (no arithmetic): " + ", ".join(skipped), fontsize=7, color="grey")
    adjust_text(texts, ax=ax, arrowprops=dict(arrowstyle="-", color="grey", lw=0.5))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _label(group: list[Prediction]) -> str:
    names = [r.layer for r in group]
    text = ", ".join(names) if len(names) <= 3 else f"{names[0]} ... {names[-1]} ({len(names)})"
    return f"{text} {group[0].phase}"
