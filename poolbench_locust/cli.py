"""`poolbench-locust`: Locust's own command line with the plugin loaded first.

Locust prints --help before it imports the locustfile (locust.argument_parser.parse_locustfile_option),
so the options a locustfile's plugin adds never show in `locust -f ... --help`. Loaded before
Locust parses anything, the plugin's options are in the help like Locust's own; every other
invocation is exactly `locust` with the same arguments.
"""

from __future__ import annotations

import poolbench_locust.plugin  # noqa: F401  (registers the options before Locust builds its parser)


def main() -> None:
    from locust.main import main as locust_main

    locust_main()


if __name__ == "__main__":
    main()
