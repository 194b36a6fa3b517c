"""The server's own request fields (--truncate, --input-type, --extra-body), merged into every JSON body.

One step for every endpoint: a class declares which truncation fields its server takes
(`Endpoint.truncation`) and which input types (`Endpoint.input_types`), and its body builder knows
nothing of them. What a class cannot send stops the run at start (`refused`, read by
engine/plan.check_settings), instead of a run whose every request the server refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.endpoints.spec import Endpoint, Inputs
from poolbench_locust.options import Settings

SAMPLE = Inputs(texts=("a",), query="q")
"""Inputs of every shape, to learn which fields a class's body builds itself."""


def own_fields(endpoint: Endpoint, settings: Settings) -> dict[str, Any]:
    """The fields --truncate and --input-type add to the endpoint's body (empty when neither is given)."""
    fields: dict[str, Any] = {}
    if settings.truncate is not None:
        fields.update(endpoint.truncation.get(settings.truncate, {}))
    if settings.input_type is not None:
        fields["input_type"] = settings.input_type
    return fields


def request_fields(endpoint: Endpoint, settings: Settings) -> dict[str, Any]:
    """Every field merged into each body: --truncate's and --input-type's, then --extra-body's (which
    `refused` let replace one of those or of the class's own only with --extra-body-overrides)."""
    fields = own_fields(endpoint, settings)
    if settings.extra_body is not None:
        fields.update(settings.extra_body.fields())
    return fields


def merged(body: dict[str, Any] | list[Any], fields: Mapping[str, Any]) -> dict[str, Any] | list[Any]:
    """The body with the fields merged in; a body that is not a JSON object (refused at start) as it was."""
    if not fields or not isinstance(body, dict):
        return body
    return {**body, **fields}


def _listed(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(values)


def refused(endpoint: Endpoint, settings: Settings) -> tuple[str, str] | None:
    """(flag, why) of the first of these options the endpoint cannot send as given, or None; `why`
    follows the class's name in the one line that stops the run."""
    if (truncate := settings.truncate) is not None:
        if not endpoint.truncation:
            return "--truncate", f"cannot honour --truncate {truncate}: its server's request has no truncation field"
        if truncate not in endpoint.truncation:
            does = _listed(list(endpoint.truncation))
            return "--truncate", f"cannot honour --truncate {truncate}: its server's truncation does {does}"
    if (kind := settings.input_type) is not None:
        if not endpoint.input_types:
            return "--input-type", f"cannot honour --input-type {kind}: its server's request has no input_type"
        if kind not in endpoint.input_types:
            return "--input-type", f"cannot honour --input-type {kind}: it takes {_listed(endpoint.input_types)}"
    needs = endpoint.input_type_required
    if kind is None and settings.model and needs is not None and needs(settings.model):
        return "--input-type", (
            f"needs --input-type for the model {settings.model}: its server refuses every request without one; "
            f"give one of {_listed(endpoint.input_types)}"
        )
    if settings.extra_body is None:
        return None
    body = endpoint.body(SAMPLE, settings)
    if not isinstance(body, dict):
        return "--extra-body", "cannot honour --extra-body: its request body is not a JSON object"
    built = {*body, *own_fields(endpoint, settings)}
    if not settings.extra_body_overrides and (clashes := [n for n in settings.extra_body.names() if n in built]):
        names = _listed([repr(name) for name in clashes])
        them = "it" if len(clashes) == 1 else "them"
        return "--extra-body", f"builds {names} itself: give --extra-body-overrides to let --extra-body replace {them}"
    return None
