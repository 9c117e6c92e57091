"""A store of three imported recordings, and `tracker serve`'s app listening on loopback over it,
for the web app's tests (test_serve.py, test_serve_browser.py) and its load benchmark."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DATA = Path(__file__).parent / "data"
RAW_B16 = DATA / "ncu" / "ncu-raw-h100-sm90-ncu2025.3-alexnet-b16.csv"  # our batch-16 H100 run's ncu page
RAW_NVTX_B16 = DATA / "ncu" / "ncu-raw-nvtx-h100-sm90-ncu2025.3-alexnet-b16.csv"  # the same, kernels renamed
TRACE = DATA / "public" / "pytorch-alexnet-fwd-a100-kineto.json.gz"  # PARAM's AlexNet forward on an A100


def three_runs(db: str) -> None:
    """Run 1 and 2: our AlexNet at batch 16 on the H100 with every ncu counter (one run, read from its
    two raw pages); run 3: PyTorch's AlexNet forward on an A100 with real start times."""
    from tracker.importers import import_file
    from tracker.nets import build

    import_file(db, RAW_B16, build("alexnet"), batch=16)
    import_file(db, RAW_NVTX_B16, build("alexnet"), batch=16)
    import_file(db, TRACE, build("alexnet"), batch=128)


@contextmanager
def serving(db: str, reader: str | None = None) -> Iterator[str]:
    """`tracker serve`'s app on 127.0.0.1 at a free port, in a thread; its base URL."""
    from tracker.serve.app import create_app
    from tracker.serve.app import server as serving_server

    server = serving_server(create_app(db, reader), "127.0.0.1", 0)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("tracker serve did not start")
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
