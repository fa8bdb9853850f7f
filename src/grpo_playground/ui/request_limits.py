"""What one HTTP request, one visitor and one socket may hold, counted on what arrives (issue 38).

    RequestLimits              # ASGI middleware: every route's body counted as it streams, uploads per visitor
    guard_connections(server)  # uvicorn sockets: a deadline for a request's head, a bound per client address
    sweep_uploads(folder)      # uploads past their lifetime deleted, also those an unclean stop left behind

Round 2 read the declared Content-Length; a request with `Transfer-Encoding: chunked` (and a small, lying
Content-Length) is framed by its chunks, so one upload request stored 300 files and a /queue/join body of 200 MB
was read into memory. Here the body's bytes are counted as the server hands them over, and past the route's limit
the request is answered 413 and its connection closed: the rest is never read. Gradio serves its dev-mode reload
stream (polled every 50 ms in the event loop) in production, and uvicorn, as Gradio starts it, has no deadline
for a request's head nor a bound on one client's sockets: 3,000 idle streams made /score 70x slower.
"""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path

DELETE_CACHE = (60, 600)  # every minute, temp files (uploads included) older than 10 minutes are deleted
UPLOAD_LIFETIME_S = DELETE_CACHE[1]
UPLOAD_PATH = "/gradio_api/upload"
MAX_UPLOAD_BYTES = 1_000_000  # one file: a completions file (1 MB) or a recipe (256 KiB), refused while arriving
MAX_UPLOAD_BODY_BYTES = MAX_UPLOAD_BYTES + 64 * 1024  # one upload request: one such file and its multipart headers
MAX_FILES_PER_UPLOAD = 1  # the app's upload boxes take one file each; 1 MB of empty parts would be ~5,000 files
MAX_UPLOADS_BYTES = 256 * 1024 * 1024  # everyone's temp uploads together
MAX_UPLOADS_FILES = 2_000
# One visitor's uploads within a file's lifetime: one stranger fills at most an eighth of the space (by bytes)
# or a twentieth (by files), so filling it takes many addresses.
MAX_VISITOR_UPLOAD_BYTES = MAX_UPLOADS_BYTES // 8
MAX_VISITOR_UPLOADS = MAX_UPLOADS_FILES // 20
MAX_VISITORS_TRACKED = 4_096
# Any other request: the largest is a 200,000-character paste, which JSON-escaped (\uXXXX) stays under 3 MB.
MAX_BODY_BYTES = 3 * 1024 * 1024
# Requests of one visitor in flight at once: a page holds a few streams (heartbeat, queue data) and an event or
# two; a classroom behind one address shares it.
MAX_OPEN_REQUESTS_PER_VISITOR = 128
MAX_SOCKETS_PER_ADDRESS = 256  # open sockets of one client address (not a trusted proxy's: see guard_connections)
HEAD_TIMEOUT_S = 10  # a new connection must finish its first request's head (line and headers) within this
# Gradio's dev mode (`gradio app.py` reloading) and its vibe editor: nothing a deployed app serves.
DEV_ROUTES = ("/gradio_api/dev/", "/gradio_api/vibe-edit", "/gradio_api/undo-vibe-edit")
# Gradio's video-recording route (audio/video inputs, which the app has none of): it ran outside the queue and
# echoed up to 1 MB a request back.
UNUSED_ROUTES = ("/gradio_api/process_recording",)
SPACE_ENV = "SPACE_ID"


def visitor_of(scope) -> str:
    """Whom a request counts against. On a Space every socket is the Space's proxy: the visitor is the address
    that proxy appended last to X-Forwarded-For (earlier entries are the client's own, free to forge). Elsewhere
    the client address as uvicorn gives it (it reads X-Forwarded-For only from FORWARDED_ALLOW_IPS)."""
    forwarded = dict(scope["headers"]).get(b"x-forwarded-for", b"").decode("latin-1")
    client = scope.get("client")
    return _visitor(forwarded, client[0] if client else None)


def visitor_of_request(request) -> str:
    """visitor_of for a handler's gr.Request (None when a handler is called directly, not through the app)."""
    if request is None:
        return "unknown"
    client = getattr(request, "client", None)
    return _visitor(request.headers.get("x-forwarded-for", ""), getattr(client, "host", None))


def _visitor(forwarded: str, client: str | None) -> str:
    if os.environ.get(SPACE_ENV) and forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return client or "unknown"


