"""A user's mistake as the page shows it: a `gr.Error` with the message that says what to fix, and no server-side
traceback (the mistake is the user's, not the app's). Every tab and API endpoint turns its errors into one here,
through ui/handlers.py's decorator."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import gradio as gr

# what a handler raises for a bad value, a wrong owner token, an unknown run or file, a job that cannot start
USER_ERRORS = (ValueError, PermissionError, RuntimeError, FileNotFoundError)


def user_error(exc: Exception) -> gr.Error:
    return gr.Error(str(exc), print_exception=False)


@contextmanager
def as_user_error(kinds: tuple[type[Exception], ...] | type[Exception] = USER_ERRORS) -> Iterator[None]:
    """`with as_user_error(): ...` raises an error of `kinds` met inside as the user's error; others pass."""
    try:
        yield
    except kinds as exc:
        raise user_error(exc) from None
