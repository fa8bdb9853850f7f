"""Fifty visitors scoring through the app's HTTP handler while one flood at a time runs (issue 38's "Done when").

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.http_load [--seconds 40] [--only NAME ...]

The real app (`python app.py` in a child process, as a Space runs it: an owner token, custom rewards allowed, a data
root with its runs, cache and Gradio temp folders) serves on a free port. Fifty benign clients, each from its own
loopback address (127.0.1.x: each is a visitor of its own, as strangers' addresses are), score a group of 8 honest
completions through `/gradio_api/queue/join` and its event stream, the way the page and gradio_client do, one request
after another for the row's seconds. Each row measures them alone or beside one flood, sent by a second child process
from other addresses (127.0.2.x-127.0.9.x). Per row: the benign requests' end-to-end p50/p95 (join to result) and
the handler's p95 (Gradio's own `duration` of the event), errors (refusals, 503, "busy", timeouts), a one-line upload
by a fresh visitor at the row's end, the machine's load average, the CPU the app, the flood's sender and the benign
clients used (% of one core), and the p95 ratios against the baseline measured first (and again last) in the same
run. Prints a Markdown table; results/http_load.md keeps one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
GOOD = "<start_working_out>6 x 7<end_working_out><SOLUTION>42</SOLUTION>"
BENIGN = 50
TOKEN = "a-long-owner-token-for-the-benchmark-0123456789"
REQUEST_TIMEOUT_S = 30
FLOODS = {  # name: what the flood process sends, over and over, for the row's seconds
    "backtracking": "16 addresses, each a /score group of 64 x 'abb' * 1039 with one-letter tags",
    "small-scores": "64 threads from 2 addresses, each a /score of one completion in a new session, back to back",
    "page-config": "64 threads from 2 addresses, each GET /config (a page load), back to back",
    "chunked-lie": "8 addresses, each a chunked /queue/join (and upload) of 8 MB with Content-Length: 100",
    "half-open": "8 addresses x 300 sockets that never finish their request head, reopened when closed",
    "dev-reload": "64 threads from 2 addresses, each GET /gradio_api/dev/reload (the dev-mode stream)",
    "uploads": "16 addresses x 2 threads, each uploading one-line files back to back",
}


# --- the app ------------------------------------------------------------------------------------------------------

def start_app(data_root: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": str(port),
           "GRPO_PLAYGROUND_OWNER_TOKEN": TOKEN, "GRPO_PLAYGROUND_ALLOW_CUSTOM_REWARD": "1",
           "GRPO_PLAYGROUND_DATA_ROOT": str(data_root), "GRPO_PLAYGROUND_RUNS_DIR": str(data_root / "runs"),
           "GRPO_PLAYGROUND_CACHE": str(data_root / "cache"), "HF_HOME": str(data_root / "hf-home"),
           "GRADIO_TEMP_DIR": str(data_root / "gradio-tmp")}
    log = (data_root / "app.log").open("w")
    app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and app.poll() is None:
        try:
            if httpx.get(f"{url}/config", timeout=5).status_code == 200:
                return app, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    app.kill()
    raise SystemExit(f"the app did not serve within 180 s: see {data_root / 'app.log'}")


class ScoreEvent:
    """The /score event as the page sends it: its fn_index and every input's default from the page's config."""

    def __init__(self, url: str):
        config = httpx.get(f"{url}/config", timeout=30).json()
        values = {c["id"]: c.get("props", {}).get("value") for c in config["components"]}
        dependency = next(d for d in config["dependencies"] if d.get("api_name") == "score")
        self.fn_index = dependency["id"]
        self.defaults = [values.get(i) for i in dependency["inputs"]]

    def data(self, completions: list[str], tags: tuple[str, ...] | None = None) -> list:
        data = list(self.defaults)
        data[0], data[1] = "\n---\n".join(completions), "42"
        if tags:
            data[4:8] = tags  # the four tag boxes follow completions, answer, rewards and scale
        return data


def client(address: str, timeout: float = REQUEST_TIMEOUT_S) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=timeout)


def call(http: httpx.Client, url: str, fn_index: int, data: list, session: str | None = None
         ) -> tuple[str, float | None]:
    """Join the queue in `session` (a page keeps one; a new one each time when None) and follow the event to its
    end: ("ok" or what went wrong, Gradio's handler seconds)."""
    session = session or uuid.uuid4().hex
    joined = http.post(f"{url}/gradio_api/queue/join", json={
        "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None, "trigger_id": None})
    if joined.status_code != 200:
        return f"HTTP {joined.status_code}", None
    with http.stream("GET", f"{url}/gradio_api/queue/data", params={"session_hash": session}) as stream:
        if stream.status_code != 200:
            return f"stream HTTP {stream.status_code}", None
        for line in stream.iter_lines():
            if not line.startswith("data: "):
                continue
            message = json.loads(line[6:])
            if message.get("msg") == "queue_full":
                return "busy", None
            if message.get("msg") == "process_completed":
                output = message.get("output") or {}
                return ("ok" if message.get("success") else "failed"), output.get("duration")
    return "stream ended", None


def upload_once(url: str, address: str) -> str:
    with client(address) as http:
        answer = http.post(f"{url}/gradio_api/upload", files={"files": ("one.csv", b"completion\nabc\n")})
    return "ok" if answer.status_code == 200 else f"HTTP {answer.status_code}"


# --- the benign clients ---------------------------------------------------------------------------------------

def benign_load(url: str, event: ScoreEvent, seconds: float) -> tuple[list[float], list[float], list[str]]:
    """BENIGN clients, each from its own address, scoring back to back for `seconds`: (end-to-end s, handler s,
    errors)."""
    times, handler, errors = [], [], []
    lock = threading.Lock()
    end = time.monotonic() + seconds
    data = event.data([GOOD] * 8)

    def visitor(i: int):
        session = uuid.uuid4().hex  # one page: one session for all its requests
        with client(f"127.0.1.{i + 1}") as http:
            while time.monotonic() < end:
                start = time.monotonic()
                try:
                    outcome, duration = call(http, url, event.fn_index, data, session)
                except httpx.HTTPError as exc:
                    outcome, duration = type(exc).__name__, None
                with lock:
                    if outcome == "ok":
                        times.append(time.monotonic() - start)
                        handler.append(duration)
                    else:
                        errors.append(outcome)
                time.sleep(0.2)  # a person reads the table before the next paste

    threads = [threading.Thread(target=visitor, args=(i,)) for i in range(BENIGN)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times, [d for d in handler if d is not None], errors


# --- the floods (run in their own process: `--flood NAME URL`) -------------------------------------------------

def flood(name: str, url: str) -> None:
    """Send flood `name` until killed, from addresses 127.0.2.x-127.0.9.x."""
    event = ScoreEvent(url)
    backtracking = event.data(["abb" * 1039] * 64, ("s", "a", "b", "c"))
    workers = {"backtracking": lambda: [(_scores, f"127.0.2.{i + 1}", backtracking) for i in range(16)],
               "small-scores": lambda: [(_scores, f"127.0.2.{i % 2 + 1}", event.data([GOOD])) for i in range(64)],
               "page-config": lambda: [(_gets, f"127.0.2.{i % 2 + 1}", "/config") for i in range(64)],
               "chunked-lie": lambda: [(_chunked, f"127.0.2.{i + 1}", i % 2) for i in range(8)],
               "half-open": lambda: [(_half_open, f"127.0.{i + 2}.1", 300) for i in range(8)],
               "dev-reload": lambda: [(_gets, f"127.0.2.{i % 2 + 1}", "/gradio_api/dev/reload") for i in range(64)],
               "uploads": lambda: [(_uploads, f"127.0.2.{i % 16 + 1}", None) for i in range(32)]}[name]()
    for target, address, arg in workers:
        threading.Thread(target=_forever, args=(target, url, address, arg, event), daemon=True).start()
    while True:
        time.sleep(60)


def _forever(target, url, address, arg, event) -> None:
    while True:
        try:
            target(url, address, arg, event)
        except (OSError, httpx.HTTPError):
            time.sleep(0.05)  # refused or cut: what matters is what the flood costs the others


def _scores(url, address, data, event) -> None:
    with client(address, timeout=60) as http:
        while True:
            call(http, url, event.fn_index, data)


def _gets(url, address, path, event) -> None:
    with client(address) as http:
        while True:
            http.get(f"{url}{path}")


def _uploads(url, address, _, event) -> None:
    with client(address) as http:
        while True:
            http.post(f"{url}/gradio_api/upload", files={"files": ("x.csv", b"completion\nx\n")})


def _chunked(url, address, upload, event) -> None:
    host, port = url.removeprefix("http://").split(":")
    path, kind = (("/gradio_api/upload", "multipart/form-data; boundary=b") if upload else
                  ("/gradio_api/queue/join", "application/json"))
    with socket.create_connection((host, int(port)), source_address=(address, 0)) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n"
                     f"Content-Type: {kind}\r\n\r\n".encode())
        piece = b"x" * 65536
        for _ in range(128):  # 8 MB, unless the server closes first
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        sock.sendall(b"0\r\n\r\n")
        sock.recv(4096)


def _half_open(url, address, count, event) -> None:
    host, port = url.removeprefix("http://").split(":")
    sockets: list[socket.socket] = []
    while True:
        for sock in list(sockets):  # the server closed it (its head deadline): open another
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                continue
            except OSError:
                pass
            sock.close()
            sockets.remove(sock)
        while len(sockets) < count:
            sock = socket.create_connection((host, int(port)), source_address=(address, 0), timeout=5)
            sock.sendall(b"GET /config HTTP/1.1\r\nHost: x\r\n")  # and never the blank line that ends the head
            sockets.append(sock)
        time.sleep(0.5)


# --- the table ----------------------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process `pid` has used (its children not counted)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40, help="seconds of benign load per row")
    parser.add_argument("--only", nargs="*", choices=list(FLOODS), help="these floods only (default: all)")
    parser.add_argument("--flood", nargs=2, metavar=("NAME", "URL"), help=argparse.SUPPRESS)  # the flood process
    args = parser.parse_args()
    if args.flood:
        return flood(*args.flood)
    with tempfile.TemporaryDirectory(prefix="http-load-") as data_root:
        app, url = start_app(Path(data_root))
        try:
            event = ScoreEvent(url)
            benign_load(url, event, 5)  # first calls (imports, the checkers' start) are not what this measures
            print(f"{BENIGN} benign /score clients (8 completions each, default rewards), {args.seconds:.0f} s a row; "
                  f"{os.cpu_count()} cores\n")
            print("| flood | benign requests | errors | p50 ms | p95 ms | p95 / baseline | handler p95 ms | "
                  "handler p95 / baseline | fresh visitor's upload | load avg | CPU %: app, flood sender, "
                  "benign clients |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            baseline = None
            for name in ["none (baseline)", *(args.only or FLOODS), "none (baseline, again)"]:
                sender = None
                if name in FLOODS:
                    sender = subprocess.Popen([sys.executable, "-m", "benchmarks.http_load", "--flood", name, url],
                                              cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                              stderr=subprocess.DEVNULL)
                    time.sleep(3)  # the flood under way
                try:
                    # the CPU each side used during the row, in % of one core: who took the 2 cores
                    start, used = time.monotonic(), [cpu_seconds(app.pid), cpu_seconds(sender.pid) if sender else 0,
                                                     cpu_seconds(os.getpid())]
                    times, handler, errors = benign_load(url, event, args.seconds)
                    used = [cpu_seconds(app.pid) - used[0], (cpu_seconds(sender.pid) - used[1]) if sender else 0,
                            cpu_seconds(os.getpid()) - used[2]]
                    cpu = ", ".join(f"{100 * seconds / (time.monotonic() - start):.0f}" for seconds in used)
                    uploaded = upload_once(url, "127.0.1.200")
                finally:
                    if sender:
                        sender.kill()
                        sender.wait()
                row = (p95(times), p95(handler))
                baseline = baseline or row
                described = f"{name}: {FLOODS[name]}" if name in FLOODS else name
                kinds = ", ".join(f"{errors.count(e)} {e}" for e in sorted(set(errors)))
                print(f"| {described} | {len(times) + len(errors)} | {len(errors)}{f' ({kinds})' if kinds else ''} | "
                      f"{statistics.median(times) * 1000:.0f} | {row[0] * 1000:.0f} | {row[0] / baseline[0]:.2f} | "
                      f"{row[1] * 1000:.0f} | {row[1] / baseline[1]:.2f} | {uploaded} | "
                      f"{os.getloadavg()[0]:.1f} | {cpu} |", flush=True)
                time.sleep(12)  # the flood's sockets closed (head deadline 10 s) and its queue drained
        finally:
            app.terminate()
            try:
                app.wait(timeout=30)
            except subprocess.TimeoutExpired:  # its chat servers and checkers first: a busy machine takes a while
                app.kill()
                app.wait()


if __name__ == "__main__":
    main()
