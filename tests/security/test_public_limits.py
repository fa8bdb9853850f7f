"""What a stranger can make a public app hold or run before any token (issue 25): request bodies, sessions, uploads,
the queue, exposed routes, numbers that overflow. Each test is one attack of the issue, against the real app.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/security/test_public_limits.py
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import gradio as gr
import httpx
import pytest

from grpo_playground.child_process import free_port
from grpo_playground.owner import OWNER_TOKEN_ENV
from grpo_playground.rewards.custom import Limits, _interpret
from grpo_playground.ui import public_limits, request_limits
from grpo_playground.ui.public_limits import MIN_WAITING, SESSION_CAPACITY
from grpo_playground.ui.request_limits import DELETE_CACHE

ROOT = Path(__file__).resolve().parents[2]
GROUP = "<SOLUTION>42</SOLUTION>\n---\n<SOLUTION>41</SOLUTION>"


@pytest.fixture(scope="module")
def demo(app_module):
    return app_module.demo


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def fn_index(demo, name: str) -> int:
    """An event's index by its api_name or, for the private handlers a stranger can still call, its function name."""
    return next(i for i, fn in demo.fns.items() if name in (fn.api_name, fn.name))


def join(app_url: str, demo, name: str, values: dict[int, object], session: str | None = None,
         visitor: str | None = None) -> httpx.Response:
    """POST /gradio_api/queue/join as a browser would, the event's inputs None except `values` (index -> value),
    from `visitor`'s address (given as X-Forwarded-For, which uvicorn trusts from 127.0.0.1 as from a proxy)."""
    index = fn_index(demo, name)
    data = [values.get(i) for i in range(len(demo.fns[index].inputs))]
    return httpx.post(f"{app_url}gradio_api/queue/join", timeout=30,
                      headers={"X-Forwarded-For": visitor} if visitor else None,
                      json={"data": data, "fn_index": index, "session_hash": session or uuid.uuid4().hex})


def scoring_button(fn, api_name: str, limit: int) -> gr.Blocks:
    """A one-button app whose event joins the shared scoring group with `limit` slots."""
    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button().click(fn, box, box, api_name=api_name, concurrency_id="score", concurrency_limit=limit)
    return demo

