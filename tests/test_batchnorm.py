"""Batch normalization in training mode (tracker/ops/batchnorm.py, kernels/batchnorm.cu):
both variants on the CPU emulation of CUDA against the float64 reference at the op's small cases,
2-D and 3-D, the running statistics included; the reference against finite differences and against
PyTorch's F.batch_norm; and what the launchers refuse."""

from __future__ import annotations

import numpy as np
import pytest
from gradient_check import close, numeric_grad

from tracker import reference as ref
from tracker.errors import TrackerError
from tracker.nets import build
from tracker.ops import OPS
from tracker.ops.batchnorm import CHANNEL_THREADS, EPS, MOMENTUM, bn_shape, inputs, parts
from tracker.ops.launch import Arrays
from tracker.ops.selftest import REDUCTION, network_cases, run_case

BATCHNORM = OPS["batchnorm"]
OUTPUTS = {
    ("fwd", "y"),
    ("fwd", "mean"),
    ("fwd", "invstd"),
    ("fwd", "running_mean"),
    ("fwd", "running_var"),
    ("bwd_weight", "dw"),
    ("bwd_weight", "db"),
    ("bwd_data", "dx"),
}
rng = np.random.default_rng(45)


@pytest.mark.parametrize("variant", list(BATCHNORM.variants))
@pytest.mark.parametrize("case", BATCHNORM.small_cases, ids=lambda c: c.layer)
def test_every_variant_matches_the_reference(emulator, case, variant):
    emulator.log.clear()
    results = run_case(emulator, case, variant, seed=2)
    assert {(r.phase, r.output) for r in results} == OUTPUTS
    assert {r.tolerance for r in results} == {REDUCTION}
    failed = [(r.phase, r.output, r.error) for r in results if not r.passed]
    assert not failed, failed
    declared = {k.name for launch in BATCHNORM.variants[variant].launches.values() for k in launch.kernels}
    assert {r.kernel for r in emulator.log} == declared


