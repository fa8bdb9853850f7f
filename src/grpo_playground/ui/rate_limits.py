"""Requests per client address over time: a token bucket per visitor for page loads and one for queue joins (issue 38).

    RateLimits     # ASGI middleware: GET/HEAD of the page, /config and /gradio_api/info; POST /gradio_api/queue/join

Measured through the app's HTTP handler (benchmarks/http_load.py): 64 threads from two addresses fetching /config
back to back (answered from page_config.py's cache) or sending one-completion /score requests in new sessions
(refused past fair_queue.py's share) made fifty honest visitors' handler p95 5x its baseline. Answered from a cache or
refused, each request still cost the app its routing, a session and Gradio's parsing of the body, on the cores the
handlers need. Here a visitor (the address request_limits.visitor_of names, as every per-visitor limit does) has a
bucket per budget: `burst` requests at once, refilled at `rate` a second. Past it the request is answered 429 with
Retry-After before Gradio reads it, and REFUSAL_DELAY_S late: a sender that loops on refusals waits for each, so N
connections get at most N refusals a second (and one visitor holds at most request_limits'
MAX_OPEN_REQUESTS_PER_VISITOR requests, held refusals included).

The owner is not locked out by their own address's budget: a join over budget whose event carries the right owner
token goes in (`owner_join`, which counts wrong tokens with the queue's guess limit, token_guesses.py, so this path
is no faster oracle for guessing the token).
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from dataclasses import dataclass
from typing import Callable

from grpo_playground.ui.page_config import PAGE_PATHS
from grpo_playground.ui.request_limits import MAX_VISITORS_TRACKED, refuse, visitor_of

JOIN_PATH = "/gradio_api/queue/join"
REFUSAL_DELAY_S = 1.0
OWNER_PEEK_BYTES = 64 * 1024  # a join over budget is read (for the owner token) up to this size, else refused unread


@dataclass(frozen=True)
class Budget:
    what: str  # the requests, as the refusal names them
    burst: int  # requests at once (a full bucket)
    rate: float  # requests a second, sustained


# One browser tab (counted with headless chromium, docs/deploy.md): its load makes 1 page request and ~15 joins, then
# its three timers join ~1.3 times a second, typing in the sandbox up to ~6 a second. A gradio_client makes 2 page
# requests and one join per call. The budgets fit several tabs of one person (or a small group behind one address).
PAGES = Budget("page loads (/, /config, /gradio_api/info)", burst=60, rate=1.0)
JOINS = Budget("events (clicks, timers, scoring requests)", burst=120, rate=8.0)


class Buckets:
    """Each visitor's bucket of one budget: (requests left, as of time.monotonic()), the least recently seen
    first. Past MAX_VISITORS_TRACKED visitors the least recently seen is forgotten: one not seen for burst / rate
    seconds has a full bucket anyway, so memory stays bounded and only a visitor among more than that many active
    addresses (an IPv6 range) may start afresh."""

    def __init__(self, budget: Budget, capacity: int = MAX_VISITORS_TRACKED):
        self.budget, self.capacity = budget, capacity
        self.levels: collections.OrderedDict[str, tuple[float, float]] = collections.OrderedDict()

    def take(self, visitor: str, now: float) -> float:
        """Take one request from the visitor's bucket: 0.0 if it may go, else the seconds until one could."""
        left, when = self.levels.pop(visitor, (float(self.budget.burst), now))
        left = min(float(self.budget.burst), left + (now - when) * self.budget.rate)
        wait = 0.0 if left >= 1 else (1 - left) / self.budget.rate
        self.levels[visitor] = (left - 1 if not wait else left, now)
        if len(self.levels) > self.capacity:
            self.levels.popitem(last=False)
        return wait


class RateLimits:
    """ASGI middleware: each visitor's page loads and queue joins within their budgets (see the module's doc).
    `owner_join(visitor, body)`: whether a join's body carries the right owner token (None: no exemption)."""

    def __init__(self, app, owner_join: Callable[[str, bytes], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.app, self.owner_join, self.clock = app, owner_join, clock
        self.pages, self.joins = Buckets(PAGES), Buckets(JOINS)

    async def __call__(self, scope, receive, send):
        buckets = self._buckets(scope)
        if buckets is None:
            return await self.app(scope, receive, send)
        visitor = visitor_of(scope)
        wait = buckets.take(visitor, self.clock())
        if not wait:
            return await self.app(scope, receive, send)
        body = b"" if buckets is self.pages else await _small_body(receive, scope)  # a join's, if small
        if body and self.owner_join is not None and self.owner_join(visitor, body):
            return await self.app(scope, _replay(body, receive), send)
        await asyncio.sleep(REFUSAL_DELAY_S)
        budget = buckets.budget
        retry = max(1, math.ceil(wait - REFUSAL_DELAY_S))
        # A connection whose request was read whole is kept alive (a looping sender does not cost the app a new
        # connection each time); one with a body left unread is closed, so the rest is never read.
        headers = [(b"retry-after", str(retry).encode())] + ([(b"connection", b"close")] if body is None else [])
        await refuse(send, 429, f"too many {budget.what} from your address: at most {budget.burst} at once and "
                                f"{budget.rate:g} a second; try again in {retry} s", headers)

    def _buckets(self, scope) -> Buckets | None:
        if scope["type"] != "http":
            return None
        if scope["method"] in ("GET", "HEAD") and scope["path"] in PAGE_PATHS:
            return self.pages
        if scope["method"] == "POST" and scope["path"].rstrip("/") == JOIN_PATH:
            return self.joins
        return None


async def _small_body(receive, scope) -> bytes | None:
    """The request's body if it declares at most OWNER_PEEK_BYTES and brings no more, else None."""
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if not declared.isdigit() or int(declared) > OWNER_PEEK_BYTES:
        return None
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > OWNER_PEEK_BYTES:
            return None
        if not message.get("more_body"):
            return body


def _replay(body: bytes, receive):
    """A `receive` that hands the app the body already read, then the client's own messages (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed():
        return pending.pop() if pending else await receive()

    return replayed