@contextlib.contextmanager
def served(demo):
    """`demo` served as the Space serves the app (its queue and launch settings) on a free port: its URL."""
    public_limits.configure_queue(demo)
    port = free_port()
    demo.launch(server_port=port, prevent_thread_lock=True, quiet=True, **public_limits.launch_settings())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def raw_headers(app_url: str, path: str, headers: str) -> str:
    """Send only a request's head (no body) and return the status line: what the server decides before reading."""
    url = urlparse(app_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n{headers}\r\n".encode())
        return sock.recv(4096).decode(errors="replace").splitlines()[0]


def test_run_routes_do_not_skip_the_queue(app_url, monkeypatch):
    # Before: with SPACE_ID unset, /gradio_api/run/score ran at once beside the queue (40 bombs ran together).
    monkeypatch.delenv("SPACE_ID", raising=False)
    reply = httpx.post(f"{app_url}gradio_api/run/score", json={"data": [GROUP, "42"]}, timeout=30)
    assert reply.status_code == 404 and "join the queue" in reply.text


def test_monitoring_answers_nobody_unless_the_owner_enables_it(app_url):
    # Before: /monitoring printed the dashboard's URL and /monitoring/summary gave every event's timings to anyone.
    assert httpx.get(f"{app_url}monitoring", timeout=30).status_code == 403
    assert httpx.get(f"{app_url}monitoring/summary", timeout=30).status_code == 403


def test_the_page_config_names_no_install_path(app_url):
    # Before: the chat pickers' values held the packaged GGUF's absolute path inside the virtual environment.
    config = httpx.get(f"{app_url}config", timeout=30).text
    for path in {sys.prefix, os.path.realpath(sys.prefix), str(ROOT)}:
        assert path not in config


def test_a_body_over_the_limit_is_refused_before_it_is_read(app_url, demo):
    # Before: /queue/join read a 50 MB body, and its session kept the paste (880 MB -> 1,987 MB in 22 requests).
    sessions = len(demo.state_holder.session_data)
    status = raw_headers(app_url, "/gradio_api/queue/join",
                         "Content-Type: application/json\r\nContent-Length: 50000000\r\n")
    assert " 413 " in status  # a chunked body is counted as it arrives: test_request_limits.py
    assert len(demo.state_holder.session_data) == sessions  # no session made for it


def test_a_refused_paste_is_neither_queued_nor_kept_in_a_session(app_url, demo):
    # Before: the box's max_length held only in the browser; the server queued the paste and kept it in the
    # session's component values, for up to 10,000 sessions.
    paste = "x" * 300_000  # inside the body limit, over the completions box's limit
    reply = join(app_url, demo, "score", {0: paste, 1: "42"}, session="stranger-paste")
    assert reply.status_code == 422 and "refused before queueing" in reply.text and "the limit is" in reply.text
    for session in demo.state_holder.session_data.values():
        for config in session.config_values.values():
            value = (config or {}).get("props", {}).get("value")
            assert not (isinstance(value, str) and len(value) >= len(paste))
    assert demo.state_holder.capacity == SESSION_CAPACITY  # before: 10,000 sessions of ~0.64 MB each at least
    index = fn_index(demo, "score")
    extra = httpx.post(f"{app_url}gradio_api/queue/join", timeout=30, json={  # values Gradio would ignore, yet queue
        "data": [GROUP, "42", *[None] * (len(demo.fns[index].inputs) - 2), paste], "fn_index": index,
        "session_hash": uuid.uuid4().hex})
    assert extra.status_code == 422 and "values past the event's inputs" in extra.text


def test_one_post_of_500_files_is_refused_before_it_is_read(app_url):
    # Before: the 1 MB cap was per file: 500 files x 999,999 bytes in one POST were accepted and kept (~1 GB).
    status = raw_headers(app_url, "/gradio_api/upload", f"Content-Length: {500 * 1_000_200}\r\n"
                         "Content-Type: multipart/form-data; boundary=x\r\n")
    assert " 413 " in status
    two = [("files", (f"{i}.csv", b"x" * 999_999)) for i in range(2)]
    assert httpx.post(f"{app_url}gradio_api/upload", files=two, timeout=30).status_code == 413
    one = httpx.post(f"{app_url}gradio_api/upload", files=[("files", ("ok.csv", b"completion\nx\n"))], timeout=30)
    assert one.status_code == 200


def test_uploads_stop_at_the_overall_cap_and_are_swept(app_url, demo, monkeypatch):
    reply = httpx.post(f"{app_url}gradio_api/upload", files=[("files", ("a.csv", b"completion\nx\n"))], timeout=30)
    path = reply.json()[0]
    assert path in demo.upload_file_set and demo.delete_cache == DELETE_CACHE  # what Gradio's sweep deletes, and when
    used, _ = request_limits.sweep_uploads(Path(path).parents[1])
    monkeypatch.setattr(request_limits, "MAX_UPLOADS_BYTES", used + 100)
    full = httpx.post(f"{app_url}gradio_api/upload", files=[("files", ("b.csv", b"x" * 200))], timeout=30)
    assert full.status_code == 507 and "upload space is full" in full.text


def test_a_file_input_naming_a_url_is_refused(app_url, demo):
    # Gradio downloads a file input given as a URL into its temp folder, with no size limit.
    linked = {"path": "https://example.com/huge.csv", "meta": {"_type": "gradio.FileData"}, "orig_name": "huge.csv"}
    reply = join(app_url, demo, "upload_file", {0: linked})
    assert reply.status_code == 422 and "names a file by URL" in reply.text


def test_saving_a_recipe_writes_nothing_for_a_stranger(demo, monkeypatch):
    # Before: the form's save handler wrote a recipe-* temp folder for anyone (50 calls, 50 folders).
    from gradio.utils import get_upload_folder

    monkeypatch.setenv(OWNER_TOKEN_ENV, "the-owners-secret")
    save = demo.fns[fn_index(demo, "save_form")]
    values = [block.value for block in save.inputs[1:]]

    def folders():
        return {str(p) for d in (tempfile.gettempdir(), get_upload_folder()) for p in Path(d).glob("recipe-*")}

    before = folders()
    with pytest.raises(gr.Error, match="saving a recipe file needs the owner token"):
        save.fn("guess", *values)
    assert folders() == before
    saved = save.fn("the-owners-secret", *values)[0]["value"]
    assert Path(saved).is_relative_to(get_upload_folder())  # swept with the other temp files


@pytest.mark.parametrize("weight, message", [
    (10**400, "weight of check_answer is an integer of 401 digits: give a finite number between -1e+06 and 1e+06"),
    (1e308, "weight of check_answer is 1e+308: give a finite number between -1e+06 and 1e+06"),
], ids=["10**400", "1e308"])
def test_huge_weights_get_an_error_naming_them(client, weight, message):
    # Before: 1e308 passed the finite check and the totals came back NaN; 10**400 raised an unhandled OverflowError.
    with pytest.raises(Exception, match=re.escape(message)):
        client.predict(GROUP, "42", weight_check_answer=weight, api_name="/score")


def test_a_recipe_weight_that_would_overflow_is_refused():
    from grpo_playground.config import ConfigError
    from grpo_playground.config.recipe_io import config_from_dict, safe_yaml

    with pytest.raises(ConfigError, match=re.escape("rewards.weights.check_answer=1e+308: must be between -1000000.0 and 1000000.0")):
        config_from_dict(safe_yaml("rewards: {weights: {check_answer: 1e308}}"))


def test_huge_custom_scores_and_deeply_nested_replies_are_named():
    from grpo_playground.rewards import RewardInputError, score_group

    with pytest.raises(RewardInputError, match="custom score 0 is 1.7e"):
        score_group(["a", "b"], "42", extra_scores={"custom": [1.7e308, 1.0]})
    # Before: "could not start the reward sandbox: maximum recursion depth exceeded".
    result = _interpret(0, "", b"[" * 100_000, False, 1, Limits())
    assert result.scores is None and "unreadable reply" in result.error


def test_one_letter_tags_cannot_buy_seconds_of_server_time(client):
    # Before: reasoning_end `a`, solution_start `b`, solution_end `c` and 64 completions "abb" * 1039 cost ~20 s.
    start = time.monotonic()
    table = client.predict("\n---\n".join(["abb" * 1039] * 64), "42", reasoning_end="a", solution_start="b",
                           solution_end="c", api_name="/score")
    assert len(table["data"]) == 64
    assert time.monotonic() - start < 5.0  # the request itself takes ~0.1 s; the rest is the HTTP round trip


def test_a_full_group_leaves_other_events_their_room(monkeypatch):
    # Before: one queue size for all events: 16 slow scoring requests and 70 cheap ones filled it, and then every
    # event of every user (timers, the owner's Start) got 503 "Queue is full".
    release = threading.Event()
    with gr.Blocks() as demo:
        box = gr.Textbox()
        gr.Button().click(lambda x: release.wait(60) and x, box, box, api_name="slow", concurrency_id="score",
                          concurrency_limit=1)
        gr.Button().click(lambda x: x.upper(), box, box, api_name="fast")
    with served(demo) as url:
        try:
            slow = [join(url, demo, "slow", {0: "x"}, visitor=f"10.0.1.{i}").status_code
                    for i in range(MIN_WAITING + 8)]
            assert slow.count(503) >= 6 and slow.count(200) <= MIN_WAITING + 2  # the slow group is bounded on its own
            session = uuid.uuid4().hex
            assert join(url, demo, "fast", {0: "owner"}, session=session).status_code == 200
            with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session},
                              timeout=30) as events:
                done = next(json.loads(line[5:]) for line in events.iter_lines()
                            if line.startswith("data:") and "process_completed" in line)
            assert done["output"]["data"] == ["OWNER"]
        finally:
            release.set()


