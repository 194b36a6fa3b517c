"""Where the API key may go, and whether the server's TLS certificate is checked.

The key is a secret of the user's, not of the environment the run happens to start in: an
`OPENAI_API_KEY` exported for some other tool is sent only when `--api-key-from-env` asks for it.
No key goes over plain http to a host that is not this machine unless `--api-key-over-http` says
so: anyone on the path could read it. TLS certificates are not verified by default, as Locust's
FastHttpUser does not (its `insecure = True`: test servers mostly have self-signed certificates);
`--tls-verify` verifies them against the system's CAs, `--ca-bundle FILE` against your own.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import gevent.ssl

from poolbench_locust.options import OptionError, Settings
from poolbench_locust.store import Slot
from poolbench_locust.urls import shown_url

logger = logging.getLogger("poolbench_locust")

ENV_KEY = "OPENAI_API_KEY"


def is_loopback(hostname: str) -> bool:
    """The name or address is this machine itself. A name is not resolved: only `localhost` counts."""
    if hostname.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """The key to send to one host, and how its certificate is checked."""

    api_key: str | None = field(default=None, repr=False)
    host_password: str | None = field(default=None, repr=False)
    """The password of a `user:password@` in --host: a secret like the key."""
    tls_verify: bool = False
    ca_bundle: str | None = None

    def ssl_context_factory(self) -> Callable[..., Any] | None:
        """For FastHttpUser.ssl_context_factory: None keeps Locust's own choice (by `insecure`)."""
        if self.ca_bundle is None:
            return None
        context = _bundle_context(self.ca_bundle)
        return lambda **_: context


@cache
def _bundle_context(path: str) -> Any:
    """One context per CA file, shared by every user and connection: loading the file is the slow part."""
    return gevent.ssl.create_default_context(cafile=path)


_WARNINGS: Slot[set[tuple[str, str]]] = Slot("api_key_warnings", set)
"""The API-key warnings given already in an environment, one per kind and host: given once a process."""


def warnings_given(environment: Any) -> set[tuple[str, str]]:
    return _WARNINGS.of(environment)


def _once(warned: set[tuple[str, str]], kind: str, host: str, message: str, *args: Any) -> None:
    if (kind, host) not in warned:
        warned.add((kind, host))
        logger.warning(message, *args)


def access_for(settings: Settings, host: str | None, warned: set[tuple[str, str]] | None = None) -> Access:
    """The Access of a run against `host`; OptionError when the key must not go there. A warning about
    the key is given once per kind and host among those `warned` holds (the run's, or only this call's)."""
    warned = set() if warned is None else warned
    api_key = settings.api_key
    bundle = settings.ca_bundle or None
    if bundle is not None:
        if not os.path.isfile(bundle):
            raise OptionError("--ca-bundle", f"no such file: {bundle}")
        try:
            _bundle_context(bundle)  # at start: a file that is not PEM certificates would fail every user
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            raise OptionError("--ca-bundle", f"{bundle} holds no usable CA certificates: {e}") from None
    verify = settings.tls_verify or bundle is not None
    parts = urlsplit(host or "")
    shown = shown_url(host or "") if parts.hostname else "the host"
    if not api_key and (from_env := os.environ.get(ENV_KEY)):
        if settings.api_key_from_env:
            api_key = from_env
            _once(warned, "env", shown, "--api-key-from-env: sending $%s to %s", ENV_KEY, shown)
        else:
            _once(
                warned,
                "unused",
                shown,
                "$%s is set but not sent to %s: give --api-key-from-env to send it",
                ENV_KEY,
                shown,
            )
    if api_key and parts.scheme == "http" and not is_loopback(parts.hostname or "") and not settings.api_key_over_http:
        raise OptionError(
            "--api-key",
            f"refusing to send the API key over plain http to {parts.hostname} (not loopback): "
            "use https://, or give --api-key-over-http",
        )
    return Access(api_key=api_key or None, host_password=parts.password, tls_verify=verify, ca_bundle=bundle)
