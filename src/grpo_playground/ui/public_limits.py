"""What a public app bounds before any handler runs: request bodies, temp uploads, each event's inputs, sessions,
and how the Gradio queue is shared.

Gradio 6.31 alone accepts a /queue/join body of any size, stores every input value in its session (up to
10,000 sessions of ~0.6 MB each before any input) before a handler runs, does not enforce a Textbox's
`max_length` on the server, caps uploads per file only and keeps them, downloads a file input given as a URL,
and has one queue size for every event: a stranger's slow scoring requests filled it and then every event of
every user got HTTP 503 "Queue is full". Each constant below closes one of those; `bound_queue` applies them,
`launch_settings` passes the rest to `demo.launch`, with request_limits.py's guard in front of every route and
rate_limits.py's budgets per address behind it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Callable

import gradio as gr
from fastapi import HTTPException
from gradio.components.api_component import Api
from gradio_client.utils import is_http_url_like

from grpo_playground.config.recipe_io import MAX_RECIPE_BYTES
from grpo_playground.owner import owner_token_required
from grpo_playground.rewards.custom import MAX_CODE_CHARS
from grpo_playground.ui.fair_queue import FairGroups
from grpo_playground.ui.page_config import PageConfigCache
from grpo_playground.ui.rate_limits import RateLimits
from grpo_playground.ui.request_limits import (
    MAX_UPLOAD_BYTES,
    RequestLimits,
    guard_connections,
    sweep_uploads,
    visitor_of_request,
)
from grpo_playground.ui.run_downloads import RunDownloads
from grpo_playground.ui.token_guesses import TokenGuesses, event_tokens, wrong_token

MONITORING_ENV = "GRPO_PLAYGROUND_MONITORING"
# Sessions Gradio keeps: ~0.64 MB of per-session config each (measured) plus the inputs bounded below (~1 MB of
# characters for one session that fills every box); past it the least recently used is dropped (its page then
# starts afresh), so all sessions together stay within ~1-2 GB.
SESSION_CAPACITY = 500
MAX_INPUT_CHARS = 4_096  # an input without its own max_length: numbers, choices, names, tokens, file references
MAX_API_INPUT_CHARS = MAX_RECIPE_BYTES  # a gr.api parameter: the largest is a recipe's YAML text
# Gradio runs at most MAX_THREADS events at once. The named groups that strangers share (scoring, chat, eval,
# comparison) may hold at most MAX_THREADS - RESERVED_THREADS of them, so the owner's actions, the timers and every
# other event (each its own group) always find a free one.
MAX_THREADS = 40
RESERVED_THREADS = 16
# A group keeps at most this many waiting events per concurrency slot (at least MIN_WAITING), for quick and for slow
# visitors each (fair_queue.py): fifty visitors scoring at once wait in the scoring group's 64 places while slow
# requests hold 12 of its 16 slots (with 3 per slot, 48 places, some of them got "busy": benchmarks/http_load.py).
WAITING_PER_SLOT = 4
MIN_WAITING = 16


def monitoring_enabled() -> bool:
    """Gradio's /monitoring dashboard (every event's timings) only when the owner asks for it."""
    return os.environ.get(MONITORING_ENV, "").strip() == "1"


def input_limit(block) -> int:
    """How many characters (serialized, for a non-text value) an input of this component may carry."""
    if getattr(block, "max_length", None):
        return block.max_length
    if isinstance(block, gr.Code):
        return MAX_CODE_CHARS  # a custom reward's source
    return MAX_API_INPUT_CHARS if isinstance(block, Api) else MAX_INPUT_CHARS


def input_problem(block, value) -> str | None:
    """Why an event's value for `block` is refused before it is queued or stored, or None."""
    if value is None:
        return None
    size = len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
    name = getattr(block, "label", None) or type(block).__name__
    if size > input_limit(block):
        return f"{name!r} holds {size:,} characters: the limit is {input_limit(block):,}"
    if _linked_file(value):
        return f"{name!r} names a file by URL: upload the file instead"
    return None


def _linked_file(value) -> bool:
    """A file input pointing at a URL: Gradio would download it, with no size limit, into its temp folder."""
    if isinstance(value, dict):
        return is_http_url_like(value.get("path")) or any(_linked_file(v) for v in value.values())
    if isinstance(value, list):
        return any(_linked_file(v) for v in value)
    return False


def _validation_error(block, problem: str) -> dict:
    name = getattr(block, "label", None) or type(block).__name__.lower()
    return {"__type__": "validate", "is_valid": False, "parameter_name": name,
            "message": f"refused before queueing: {problem}"}


def waiting_limit(concurrency_limit) -> int:
    slots = concurrency_limit if isinstance(concurrency_limit, int) else 1
    return max(MIN_WAITING, WAITING_PER_SLOT * slots)


def configure_queue(demo: gr.Blocks) -> None:
    """The app's queue. api_open=False: /gradio_api/run/* refuses queued events, so every call waits its turn,
    with or without SPACE_ID. No shared max_size: each concurrency group has its own bound (bound_queue)."""
    demo.queue(api_open=False, max_size=None, default_concurrency_limit=4)
    bound_queue(demo)


