"""What poolbench-locust adds to Locust's pages: sections of its HTML report and tabs of its web UI.

Locust's report and web UI have no hook for either. A room adds to them by listening to one of the
two events of `page_events`, as to Locust's own events (locust.event.EventHook):

- `report_sections(environment, sections, final)` is fired once per HTML report: the --html file
  when Locust quits (`final`: the run is over), and each /stats/report the web UI serves. Each
  listener appends its `Section`; they go before </body> in the order of their `order`.
- `web_ui_tabs(environment, tabs)` is fired once when the web UI starts. Each listener appends its
  `Tab` (title, columns, rows, CSV link); the tabs follow Locust's own in the order of their `order`.

This module is the one writer of the --html file, and the one place that extends the web UI's
/stats/requests and /stats/report answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from flask import Response, jsonify, request
from locust.env import Environment
from locust.event import EventHook, Events
from locust.runners import WorkerRunner

from poolbench_locust.locust_options import locust_options

SERVER_METRICS_SECTION = 10
CHARTS_SECTION = 20
POOLING_SECTION = 30
CLIENT_LOAD_SECTION = 40
CAPACITY_SECTION = 50
"""Where each section goes in the HTML report, in one place: after Locust's own, the server's view,
the charts, the pooling table, whether the client kept up, then the capacity search's probes."""
POOLING_TAB = 10
SERVER_METRICS_TAB = 20
RECONCILIATION_TAB = 30
CLIENT_LOAD_TAB = 40
CAPACITY_TAB = 50
"""Where each tab goes in the web UI, after Locust's own."""


@dataclass(frozen=True)
class Section:
    order: int
    html: str


@dataclass(frozen=True)
class Tab:
    order: int
    title: str
    key: str
    header: Sequence[str]
    rows: Callable[[], list[dict[str, Any]]]
    """The table's rows as the CSV files have them: one dict per row, keyed by the header's titles."""
    name_column: str
    """The column Locust's table uses as the row's name."""
    csv: tuple[str, str] | None = None
    """(href, title) of the tab's CSV download, if it has one."""


class PageEvents:
    report_sections: EventHook
    web_ui_tabs: EventHook

    def __init__(self) -> None:
        self.report_sections = EventHook()
        self.web_ui_tabs = EventHook()


page_events = PageEvents()


def column_key(title: str) -> str:
    """A column's key in the web UI's tables: its title in snake case, as Locust's own keys are."""
    return title.lower().replace("%", "").replace("/", "_per_").replace(" ", "_")


def web_rows(rows: list[dict[str, Any]], name_column: str) -> list[dict[str, Any]]:
    return [{**{column_key(k): v for k, v in row.items()}, "safe_name": row[name_column]} for row in rows]


def web_base(environment: Environment) -> str:
    """The web UI's --web-base-path without its last slash: the prefix of every route of ours."""
    return locust_options(environment).web_base_path


def add_route(environment: Environment, path: str, view: Callable[[], Response]) -> None:
    """A route of the web UI under its base path, behind its login when --web-login asks for one."""
    web_ui = environment.web_ui
    assert web_ui is not None and web_ui.app is not None
    web_ui.app.route(web_base(environment) + path)(web_ui.auth_required_if_enabled(view))


def csv_download(text: str, name: str) -> Response:
    """A CSV file the browser saves as NAME_<epoch seconds>.csv, as Locust names its own."""
    return Response(
        text,
        mimetype="text/csv",
        headers={"Content-Disposition": f"attachment;filename={name}_{int(time.time())}.csv"},
    )


def insert_before_body_end(page: str, html: str) -> str:
    index = page.rfind("</body>")
    return page + html if index < 0 else page[:index] + html + page[index:]


