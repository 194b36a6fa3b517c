"""Screenshots for README, in headless Chromium: the web UI's start form (custom parameters open),
the Pooling tab with its live charts during a run, the HTML report's charts, and a sweep's knee.

    .venv/bin/python bench/screenshots.py       # about 90 s; needs chromium (apt-get install chromium)

Everything runs on 127.0.0.1: the bundled mock in its own process (20 ms to the headers, the body
trickled over 30 ms, so the curves show a server's times rather than loopback's), Locust's web UI,
and Chromium driven over its DevTools protocol (websocket-client comes with Locust).
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import websocket

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CHILD_ENV, PYTHON, ROOT, Mock

RESULTS = ROOT / "bench" / "results"
LOCUST = str(Path(PYTHON).with_name("locust"))
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """One headless Chromium page, driven over the DevTools protocol."""

    def __init__(self, width: int) -> None:
        self.profile = tempfile.mkdtemp(prefix="poolbench-chromium-")
        port = free_port()
        self.proc = subprocess.Popen(
            [
                shutil.which("chromium") or "chromium",
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self.profile}",
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
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.ids += 1
        self.ws.send(json.dumps({"id": self.ids, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.ids:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def js(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        return result["result"].get("value")

    def until(self, expression: str, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while not self.js(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.2)

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.until("document.readyState === 'complete'")

    def shot(self, path: Path, selector: str | None = None, pad: int = 8) -> None:
        """The element as PNG, or without a selector the window as it is (Locust's header included)."""
        if selector is None:
            data = self.call("Page.captureScreenshot", format="png")["data"]
            path.write_bytes(base64.b64decode(data))
            print(path.relative_to(ROOT))
            return
        box = self.js(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()"
        )
        x, y, w, h = box
        clip = {"x": max(x - pad, 0), "y": max(y - pad, 0), "width": w + 2 * pad, "height": h + 2 * pad, "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        print(path.relative_to(ROOT))

    def _stop_process(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def close(self) -> None:
        self.ws.close()
        self._stop_process()


def start_locust(host: str, port: int, *flags: str) -> subprocess.Popen[bytes]:
    cmd = [LOCUST, "-f", "locustfiles/demo.py", "--host", host, "--web-host", "127.0.0.1", "--web-port", str(port)]
    return subprocess.Popen(
        [*cmd, *flags], cwd=ROOT, env=CHILD_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def post(url: str, form: dict[str, str]) -> None:
    urllib.request.urlopen(url, data=urllib.parse.urlencode(form).encode(), timeout=10).close()


def web_ui_shots(mock: Mock, browser: Browser) -> None:
    """The form, the Pooling tab during a run, and the report's charts after it."""
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    locust = start_locust(mock.url, port)
    try:
        wait_http(web + "/")
        browser.goto(web + "/")
        browser.until("[...document.querySelectorAll('p')].some(p => p.textContent === 'Custom parameters')")
        browser.js("[...document.querySelectorAll('p')].find(p => p.textContent === 'Custom parameters').click()")
        browser.until("document.querySelector('.poolbench-group') !== null")
        time.sleep(1)  # the accordion's opening transition
        browser.shot(RESULTS / "webui-form.png", "form")

        post(web + "/swarm", {"user_count": "8", "spawn_rate": "8", "host": mock.url, "batch_size": "1:16"})
        time.sleep(45)
        browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=1180, deviceScaleFactor=1, mobile=False)
        browser.goto(web + "/?tab=pooling")
        browser.until("document.querySelector('#poolbench-charts svg') !== null")
        time.sleep(1)
        browser.shot(RESULTS / "webui-pooling-tab.png")

        post(web + "/stop", {})
        time.sleep(2)
        browser.goto(web + "/stats/report")
        browser.until("document.querySelector('#poolbench-charts') !== null")
        browser.shot(RESULTS / "report-charts.png", "#poolbench-charts")
    finally:
        stop(locust)


def knee_shot(mock: Mock, browser: Browser) -> None:
    """A sweep's PREFIX_sweep.svg, drawn by the run itself."""
    out = Path(tempfile.mkdtemp(prefix="poolbench-sweep-"))
    prefix = out / "knee"
    try:
        subprocess.run(
            [
                *(LOCUST, "-f", "locustfiles/demo.py", "--host", mock.url, "--headless", "--only-summary"),
                *("--sweep-users", "1,2,4,8,16,32", "--sweep-step-time", "5", "--csv", str(prefix)),
            ],
            cwd=ROOT,
            env=CHILD_ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=90,
            check=True,
        )
        browser.goto(Path(f"{prefix}_sweep.svg").as_uri())
        browser.shot(RESULTS / "sweep-knee.png", "svg", pad=0)
        shutil.copy(f"{prefix}_sweep.csv", RESULTS / "sweep-knee.csv")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    RESULTS.mkdir(exist_ok=True)
    mock = Mock("--ttfb-ms", "20", "--body-ms", "30")
    browser: Browser | None = None
    try:  # whatever fails, the mock and the browser stop with the script
        browser = Browser(width=1400)
        web_ui_shots(mock, browser)
        knee_shot(mock, browser)
    finally:
        if browser is not None:
            browser.close()
        mock.close()


if __name__ == "__main__":
    main()
