"""The page and its config, built once per address the page is reached at, not once per request.

    PageConfigCache        # ASGI middleware in front of GET and HEAD of PAGE_PATHS

Gradio answers every GET /config (and /, which embeds the same config, and /gradio_api/info) by deep-copying the
whole page's config (0.45 MB here) and rewriting its URLs, ~50 ms of CPU, in the thread pool that also runs the
event handlers. Measured through the app's HTTP handler (benchmarks/http_load.py, issue 38): 64 threads fetching
/config from two addresses took every thread, and fifty honest visitors' scoring requests waited 131 s (median) for
one. These answers are fixed once the app is launched (blocks.config; the app has no login, so no user name in
them): they depend only on the address the page is reached at (Host, X-Forwarded-Host and -Proto, the mount path)
and the query. Each is built once, by Gradio, compressed once (gzip, when the client takes it: Gradio's Brotli
middleware, outside this one, passes an encoded answer as it is instead of compressing 0.45 MB again each time)
and replayed byte for byte; a visitor has one build at a time, and at most BUILDS_AT_ONCE run in all (the others
wait without a thread).
"""

from __future__ import annotations

import asyncio
import collections
import gzip

from grpo_playground.ui.request_limits import visitor_of

PAGE_PATHS = frozenset({"/", "/config", "/config/", "/gradio_api/info", "/gradio_api/info/"})
BUILDS_AT_ONCE = 2
MAX_ANSWERS = 64  # distinct addresses the page is reached at (a Space: one or two); past it, the oldest is dropped
_KEY_HEADERS = (b"host", b"x-forwarded-host", b"x-forwarded-proto")


class PageConfigCache:
    def __init__(self, app):
        self.app = app
        self.answers: collections.OrderedDict[tuple, list[dict]] = collections.OrderedDict()
        self.builds = asyncio.Semaphore(BUILDS_AT_ONCE)
        self.building: dict[str, list] = {}  # visitor -> [their one build at a time, requests waiting on it]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or scope["path"] not in PAGE_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        key = (scope["method"], scope["path"], scope.get("query_string", b""), scope.get("root_path", ""),
               scope.get("scheme"), b"gzip" in headers.get(b"accept-encoding", b""),
               *(headers.get(name) for name in _KEY_HEADERS))
        if key not in self.answers:
            visitor = visitor_of(scope)
            entry = self.building.setdefault(visitor, [asyncio.Lock(), 0])
            entry[1] += 1
            try:
                async with entry[0], self.builds:
                    if key not in self.answers:  # else built meanwhile by an earlier request
                        return await self._build(key, scope, receive, send)
            finally:
                entry[1] -= 1
                if not entry[1]:
                    del self.building[visitor]
        for message in self.answers[key]:
            await send(message)

    async def _build(self, key, scope, receive, send) -> None:
        """Gradio's answer, kept if it is a complete 200 (compressed when the client takes gzip), then sent."""
        messages = []

        async def keep(message):
            messages.append(message)

        await self.app(scope, receive, keep)
        start, body = messages[0], b"".join(m.get("body", b"") for m in messages[1:])
        if start.get("status") == 200 and b"content-encoding" not in dict(start["headers"]):
            headers = [(k, v) for k, v in start["headers"] if k != b"content-length"]
            if key[5] and scope["method"] == "GET":  # the client takes gzip
                body = gzip.compress(body, compresslevel=6)
                headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
            length = str(len(body) if scope["method"] == "GET" else dict(start["headers"]).get(b"content-length",
                                                                                                b"0").decode())
            messages = [{**start, "headers": headers + [(b"content-length", length.encode())]},
                        {"type": "http.response.body", "body": body}]
            self.answers[key] = messages
            while len(self.answers) > MAX_ANSWERS:
                self.answers.popitem(last=False)
        for message in messages:
            await send(message)
