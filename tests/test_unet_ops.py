"""The ops for the 2-D and 3-D U-Nets (tracker/ops/sigmoid.py, upsample.py, concat.py):
every variant on the CPU emulation of CUDA against the float64 reference at its small cases, the
corners the selftest's check does not reach (a loss nobody wants, an input with no gradient), the
network cases the U-Nets make, and the compile matrix `tracker kernels` lists."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from tracker import reference as ref
from tracker.cli import cli
from tracker.errors import TrackerError
from tracker.nets import build
from tracker.ops import OPS
from tracker.ops.launch import Arrays
from tracker.ops.selftest import ELEMENTWISE, REDUCTION, network_cases, run_case, small_cases

UNET_OPS = ("sigmoid", "upsample", "concat")
CASES = [case for case in small_cases() if case.op in UNET_OPS]


def test_the_three_ops_are_registered_with_a_global_and_a_shared_variant():
    for kind in UNET_OPS:
        op = OPS[kind]
        copies = ("inplace",) if kind == "concat" else ()  # no copy at batch 1; elsewhere global's (below)
        assert op.phases == ("fwd", "bwd_data") and tuple(op.variants) == ("global", "shared", *copies), kind
        assert op.default == "global"
    kernels = {
        (v.op, v.phase, v.variant): [k.name for k in v.kernels]
        for v in OPS.launches()
        if v.op in UNET_OPS and v.variant != "inplace"
    }
    assert {phase: [k.name for k in v.kernels] for phase, v in OPS["concat"].variants["inplace"].launches.items()} == {
        "fwd": ["concat_fwd_global"],
        "bwd_data": ["concat_bwd_global"],
    }
    assert kernels == {
        ("sigmoid", "fwd", "global"): ["sigmoid_fwd_global"],
        ("sigmoid", "bwd_data", "global"): ["sigmoid_bce_bwd_global", "sigmoid_bce_loss_global"],
        ("sigmoid", "fwd", "shared"): ["sigmoid_fwd_shared"],
        ("sigmoid", "bwd_data", "shared"): ["sigmoid_bce_bwd_shared"],
        ("upsample", "fwd", "global"): ["upsample_fwd_global"],
        ("upsample", "bwd_data", "global"): ["upsample_bwd_global"],
        ("upsample", "fwd", "shared"): ["upsample_fwd_shared"],
        ("upsample", "bwd_data", "shared"): ["upsample_bwd_shared"],
        ("concat", "fwd", "global"): ["concat_fwd_global"],
        ("concat", "bwd_data", "global"): ["concat_bwd_global"],
        ("concat", "fwd", "shared"): ["concat_fwd_shared"],
        ("concat", "bwd_data", "shared"): ["concat_bwd_shared"],
    }
    # named apart from every other case: the selftest's tables key results by layer name
    names = [case.layer for case in CASES]
    assert len(set(names)) == len(names) and not set(names) & {c.layer for c in small_cases() if c.op not in UNET_OPS}
    # both 2-D and 3-D shapes among the small cases of the ops that have spatial structure
    for kind in ("upsample", "concat", "sigmoid"):
        assert {len(c.shapes["x"]) for c in CASES if c.op == kind} == {4, 5}, kind


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}-{c.layer}")
def test_every_variant_matches_the_reference_on_the_emulator(emulator, case):
    outputs = {"sigmoid": {"y", "dx", "loss"}, "upsample": {"y", "dx"}, "concat": {"y", "dx", "dx2"}}[case.op]
    for variant, v in OPS[case.op].variants.items():
        emulator.log.clear()
        results = run_case(emulator, case, variant, seed=5)
        assert {r.output for r in results} == outputs
        failed = [(r.phase, r.output, r.error) for r in results if not r.passed]
        assert not failed, (variant, failed)
        declared = {(k.source, k.name) for launch in v.launches.values() for k in launch.kernels}
        assert {(r.source, r.kernel) for r in emulator.log} == declared, variant


def _sigmoid_arrays(emulator, rng, shape):
    x = (rng.normal(size=shape) * 3).astype(np.float32)
    t = (rng.random(size=shape) < 0.5).astype(np.float32)
    nan = np.full(shape, np.nan, np.float32)
    return (
        x,
        t,
        Arrays(
            x=emulator.asarray(x),
            y=emulator.asarray(nan),
            dx=emulator.asarray(nan),
            labels=emulator.asarray(t),
            loss=emulator.asarray(np.full(shape[0], np.nan, np.float32)),
        ),
    )


@pytest.mark.parametrize("variant", ["global", "shared"])
def test_the_sigmoid_losses_mean_is_the_batchs_binary_cross_entropy(emulator, variant):
    """loss (N,): each image's mean, so that their mean is the loss the gradient belongs to; and
    with no loss array the backward still writes dx (global launches no second kernel)."""
    rng = np.random.default_rng(3)
    shape = (3, 2, 19, 23)
    x, t, a = _sigmoid_arrays(emulator, rng, shape)
    op = OPS["sigmoid"]
    op.launch(emulator, variant, "fwd", a)
    op.launch(emulator, variant, "bwd_data", a)
    p = ref.sigmoid_fwd(x.astype(np.float64))
    assert np.isclose(emulator.asnumpy(a.loss).mean(), ref.binary_cross_entropy(p, t), rtol=REDUCTION)
    emulator.log.clear()
    dx = emulator.asnumpy(a.dx)
    a.loss, a.dx = None, emulator.asarray(np.full(shape, np.nan, np.float32))
    op.launch(emulator, variant, "bwd_data", a)
    assert [r.kernel for r in emulator.log] == [f"sigmoid_bce_bwd_{variant}"]
    assert np.array_equal(emulator.asnumpy(a.dx), dx)
    np.testing.assert_allclose(dx, ref.sigmoid_bce_bwd(p, t), rtol=0, atol=ELEMENTWISE / x.size)


@pytest.mark.parametrize("variant", ["global", "shared"])
@pytest.mark.parametrize("missing", ["dx", "dx2"])
def test_concat_backward_skips_an_input_with_no_gradient(emulator, variant, missing):
    rng = np.random.default_rng(4)
    dy = rng.normal(size=(2, 5, 3, 4)).astype(np.float32)  # c2 = 2: images of 36 + 24 floats, float4s
    expected = dict(zip(("dx", "dx2"), ref.concat_bwd(dy, 3)))
    kept = "dx2" if missing == "dx" else "dx"
    out = emulator.asarray(np.full(expected[kept].shape, np.nan, np.float32))
    a = Arrays(dy=emulator.asarray(dy), **{kept: out})
    OPS["concat"].launch(emulator, variant, "bwd_data", a, c2=2)
    assert np.array_equal(emulator.asnumpy(out), expected[kept])


@pytest.mark.parametrize("name", ["unet2d", "unet3d"])
def test_the_unets_layers_make_cases_the_ops_take(name):
    """Op.case at the U-Nets' own layers: upsample's scale, concat's second input's channels, and
    arrays whose shapes are the layers' own."""
    net = build(name)
    cases = {case.layer: case for case in network_cases(net, 2)}
    layers = [layer for layer in net.layers if layer.kind in UNET_OPS]
    assert layers
    for layer in layers:
        case = cases[layer.name]
        shapes = OPS.of(layer).arrays(case)
        assert shapes["x"] == (2, *layer.input_shapes[0]) and shapes["y"] == (2, *layer.output_shape), layer.name
        if layer.kind == "upsample":
            assert case.params == {"scale": layer.op.scale}
        if layer.kind == "concat":
            assert case.params == {"c2": layer.input_shapes[1][0]} and shapes["x2"] == (2, *layer.input_shapes[1])
        if layer.kind == "sigmoid":
            assert shapes["labels"] == shapes["y"] and shapes["loss"] == (2,)