def test_a_visitor_over_its_share_of_a_group_is_refused_and_waits_behind_lighter_visitors():
    # Before: a group's waiting events ran first come, first served and only their total was bounded: 64 cheap
    # /score requests from two addresses kept the scoring group full and 94% of fifty honest visitors' requests got
    # 503 (benchmarks/http_load.py). Now one visitor holds at most MAX_EVENTS_PER_VISITOR of a shared group, and a
    # free slot goes to the visitor who held the group's slots least lately.
    from grpo_playground.ui.fair_queue import MAX_EVENTS_PER_VISITOR

    release, order = threading.Event(), []

    def slow(x):
        release.wait(60)
        order.append(x)
        return x

    demo = scoring_button(slow, "slow", 1)
    with served(demo) as url:
        try:
            flood = [join(url, demo, "slow", {0: f"flood-{i}"}, visitor="10.0.0.66")
                     for i in range(MAX_EVENTS_PER_VISITOR + 3)]
            assert [answer.status_code for answer in flood] == [200] * MAX_EVENTS_PER_VISITOR + [429] * 3
            assert "from your address" in flood[-1].text
            assert join(url, demo, "slow", {0: "honest"}, visitor="10.0.0.7").status_code == 200  # another gets in
            time.sleep(0.5)  # the flood's first event holds the slot, its others and the honest one wait
            release.set()
            deadline = time.monotonic() + 30
            while len(order) < MAX_EVENTS_PER_VISITOR + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            # the honest request, last to arrive, runs before the flood's waiting ones: it has held no slot lately
            assert order[:2] == ["flood-0", "honest"], order
        finally:
            release.set()


