"""The library arm (issue 29): the same network run by a framework's libraries (PyTorch: cuDNN,
cuBLAS), layer phase by layer phase, under the NVTX names our own kernels' launches carry, so
that the same collectors and the same join trace it.

``torch_net`` builds a tracker network in PyTorch from ``tracker.nets``' one definition. PyTorch
is imported only here, and only when used (``pip install -e '.[torch]'``).
"""
