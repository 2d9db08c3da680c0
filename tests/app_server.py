"""An ASGI app (the controller's API) served over HTTP on a free loopback port, in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


@contextmanager
def serving(app: Any, start_timeout: float = 20.0) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a port the kernel picks) until the block ends; its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        assert time.monotonic() < deadline, "controller did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