def bound_queue(demo: gr.Blocks) -> None:
    """Give every concurrency group its own bound on waiting events and the shared ones a fair share per visitor
    (fair_queue.py), refuse oversized inputs before they are queued (so a refused paste is never held, in the
    queue or in a session), and a visitor guessing the owner token its events that carry one (token_guesses.py)."""
    queue = demo._queue
    shared: dict[str, int] = {}
    for fn in demo.fns.values():
        if str(fn.concurrency_id).isdigit():
            continue  # Gradio's default id: the event is a group of its own
        limit = fn.concurrency_limit if isinstance(fn.concurrency_limit, int) else queue.default_concurrency_limit or 1
        shared[fn.concurrency_id] = min(shared.get(fn.concurrency_id, limit), limit)  # Gradio keeps the smallest
    held = sum(shared.values())
    if held > MAX_THREADS - RESERVED_THREADS:
        raise ValueError(f"the shared concurrency groups {shared} take {held} of {MAX_THREADS} event slots: keep them "
                         f"under {MAX_THREADS - RESERVED_THREADS} so the owner's actions and the timers keep theirs")
    push = queue.push
    guesses = demo.token_guesses = TokenGuesses()  # also asked by owner_join, at the rate limit in front
    fair = FairGroups(queue, set(shared))
    fair.install()

    async def bounded_push(body, request, username):
        fn = demo.fns.get(body.fn_index) if body.fn_index is not None else None
        if fn is None:
            return await push(body, request, username)  # Gradio's own error for a missing or unknown fn_index
        tokens = event_tokens(fn, body.data)
        visitor = visitor_of_request(request)
        if refusal := guesses.refusal(visitor, tokens) or fair.refusal(fn, visitor):
            raise HTTPException(status_code=429, detail=refusal)
        problems = [(block, input_problem(block, value)) for block, value in zip(fn.inputs, body.data)]
        # Values past the event's inputs (Gradio ignores them) and its event data would still wait in the queue.
        for what, extra in (("values past the event's inputs", body.data[len(fn.inputs):]),
                            ("event data", body.event_data)):
            if extra and len(json.dumps(extra, default=str)) > MAX_INPUT_CHARS:
                problems.append((None, f"{what} over {MAX_INPUT_CHARS:,} characters"))
        refused = [_validation_error(block, problem) for block, problem in problems if problem]
        if refused:  # Gradio's own validation reply (HTTP 422): the page and gradio_client show each message
            return False, refused, "validator_error"
        group = queue.event_queue_per_concurrency_id.get(fn.concurrency_id)
        if group is not None and fair.crowded(fn, visitor, waiting_limit(group.concurrency_limit)):
            return (False, f"busy: {len(group.queue)} requests of this kind are waiting; try again in a few seconds",
                    "queue_full")
        return await push(body, request, username)

    queue.push = bounded_push


# Gradio 6.31's page announces each finished event to screen readers as `common.complete`, a key its English
# strings lack: the raw key was read out (and once seen on the page, issue 39) after every click
GRADIO_MISSING_WORDS = {"en": {"common.complete": "Complete"}}


def owner_join(demo: gr.Blocks, visitor: str, body: bytes) -> bool:
    """Whether a queue join's raw body is an event of `demo` carrying the right owner token (rate_limits.py lets it
    in over its address's budget). Its tokens count against the visitor's wrong guesses as any event's do."""
    guesses = getattr(demo, "token_guesses", None)  # set by bound_queue: a demo without it has no owner events
    if guesses is None or not owner_token_required():
        return False
    try:
        join = json.loads(body)
        fn, data = demo.fns.get(join["fn_index"]), join["data"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    if fn is None or not isinstance(data, list):
        return False
    tokens = event_tokens(fn, data)
    return bool(tokens) and guesses.refusal(visitor, tokens) is None and not any(map(wrong_token, tokens))


def launch_settings(kept: Callable[[], set[str]] = set, owner_join: Callable[[str, bytes], bool] | None = None
                    ) -> dict:
    """What `demo.launch` needs besides the address, so tests serve the app with the settings a Space gets.
    `kept`: the files of the upload folder that Gradio keeps for the page (never swept); `owner_join`: the owner's
    events over their address's rate limit (rate_limits.py)."""
    import gradio as gr
    from gradio.utils import get_upload_folder
    from starlette.middleware import Middleware

    return {
        "i18n": gr.I18n(**GRADIO_MISSING_WORDS),
        "max_file_size": MAX_UPLOAD_BYTES,
        "max_threads": MAX_THREADS,
        "state_session_capacity": SESSION_CAPACITY,
        "enable_monitoring": monitoring_enabled(),
        "num_workers": 0,  # no static-file worker processes: every upload passes RequestLimits
        "app_kwargs": {"middleware": [Middleware(RequestLimits, upload_dir=get_upload_folder(), kept=kept),
                                      Middleware(RateLimits, owner_join=owner_join), Middleware(PageConfigCache),
                                      Middleware(RunDownloads)]},
    }


def kept_files(demo: gr.Blocks) -> set[str]:
    """Files of the upload folder that Gradio keeps for the page: components' default values and examples."""
    return set().union(*(getattr(block, "keep_in_cache", set()) for block in demo.blocks.values()))


def serve(demo: gr.Blocks, **kwargs) -> None:
    """Start `demo` with the public limits and return (`demo.block_thread()` waits on it): the uploads an unclean
    stop left behind are swept first, and the server's sockets are guarded once it listens."""
    from gradio.utils import get_upload_folder

    sweep_uploads(Path(get_upload_folder()), kept=kept_files(demo))
    settings = launch_settings(lambda: kept_files(demo), functools.partial(owner_join, demo))
    demo.launch(prevent_thread_lock=True, **settings, **kwargs)
    guard_connections(demo.server)
