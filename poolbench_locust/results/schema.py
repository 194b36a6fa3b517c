"""The JSON result's schema (JSON Schema, Draft 2020-12), whole: schema.json beside this module holds the
document's own keys (results/document.py), and each room's section (json_sections.py) adds the part of its
own keys, as the document takes their values from it.

The rooms' sections are those the plugin's setup registered: importing `poolbench_locust.plugin` (or a User
class from `poolbench_locust`) before asking for the whole schema gives every room's part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib.resources import files
from typing import Any

from poolbench_locust.json_sections import JsonSection, json_sections


def own() -> dict[str, Any]:
    """schema.json: the document's own keys, and the definitions the rooms' parts may refer to."""
    schema: dict[str, Any] = json.loads(
        files("poolbench_locust.results").joinpath("schema.json").read_text(encoding="utf-8")
    )
    return schema


def whole(sections: Iterable[JsonSection] | None = None) -> dict[str, Any]:
    """The document's own part with every section's merged in: its properties, the keys it requires and its
    `$defs`. A key two parts declare is an error: two rooms cannot share a key of the document."""
    schema = own()
    schema.pop("$comment")  # the file's note that it is only a part
    for section in json_sections() if sections is None else sections:
        for where, part in (("properties", section.properties), ("$defs", section.defs)):
            if shared := set(part) & set(schema[where]):
                raise ValueError(f"the JSON result's schema: {where} {sorted(shared)} declared twice")
            schema[where].update(part)
        schema["required"].extend(section.required)
    return schema
