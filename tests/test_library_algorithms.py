"""Which algorithm a library ran, read from kernel names: every name here is a real one, copied
from public profiler traces of TensorFlow and PyTorch programs (cuDNN 7 to 9, Maxwell to Hopper)
found on GitHub, as the profilers printed them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracker.kernel_names import classify, phase_algorithm

REAL = [  # (kernel name, algorithm, role, tensor cores)
    (
        "void implicit_convolve_sgemm<float, float, 512, 6, 8, 3, 3, 5, 1, false, false, true>(int, int, int, "
        "float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, "
        "float const*, float const*, bool, int, int)",
        "implicit_gemm",
        "math",
        False,
    ),
    (
        "_Z23implicit_convolve_sgemmIffLi1024ELi5ELi5ELi3ELi3ELi3ELi1ELb0ELb1ELb1EEviiiPKT_iPT0_S2_18kernel_conv_params"
        "yiffiPKS3_S7_bii",
        "implicit_gemm",
        "math",
        False,
    ),
    (
        "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, "
        "float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, "
        "int, int)",
        "implicit_gemm",
        "math",
        False,
    ),
    (
        "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1"
        "_g1_tensor16x8x8",
        "implicit_gemm",
        "math",
        True,
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x32x32_stage4_warpsize4x1x1_g1_"
        "tensor16x8x16_execute_kernel__5x_cudnn",
        "implicit_gemm",
        "math",
        True,
    ),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "implicit_precomp_gemm", "math", False),
    ("maxwell_scudnn_128x128_relu_interior_nn", "implicit_precomp_gemm", "math", False),
    ("ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148n_nt_v1", "winograd", "math", False),
    (
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::"
        "WinogradDataParams<float, float>)",
        "winograd_nonfused",
        "transform",
        False,
    ),
    (
        "winogradWgradDelta4x4<float, float>(cudnn::winograd_nonfused::WinogradDeltaParams<float, float>)",
        "winograd_nonfused",
        "transform",
        False,
    ),
    (
        "void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, int, int, "
        "int, int, int, int, float, float, cudnn::reduced_divisor, bool, float*, float*, int2, int, int)",
        "fft",
        "transform",
        False,
    ),
    ("volta_cgemm_32x32_tn", "fft", "math", False),
    ("volta_sgemm_128x64_nn", "gemm", "math", False),
    ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "gemm", "math", True),
    (
        "void tensorflow::functor::ShuffleInTensor3Simple<float, 2, 1, 0, false>(int, float const*, "
        "tensorflow::functor::Dimension<3>, float*)",
        None,
        "transform",
        False,
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
        "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
        None,
        "transform",
        False,
    ),
    (
        "void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>"
        "(cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, "
        "float const*, float*, void*, long, float*, int*)",
        None,
        "reduction",
        False,
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
        None,
        "fill",
        False,
    ),
    (
        "void cudnn::detail::pooling_fw_4d_kernel<float, float, cudnn::detail::maxpooling_func<float, "
        "(cudnnNanPropagation_t)0>, 0, false>",
        None,
        "other",
        False,
    ),
]


def hta_alexnet() -> list[tuple]:
    """Every distinct kernel of the public AlexNet trace (tests/data/public), and what it is:
    cuDNN's conv1 (offsets, then a precomputed implicit GEMM), conv2 (FFT), conv3-5 (TF32
    implicit GEMM, after layout transforms), cuBLAS's fc layers (sgemm, a cuBLASLt epilogue)."""
    from tracker.library import kineto

    path = Path(__file__).parent / "data" / "public" / "pytorch-alexnet-fwd-a100-kineto.json.gz"
    names = dict.fromkeys(k.name for k in kineto.kernels(kineto.load(path)))
    expected = {
        "computeOffsetsKernel": ("implicit_precomp_gemm", "offsets", False),
        "scudnn_128x64_relu_xregs_large": ("implicit_precomp_gemm", "math", False),
        "fft2d_r2c_32x32": ("fft", "transform", False),
        "fft2d_c2r_32x32": ("fft", "transform", False),
        "gcgemm_64x64_nt": ("fft", "math", False),
        "nchwToNhwcKernel": (None, "transform", False),
        "xmma_fprop_implicit_gemm_indexed_tf32f32": ("implicit_gemm", "math", True),
        "ampere_sgemm_32x32_sliced1x4_tn": ("gemm", "math", False),
        "epilogue::impl::globalKernel": (None, "epilogue", False),
    }
    cases = [(name, *what) for name in names for key, what in expected.items() if key in name]
    assert {key for key in expected if any(key in name for name in names)} == set(expected)
    return cases


