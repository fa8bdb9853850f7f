"""The owner token: when GRPO_PLAYGROUND_OWNER_TOKEN is set, whatever starts, stops or changes something (jobs, the
sandbox's scoring, chat servers) needs it; visitors can only watch. Compared in constant time; standard library only,
so the jobs and every tab import it from here.
"""

from __future__ import annotations

import hmac
import os

OWNER_TOKEN_ENV = "GRPO_PLAYGROUND_OWNER_TOKEN"
MIN_OWNER_TOKEN_CHARS = 16  # nothing limits how fast a stranger may guess: a short token is no lock


def owner_token_required() -> bool:
    return bool(os.environ.get(OWNER_TOKEN_ENV))


def weak_owner_token() -> str | None:
    """What is wrong with the configured owner token, said at launch; None when it is long enough or unset."""
    token = os.environ.get(OWNER_TOKEN_ENV, "")
    if 0 < len(token) < MIN_OWNER_TOKEN_CHARS:
        return (f"WARNING: {OWNER_TOKEN_ENV} has {len(token)} characters: every request may guess it, as fast as it "
                f"likes. Use at least {MIN_OWNER_TOKEN_CHARS} random ones, e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return None


def check_owner(token: str | None, action: str = "starting, stopping and resuming jobs") -> None:
    """Raise PermissionError unless no owner token is configured or `token` matches it (constant time)."""
    expected = os.environ.get(OWNER_TOKEN_ENV, "")
    if expected and not (isinstance(token, str) and hmac.compare_digest(token.encode(), expected.encode())):
        raise PermissionError(
            f"{action} needs the owner token of this app "
            f"(env {OWNER_TOKEN_ENV}): type it in the 'Owner token' box; visitors can only watch"
        )