def test_the_small_cases_reach_every_path():
    """2-D and 3-D; a global reduction cut into one part and into several; a walk whose stride
    crosses several images (positions an image under the block); channel counts and sizes that
    are multiples of nothing the kernels use."""
    shapes = [case.shapes["x"] for case in BATCHNORM.small_cases]
    assert {len(x) for x in shapes} == {4, 5}
    splits = {parts(int(np.prod(x)) // x[1], x[1]) for x in shapes}
    assert 1 in splits and max(splits) > 1
    assert any(int(np.prod(x[2:])) < 256 for x in shapes)
    assert all(x[1] % 2 and (int(np.prod(x)) // x[1]) % 32 for x in shapes)


def test_the_running_statistics_follow_pytorch_over_two_steps(emulator):
    """Each forward moves the running statistics by momentum, the variance unbiased, as PyTorch's
    F.batch_norm(training=True) moves its buffers; a forward with none keeps none."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    x_shape = (2, 3, 4, 5, 3)
    C = x_shape[1]
    for variant in BATCHNORM.variants:
        xh, w, b, rm, rv, _ = inputs(rng, x_shape)
        a = Arrays(
            w=emulator.asarray(w),
            bias=emulator.asarray(b),
            running_mean=emulator.asarray(rm),
            running_var=emulator.asarray(rv),
            mean=emulator.empty((C,)),
            invstd=emulator.empty((C,)),
        )
        t_mean, t_var = torch.tensor(rm), torch.tensor(rv)
        for step in range(2):
            xs = xh + step
            a.x, a.y = emulator.asarray(xs), emulator.empty(x_shape)
            BATCHNORM.launch(emulator, variant, "fwd", a, eps=EPS, momentum=MOMENTUM)
            y = F.batch_norm(
                torch.tensor(xs),
                t_mean,
                t_var,
                torch.tensor(w),
                torch.tensor(b),
                training=True,
                momentum=MOMENTUM,
                eps=EPS,
            )
            np.testing.assert_allclose(emulator.asnumpy(a.y), y.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(emulator.asnumpy(a.running_mean), t_mean.numpy(), rtol=1e-5)
        np.testing.assert_allclose(emulator.asnumpy(a.running_var), t_var.numpy(), rtol=1e-5)

        a.running_mean = a.running_var = None  # none kept: the statistics the backward reads still are
        a.mean, a.invstd = emulator.empty((C,)), emulator.empty((C,))
        BATCHNORM.launch(emulator, variant, "fwd", a, eps=EPS, momentum=MOMENTUM)
        _, mean, var = ref.batchnorm_fwd(emulator.asnumpy(a.x).astype(np.float64), w, b)
        np.testing.assert_allclose(emulator.asnumpy(a.mean), mean, rtol=1e-5)
        np.testing.assert_allclose(emulator.asnumpy(a.invstd), 1 / np.sqrt(var + EPS), rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 3, 2), (2, 2, 2, 3, 2)])
def test_the_reference_backward_matches_finite_differences(shape):
    x, g = rng.normal(size=shape) * 2 + 1, rng.normal(size=shape)
    w, b = 1 + rng.normal(size=shape[1]) * 0.2, rng.normal(size=shape[1]) * 0.1

    def loss():
        return (ref.batchnorm_fwd(x, w, b)[0] * g).sum()

    dx, dw, db = ref.batchnorm_bwd(g, x, w)
    close(dx, numeric_grad(loss, x))
    close(dw, numeric_grad(loss, w))
    close(db, numeric_grad(loss, b))


def test_the_reference_matches_pytorch():
    """Forward, both gradients and the running statistics, float64 throughout."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    shape = (3, 4, 2, 3, 5)
    x, g = rng.normal(size=shape) * 2 + 3, rng.normal(size=shape)
    w, b, rm, rv = 1 + rng.normal(size=4) * 0.2, rng.normal(size=4), rng.normal(size=4), 1 + rng.random(4)
    leaves = [torch.tensor(v, requires_grad=True) for v in (x, w, b)]
    t_mean, t_var = torch.tensor(rm), torch.tensor(rv)
    y = F.batch_norm(leaves[0], t_mean, t_var, leaves[1], leaves[2], training=True, momentum=0.1, eps=1e-5)
    y.backward(torch.tensor(g))
    expected, mean, var = ref.batchnorm_fwd(x, w, b)
    close(y.detach().numpy(), expected)
    for mine, theirs in zip(ref.batchnorm_bwd(g, x, w), leaves):
        close(mine, theirs.grad.numpy())
    running = ref.batchnorm_running(rm, rv, mean, var, x.size // 4)
    close(running[0], t_mean.numpy())
    close(running[1], t_var.numpy())


def test_what_the_launchers_refuse(emulator):
    with pytest.raises(TrackerError, match="more than one value a channel"):
        bn_shape((1, 4, 1, 1), EPS, MOMENTUM)
    with pytest.raises(TrackerError, match=r"2-D and 3-D inputs .* got shape \(2, 4, 8\)"):
        bn_shape((2, 4, 8), EPS, MOMENTUM)
    x = emulator.asarray(np.ones((2, 3, 4, 4), np.float32))
    plain = Arrays(
        x=x,
        y=emulator.empty(x.shape),
        w=emulator.asarray(np.ones(3, np.float32)),
        bias=emulator.asarray(np.zeros(3, np.float32)),
    )
    emulator.log.clear()
    for variant in BATCHNORM.variants:
        with pytest.raises(TrackerError, match="batch norm needs the arrays mean, invstd"):
            BATCHNORM.launch(emulator, variant, "fwd", plain, eps=EPS, momentum=MOMENTUM)
    assert emulator.log == []


def test_a_3d_unet_batch_norm_runs_as_a_case(emulator):
    """Every batch norm of the 3-D U-Net is a case of the op (5-D input, its statistics (C,)), and the
    first passes the selftest on both variants at the network's own shape."""
    net = build("unet3d", input_size="8", depth=2, base_filters=2)
    cases = [case for case in network_cases(net, 2) if case.op == "batchnorm"]
    assert len(cases) == sum(layer.kind == "batchnorm" for layer in net.layers) > 0
    assert all(len(case.shapes["x"]) == 5 for case in cases)
    C = cases[0].shapes["x"][1]
    assert {role: shape for role, shape in BATCHNORM.arrays(cases[0]).items() if len(shape) == 1} == {
        role: (C,) for role in ("w", "bias", "dw", "db", "mean", "invstd", "running_mean", "running_var")
    }
    for variant in BATCHNORM.variants:
        results = run_case(emulator, cases[0], variant, seed=4)
        assert {(r.phase, r.output) for r in results} == OUTPUTS
        assert all(r.passed for r in results), [(r.phase, r.output, r.error) for r in results if not r.passed]


@pytest.mark.slow  # compiles kernels with NVRTC
def test_a_channel_block_of_1024_threads_fits_the_registers_of_an_sm():
    """The shared variant launches CHANNEL_THREADS a block, with no __launch_bounds__: each of its
    kernels must use at most 64 registers a thread on sm_80 and sm_90, both L1 policies."""
    from tracker.gpu.compile import build as compile_module

    assert CHANNEL_THREADS == 1024
    for arch in ("sm_80", "sm_90"):
        for policy in ("ca", "cg"):
            kernels = compile_module("batchnorm.cu", arch, policy).kernels
            for name in ("batchnorm_fwd_shared", "batchnorm_bwd_data_shared", "batchnorm_bwd_weight_shared"):
                assert kernels[name].registers * CHANNEL_THREADS <= 64 * 1024, (arch, policy, name, kernels[name])
