"""Row readers for local files (jsonl, json, csv, parquet) and Hugging Face Hub datasets.

Readers stream, so a huge file costs only the rows actually used; a line that cannot be parsed is yielded as a
`BadRow` so the loader counts it instead of dropping it silently. Heavy libraries (pyarrow, datasets) are imported
inside functions: the UI process imports this module.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# One oversized field must not take the process down: csv's default field limit is 128 KiB.
MAX_FIELD_BYTES = 1_000_000

# Hub datasets the adapters know: id -> (format, config, split). Other ids need ?format= or a column mapping.
HUB_DATASETS = {
    "openai/gsm8k": ("gsm8k", "main", "test"),
    "gsm8k": ("gsm8k", "main", "test"),
    "unsloth/OpenMathReasoning-mini": ("openmath", None, "cot"),
    "nvidia/OpenMathReasoning": ("openmath", None, "cot"),
    "open-r1/DAPO-Math-17k-Processed": ("dapo", "all", "train"),
}
OFFLINE_ALTERNATIVES = (
    "generator:train / generator:test (built in), gsm8k:PATH.jsonl, openmath:PATH, dapo:PATH, "
    "or file:PATH?question=COL&answer=COL for a local copy"
)


@dataclass(frozen=True)
class BadRow:
    reason: str


def iter_file_rows(path: str | Path) -> Iterator[dict | BadRow]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist (working directory {os.getcwd()})")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        yield from _jsonl_rows(path)
    elif suffix == ".json":
        yield from _json_rows(path)
    elif suffix == ".csv":
        yield from _csv_rows(path)
    elif suffix == ".parquet":
        yield from _parquet_rows(path)
    else:
        raise ValueError(f"cannot read {path.name}: use a .jsonl, .json, .csv or .parquet file")


def _jsonl_rows(path: Path) -> Iterator[dict | BadRow]:
    with path.open("rb") as f:
        for line in f:
            if len(line) > MAX_FIELD_BYTES:
                yield BadRow("line too long")
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                yield BadRow("invalid JSON line")
                continue
            yield row if isinstance(row, dict) else BadRow("JSON line is not an object")


def _json_rows(path: Path) -> Iterator[dict | BadRow]:
    if path.stat().st_size > 200 * MAX_FIELD_BYTES:
        raise ValueError(f"{path.name} is larger than 200 MB: a .json file is read whole; convert it to .jsonl")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path.name} must hold a JSON list of objects (or use .jsonl, one object per line)")
    for row in data:
        yield row if isinstance(row, dict) else BadRow("JSON item is not an object")


def _csv_rows(path: Path) -> Iterator[dict | BadRow]:
    csv.field_size_limit(min(sys.maxsize, MAX_FIELD_BYTES))
    with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: spreadsheet exports start with a BOM
        reader = csv.DictReader(f)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error:
                yield BadRow("malformed CSV row")
                continue
            yield row


def _parquet_rows(path: Path) -> Iterator[dict]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
        yield from batch.to_pylist()


def iter_hub_rows(repo_id: str, config: str | None, split: str) -> Iterator[dict]:
    """Rows of a hub dataset through `datasets` (its local cache works offline); a clear error when unreachable."""
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") or os.environ.get(
        "HF_DATASETS_OFFLINE", "0"
    ).lower() in ("1", "true", "yes")
    import datasets

    try:
        dataset = datasets.load_dataset(repo_id, config, split=split)
    except Exception as exc:  # datasets raises many types (ConnectionError, DatasetNotFoundError, ...)
        why = "the hub is offline here (HF_HUB_OFFLINE=1) and the dataset is not in the local cache" if offline else (
            f"it could not be loaded from the Hugging Face Hub ({type(exc).__name__}: {str(exc)[:300]})"
        )
        raise RuntimeError(f"hub dataset {repo_id!r} (config {config}, split {split}): {why}. Offline alternatives: {OFFLINE_ALTERNATIVES}") from exc
    yield from dataset