def sweep_uploads(folder: Path, kept=frozenset(), max_age_s: float = UPLOAD_LIFETIME_S) -> tuple[int, int]:
    """Delete files under `folder` older than `max_age_s`, but those in `kept` (Gradio's own sweep knows only the
    files of the app that received them: those of an app that was killed stayed forever), and empty folders;
    return (bytes, files) left."""
    size = files = 0
    oldest = time.time() - max_age_s
    for root, dirs, names in os.walk(folder, topdown=False):
        left = len(dirs)
        for name in names:
            path = os.path.join(root, name)
            try:
                stat = os.lstat(path)
                if stat.st_mtime < oldest and path not in kept:
                    os.unlink(path)
                    continue
            except FileNotFoundError:
                continue  # deleted meanwhile (Gradio's sweep)
            size += stat.st_size
            files += 1
            left += 1
        if names and not left and root != str(folder):
            try:
                os.rmdir(root)  # the folder Gradio made for those files, now empty
            except OSError:
                pass  # a file or folder arrived meanwhile
    return size, files


class UploadLedger:
    """Each visitor's uploads while their files live: [time, bytes] entries, reserved when an upload request
    starts (so parallel requests count) and settled to the bytes that arrived when it ends."""

    def __init__(self):
        self.entries: dict[str, collections.deque[list]] = {}

    def usage(self, visitor: str) -> tuple[int, int]:
        entries = self.entries.get(visitor)
        if entries is None:
            return 0, 0
        while entries and entries[0][0] < time.monotonic() - UPLOAD_LIFETIME_S:
            entries.popleft()
        if not entries:
            del self.entries[visitor]
            return 0, 0
        return sum(size for _, size in entries), len(entries)

    def reserve(self, visitor: str, size: int) -> list:
        if len(self.entries) > MAX_VISITORS_TRACKED:  # many addresses (an IPv6 range): forget the expired ones
            for gone in list(self.entries):
                self.usage(gone)
        entry = [time.monotonic(), size]
        self.entries.setdefault(visitor, collections.deque()).append(entry)
        return entry


class CountedBody:
    """The request's `receive` and `send`, counting the body as it arrives. Past `limit` bytes (or, for an upload,
    past MAX_FILES_PER_UPLOAD files), the client gets 413 with `Connection: close`, the app sees the client
    disconnect, and nothing more is read."""

    def __init__(self, receive, send, limit: int, boundary: bytes | None):
        self._receive, self._send, self.limit = receive, send, limit
        self.delimiter = b"--" + boundary if boundary else None
        self.received = self.parts = 0
        self._tail = b""
        self.cut = self.started = False

    async def receive(self):
        if self.cut:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        chunk = message.get("body", b"")
        self.received += len(chunk)
        problem = None
        if self.received > self.limit:
            problem = f"the body passed {self.limit:,} bytes (upload one file of at most {MAX_UPLOAD_BYTES:,} bytes)"
        elif self.delimiter and self._count_parts(chunk) > MAX_FILES_PER_UPLOAD:
            problem = f"upload one file a request (at most {MAX_FILES_PER_UPLOAD})"
        if problem is None:
            return message
        self.cut = True
        if not self.started:
            await refuse(self._send, 413, f"request refused while arriving: {problem}")
        return {"type": "http.disconnect"}

    def _count_parts(self, chunk: bytes) -> int:
        """Multipart parts so far: the boundary delimiters seen, less the closing one (never inside a part)."""
        data = self._tail + chunk
        self.parts += data.count(self.delimiter)
        self._tail = data[-(len(self.delimiter) - 1):]
        return self.parts - 1

    async def send(self, message):
        if self.cut:
            return  # the client has its 413 and the connection is closing
        self.started = True
        await self._send(message)


