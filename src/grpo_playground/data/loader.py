"""`load_examples(spec, ...)`: any source spec -> normalized examples plus the skipped rows counted by reason."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from grpo_playground.data.adapters import ADAPTERS, SCHEMAS, Skip, check_columns, mapped_row_adapter
from grpo_playground.data.answers import normalize_number
from grpo_playground.data.examples import LoadResult, make_example
from grpo_playground.data.readers import HUB_DATASETS, BadRow, iter_file_rows, iter_hub_rows
from grpo_playground.data.spec import COLUMN_KEYS, SourceSpec, parse_levels, parse_spec
from grpo_playground.tags import DEFAULT_TAGS, Tags

# The generator has no natural size: without n, this many problems.
DEFAULT_GENERATOR_N = 1000
MAX_EXAMPLES = 1_000_000


def load_examples(
    spec: str | SourceSpec, n: int | None = None, tags: Tags = DEFAULT_TAGS, with_solution: bool = False, seed: int = 0
) -> LoadResult:
    """Load up to `n` normalized examples (all rows when None) from a source spec (see grpo_playground.data.spec).

    File and hub sources keep their row order (the first n rows that normalize); `seed` drives the generator.
    `with_solution=True` adds the tagged SFT `completion`; rows without a worked solution are then skipped.
    """
    source = spec if isinstance(spec, SourceSpec) else parse_spec(spec)
    if n is not None and not 1 <= n <= MAX_EXAMPLES:
        raise ValueError(f"n={n}: ask for between 1 and {MAX_EXAMPLES} examples (or None for all)")
    if source.kind == "generator":
        return _generator_examples(source, n or DEFAULT_GENERATOR_N, tags, with_solution, seed)
    if source.kind == "hub":
        fmt, config, split = HUB_DATASETS.get(source.target, (None, None, "train"))
        fmt = source.options.get("format", fmt)
        rows = iter_hub_rows(source.target, source.options.get("config", config), source.options.get("split", split))
        if fmt is None and "question" not in source.options:
            raise ValueError(
                f"hub dataset {source.target!r} has no known schema: add ?format=gsm8k|openmath|dapo "
                "or a column mapping ?question=COL&answer=COL"
            )
    else:
        fmt = None if source.kind == "file" else source.kind
        rows = iter_file_rows(source.target)
    if fmt is not None and fmt not in ADAPTERS:
        raise ValueError(f"format={fmt!r} is unknown: use one of {sorted(ADAPTERS)}")
    if fmt is not None:
        adapter, needed = ADAPTERS[fmt], SCHEMAS[fmt][with_solution]
    else:
        columns = {k: source.options[k] for k in COLUMN_KEYS if source.options.get(k)}
        adapter, needed = mapped_row_adapter(columns), tuple(columns[k] for k in ("question", "answer"))
    return _adapt_rows(rows, adapter, needed, str(source), n, tags, with_solution)


def _adapt_rows(rows: Iterable, adapter, needed, source: str, n: int | None, tags: Tags, with_solution: bool) -> LoadResult:
    examples: list[dict] = []
    skipped: Counter[str] = Counter()
    seen = 0
    checked = False
    for row in rows:
        if n is not None and len(examples) >= n:
            break
        seen += 1
        if isinstance(row, BadRow):
            skipped[row.reason] += 1
            continue
        if not checked:
            check_columns(row, needed, source)
            checked = True
        try:
            examples.append(adapter(row, tags, with_solution, source))
        except Skip as skip:
            skipped[str(skip)] += 1
    if seen == 0:
        raise ValueError(f"data source {source!r} holds no rows")
    return LoadResult(examples, dict(skipped), seen)


def _generator_examples(source: SourceSpec, n: int, tags: Tags, with_solution: bool, seed: int) -> LoadResult:
    from grpo_playground.data import generator

    levels = parse_levels(source.options["levels"]) if "levels" in source.options else generator.LEVELS
    problems = generator.generate_problems(n, split=source.target, seed=seed, levels=levels)
    examples = []
    for problem in problems:
        completion = generator.format_solution(problem, tags) if with_solution else None
        answer = normalize_number(problem.answer)
        if answer is None:  # a generator bug, not a data row to skip
            raise ValueError(f"generator answer {problem.answer!r} is not a plain number ({problem.question!r})")
        examples.append(make_example(problem.question, answer, str(source), tags, completion, problem.level))
    return LoadResult(examples, {}, len(problems))


def to_hf_dataset(examples: list[dict]):
    """A `datasets.Dataset` of the normalized rows, the form TRL's trainers take.

    Columns that are None in every row (`level` for most sources) are left out: datasets would type them
    as null, which breaks concatenation with typed data."""
    if not examples:
        raise ValueError("no examples to build a dataset from: check the source and the skipped-row counts")
    import datasets

    empty = {key for key in examples[0] if all(row.get(key) is None for row in examples)}
    return datasets.Dataset.from_list([{k: v for k, v in row.items() if k not in empty} for row in examples])
