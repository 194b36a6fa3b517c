"""Headless Chromium driven over its DevTools protocol: the one client the browser tests and
bench/screenshots.py share. Debian's `chromium` (`.ci/run` installs it); websocket-client comes with
Locust. Everything stays on 127.0.0.1, and every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

from devsupport.ports import free_port
from devsupport.subprocesses import stop

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
"""Scrollbars stay: a screenshot shows where a table scrolls inside its box."""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def wait_http(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Browser:
    """One headless Chromium page. `errors` collects what the page's JavaScript threw or logged as an
    error (uncaught exceptions, console.error, failed loads), in order."""

    def __init__(self, width: int, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="poolbench-chromium-")
        port = free_port()
        self.proc = subprocess.Popen(
            [
                chromium() or "chromium",
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self.profile}",
                "--remote-debugging-address=127.0.0.1",
                f"--remote-debugging-port={port}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/json/version")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                page = next(t for t in json.load(r) if t["type"] == "page")
            self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        except BaseException:
            self._stop_process()
            raise
        self.ids = 0
        self.errors: list[str] = []
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.resize(width, height)

    def resize(self, width: int, height: int = 900) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.ids += 1
        self.ws.send(json.dumps({"id": self.ids, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.ids:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self._event(message)

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result["result"].get("value")

    def until(self, expression: str, seconds: float = 20) -> Any:
        """Wait for the expression to be truthy; its value."""
        deadline = time.monotonic() + seconds
        while not (value := self.js(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.2)
        return value

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.until("document.readyState === 'complete'")

    def shot(self, path: Path, selector: str | None = None, pad: int = 8, full: bool = False) -> None:
        """The element as PNG; without a selector, the window as it is (Locust's header included), or
        with `full` the whole page as tall as it is."""
        if selector is None and not full:
            data = self.call("Page.captureScreenshot", format="png")["data"]
            path.write_bytes(base64.b64decode(data))
            return
        if selector is None:
            box = self.js("[0, 0, document.documentElement.clientWidth, document.documentElement.scrollHeight]")
            pad = 0
        else:
            box = self.js(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                " return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()"
            )
        x, y, w, h = box
        clip = {"x": max(x - pad, 0), "y": max(y - pad, 0), "width": w + 2 * pad, "height": h + 2 * pad, "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def _stop_process(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.profile, ignore_errors=True)

    def close(self) -> None:
        self.ws.close()
        self._stop_process()