def test_slow_visitors_leave_a_quarter_of_a_groups_slots_to_quick_ones():
    # Before: 16 addresses each sending one backtracking group (a slot held for seconds) kept every scoring slot, and
    # honest requests waited seconds for one to free. Now the last quarter of a shared group's slots goes only to a
    # visitor whose events lately held a slot less than 0.5 s on average.
    release = threading.Event()

    def work(x):
        if x.startswith("slow"):
            release.wait(60)
        return x

    demo = scoring_button(work, "work", 4)
    with served(demo) as url:
        try:
            for visitor in ("10.0.2.1", "10.0.2.2", "10.0.2.3"):  # three slow requests hold three of the four slots
                assert join(url, demo, "work", {0: "slow"}, visitor=visitor).status_code == 200
            time.sleep(1.0)  # their visitors are slow now: their events have held a slot over 0.5 s
            assert join(url, demo, "work", {0: "slow again"}, visitor="10.0.2.1").status_code == 200  # waits
            session = uuid.uuid4().hex
            assert join(url, demo, "work", {0: "honest"}, session=session, visitor="10.0.0.7").status_code == 200
            with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session},
                              timeout=30) as events:
                done = next(json.loads(line[5:]) for line in events.iter_lines()
                            if line.startswith("data:") and "process_completed" in line)
            assert done["output"]["data"] == ["honest"] and not release.is_set()  # served while the slow ones still run
        finally:
            release.set()