@pytest.mark.parametrize("name, algorithm, role, tensor_cores", hta_alexnet())
def test_the_kernels_of_a_public_alexnet_trace(name, algorithm, role, tensor_cores):
    assert tuple(classify(name)) == (algorithm, role, tensor_cores)


@pytest.mark.parametrize("name, algorithm, role, tensor_cores", REAL)
def test_real_kernel_names(name, algorithm, role, tensor_cores):
    assert tuple(classify(name)) == (algorithm, role, tensor_cores)


def test_a_phase_is_named_by_its_most_telling_launch():
    """A non-fused Winograd's products run as a plain sgemm and an FFT's as a cgemm: the
    transforms beside them say which algorithm the layer phase ran; layout transforms and fills
    do not change it."""
    winograd = [
        "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(...)",
        "void cudnn::winograd_nonfused::winogradForwardFilter4x4<float, float>(...)",
        "volta_sgemm_128x64_nn",
        "void cudnn::winograd_nonfused::winogradForwardOutput4x4<float, float>(...)",
    ]
    assert phase_algorithm(winograd) == "winograd_nonfused"
    assert (
        phase_algorithm(
            [
                "void fft2d_r2c_32x32<float, false, 0u, false>(...)",
                "volta_cgemm_32x32_tn",
                "void fft2d_c2r_32x32<float, false, false, 0u, false, false>(...)",
            ]
        )
        == "fft"
    )
    assert (
        phase_algorithm(
            [
                "void cudnn::ops::nchwToNhwcKernel<float>(...)",
                "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16",
                "void cudnn::ops::nhwcToNchwKernel<float>(...)",
            ]
        )
        == "implicit_gemm"
    )
    assert phase_algorithm(["volta_sgemm_128x64_nn", "void splitKreduce_kernel<32, 16>(...)"]) == "gemm"
    assert phase_algorithm(["void at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>"]) is None
    assert phase_algorithm([]) is None


def test_our_own_kernels_are_named_by_the_same_rules():
    """Every conv variant's forward names its algorithm from the kernels it launches, so that our
    runs and a library's sit side by side; the work around the math is labelled."""
    from tracker.ops import OPS

    declared = {
        name: [k.name for k in variant.launches["fwd"].kernels] for name, variant in OPS["conv"].variants.items()
    }
    assert {name: phase_algorithm(kernels) for name, kernels in declared.items()} == {
        "global": "direct",
        "constant": "direct",
        "shared": "implicit_gemm",
        "gemm": "gemm",
        "fused": "implicit_gemm",
        "winograd": "winograd_nonfused",
        "winograd_f4": "winograd_nonfused",
        "fft": "fft",
    }  # winograd's fallback is implicit_gemm
    assert [
        classify(k).role for k in ("im2col", "winograd_input_a4", "splitk_reduce", "bias_grad", "relu_fwd_global")
    ] == ["transform", "transform", "reduction", "reduction", "other"]  # a ReLU's kernel: its phase's math (tagged)
    # the retired fused Winograd's recorded launches read as they did: a fused F(2x2), priced so
    from tracker.ops.winograd import modelled

    fused = ["winograd_filter_a4", "winograd_fused_a4"]
    assert classify(fused[1]) == ("winograd", "math", False) and phase_algorithm(fused) == "winograd"
    assert modelled(phase_algorithm(fused), "winograd_fused") == "winograd_f2"
