"""Issue 38's cheap floods, bounded per client address (ui/rate_limits.py): page loads and queue joins from one
address get 429 once its burst is spent while another address is served, an honest browser tab's requests never do,
the owner's token events still go in, and many addresses keep the limiter's memory bounded.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_rate_limits.py
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid

import httpx
import pytest

from grpo_playground.owner import OWNER_TOKEN_ENV
from grpo_playground.ui import rate_limits
from grpo_playground.ui.rate_limits import JOINS, PAGES, RateLimits
from grpo_playground.ui.request_limits import MAX_VISITORS_TRACKED

OWNER = "the-owner-token-of-this-test-0123456789"


def address() -> str:
    """A visitor of its own (uvicorn reads X-Forwarded-For from 127.0.0.1, as from a proxy)."""
    return f"10.38.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"


def served_limiter(demo, url: str) -> RateLimits:
    """The RateLimits instance in the served app's middleware stack (built by its first request)."""
    httpx.get(f"{url}no-such-page", timeout=30)
    layer = demo.server_app.middleware_stack
    while not isinstance(layer, RateLimits):
        layer = layer.app
    return layer


def join_body(fn_index: int, data: list | None = None) -> dict:
    return {"data": data or [], "fn_index": fn_index, "session_hash": uuid.uuid4().hex}


def flood_until_refused(send, most: int) -> tuple[int, httpx.Response]:
    """Call send() until it answers 429 or `most` times: (requests sent, the last answer)."""
    for sent in range(1, most + 1):
        answer = send()
        if answer.status_code == 429:
            return sent, answer
    return most, answer


@pytest.mark.parametrize("budget", ["pages", "joins"])
def test_a_flood_from_one_address_is_refused_quickly_while_another_is_served(app_url, budget):
    # Before: 64 threads from two addresses fetching /config (or sending one-completion /score requests) back to
    # back were all answered: fifty honest visitors' handler p95 rose to 5x its baseline (results/http_load.md).
    import app

    flooder, other = address(), address()
    limit = PAGES if budget == "pages" else JOINS
    fn_index = next(i for i, fn in app.demo.fns.items() if fn.api_name == "score")
    with httpx.Client(timeout=30) as http:
        def send(visitor: str) -> httpx.Response:
            if budget == "pages":
                return http.get(f"{app_url}config", headers={"X-Forwarded-For": visitor})
            # a join without an event: refused by Gradio's validation (422), so the flood costs the test little
            return http.post(f"{app_url}gradio_api/queue/join", json={}, headers={"X-Forwarded-For": visitor})

        start = time.monotonic()
        sent, refused = flood_until_refused(lambda: send(flooder), 4 * limit.burst)
        elapsed = time.monotonic() - start
        assert refused.status_code == 429, f"{sent} requests from one address, none refused"
        assert sent <= limit.burst + limit.rate * elapsed + 2  # the burst, and what its rate refilled meanwhile
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.headers["content-type"].startswith("text/plain") and "from your address" in refused.text
        # another address is served normally, the page and a real scoring event
        assert http.get(f"{app_url}config", headers={"X-Forwarded-For": other}).status_code == 200
        scored = http.post(f"{app_url}gradio_api/queue/join", headers={"X-Forwarded-For": other},
                           json=join_body(fn_index, [None] * len(app.demo.fns[fn_index].inputs)))
        assert scored.status_code == 200 and "event_id" in scored.json()


def test_the_owners_token_events_go_in_over_their_address_budget(app_url, monkeypatch):
    # The owner shares the limit of their address, but an event that carries the right owner token (Stop, Start)
    # is never refused for it; a wrong token is, and counts as a guess (token_guesses.py).
    import app

    monkeypatch.setenv(OWNER_TOKEN_ENV, OWNER)
    monkeypatch.setattr(rate_limits, "REFUSAL_DELAY_S", 0)
    joins = served_limiter(app.demo, app_url).joins  # refilled at one event an hour: what is spent stays spent
    monkeypatch.setattr(joins, "budget", dataclasses.replace(JOINS, rate=1 / 3600))
    fn_index = next(i for i, fn in app.demo.fns.items() if fn.api_name == "stop")
    owner = address()
    with httpx.Client(timeout=30) as http:
        def stop(token: str) -> httpx.Response:
            return http.post(f"{app_url}gradio_api/queue/join", headers={"X-Forwarded-For": owner},
                             json=join_body(fn_index, ["20990101-000000-none-beef", token]))

        def drain():
            assert flood_until_refused(lambda: stop(""), 4 * JOINS.burst)[1].status_code == 429

        drain()
        assert [stop(OWNER).status_code for _ in range(12)].count(429) == 0
        drain()
        wrong = stop("a-wrong-guess-of-the-token")
        assert wrong.status_code == 429 and "from your address" in wrong.text
    assert len(app.demo.token_guesses._wrong[owner]) == 1  # the wrong one counted as a guess


