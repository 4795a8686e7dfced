"""Headless Chromium driven over the DevTools protocol on a pipe: the docs' screenshots, the tab's tests and benchmark.

Needs only the standard library and Chromium (Debian: `apt-get install chromium`).
The browser runs with no network beyond what the page asks of 127.0.0.1 (no
background networking, no component updates, no sync) in a fresh profile.

    with Browser(find_chromium(), profile_dir) as browser:
        browser.open("http://127.0.0.1:6006/", timeout=60)
        browser.wait_until("({ready: document.title !== ''})", 60, "the page")
        browser.screenshot("page.png")
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from typing import Any

__all__ = ["Browser", "find_chromium"]

_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
)


def find_chromium(given: str | None = None) -> str:
    """The Chromium executable: `given`, else the first of chromium, chromium-browser, google-chrome on PATH.

    Raises:
        FileNotFoundError: None is found; the message says how to install it.
    """
    for candidate in [given] if given else ["chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(candidate)
        if path:
            return path
    raise FileNotFoundError(
        f"Chromium not found (tried {given or 'chromium, chromium-browser, google-chrome'}). "
        "Install it (`apt-get install chromium`) or pass its path."
    )


def _group_alive(group: int) -> bool:
    """Whether a process of the process group `group` is still there."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _high_fd(fd: int) -> int:
    """Move `fd` to a number >= 10, clear of the 3 and 4 the child needs."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pipe (fd 3: commands in, fd 4: replies out).

    Args:
        chromium: The executable (`find_chromium`).
        profile: An empty directory for the browser's profile.
        width, height: The viewport in CSS pixels.
        scale: Device pixels per CSS pixel (screenshots are `scale` times larger).
        prelude: JavaScript put before every `evaluate`d expression (helpers it uses).
    """

    def __init__(self, chromium: str, profile: str, width: int = 800, height: int = 1100, scale: float = 1,
                 prelude: str = "") -> None:
        self.width, self.height, self._prelude = width, height, prelude
        cmd_read, self._cmd_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        cmd_read, reply_write = _high_fd(cmd_read), _high_fd(reply_write)
        args = [chromium, *_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "about:blank"]
        # bash puts the pipe ends on fds 3 and 4 and closes the originals.
        redirect = f'exec "$0" "$@" 3<&{cmd_read} 4>&{reply_write} {cmd_read}<&- {reply_write}>&-'
        # In a session of its own: closing ends the browser's whole process group (renderers, helpers), so
        # nothing writes to the profile after `close`.
        self._proc = subprocess.Popen(
            ["bash", "-c", redirect, *args], pass_fds=(cmd_read, reply_write),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        os.close(cmd_read)
        os.close(reply_write)
        self._buffer = b""
        self._next_id = 0
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            self.call("Page.enable", session=True)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False},
                session=True,
            )
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, params: dict | None = None, *, session: bool = False, timeout: float = 60) -> dict:
        """Send one DevTools command (to the page where `session`) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._cmd_write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise RuntimeError(f"Chromium: {method} failed: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Chromium did not answer {method} within {timeout:.0f} s")
            readable, _, _ = select.select([self._reply_read], [], [], left)
            if readable:
                chunk = os.read(self._reply_read, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium exited (status {self._proc.poll()}) during {method}")
                self._buffer += chunk

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """The value of a JavaScript expression in the page (awaited where it is a promise)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": f"(() => {{ {self._prelude}\nreturn ({expression.strip()}); }})()", "returnByValue": True,
             "awaitPromise": True},
            session=True, timeout=timeout,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, timeout: float) -> None:
        """Load `url` as a fresh document (never a same-page hash change) and wait until it has loaded."""
        self.call("Page.navigate", {"url": "about:blank"}, session=True)
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_until(
            f"({{ready: location.origin === new URL({json.dumps(url)}).origin && document.readyState === 'complete'}})",
            timeout, url, settle=0.0,
        )

    def wait_until(self, expression: str, timeout: float, what: str, settle: float = 1.0, interval: float = 0.2) -> dict:
        """Evaluate `expression` (an object with `ready`) until `ready` is true; return the object.

        Raises:
            TimeoutError: Not ready within `timeout` seconds; the message holds the last object.
        """
        deadline = time.monotonic() + timeout
        state: dict = {}
        while time.monotonic() < deadline:
            state = self.evaluate(expression) or {}
            if state.get("ready"):
                time.sleep(settle)  # let the last transitions finish
                return state
            time.sleep(interval)
        raise TimeoutError(f"{what} was not ready within {timeout:.0f} s: {state}")

    def screenshot(self, path: str, clip: dict | None = None) -> None:
        """Write the page (or `clip`: x, y, width, height in CSS pixels) as a PNG."""
        params: dict[str, Any] = {"format": "png"}
        if clip:
            params.update(clip={**clip, "scale": 1}, captureBeyondViewport=True)
        data = base64.b64decode(self.call("Page.captureScreenshot", params, session=True)["data"])
        with open(path, "wb") as f:
            f.write(data)
        print(f"wrote {path} ({len(data) // 1024} KiB)", flush=True)

    def close(self) -> None:
        """Stop the browser and its helper processes (its own process group, by the browser's pid) and close the
        pipes."""
        group = self._proc.pid  # the session's leader: the group's id is the browser's pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            deadline = time.monotonic() + 5
            while _group_alive(group) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _group_alive(group):
                break
        for fd in (self._cmd_write, self._reply_read):
            with contextlib.suppress(OSError):  # closed already
                os.close(fd)
