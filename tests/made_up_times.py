"""Times for launches the CPU emulation (tests/emu) ran: it gives real launch logs (kernel names,
fusion: a fused ReLU launches nothing) but no times. These are made up by a rule the assertions
recompute: they test the arithmetic and the bookkeeping (speedups, spreads, noise, pairs), never a
GPU's behaviour."""

from __future__ import annotations

JITTER = (1.00, 1.01, 0.99)  # per measured iteration: a 2 % spread


def made_up_ms(row: dict) -> float:
    """0.1 ms per layer ID; L1 bypass makes conv 10 % faster and everything else 0.5 % slower;
    the fused kernels take their own time plus half the ReLU's; jitter per iteration."""
    base = 0.1 * row["layer_id"]
    if row["l1_policy"] == "cg":
        base *= 0.9 if row["kernel_name"].startswith("conv") else 1.005
    if row["variant"] == "fused":
        base += 0.05 * (row["layer_id"] + 1)  # the ReLU that follows has ID + 1
    return base * JITTER[row["repeat"] % 3]