LIVE_BOX_SCRIPT = """<script>
(() => {
  // Locust's TAB tab is a table of ours; under it, a box of HTML the server makes, fetched live (escaped there).
  // Several rooms may each put a box under one tab: the boxes follow the table one after another.
  const ID = "BOX_ID", EVERY = REFRESH_MS, MARK = "data-poolbench-box";
  let fetchedAt = 0, busy = false;
  function follows(box, anchor) {
    for (let e = box.previousElementSibling; e; e = e.previousElementSibling) {
      if (e === anchor) return true;
      if (!e.hasAttribute(MARK)) return false;
    }
    return false;
  }
  async function tick() {
    let box = document.getElementById(ID);
    const table = document.querySelector("table");
    if (new URLSearchParams(location.search).get("tab") !== "TAB" || !table) {
      if (box) box.remove();
      return;
    }
    const anchor = table.closest(".MuiTableContainer-root") || table;
    if (!box || !follows(box, anchor)) {
      if (box) box.remove();
      box = document.createElement("div");
      box.id = ID;
      box.setAttribute(MARK, "");
      box.style.margin = "16px 0";
      let last = anchor;
      while (last.nextElementSibling && last.nextElementSibling.hasAttribute(MARK)) last = last.nextElementSibling;
      last.after(box);
      fetchedAt = 0;
    }
    if (busy || Date.now() - fetchedAt < EVERY) return;
    busy = true;
    try {
      const answer = await fetch("./ROUTE");
      if (answer.ok) box.innerHTML = await answer.text();
      fetchedAt = Date.now();
    } finally {
      busy = false;
    }
  }
  setInterval(tick, 250);
})();
</script>"""


def live_box_script(tab: str, box_id: str, route: str, refresh_ms: int) -> str:
    """The script that shows, under one of our tabs' table, the HTML `route` answers, fetched again every
    `refresh_ms` while the tab is open (Locust's React page knows nothing of it: the box follows its table,
    after the boxes other rooms put under the same tab)."""
    for name, value in (("BOX_ID", box_id), ("REFRESH_MS", str(refresh_ms)), ("ROUTE", route.lstrip("/"))):
        if not value.replace("-", "").replace("_", "").replace("/", "").isalnum():
            raise ValueError(f"{name} {value!r}: letters, digits, - _ / only (it goes into a script)")
    return (
        LIVE_BOX_SCRIPT.replace("BOX_ID", box_id)
        .replace("REFRESH_MS", str(refresh_ms))
        .replace("ROUTE", route.lstrip("/"))
        .replace("TAB", tab)
    )


def report_sections(environment: Environment, final: bool) -> str:
    sections: list[Section] = []
    page_events.report_sections.fire(environment=environment, sections=sections, final=final)
    return "".join(s.html for s in sorted(sections, key=lambda s: s.order))


def add_to_report(page: str, environment: Environment, final: bool) -> str:
    return insert_before_body_end(page, report_sections(environment, final))


def _install_web_ui(environment: Environment, web_ui: Any) -> None:
    tabs: list[Tab] = []
    page_events.web_ui_tabs.fire(environment=environment, tabs=tabs)
    tabs.sort(key=lambda t: t.order)
    args = web_ui.template_args
    args["extended_tabs"] = [{"title": t.title, "key": t.key} for t in tabs]
    args["extended_tables"] = [
        {"key": t.key, "structure": [{"key": column_key(title), "title": title} for title in t.header]} for t in tabs
    ]
    args["extended_csv_files"] = [{"href": t.csv[0], "title": t.csv[1]} for t in tabs if t.csv is not None]
    keys = {t.key for t in tabs}

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.is_json:
            # Locust memoizes /stats/requests for 2 s and hands back the same Response, already extended
            # by the last call: our tabs' entries are replaced, never added again (two entries for one tab,
            # the first stale, were the page's).
            data = response.get_json()
            others = [e for e in data.get("extended_stats", []) if e.get("key") not in keys]
            data["extended_stats"] = others + [{"key": t.key, "data": web_rows(t.rows(), t.name_column)} for t in tabs]
            response.set_data(jsonify(data).get_data())
        elif (
            request.path.endswith("/stats/report")
            and response.mimetype == "text/html"
            and not response.direct_passthrough
        ):
            response.set_data(add_to_report(response.get_data(as_text=True), environment, final=False))
        return response


def write_html_file(environment: Environment) -> None:
    """The --html file Locust wrote, with every section added, rewritten once."""
    html_file = locust_options(environment).html_file
    if not html_file:
        return
    with open(html_file, encoding="utf-8") as f:
        page = f.read()
    with open(html_file, "w", encoding="utf-8") as f:
        f.write(add_to_report(page, environment, final=True))


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if isinstance(runner, WorkerRunner):
        return  # the figures are shown where they are merged
    if web_ui is not None:
        _install_web_ui(environment, web_ui)
    environment.events.quitting.add_listener(lambda **_: write_html_file(environment))


def setup(events: Events) -> None:
    """Last of the plugin's setups: the --html file is rewritten after every other quitting listener
    (the last scrape, the sweep's last step) has run."""
    events.init.add_listener(on_init)
