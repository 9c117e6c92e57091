"""Everything that needs an NVIDIA GPU. CuPy is imported only inside the modules that launch
kernels, never at package import, so the rest of tracker works without it."""
