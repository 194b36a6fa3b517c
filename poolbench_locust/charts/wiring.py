"""The charts wired into Locust on the runner that shows the figures (the master, or the only
process): routes of the web UI, the Pooling tab's live charts, the HTML report, the sweep's image."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from poolbench_locust.charts.figures import knee_sheet
from poolbench_locust.charts.pages import add_to_report, insert_before_body_end, live_fragment, sweep_steps
from poolbench_locust.metrics.columns import chooser_script
from poolbench_locust.metrics.history import history_of

REFRESH_MS = 2000
"""As often as Locust's web UI asks for its own stats."""

TAB_SCRIPT = """<script>
(() => {
  // Locust's Pooling tab is a table of ours; under it, the charts the master draws, fetched live.
  const ID = "poolbench-charts", EVERY = REFRESH_MS;
  let fetchedAt = 0, busy = false;
  async function tick() {
    let box = document.getElementById(ID);
    const table = document.querySelector("table");
    if (new URLSearchParams(location.search).get("tab") !== "pooling" || !table) {
      if (box) box.remove();
      return;
    }
    const anchor = table.closest(".MuiTableContainer-root") || table;
    if (!box || box.previousElementSibling !== anchor) {
      if (box) box.remove();
      box = document.createElement("div");
      box.id = ID;
      box.style.margin = "16px 0";
      anchor.after(box);
      fetchedAt = 0;
    }
    if (busy || Date.now() - fetchedAt < EVERY) return;
    busy = true;
    try {
      const answer = await fetch("./pooling/charts");
      if (answer.ok) box.innerHTML = await answer.text();
      fetchedAt = Date.now();
    } finally {
      busy = false;
    }
  }
  setInterval(tick, 250);
})();
</script>""".replace("REFRESH_MS", str(REFRESH_MS))


def _install_web_ui(environment: Environment) -> None:
    web_ui = environment.web_ui
    assert web_ui is not None
    base = (getattr(environment.parsed_options, "web_base_path", "") or "").rstrip("/")

    @web_ui.app.route(f"{base}/pooling/history")
    @web_ui.auth_required_if_enabled
    def pooling_history() -> Response:
        history = history_of(environment)
        return jsonify({"interval": history.interval, "samples": history.samples})

    @web_ui.app.route(f"{base}/pooling/charts")
    @web_ui.auth_required_if_enabled
    def pooling_charts() -> Response:
        return Response(live_fragment(environment), mimetype="text/html")

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if response.mimetype != "text/html" or response.direct_passthrough:
            return response
        if request.path == f"{base}/":
            response.set_data(insert_before_body_end(response.get_data(as_text=True), TAB_SCRIPT + chooser_script()))
        elif request.path.endswith("/stats/report"):
            response.set_data(add_to_report(response.get_data(as_text=True), environment))
        return response


def write_knee(environment: Environment, prefix: str) -> str | None:
    """PREFIX_sweep.svg beside PREFIX_sweep.csv; its path, or None when the run was no sweep."""
    steps = sweep_steps(environment, ended=True)
    if not steps:
        return None
    path = f"{prefix}_sweep.svg"
    with open(path, "w", encoding="utf-8") as f:
        f.write(knee_sheet(steps))
    return path


@events.init.add_listener
def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # the history lives where the figures are shown
    if web_ui is not None:
        _install_web_ui(environment)

    @environment.events.quitting.add_listener
    def finish(**_: Any) -> None:
        options = environment.parsed_options
        if prefix := getattr(options, "csv_prefix", None):
            write_knee(environment, prefix)
        if html_file := getattr(options, "html_file", None):
            with open(html_file, encoding="utf-8") as f:
                page = f.read()
            with open(html_file, "w", encoding="utf-8") as f:
                f.write(add_to_report(page, environment, ended=True))