async def refuse(send, status: int, message: str, headers=((b"connection", b"close"),)) -> None:
    """A plain-text refusal; by default the connection is closed (the body left unread is not worth reading)."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *headers]})
    await send({"type": "http.response.body", "body": message.encode()})


def _boundary(headers: dict) -> bytes | None:
    kind = headers.get(b"content-type", b"")
    if not kind.startswith(b"multipart/"):
        return None
    for param in kind.split(b";")[1:]:
        key, _, value = param.strip().partition(b"=")
        if key.lower() == b"boundary" and value.strip(b'"'):
            return value.strip(b'"')
    return None


class RequestLimits:
    """ASGI middleware in front of every route: dev routes answer 404; a visitor has at most
    MAX_OPEN_REQUESTS_PER_VISITOR requests in flight; a body is refused by its declared length when that is over
    the route's limit and cut while arriving when its bytes pass it; an upload must fit the visitor's share and
    the space everyone's uploads may hold together."""

    def __init__(self, app, upload_dir: str, kept=set):
        self.app = app
        self.upload_dir = Path(upload_dir)
        self.kept = kept
        self.open_requests: collections.Counter[str] = collections.Counter()
        self.uploads = UploadLedger()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        visitor = visitor_of(scope)
        upload = scope["path"].rstrip("/").endswith(UPLOAD_PATH)
        headers = dict(scope["headers"])
        refusal = self._refusal(scope["path"], headers, visitor, upload)
        if refusal:
            return await refuse(send, *refusal)
        body = CountedBody(receive, send, MAX_UPLOAD_BODY_BYTES if upload else MAX_BODY_BYTES,
                           _boundary(headers) if upload else None)
        entry = self.uploads.reserve(visitor, self._declared(headers) or body.limit) if upload else None
        self.open_requests[visitor] += 1
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if not body.cut:
                raise  # the app's own failure; a cut body's ClientDisconnect is expected
        finally:
            self.open_requests[visitor] -= 1
            if not self.open_requests[visitor]:
                del self.open_requests[visitor]
            if entry is not None:
                entry[1] = body.received

    @staticmethod
    def _declared(headers: dict) -> int | None:
        declared = headers.get(b"content-length")
        return int(declared) if declared is not None and declared.strip().isdigit() else None

    def _refusal(self, path: str, headers: dict, visitor: str, upload: bool) -> tuple[int, str] | None:
        if any(path.startswith(route) or path.rstrip("/") == route.rstrip("/") for route in DEV_ROUTES + UNUSED_ROUTES):
            return 404, "Not Found"
        if self.open_requests[visitor] >= MAX_OPEN_REQUESTS_PER_VISITOR:
            return 429, f"{MAX_OPEN_REQUESTS_PER_VISITOR} requests from your address are open: close some first"
        if headers.get(b"content-length") is not None and self._declared(headers) is None:
            return 400, "Content-Length is not a number"
        length = self._declared(headers) or 0
        limit = MAX_UPLOAD_BODY_BYTES if upload else MAX_BODY_BYTES
        if length > limit:
            what = "an upload request" if upload else "a request"
            return 413, (f"{what} of {length:,} bytes: the limit is {limit:,} "
                         f"(upload one file of at most {MAX_UPLOAD_BYTES:,} bytes)")
        if not upload:
            return None
        mine, count = self.uploads.usage(visitor)
        if count >= MAX_VISITOR_UPLOADS or mine + max(length, 1) > MAX_VISITOR_UPLOAD_BYTES:
            return 429, (f"your address uploaded {count} files ({mine:,} bytes) in the last "
                         f"{UPLOAD_LIFETIME_S // 60} minutes: the limit is {MAX_VISITOR_UPLOADS} files and "
                         f"{MAX_VISITOR_UPLOAD_BYTES:,} bytes; try again when the oldest are deleted")
        used, files = sweep_uploads(self.upload_dir, self.kept())
        if used + length > MAX_UPLOADS_BYTES or files >= MAX_UPLOADS_FILES:
            return 507, "the server's upload space is full: try again in a few minutes (old uploads are deleted)"
        return None


def guard_connections(server) -> None:
    """Give Gradio's uvicorn server (demo.server, once launched) a deadline for each connection's first request
    head and a bound on one address's open sockets. Gradio builds uvicorn's Config itself and exposes none of it;
    uvicorn looks up `config.http_protocol_class` for every new connection, so a subclass set here applies to
    each one accepted from now on. Addresses uvicorn trusts as proxies (FORWARDED_ALLOW_IPS) and, on a Space,
    every address (all sockets are the Space's proxy) are not bounded per socket: their visitors are bounded
    per request by RequestLimits."""
    from uvicorn.middleware.proxy_headers import _TrustedHosts

    config = server.config
    base = config.http_protocol_class
    if getattr(base, "guarded", False):
        return
    trusted = _TrustedHosts(config.forwarded_allow_ips)
    open_sockets: collections.Counter[str] = collections.Counter()

    class GuardedProtocol(base):
        guarded = True
        counted: str | None = None
        head_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            address = self.client[0] if self.client else None
            if address is not None and address not in trusted and not os.environ.get(SPACE_ENV):
                if open_sockets[address] >= MAX_SOCKETS_PER_ADDRESS:
                    transport.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                                    b"Content-Length: 0\r\n\r\n")
                    transport.close()
                    return
                open_sockets[address] += 1
                self.counted = address
            self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self.head_overdue)

        def head_overdue(self):
            if self.cycle is None:  # no request's head finished since the connection opened
                self.transport.close()

        def connection_lost(self, exc):
            if self.head_timer is not None:
                self.head_timer.cancel()
            if self.counted is not None:
                open_sockets[self.counted] -= 1
                if not open_sockets[self.counted]:
                    del open_sockets[self.counted]
                self.counted = None
            super().connection_lost(exc)

    config.http_protocol_class = GuardedProtocol