def test_shapes_the_kernels_cannot_take_are_refused_in_words():
    from tracker.ops.concat import seam
    from tracker.ops.upsample import band_rows, up_shape

    with pytest.raises(TrackerError, match="2-D .* or 3-D"):
        up_shape((2, 3, 4), 2)
    with pytest.raises(TrackerError, match="use the global variant"):
        band_rows(8, 1, 64 * 1024)
    with pytest.raises(TrackerError, match="do not fit"):
        seam((2, 3, 4, 4), 3)
    concat = next(layer for layer in build("unet2d").layers if layer.kind == "concat")
    three = replace(concat, input_shapes=concat.input_shapes * 2)  # four inputs
    with pytest.raises(TrackerError, match="join two inputs"):
        OPS["concat"].params(three)
    # what a caller that hands softmax's labels, or no second input, would have the GPU read out of bounds
    launched: list = []
    backend = type("Recorder", (), {"launch": lambda self, *a, **k: launched.append(a)})()
    y = np.zeros((2, 1, 4, 4), np.float32)
    for labels in (None, np.zeros(2, np.int32), np.zeros(y.shape, np.int32)):
        for variant in ("global", "shared"):
            with pytest.raises(TrackerError, match="sigmoid's backward needs float32 targets of its output's shape"):
                OPS["sigmoid"].launch(backend, variant, "bwd_data", Arrays(x=y, y=y, dx=y, labels=labels))
            with pytest.raises(TrackerError, match=r"concat's forward needs both inputs \(Arrays.x and Arrays.x2\)"):
                OPS["concat"].launch(backend, variant, "fwd", Arrays(x=y, y=np.zeros((2, 3, 4, 4), np.float32)), c2=2)
    assert launched == []


