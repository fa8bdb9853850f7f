"""What the Reward sandbox accepts: a pasted group (blocks split by a line `---`) or a JSONL / CSV file.

Pure functions, no Gradio: the tab, the Training tab's "open in sandbox" and the tests share them.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from grpo_playground.rewards import MAX_COMPLETIONS, MAX_TOTAL_CHARS, RewardInputError, completion_text

SEPARATOR = "---"
MAX_FILE_BYTES = 1_000_000
# Room for the separators between 64 blocks on top of the characters the engine accepts.
MAX_PASTE_CHARS = MAX_TOTAL_CHARS + MAX_COMPLETIONS * (len(SEPARATOR) + 2)
_SPLIT = re.compile(rf"^{re.escape(SEPARATOR)}[ \t]*$", re.MULTILINE)
TEXT_KEYS = ("completion", "completions", "text", "content", "response", "output")


def split_group(text: str) -> list[str]:
    """Blocks between lines `---`; blank blocks at the start or end are dropped, blank ones inside are
    kept (an empty completion is a case worth scoring)."""
    if len(text) > MAX_PASTE_CHARS:
        raise RewardInputError(
            f"the pasted text has {len(text):,} characters: the limit is {MAX_TOTAL_CHARS:,} of completions"
        )
    blocks = [b.removeprefix("\n").removesuffix("\n") for b in _SPLIT.split(text)]
    while blocks and not blocks[0].strip():
        blocks.pop(0)
    while blocks and not blocks[-1].strip():
        blocks.pop()
    return blocks


def join_group(completions: list[str]) -> str:
    return f"\n{SEPARATOR}\n".join(completions)


def _row_texts(row, where: str) -> list[str]:
    """One completion per row; a row of a run's samples.jsonl ({"completions": [str, ...]}) gives its group."""
    if isinstance(row, dict) and isinstance(row.get("completions"), list):
        return [_one_text(c, where) for c in row["completions"]]
    return [_one_text(row, where)]


def _one_text(row, where: str) -> str:
    if isinstance(row, dict):
        row = next((row[k] for k in TEXT_KEYS if k in row), row)
    try:
        return completion_text(row)
    except TypeError:
        raise RewardInputError(
            f"{where}: expected a string or an object with one of {', '.join(TEXT_KEYS)}"
        ) from None


def read_completions_file(path: str | Path) -> tuple[list[str], str | None]:
    """(completions, gold answer text) from .jsonl / .json lines or .csv. The answer text is the group's one answer
    when every row that has an `answer` column/key agrees, else one answer per completion separated by lines
    `---` (the sandbox then scores each completion against its own row's answer); None when no row has one."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise RewardInputError(f"{path.name} is {size:,} bytes: upload at most {MAX_FILE_BYTES:,} bytes")
    raw = path.read_bytes().decode("utf-8", errors="replace")
    completions: list[str] = []
    answers: list[str | None] = []  # one per completion
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(raw))
        header = None
        try:  # csv.Error: e.g. a field over csv's 131,072-character limit
            header = reader.fieldnames or []
            key = next((k for k in TEXT_KEYS if k in header), None)
            if key is None:
                raise RewardInputError(f"{path.name}: no column named one of {', '.join(TEXT_KEYS)} in the header")
            for row in reader:
                completions.append(row[key] or "")
                answers.append((row.get("answer") or "").strip() or None)
        except csv.Error as exc:
            where = "header" if header is None else f"row {len(completions) + 1}"
            raise RewardInputError(f"{path.name} {where}: not CSV this can read ({exc})") from None
    elif path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RewardInputError(f"{path.name} line {n}: not JSON ({exc.msg}); write one object per line") from None
            except RecursionError:
                raise RewardInputError(
                    f"{path.name} line {n}: nested too deeply; write one flat object per line") from None
            texts = _row_texts(row, f"{path.name} line {n}")
            completions.extend(texts)
            gold = row.get("answer") if isinstance(row, dict) else None
            answers.extend([str(gold).strip() if gold is not None else None] * len(texts))
    else:
        raise RewardInputError(f"{path.name}: upload a .jsonl or .csv file of completions")
    if len(completions) > MAX_COMPLETIONS:
        raise RewardInputError(f"{path.name} holds {len(completions)} completions: the limit is {MAX_COMPLETIONS}")
    if not completions:
        raise RewardInputError(f"{path.name} holds no completions")
    return completions, _answer_text(answers, path.name)


def _answer_text(answers: list[str | None], name: str) -> str | None:
    given = {a for a in answers if a is not None}
    if len(given) <= 1:
        return next(iter(given), None)  # one answer for the whole group (rows without one share it)
    missing = [i + 1 for i, a in enumerate(answers) if a is None]
    if missing:
        raise RewardInputError(f"{name}: completions {missing[:5]} have no answer while others differ: give every "
                               "row its answer, or one answer for all")
    return join_group([str(a) for a in answers])
