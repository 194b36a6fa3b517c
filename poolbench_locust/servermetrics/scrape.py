"""Scraping: one bounded GET of a server's /metrics, and the greenlet that scrapes every few seconds.

Off the hot path: it runs on the master (or the one local process) in a greenlet of its own, one
request per server per interval. Every scrape has one deadline for connecting, the headers and the
body together, and a bound on the body's size, so a server that trickles or floods cannot hold
it, and a bad answer is one failed scrape, counted, never an exception out of here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient

from poolbench_locust.servermetrics.deltas import ServerView
from poolbench_locust.servermetrics.parse import NothingYet, ParseError, decode, printable, reading

logger = logging.getLogger("poolbench_locust")

SCRAPE_TIMEOUT_S = 5.0
"""One scrape's deadline: connect, headers and body."""
MAX_BODY = 2 << 20
"""Bytes of /metrics read at most (vLLM's is some 50 kB per engine)."""
READ_BLOCK = 65536


class ScrapeError(Exception):
    """Why one scrape gave nothing: one line, safe to show."""


def fetch(
    url: str, timeout: float = SCRAPE_TIMEOUT_S, limit: int = MAX_BODY, headers: dict[str, str] | None = None
) -> bytes:
    """The body of GET url, at most `limit` bytes, all within `timeout` seconds."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    client = HTTPClient.from_url(url, connection_timeout=timeout, network_timeout=timeout, concurrency=1)
    chunks: list[bytes] = []
    try:
        with gevent.Timeout(timeout, ScrapeError(f"no whole answer within {timeout:g} s")):
            response = client.get(path, headers=headers or {"Accept": "text/plain"})
            try:
                if response.status_code != 200:
                    raise ScrapeError(f"HTTP {response.status_code}")
                size = 0
                while chunk := response.read(READ_BLOCK):
                    size += len(chunk)
                    if size > limit:
                        raise ScrapeError(f"answer larger than {limit >> 20} MiB")
                    chunks.append(chunk)
            finally:
                response.release()
    except ScrapeError:
        raise
    except OSError as e:
        raise ScrapeError(printable(e.strerror or type(e).__name__)) from None
    except Exception as e:  # geventhttpclient's parser errors on a hostile answer: one failed scrape
        raise ScrapeError(f"{type(e).__name__}: {printable(str(e))}") from None
    finally:
        client.close()
    return b"".join(chunks)


class Scraper:
    """Scrapes its servers at the start, every `interval` seconds, and at finish()."""

    def __init__(
        self,
        views: Sequence[ServerView],
        routes: frozenset[str],
        interval: float,
        optional: bool,
        on_scrape: Callable[[ServerView], None] | None = None,
        users: Callable[[], int] | None = None,
    ) -> None:
        self.views = list(views)
        self.routes = routes
        self.interval = interval
        self.optional = optional
        """auto: a server that does not answer the first scrape is left out with one info line."""
        self.on_scrape = on_scrape
        self.users = users
        self.peak_users = 0
        self.rebased = False
        """Counting from a rebase (the warm-up's end, a reset): the requests in flight then are the server's alone."""
        self._warned: set[str] = set()
        self._greenlet: gevent.Greenlet[..., Any] | None = None
        self.finished = False

    def start(self) -> None:
        """The base scrape now, before any user starts (a request done before it would be in the base,
        counted by the client only), then the scrapes every `interval` in a greenlet."""
        self.scrape_all(first=True)
        self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        while self.views:
            gevent.sleep(self.interval)
            self.scrape_all()

    def finish(self) -> None:
        """The last scrape, now (once): the run's figures end here."""
        if self.finished:
            return
        self.finished = True
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=SCRAPE_TIMEOUT_S + 1)
            self._greenlet = None
        self.scrape_all(first=not any(v.scrapes for v in self.views))

    def rebase(self) -> None:
        """Count from a scrape taken now: the client's stats were just reset."""
        self.rebased = True
        for view in list(self.views):
            self.scrape(view, first=not view.scrapes)
            view.rebase()

    def note_users(self) -> None:
        if self.users is not None:
            self.peak_users = max(self.peak_users, self.users())

    def scrape_all(self, first: bool = False) -> None:
        self.note_users()
        for view in list(self.views):
            self.scrape(view, first)

    def scrape(self, view: ServerView, first: bool = False) -> None:
        try:
            result = reading(decode(fetch(view.url)), self.routes, view.flavor)
        except NothingYet:
            view.observe_nothing(time.time())
            if first and view.scrapes == 1:
                logger.info("Server metrics: reading %s (no series yet) every %g s", view.shown, self.interval)
            return
        except (ScrapeError, ParseError) as e:
            self._failed(view, str(e), first)
            return
        view.observe(result, time.time())
        if first and view.scrapes == 1:
            logger.info("Server metrics: reading %s (%s) every %g s", view.shown, result.flavor.name, self.interval)
        if self.on_scrape is not None:
            self.on_scrape(view)

    def _failed(self, view: ServerView, reason: str, first: bool) -> None:
        if first and self.optional and not view.scrapes:
            self.views.remove(view)
            logger.info("Server metrics: %s did not answer with metrics (%s): none shown", view.shown, reason)
            return
        view.failed(reason)
        if view.url not in self._warned:
            self._warned.add(view.url)
            logger.warning(
                "Server metrics: scrape of %s failed: %s (the report counts further failures)", view.shown, reason
            )
