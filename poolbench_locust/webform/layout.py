"""The web UI's start form: our options in groups, each with a human label, its help text and its flag.

Locust builds the form's "Custom parameters" from the parser's web-UI actions
(argument_parser.ui_extra_args_dict): per option it lets you set the default, the help text, the
choices and whether it is secret, required or multiple, and nothing else. Flask sorts the keys, so
the options come alphabetically, and the label is made from the key in the browser (`check_p95_ms`
is camel-cased to `checkP95Ms`, shown as "Check P9 5Ms"). A small script of ours, added to the
page, orders the fields by group (CSS `order`, so React's own nodes stay where React put them),
puts a heading before each group and writes the human label; the help text goes under the field.

The same camel-casing turned back on the way in posts `check_p9_5ms` for `check_p95_ms`, which
Locust's /swarm silently drops: the option could not be set from the form. Each posted name is
mapped back to its option before Locust reads the form.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import Response, request
from locust.argument_parser import default_args_dict, get_parser
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner
from werkzeug.datastructures import ImmutableMultiDict

from poolbench_locust.locust_options import locust_options
from poolbench_locust.locust_pages import insert_before_body_end
from poolbench_locust.options import ALL_OPTIONS
from poolbench_locust.options import GROUPS as OPTION_GROUPS

GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = tuple(
    (title, fields)
    for title in OPTION_GROUPS
    if (fields := tuple((opt.flag, opt.label) for opt in ALL_OPTIONS if opt.group == title and opt.web_ui))
)
"""The form's groups in order, each with its options' flags and labels: the registry's, as it orders them."""
OTHER = "Other"
"""The group of an option no group names (a locustfile's own, say): labelled with its flag."""


def browser_key(dest: str) -> str:
    """The key the web UI gives an option: Locust's bundle camel-cases templateArgs (`_x` -> `X`)."""
    return re.sub(r"_([a-z0-9])", lambda m: m[1].upper(), dest)


def posted_name(dest: str) -> str:
    """The name the web UI posts to /swarm for an option: its key turned back the bundle's way."""
    key = browser_key(dest)
    return key if key[0].isupper() else re.sub(r"([a-z0-9])([A-Z0-9])", r"\1_\2", key).lower()


def extra_actions() -> dict[str, Any]:
    """The form's custom parameters, as Locust picks them: web-UI options with a value, not its own."""
    parser = get_parser()
    parsed, locust_own = vars(parser.parse_args([])), default_args_dict()
    return {d: a for d, a in parser.args_included_in_web_ui.items() if d in parsed and d not in locust_own}


def form_spec(actions: dict[str, Any]) -> dict[str, Any]:
    """What the page's script needs, from the parser's web-UI actions (dest -> action)."""
    where = {flag: (g, i, label) for g, (_, fields) in enumerate(GROUPS) for i, (flag, label) in enumerate(fields)}
    titles = [title for title, _ in GROUPS]
    fields: dict[str, dict[str, Any]] = {}
    for dest, action in sorted(actions.items()):
        flag = next((s for s in action.option_strings if s.startswith("--")), f"--{dest}")
        group, order, label = where.get(flag, (len(GROUPS), len(fields), flag))
        fields[browser_key(dest)] = {
            "group": group,
            "order": order,
            "label": label,
            "help": action.help or "",
            "flag": flag,
        }
    return {"groups": [*titles, OTHER], "fields": fields}


FORM_SCRIPT = """<script>
(() => {
  // Locust lists the custom parameters alphabetically with labels made from their keys: order
  // them by group, head each group and write the human label, the help text under the field.
  const SPEC = __SPEC__;
  const quiet = "font-size:0.75rem;opacity:0.7;margin:3px 14px 0;line-height:1.4";
  function line(text, style) {
    const p = document.createElement("p");
    p.textContent = text;
    p.style.cssText = style;
    p.className = "poolbench-help";
    return p;
  }
  function relabel(field, f) {
    const help = f.help ? `${f.help} (${f.flag})` : f.flag;
    const tick = field.querySelector(".MuiFormControlLabel-label");
    if (tick) {
      tick.textContent = f.label;
      tick.appendChild(line(help, quiet.replace("margin:3px 14px 0", "margin:0")));
      return;
    }
    const label = field.querySelector("label");
    if (label) label.textContent = f.label;
    const notch = field.querySelector("legend > span");
    if (notch) notch.textContent = f.label;
    if (!field.querySelector(".poolbench-help")) field.appendChild(line(help, quiet));
  }
  function arrange(form) {
    const found = Object.keys(SPEC.fields)
      .map((key) => [key, form.querySelector(`[name="${key}"]`)])
      .filter(([, input]) => input);
    if (!found.length) return;
    let column = found[0][1].parentElement;
    while (column && !found.every(([, input]) => column.contains(input))) column = column.parentElement;
    if (!column || column.dataset.poolbench === String(found.length)) return;
    column.dataset.poolbench = String(found.length);
    column.querySelectorAll(":scope > .poolbench-group").forEach((heading) => heading.remove());
    const groups = new Set();
    for (const [key, input] of found) {
      let field = input;
      while (field.parentElement && field.parentElement !== column) field = field.parentElement;
      const f = SPEC.fields[key];
      field.style.order = String(f.group * 1000 + f.order + 1);
      groups.add(f.group);
      relabel(field, f);
    }
    for (const group of groups) {
      const heading = line(SPEC.groups[group], "font-weight:600;font-size:1rem;margin:8px 0 -16px");
      heading.className = "poolbench-group";
      heading.style.order = String(group * 1000);
      column.appendChild(heading);
    }
  }
  const arrangeAll = () => document.querySelectorAll("form").forEach(arrange);
  new MutationObserver(arrangeAll).observe(document.body, { childList: true, subtree: true });
  arrangeAll();
})();
</script>"""


def script(spec: dict[str, Any]) -> str:
    # "<" written as \\u003c: no help text can end the script element early.
    return FORM_SCRIPT.replace("__SPEC__", json.dumps(spec).replace("<", "\\u003c"))


def restore_names(form: ImmutableMultiDict[str, str], dests: list[str]) -> ImmutableMultiDict[str, str] | None:
    """The posted form with each mangled option name back to its option's; None if none was mangled."""
    back = {posted_name(d): d for d in dests if posted_name(d) != d}
    if not any(name in back for name in form):
        return None
    return ImmutableMultiDict([(back.get(name, name), value) for name, value in form.items(multi=True)])


def _install(environment: Environment) -> None:
    web_ui = environment.web_ui
    assert web_ui is not None and web_ui.app is not None
    base = locust_options(environment).web_base_path
    actions = extra_actions()
    page_script = script(form_spec(actions))
    dests = list(actions)

    @web_ui.app.before_request
    def unmangle() -> None:
        if request.method == "POST" and request.path == f"{base}/swarm":
            restored = restore_names(request.form, dests)
            if restored is not None:
                request.form = restored

    @web_ui.app.after_request
    def add_script(response: Response) -> Response:
        if request.path == f"{base}/" and response.mimetype == "text/html" and not response.direct_passthrough:
            response.set_data(insert_before_body_end(response.get_data(as_text=True), page_script))
        return response


def on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    if web_ui is not None and not isinstance(runner, WorkerRunner):
        _install(environment)


def setup(events: Events) -> None:
    events.init.add_listener(on_init)
