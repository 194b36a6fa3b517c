"""The Pooling tab's column chooser, like the one Locust's Statistics tab has: the key columns by
default, any other of the table's columns a tick away (the choice kept in the browser's localStorage).

Locust draws an extended tab's table itself, from the structure we give it, without a chooser; a
script of ours adds the button above it and hides the columns not chosen with a style rule, so that
React's own nodes stay as React made them. The table scrolls inside its container, never wider than
the page.
"""

from __future__ import annotations

import json

from poolbench_locust.metrics.console import SUMMARY_COLUMNS
from poolbench_locust.metrics.table import HEADER

DEFAULT_COLUMNS: tuple[str, ...] = tuple(c for c in SUMMARY_COLUMNS if c != "Input Tokens")
"""The console summary's figures, what a pooling server is judged by (its rate says what the token count
would): they fit a 1,000 px window."""

_SCRIPT = """<script>
(() => {
  // The Pooling tab's column chooser: Locust's extended tables have none.
  const ALL = __ALL__, DEFAULT = __DEFAULT__, STORE = "poolbench-pooling-columns";
  const ICON = "M14.67 5v14H9.33V5zm1 14H21V5h-5.33zm-7.34 0V5H3v14z";  // Locust's ViewColumn icon
  let chosen;
  try {
    const kept = JSON.parse(localStorage.getItem(STORE) || "null");
    chosen = new Set(Array.isArray(kept) ? kept.filter((c) => ALL.includes(c)) : DEFAULT);
  } catch (e) {
    chosen = new Set(DEFAULT);
  }
  const style = document.createElement("style");
  document.head.appendChild(style);
  const onTab = () => new URLSearchParams(location.search).get("tab") === "pooling";
  function rules() {
    const hidden = ALL.map((c, i) => (chosen.has(c) ? 0 : i + 1)).filter(Boolean);
    const hide = hidden.map((i) => `table.poolbench-pooling tr > :nth-child(${i})`).join(",");
    return (hide ? hide + "{display:none}" : "") +
      ".poolbench-pooling-box{max-width:100%;overflow-x:auto}" +
      "table.poolbench-pooling th,table.poolbench-pooling td{white-space:nowrap;padding:12px 10px}" +
      "table.poolbench-pooling th{white-space:normal;vertical-align:bottom}";
  }
  function save() {
    localStorage.setItem(STORE, JSON.stringify(ALL.filter((c) => chosen.has(c))));
    style.textContent = rules();
  }
  function chooser(paper) {
    const bar = document.createElement("div");
    bar.id = "poolbench-columns";
    bar.style.cssText = "display:flex;justify-content:flex-end;margin:16px 0;position:relative";
    const button = document.createElement("button");
    button.type = "button";
    button.id = "poolbench-columns-button";
    button.title = "Choose the columns";
    button.style.cssText = "display:inline-flex;align-items:center;padding:5px 15px;border-radius:4px;" +
      "border:1px solid currentColor;background:transparent;color:inherit;cursor:pointer;opacity:0.8";
    button.innerHTML = `<svg viewBox="0 0 24 24" width="24" height="24" fill="currentColor"><path d="${ICON}"/></svg>`;
    const menu = document.createElement("div");
    menu.id = "poolbench-columns-menu";
    menu.hidden = true;
    menu.style.cssText = "position:absolute;top:44px;right:0;z-index:10;max-height:60vh;overflow-y:auto;" +
      `padding:8px 16px;border-radius:4px;box-shadow:0 5px 15px rgba(0,0,0,.3);background:${paper}`;
    for (const column of ALL) {
      const label = document.createElement("label");
      label.style.cssText = "display:flex;align-items:center;gap:8px;padding:2px 0;white-space:nowrap";
      const tick = document.createElement("input");
      tick.type = "checkbox";
      tick.dataset.column = column;
      tick.checked = chosen.has(column);
      tick.addEventListener("change", () => {
        if (tick.checked) chosen.add(column);
        else chosen.delete(column);
        save();
      });
      label.append(tick, column);
      menu.appendChild(label);
    }
    button.addEventListener("click", () => (menu.hidden = !menu.hidden));
    document.addEventListener("click", (e) => {
      if (!bar.contains(e.target)) menu.hidden = true;
    });
    bar.append(button, menu);
    return bar;
  }
  function tick() {
    const bar = document.getElementById("poolbench-columns");
    const table = document.querySelector("table");
    if (!onTab() || !table) {
      if (bar) bar.remove();
      style.textContent = "";
      return;
    }
    const box = table.closest(".MuiTableContainer-root") || table.parentElement;
    table.classList.add("poolbench-pooling");
    box.classList.add("poolbench-pooling-box");
    if (!bar || bar.nextElementSibling !== box) {
      if (bar) bar.remove();
      const head = table.querySelector("thead");
      box.before(chooser(head ? getComputedStyle(head).backgroundColor : "white"));
    }
    if (!style.textContent) style.textContent = rules();
  }
  setInterval(tick, 250);
})();
</script>"""


def chooser_script() -> str:
    # "<" written as \\u003c: no column title can end the script element early.
    return _SCRIPT.replace("__ALL__", json.dumps(HEADER).replace("<", "\\u003c")).replace(
        "__DEFAULT__", json.dumps(list(DEFAULT_COLUMNS)).replace("<", "\\u003c")
    )
