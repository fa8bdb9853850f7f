"""Owner-token guessing, bounded per visitor (issue 38, item 8: 8-13 guesses a second per endpoint, no limit).

Every password box of the app is an owner token box, and every `token` parameter of its API endpoints (/start,
/resume, /export...) the owner token. When an event joins the queue, its tokens are checked: a
visitor who sent MAX_WRONG_TOKENS wrong ones within WINDOW_S is refused (HTTP 429) every event that carries a
token for LOCKOUT_S, the right token included (or the refusal would tell a right guess from a wrong one). Events
without a token (watching, scoring) stay open to them, and a stranger at another address cannot lock the owner out.
"""

from __future__ import annotations

import collections
import functools
import inspect
import time

import gradio as gr
from gradio.components.api_component import Api
from grpo_playground.owner import check_owner


MAX_WRONG_TOKENS = 10  # a mistyped token or two is not an attack
WINDOW_S = 60.0
LOCKOUT_S = 600.0
MAX_VISITORS_TRACKED = 4_096


@functools.cache
def token_inputs(fn) -> frozenset[int]:
    """Which of an event's inputs (a gradio BlockFunction's) carry the owner token."""
    if fn.inputs and all(isinstance(block, Api) for block in fn.inputs):  # gr.api: its function's parameters
        return frozenset(i for i, name in enumerate(inspect.signature(fn.fn).parameters) if name == "token")
    return frozenset(i for i, block in enumerate(fn.inputs)
                     if isinstance(block, gr.Textbox) and block.type == "password")


def event_tokens(fn, data: list) -> list[str]:
    """The owner tokens an event's values carry (the non-empty texts at its token inputs)."""
    return [value for i, value in enumerate(data) if i in token_inputs(fn) and isinstance(value, str) and value]


def wrong_token(token: str) -> bool:
    try:
        check_owner(token)
    except PermissionError:
        return True
    return False


class TokenGuesses:
    def __init__(self) -> None:
        self._wrong: dict[str, collections.deque] = {}
        self._locked_until: dict[str, float] = {}

    def refusal(self, visitor: str, tokens: list[str]) -> str | None:
        """Why this visitor's event carrying `tokens` (the non-empty ones) is refused, None to let it in."""
        if not tokens:
            return None
        now = time.monotonic()
        if self._locked_until.get(visitor, 0.0) > now:
            return self._message(visitor, now)
        wrong = sum(map(wrong_token, tokens))
        if not wrong:
            return None
        self._forget_old(now)
        times = self._wrong.setdefault(visitor, collections.deque())
        times.extend([now] * wrong)
        while times and times[0] < now - WINDOW_S:
            times.popleft()
        if len(times) >= MAX_WRONG_TOKENS:
            self._locked_until[visitor] = now + LOCKOUT_S
            del self._wrong[visitor]
        return None  # this wrong token gets the handler's own answer ("needs the owner token")

    def _message(self, visitor: str, now: float) -> str:
        return (f"{MAX_WRONG_TOKENS} wrong owner tokens from your address within {WINDOW_S:.0f} s: actions that take "
                f"the owner token are refused for {self._locked_until[visitor] - now:.0f} s more")

    def _forget_old(self, now: float) -> None:
        if len(self._wrong) + len(self._locked_until) < MAX_VISITORS_TRACKED:
            return
        self._locked_until = {v: t for v, t in self._locked_until.items() if t > now}
        self._wrong = {v: d for v, d in self._wrong.items() if d and d[-1] >= now - WINDOW_S}