def test_pytorchs_forwards_agree_with_the_reference():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 3, 2, 3, 4))
    up = OPS["upsample"].torch_forward(torch.as_tensor(x), None, None, scale=2)
    assert np.array_equal(up.numpy(), ref.upsample_fwd(x, 2))
    t = (rng.random(size=x.shape) < 0.5).astype(np.float64)
    loss = OPS["sigmoid"].torch_forward(torch.as_tensor(x), None, torch.as_tensor(t))
    assert np.isclose(loss.item(), ref.binary_cross_entropy(ref.sigmoid_fwd(x), t))
    assert OPS["concat"].torch_forward is None  # its hook takes one input


@pytest.mark.slow  # compiles kernels with NVRTC
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tracker_kernels_lists_the_new_variants_without_spills(runner, arch):
    result = runner.invoke(cli, ["kernels", "--arch", arch, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(result.stdout) if r["op"] in UNET_OPS]
    assert {(r["op"], r["phase"], r["variant"], r["l1"]) for r in rows} == {
        (op, phase, variant, l1)
        for op in UNET_OPS
        for phase in ("fwd", "bwd_data")
        for variant in ("global", "shared", *(("inplace",) if op == "concat" else ()))
        for l1 in ("ca", "cg")
    }
    assert len(rows) == 28
    for r in rows:
        assert r["spill_bytes"] == 0 and r["stack_bytes"] == 0 and r["occupancy"] > 0, r
        assert r["verified_on"] is None  # no GPU has run them yet
        # the shared forwards stage with cp.async where the L1 policy allows it (ca), the L1-bypass build never
        if r["variant"] == "shared" and r["phase"] == "fwd":
            assert (r["cp_async"] > 0) == (r["l1"] == "ca"), r


UP_CONVOLUTIONS = [case for case in small_cases() if case.op.startswith("convtranspose")]


@pytest.mark.slow  # builds the kernels with g++ and runs them on OS threads
@pytest.mark.parametrize("case", UP_CONVOLUTIONS, ids=lambda c: f"{c.op}-{c.layer}")
def test_an_up_convolution_whose_windows_do_not_overlap_runs_one_gemm_and_a_scatter(emulator, case):
    """The transposed convolution's `gemm` variant: where the stride equals the kernel (the U-Nets'
    2x2 and 2x2x2 stride-2), its forward is col = W^T x on the GEMM and the scatter, equal to the
    reference; elsewhere, and in its backward, shared's implicit GEMMs. The implicit GEMM took
    24.3 ms at the 3-D U-Net's last up-convolution on an H200, cuDNN 1.28."""
    from tracker.ops.convtranspose import scatters

    emulator.log.clear()
    results = run_case(emulator, case, "gemm", seed=3)
    assert results and all(r.passed for r in results), [(r.phase, r.output, r.error) for r in results if not r.passed]
    launched = [k.kernel for k in emulator.log]
    dims = len(case.shapes["x"]) - 2
    implicit = f"conv{dims}d_bwd_data_implicit"
    if scatters(case.shapes["w"], case.params["stride"]):
        assert launched[0] == "gemm_tn_images" and "convtranspose_scatter" in launched and implicit not in launched
        assert OPS[case.op].applying(case, "fwd") == ("global", "shared", "gemm")
    else:
        assert launched[0] == implicit and "convtranspose_scatter" not in launched
        assert "gemm" not in OPS[case.op].applying(case, "fwd")
    assert "gemm" not in OPS[case.op].rivals(case, "bwd_data") + OPS[case.op].rivals(case, "bwd_weight")
