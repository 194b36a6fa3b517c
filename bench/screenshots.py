"""Screenshots for the docs, in headless Chromium: the web UI's start form (custom parameters open),
the Pooling tab with its live charts during a run and the HTML report (each 1,400 and 1,000 px wide),
the report's charts, and a sweep's knee.

    .venv/bin/python bench/screenshots.py       # about 90 s; needs chromium (apt-get install chromium)

Everything runs on 127.0.0.1: the bundled mock in its own process (20 ms to the headers, the body
trickled over 30 ms, so the curves show a server's times rather than loopback's), Locust's web UI,
and Chromium driven over its DevTools protocol by devsupport/browser.py's client.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import CHILD_ENV, PYTHON, ROOT, Mock
from devsupport.browser import Browser, wait_http
from devsupport.ports import free_port

RESULTS = ROOT / "bench" / "results"
LOCUST = str(Path(PYTHON).with_name("locust"))
WIDTHS = (1400, 1000)
"""The report and the Pooling tab are shot at both: a wide screen and a laptop's window."""


def saved(path: Path) -> Path:
    print(path.relative_to(ROOT))
    return path


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
        browser.shot(saved(RESULTS / "webui-form.png"), "form")

        post(web + "/swarm", {"user_count": "8", "spawn_rate": "8", "host": mock.url, "batch_size": "1:16"})
        time.sleep(45)
        for width in WIDTHS:
            browser.resize(width, 1180)
            browser.goto(web + "/?tab=pooling")
            browser.until("document.querySelector('#poolbench-charts svg') !== null")
            browser.until("document.querySelector('#poolbench-columns') !== null")
            time.sleep(1)
            browser.shot(saved(RESULTS / f"webui-pooling-tab-{width}.png"))
        shutil.copy(RESULTS / "webui-pooling-tab-1400.png", RESULTS / "webui-pooling-tab.png")

        post(web + "/stop", {})
        time.sleep(2)
        for width in WIDTHS:
            browser.resize(width, 900)
            browser.goto(web + "/stats/report")
            browser.until("document.querySelector('#poolbench-charts') !== null")
            time.sleep(1)
            browser.shot(saved(RESULTS / f"report-{width}.png"), full=True)
            tables_shot(browser, saved(RESULTS / f"report-tables-{width}.png"))
            if width == WIDTHS[0]:
                browser.shot(saved(RESULTS / "report-charts.png"), "#poolbench-charts")
    finally:
        stop(locust)


def tables_shot(browser: Browser, path: Path) -> None:
    """The report from the Server metrics section to the end of the Pooling table, the page's full width."""
    top, bottom, width = browser.js(
        "[document.querySelector('#poolbench-server-metrics').getBoundingClientRect().top + scrollY,"
        " document.querySelector('#poolbench-pooling').getBoundingClientRect().bottom + scrollY,"
        " document.documentElement.clientWidth]"
    )
    clip = {"x": 0, "y": top - 8, "width": width, "height": bottom - top + 16, "scale": 1}
    data = browser.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)["data"]
    path.write_bytes(base64.b64decode(data))


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
        browser.shot(saved(RESULTS / "sweep-knee.png"), "svg", pad=0)
        shutil.copy(f"{prefix}_sweep.csv", RESULTS / "sweep-knee.csv")
    finally:
        shutil.rmtree(out, ignore_errors=True)


def compare_shot(browser: Browser) -> None:
    """poolbench-compare's page of bench/results/compare/ (float, bytes, float again), its verdict on top."""
    out = RESULTS / "compare"
    runs = [str((out / f"{name}.json").relative_to(ROOT)) for name in ("float", "bytes", "float-again")]
    page = out / "float-vs-bytes.html"
    compare = [str(Path(PYTHON).with_name("poolbench-compare")), *runs, "--html", str(page), "--max-regression", "5%"]
    subprocess.run(compare, cwd=ROOT, stdout=subprocess.DEVNULL, timeout=60, check=False)  # exit 1: a regression
    browser.resize(1400, 900)
    browser.goto(page.as_uri())
    browser.shot(saved(out / "float-vs-bytes.png"), full=True)


def main() -> None:
    RESULTS.mkdir(exist_ok=True)
    mock = Mock("--ttfb-ms", "20", "--body-ms", "30")
    browser: Browser | None = None
    try:  # whatever fails, the mock and the browser stop with the script
        browser = Browser(width=1400)
        web_ui_shots(mock, browser)
        knee_shot(mock, browser)
        compare_shot(browser)
    finally:
        if browser is not None:
            browser.close()
        mock.close()


if __name__ == "__main__":
    main()
