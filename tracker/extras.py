"""tracker's optional parts: what each extra of pyproject.toml brings, and the one line that
installs it. Every message that tells a user to install something reads ``install`` here, so a
hint always names the extra that holds the whole capability (the compile extra's cuobjdump and
nvdisasm with NVRTC), never a partial list of packages. tests/test_extras.py holds this table to
pyproject.toml's extras."""

from __future__ import annotations

# extra -> what it is for, as a line of prose
EXTRAS = {
    "gpu": "CuPy: tracker's kernels on an NVIDIA GPU",
    "compile": "NVRTC, cuobjdump and nvdisasm: compile the kernels and read their SASS (tracker kernels)",
    "torch": "PyTorch: --impl torch, --torch MODULE:FUNCTION and the library arms of experiments",
    "cupti": "libcupti: --backend cupti",
    "postgres": "psycopg: a PostgreSQL trace store (--db postgresql://...)",
    "parquet": "pyarrow: tracker export --format parquet",
    "perfetto": "Perfetto's trace classes: tracker export --format perfetto",
    "import": "NVIDIA's Nsight Compute report reader: tracker import of .ncu-rep files",
    "serve": "Starlette, uvicorn, Jinja2 and Plotly's JavaScript: tracker serve",
    "notebooks": "JupyterLab and ipykernel: open notebooks/ (jupyter lab notebooks/)",
}


def install(extra: str) -> str:
    """The command that installs ``extra`` into a clone of tracker: ``pip install -e '.[compile]'``."""
    if extra not in EXTRAS:
        raise KeyError(f"no extra '{extra}'; known: {', '.join(EXTRAS)}")
    return f"pip install -e '.[{extra}]'"