def test_slow_visitors_waiting_cannot_fill_the_places_of_quick_ones():
    # Before: one count of waiting places per group: 16 addresses of slow groups, each up to 4 events waiting behind
    # the quick ones, filled the scoring group's places and honest visitors got 503 (benchmarks/http_load.py).
    import asyncio
    from types import SimpleNamespace

    from grpo_playground.ui.fair_queue import FairGroups

    async def held_for_a_while(events, batch, begin_time, fn):  # Gradio running an event that holds its slot
        await asyncio.sleep(0.6)

    group = SimpleNamespace(queue=[], concurrency_limit=16, current_concurrency=0)
    queue = SimpleNamespace(event_queue_per_concurrency_id={"score": group}, get_events=lambda: None,
                            process_events=held_for_a_while)
    fair = FairGroups(queue, {"score"})
    fair.install()
    fn = SimpleNamespace(concurrency_id="score")
    slow = [f"10.0.3.{i}" for i in range(16)]

    async def run_once_each():
        await asyncio.gather(*(queue.process_events([SimpleNamespace(visitor=v)], False, 0, fn) for v in slow))

    # each slow visitor's event held a slot 0.6 s; in a thread of its own: a browser test earlier on this worker
    # leaves Playwright's event loop running in the main thread, where asyncio.run refuses to start
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run_once_each()).result()
    group.queue = [SimpleNamespace(visitor=visitor) for visitor in slow]  # then each waits with another
    assert fair.crowded(fn, slow[0], 16)  # the slow visitors' places are full
    assert not fair.crowded(fn, "10.0.0.7", 16)  # a visitor new to the group (quick) still has its own


def test_the_page_config_is_built_once_per_address_not_per_request(monkeypatch):
    # Before: every GET /config deep-copied the page's whole config in the thread pool that runs the event handlers
    # (~50 ms of CPU, 0.45 MB for the app): 64 threads fetching it from two addresses kept every thread busy and
    # honest scoring requests waited minutes (benchmarks/http_load.py). Now it is built once per address the page
    # is reached at, and replayed.
    import gradio.route_utils

    builds = []
    rewrite = gradio.route_utils.update_root_in_config

    def counted(config, root):  # the last step of building the page's config, for /config and for the page
        builds.append(root)
        return rewrite(config, root)

    monkeypatch.setattr(gradio.route_utils, "update_root_in_config", counted)
    with gr.Blocks() as demo:
        gr.Textbox("hello", label="box")
    with served(demo) as root:
        url = f"{root}config"
        builds.clear()  # launch's own calls
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: httpx.get(url, timeout=30), range(48)))
        assert {answer.status_code for answer in answers} == {200}
        assert len({answer.content for answer in answers}) == 1  # every visitor gets the same page
        assert json.loads(answers[0].content)["components"][0]["props"]["value"] == "hello"
        assert len(builds) == 1, f"/config was built {len(builds)} times for 48 requests"
        # reached at another address (a proxy's host): its own answer, with that address's URLs
        other = httpx.get(url, headers={"X-Forwarded-Host": "space.example"}, timeout=30)
        assert len(builds) == 2 and "space.example" in other.json()["root"]
        # the page itself embeds the same config: built once too (get_page_config copies it)
        pages = [httpx.get(url.removesuffix("config"), timeout=30) for _ in range(3)]
        assert len({page.content for page in pages}) == 1 and b"hello" in pages[0].content and len(builds) == 3


def test_the_apps_shared_groups_are_the_ones_the_deploy_guide_names(demo):
    """deploy.md: scoring 16, chat 3, eval 1, comparison 1, at most 24 of Gradio's 40 event slots. The test above
    attacks the mechanism on a small app; this one reads the real app's groups."""
    shared: dict[str, set] = {}
    for fn in demo.fns.values():
        if not str(fn.concurrency_id).isdigit():  # Gradio's default id: an event alone in its group
            shared.setdefault(fn.concurrency_id, set()).add(fn.concurrency_limit)
    assert shared == {"score": {16}, "chat": {3}, "eval": {1}, "compare": {1}}, shared
    assert sum(min(limits) for limits in shared.values()) <= public_limits.MAX_THREADS - public_limits.RESERVED_THREADS
    assert public_limits.MAX_THREADS - public_limits.RESERVED_THREADS == 24
