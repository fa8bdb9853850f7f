"""Issue 38's attacks on what one request, one visitor and one socket may hold, sent over real sockets to the running
app: bodies framed by chunks (with and without a lying Content-Length), Gradio's dev routes, idle sockets and
streams, one stranger's uploads, and the uploads of an app that was killed.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_request_limits.py
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import gradio as gr
import httpx
import pytest
from gradio.utils import get_upload_folder

from grpo_playground.ui import request_limits
from grpo_playground.ui.public_limits import serve
from grpo_playground.ui.request_limits import MAX_BODY_BYTES, MAX_OPEN_REQUESTS_PER_VISITOR, MAX_UPLOAD_BODY_BYTES

PART = 900_000  # one file part, under the 1 MB a file may have


def connect(url: str) -> socket.socket:
    address = urlparse(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # what the server reads, not what buffers hold
    return sock


def send_chunked(url: str, path: str, head: str, pieces, limit_s: float = 60) -> tuple[int, str]:
    """POST `pieces` as HTTP chunks; return (bytes the server took before it closed, its status line)."""
    sent = 0
    with connect(url) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n{head}\r\n".encode())
        deadline = time.monotonic() + limit_s
        try:
            for piece in pieces:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
                assert time.monotonic() < deadline
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: what it answered is already in our receive buffer
        try:
            reply = sock.recv(4096).decode(errors="replace")
        except ConnectionResetError:
            reply = ""
    return sent, (reply.splitlines() or [""])[0]


def stored(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def multipart(boundary: str, files: int):
    """An upload body of `files` parts of PART bytes each, yielded in 64 KiB pieces as a client streams it."""
    for i in range(files):
        yield (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"f{i}.csv\"\r\n"
               "Content-Type: text/csv\r\n\r\n").encode()
        for _ in range(PART // 60_000):
            yield b"x" * 60_000
        yield b"\r\n"
    yield f"--{boundary}--\r\n".encode()


@pytest.mark.parametrize("lying_length", [True, False], ids=["with-content-length-100", "chunked-only"])
def test_a_chunked_upload_is_cut_at_the_limit(app_url, lying_length):
    # Before: `Content-Length: 100` with `Transfer-Encoding: chunked` passed the declared-length check and the
    # chunks were read: one request stored 300 files / 289 MB. Here 20 files of 0.9 MB are sent.
    folder = Path(get_upload_folder())
    folder.mkdir(parents=True, exist_ok=True)
    before = stored(folder)
    boundary = uuid.uuid4().hex
    head = f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
    sent, status = send_chunked(app_url, "/gradio_api/upload", head + ("Content-Length: 100\r\n" * lying_length),
                                multipart(boundary, 20))
    assert " 413 " in status, status
    assert stored(folder) - before <= MAX_UPLOAD_BODY_BYTES  # before: 18 MB
    assert sent < 8 * PART, f"the server read {sent:,} bytes of an upload limited to {MAX_UPLOAD_BODY_BYTES:,}"


def test_a_chunked_queue_join_body_is_cut_at_the_limit(app_url):
    # Before: a 200 MB /queue/join body was read into the app's memory (212 -> 846 MB), a lying length or not.
    body = (b"x" * 1_000_000 for _ in range(64))
    sent, status = send_chunked(app_url, "/gradio_api/queue/join", "Content-Type: application/json\r\n"
                                "Content-Length: 100\r\n", body)
    assert " 413 " in status, status
    assert sent < 4 * MAX_BODY_BYTES, f"the server read {sent:,} bytes of a body limited to {MAX_BODY_BYTES:,}"


def test_gradios_dev_routes_are_not_served(app_url):
    # Before: /gradio_api/dev/reload answered 200 with a stream polled every 50 ms in the event loop; 3,000 of
    # them made /score 70x slower.
    for path in ("gradio_api/dev/reload", "gradio_api/dev/reload/", "gradio_api/vibe-edit"):
        with httpx.stream("GET" if "dev" in path else "POST", f"{app_url}{path}", timeout=10) as reply:
            assert reply.status_code == 404, path


def test_the_recording_route_is_not_served(app_url):
    # Before: /process_recording (Gradio's, for audio and video inputs the app does not have) ran outside the queue
    # and answered 200, echoing the 1 MB "video" it was sent.
    video = {"video": ("clip.webm", b"\0" * 1_000_000, "video/webm")}
    reply = httpx.post(f"{app_url}gradio_api/process_recording", files=video, timeout=30)
    assert reply.status_code == 404 and len(reply.content) < 1_000


def test_one_address_holds_a_bounded_number_of_open_requests(app_url):
    # Before: every stream stayed open (1,000 from one client made /score 4x slower). Streams are opened until one
    # is refused: other tests' clients may hold a few of this address's requests.
    socks, status = [], b""
    try:
        while len(socks) <= MAX_OPEN_REQUESTS_PER_VISITOR:
            sock = connect(app_url)
            sock.sendall(f"GET /gradio_api/heartbeat/{uuid.uuid4().hex} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            socks.append(sock)
            status = sock.recv(4096)
            if b" 200 " not in status.split(b"\r\n")[0]:
                break
        while b"requests from your address" not in status and (more := socks[-1].recv(4096)):
            status += more  # the refusal's body, after its head
        assert b" 429 " in status and b"requests from your address are open" in status, status[:200]
        assert MAX_OPEN_REQUESTS_PER_VISITOR - 16 < len(socks) <= MAX_OPEN_REQUESTS_PER_VISITOR + 1
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + 10
    while httpx.get(f"{app_url}config", timeout=10).status_code != 200:  # freed as the streams notice
        assert time.monotonic() < deadline
        time.sleep(0.2)


@pytest.fixture
def small_app(monkeypatch):
    """A one-box app served as the real one is, with 127.0.0.1 not trusted as a proxy (as a remote client is not)."""
    from grpo_playground.child_process import free_port

    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "192.0.2.1")  # uvicorn reads it when Gradio builds its Config
    with gr.Blocks() as demo:
        gr.File()
    port = free_port()
    serve(demo, server_name="127.0.0.1", server_port=port, quiet=True)
    yield demo, f"http://127.0.0.1:{port}/"
    demo.close()


def test_a_connection_that_never_finishes_its_head_is_closed(small_app, monkeypatch):
    # Before: 3,000 sockets that sent a partial request head stayed open, each holding the server's memory.
    monkeypatch.setattr(request_limits, "HEAD_TIMEOUT_S", 1)
    _, url = small_app
    with connect(url) as sock:
        sock.sendall(b"GET /config HTTP/1.1\r\nHost: x\r\n")  # no blank line: the head never ends
        start = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the server
        assert time.monotonic() - start < 5
    assert httpx.get(f"{url}config", timeout=10).status_code == 200  # a whole request still gets through


def test_one_address_holds_a_bounded_number_of_sockets(small_app, monkeypatch):
    monkeypatch.setattr(request_limits, "MAX_SOCKETS_PER_ADDRESS", 8)
    _, url = small_app
    idle = [connect(url) for _ in range(8)]
    try:
        time.sleep(0.3)
        with connect(url) as ninth:
            assert ninth.recv(4096).startswith(b"HTTP/1.1 503")
            assert ninth.recv(4096) == b""
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the count follows the closed sockets
        try:
            assert httpx.get(f"{url}config", timeout=10).status_code == 200
            break
        except (httpx.HTTPError, AssertionError):
            assert time.monotonic() < deadline
            time.sleep(0.2)


def upload(url: str, visitor: str, name: str = "a.csv") -> httpx.Response:
    return httpx.post(f"{url}gradio_api/upload", files=[("files", (name, b"completion\nx\n"))], timeout=30,
                      headers={"X-Forwarded-For": visitor})


def test_one_stranger_cannot_lock_uploads_for_everyone(app_url, monkeypatch):
    # Before: ~2,000 one-line uploads from one stranger filled the shared quota: every visitor got 507 for ~10
    # minutes. On a Space the visitor is the address the Space's proxy appended to X-Forwarded-For.
    monkeypatch.setenv("SPACE_ID", "someone/grpo-playground")
    monkeypatch.setattr(request_limits, "MAX_VISITOR_UPLOADS", 5)
    stranger = f"203.0.113.{uuid.uuid4().int % 200}"
    replies = [upload(app_url, stranger).status_code for _ in range(5)]
    assert replies == [200] * 5
    refused = upload(app_url, stranger)
    assert refused.status_code == 429 and "the limit is 5 files" in refused.text
    forged = upload(app_url, f"198.51.100.9, {stranger}")  # a forged first entry changes nothing
    assert forged.status_code == 429
    assert upload(app_url, "198.51.100.10").status_code == 200  # everyone else still uploads


def test_uploads_an_unclean_stop_left_are_deleted_at_start(monkeypatch):
    # Before: uploads received by an app that was then killed were never deleted (still 507 after 27 minutes).
    from grpo_playground.child_process import free_port

    folder = Path(get_upload_folder()) / uuid.uuid4().hex
    folder.mkdir(parents=True)
    old, fresh = folder / "old.csv", folder / "fresh.csv"
    old.write_text("completion\nx\n")
    fresh.write_text("completion\nx\n")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    default = Path(get_upload_folder()) / "default-value.txt"  # a component's value, which Gradio keeps
    default.write_text("kept")
    with gr.Blocks() as demo:
        shown = gr.File(value=str(default))
    kept = next(iter(shown.keep_in_cache))
    os.utime(kept, (an_hour_ago, an_hour_ago))
    port = free_port()
    serve(demo, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        assert not old.exists() and fresh.exists() and Path(kept).exists()
        time.sleep(0.01)
        os.utime(fresh, (an_hour_ago, an_hour_ago))  # it ages while the app runs: the next upload sweeps it
        reply = httpx.post(f"http://127.0.0.1:{port}/gradio_api/upload", timeout=30,
                           files=[("files", ("new.csv", b"completion\nx\n"))])
        assert reply.status_code == 200 and Path(json.loads(reply.text)[0]).exists()
        assert not fresh.exists() and not folder.exists() and Path(kept).exists()
    finally:
        demo.close()
        default.unlink(missing_ok=True)