# --- the middleware alone, on a clock the test moves -----------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(monkeypatch) -> tuple[RateLimits, Clock]:
    monkeypatch.setattr(rate_limits, "REFUSAL_DELAY_S", 0)

    async def served(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    clock = Clock()
    return RateLimits(served, clock=clock), clock


def status(limits: RateLimits, method: str, path: str, visitor: str) -> int:
    scope = {"type": "http", "method": method, "path": path, "headers": [], "client": (visitor, 4000)}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    call = limits(scope, receive, send)  # nothing in it waits (no refusal delay): run it without an event loop
    with contextlib.suppress(StopIteration):
        while True:
            call.send(None)
    return sent[0]["status"]


# One browser tab of the app as headless chromium sent it (its request log, counted as docs/deploy.md says): a load is
# one GET / and 11 joins within a second; clicking through the five tabs, 49 joins in 12 s (37 in its first second);
# typing a line into the sandbox, 26 joins in 20 s; an idle page, none. Its three timers joining every 2, 2 and 3 s
# (1.33 joins a second) are more than a tab sends now: only the shown tab's timers tick (the Training tab's: 0.5 a
# second; the Evaluate tab's two: 0.83).
def polling_tab(start: float, seconds: int) -> list[tuple[float, str]]:
    events = [(start, "page")] + [(start + i / 11, "join") for i in range(11)]
    for period in (2.0, 2.0, 3.0):
        events += [(start + 1 + k * period, "join") for k in range(int(seconds / period))]
    return events


def busy_minute(start: float) -> list[tuple[float, str]]:
    """A person's minute in one tab: reload it, click through its tabs, type a line."""
    events = [(start, "page")] + [(start + i / 11, "join") for i in range(11)]
    events += [(start + 2 + i / 37, "join") for i in range(37)] + [(start + 3 + i, "join") for i in range(12)]
    return events + [(start + 20 + i * 20 / 26, "join") for i in range(26)]


def test_an_honest_browser_tab_is_never_refused(monkeypatch):
    # Four tabs of one person at one address for ten minutes, each following a run, an evaluation and a comparison,
    # the person reloading one of them, clicking through it and typing each minute; and a gradio_client (2 page
    # requests) started beside each. None may be refused.
    limits, clock = limiter(monkeypatch)
    events = [e for tab in range(4) for e in polling_tab(1000.0 + tab * 7, 600)]
    events += [e for minute in range(10) for e in busy_minute(1030.0 + 60 * minute)]
    events += [(1000.0 + i / 2, "page") for i in range(8)]
    refused = []
    for at, kind in sorted(events):
        clock.now = at
        method, path = ("GET", "/") if kind == "page" else ("POST", "/gradio_api/queue/join")
        if status(limits, method, path, "198.51.100.7") != 200:
            refused.append((at, kind))
    assert not refused, f"{len(refused)} of {len(events)} honest requests refused, the first at {refused[:3]}"


def test_the_limiters_memory_is_bounded_under_many_addresses(monkeypatch):
    # Before there was no limit (nothing to remember); a limiter keyed by address must not grow with every address
    # an IPv6 range or a botnet brings, nor forget a flooder that keeps sending among them.
    limits, clock = limiter(monkeypatch)
    flooder = "203.0.113.66"
    while status(limits, "GET", "/config", flooder) == 200:
        pass
    for i in range(5 * MAX_VISITORS_TRACKED):
        clock.now += 0.00001  # all within a fraction of a refill
        assert status(limits, "GET", "/config", f"2001:db8::{i:x}") == 200  # each new address: its own burst
        if i % 100 == 0:
            assert status(limits, "GET", "/config", flooder) == 429  # still refused among them
    assert len(limits.pages.levels) <= MAX_VISITORS_TRACKED
    assert len(limits.joins.levels) == 0
    clock.now += PAGES.burst / PAGES.rate  # refilled once it stops
    assert status(limits, "GET", "/config", flooder) == 200
