"""`Settings`: every option's value, parsed and checked together; a field per option of the registry."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from poolbench_locust.options.parsers import OptionError
from poolbench_locust.options.registry import ALL_OPTIONS, BY_FLAG, Option


def parsed(options: argparse.Namespace | None, opt: Option | str) -> Any:
    """One option's value (an Option, or its flag) from Locust's options (command line, env, or a web UI
    string), parsed again; its default when the options do not have it; OptionError on a bad value."""
    if isinstance(opt, str):
        opt = BY_FLAG[opt]
    raw = getattr(options, opt.dest, opt.default) if options is not None else opt.default
    return opt.value(raw)


class _Checked:
    """What Settings adds to its fields: the checks of options taken together, and what they imply."""

    @classmethod
    def from_options(cls, options: argparse.Namespace | None) -> Settings:
        """Parse Locust's options (command line, env, or web UI strings); raise OptionError on a bad value."""
        values: dict[str, Any] = {opt.dest: parsed(options, opt) for opt in ALL_OPTIONS}
        if values["input_len_range"] is not None:
            values["input_len"] = values["input_len_range"]
        if values["sweep_rates"] and values["sweep_users"]:
            raise OptionError("--sweep-rates", "choose --sweep-rates or --sweep-users, not both")
        if values["sweep_rates"] and values["request_rate"]:
            raise OptionError("--request-rate", "--sweep-rates sets the rate of each step: leave --request-rate out")
        if values["encoding_format"] == "float":  # JSON numbers have no dtype or byte order to ask for
            for flag in ("--embed-dtype", "--endianness"):
                opt = BY_FLAG[flag]
                if values[opt.dest] != opt.default_value:
                    raise OptionError(flag, "applies to base64, bytes and bytes_only; --encoding-format is float")
        if values["max_concurrency"] and not (values["request_rate"] or values["sweep_rates"]):
            raise OptionError("--max-concurrency", "caps an open-loop run: give --request-rate or --sweep-rates")
        return Settings(**values)

    @property
    def open_loop(self) -> bool:
        return bool(self.request_rate or self.sweep_rates)  # type: ignore[attr-defined]

    @property
    def binary(self) -> bool:
        return self.encoding_format in ("bytes", "bytes_only")  # type: ignore[attr-defined]

    @property
    def validate(self) -> bool:
        """Check the answers: --no-validate not given."""
        return not self.no_validate  # type: ignore[attr-defined]


Settings = dataclasses.make_dataclass(
    "Settings",
    [
        (opt.dest, Any, dataclasses.field(default=opt.default_value, repr=not opt.secret))  # type: ignore[misc]
        for opt in ALL_OPTIONS
    ],
    bases=(_Checked,),
    frozen=True,
)
Settings.__module__ = __name__
Settings.__doc__ = """The options a run goes with, parsed and checked once: one field per option of the registry,
named by its dest (`--batch-size` -> `batch_size`), its default the option's parsed default."""
