"""Every symbol the UI writes renders: a code point no installed font covers shows as a blank box (the sandbox's
error sign and its "design OK" tick did, in the Debian chromium the browser tests use)."""

from __future__ import annotations

import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

UI = Path(__file__).resolve().parents[1] / "src" / "grpo_playground" / "ui"


def symbols() -> set[str]:
    """Non-ASCII symbols (not letters or punctuation such as the ellipsis) in the UI's source."""
    text = "".join(p.read_text(encoding="utf-8") for p in UI.glob("*.py"))
    return {c for c in text if ord(c) > 127 and unicodedata.category(c) in ("So", "Sm", "Sk")}


@pytest.mark.skipif(shutil.which("fc-list") is None, reason="fontconfig's fc-list is not installed")
def test_every_ui_symbol_has_a_font_here():
    missing = [f"{c} (U+{ord(c):04X})" for c in sorted(symbols())
               if not subprocess.run(["fc-list", f":charset={ord(c):x}", "family"], capture_output=True,
                                     text=True).stdout.strip()]
    assert not missing, f"no installed font draws {missing}: use a symbol DejaVu has (e.g. ✔, ⚠) or a word"
