"""A real `tensorboard` server on 127.0.0.1 for tests, read back through its HTTP data API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

from tests._util import free_ports, subprocess_env


class TensorBoardServer:
    def __init__(self, base_url: str, proc: subprocess.Popen) -> None:
        self.base_url = base_url
        self.proc = proc

    def get(self, path: str, **params: str) -> object:
        url = f"{self.base_url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body[:1] in (b"{", b"[") else body

    def wait_for(self, predicate, timeout: float = 60.0, interval: float = 0.5):
        """Poll until `predicate(self)` returns a truthy value; return it."""
        deadline = time.monotonic() + timeout
        last_exc: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {self.proc.returncode}")
            try:
                value = predicate(self)
                if value:
                    return value
            except (urllib.error.URLError, ConnectionError, OSError, KeyError, ValueError) as exc:
                last_exc = exc
            time.sleep(interval)
        raise TimeoutError(f"tensorboard did not show the expected data within {timeout} s (last error: {last_exc!r})")


@contextlib.contextmanager
def tensorboard_server(log_dir: str) -> Iterator[TensorBoardServer]:
    """Start `tensorboard --logdir log_dir --host 127.0.0.1 --port P`, and stop it by its own pid."""
    (port,) = free_ports(1)
    cmd = [
        sys.executable, "-m", "tensorboard.main", "--logdir", os.fspath(log_dir), "--host", "127.0.0.1",
        "--port", str(port), "--reload_interval", "1", "--load_fast", "false",
    ]
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server = TensorBoardServer(f"http://127.0.0.1:{port}", proc)
    try:
        server.wait_for(lambda s: s.get("/data/runs") is not None, timeout=90)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()
