"""tracker: what each layer of a CNN does to an NVIDIA GPU's microarchitecture.

The pure-Python core (nets, model, store, analysis) never imports CuPy; GPU code lives in
``tracker.gpu`` and is imported only when a GPU backend runs.
"""

__version__ = "0.1.0"
