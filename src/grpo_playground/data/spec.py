"""Source spec strings, as recipes and the CLI write them: `kind:target?key=value&...`.

    generator:train            generator:test?levels=1-3
    gsm8k:data/test.jsonl      openmath:PATH      dapo:PATH        (jsonl / json / csv / parquet)
    file:PATH?question=q&answer=a[&solution=s&level=l]
    hub:openai/gsm8k[?config=main&split=test]   (needs the Hugging Face Hub or its local cache)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl

KINDS = ("generator", "gsm8k", "openmath", "dapo", "file", "hub")
FILE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
# Column-mapping keys a `file:` or unknown `hub:` source may set; question and answer are required.
COLUMN_KEYS = ("question", "answer", "solution", "level")
OPTION_KEYS = {
    "generator": ("levels",),
    "gsm8k": (),
    "openmath": (),
    "dapo": (),
    "file": COLUMN_KEYS,
    "hub": ("config", "split", "format", *COLUMN_KEYS),
}
MAX_SPEC_CHARS = 2000

EXAMPLES = "generator:train, generator:test, gsm8k:PATH.jsonl, openmath:PATH, dapo:PATH, file:PATH?question=COL&answer=COL, hub:openai/gsm8k"


@dataclass(frozen=True)
class SourceSpec:
    kind: str
    target: str
    options: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.kind}:{self.target}" + (f"?{query}" if query else "")


def parse_spec(spec: str) -> SourceSpec:
    """Parse and validate a source spec; errors name the bad part and list valid forms."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty data source: give one of {EXAMPLES}")
    if len(spec) > MAX_SPEC_CHARS:
        raise ValueError(f"data source spec is {len(spec)} characters long: keep it under {MAX_SPEC_CHARS}")
    kind, sep, rest = spec.strip().partition(":")
    if not sep or kind not in KINDS:
        raise ValueError(f"unknown data source {spec!r}: it must start with one of {', '.join(k + ':' for k in KINDS)} (e.g. {EXAMPLES})")
    target, _, query = rest.partition("?")
    target = target.strip()
    if not target:
        raise ValueError(f"data source {spec!r} names no {'split' if kind == 'generator' else 'path or id'} after '{kind}:'")
    options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=False)) if query else {}
    unknown = sorted(set(options) - set(OPTION_KEYS[kind]))
    if unknown:
        allowed = ", ".join(OPTION_KEYS[kind]) or "none"
        raise ValueError(f"data source {spec!r}: unknown option(s) {unknown}; options for '{kind}:' are: {allowed}")
    if kind == "generator" and target not in ("train", "test"):
        raise ValueError(f"generator split {target!r} does not exist: use generator:train or generator:test")
    if kind in ("gsm8k", "openmath", "dapo", "file") and not target.lower().endswith(FILE_SUFFIXES):
        raise ValueError(f"data file {target!r} must end in one of {', '.join(FILE_SUFFIXES)}")
    if kind == "file":
        missing = [k for k in ("question", "answer") if not options.get(k)]
        if missing:
            raise ValueError(f"data source {spec!r} needs a column mapping: add ?question=COLUMN&answer=COLUMN (missing: {', '.join(missing)})")
    return SourceSpec(kind, target, options)


def parse_levels(text: str) -> list[int]:
    """'1-3' -> [1, 2, 3]; '1,4' -> [1, 4]."""
    levels: set[int] = set()
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            levels.update(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    except ValueError:
        raise ValueError(f"levels={text!r} is not a list of level numbers: write e.g. levels=1-3 or levels=1,2,5") from None
    if not levels:
        raise ValueError(f"levels={text!r} selects no level")
    return sorted(levels)
