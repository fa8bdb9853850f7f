"""A stage's data as the model will see it, before Start: the source's first rows rendered through the model's own
chat template (the same `load_examples` + `render_examples` the stage trains on), each row's gold answer as the
rewards receive it, and the rows skipped on the way with their reasons.

It loads the model's tokenizer (transformers), which the app process never imports, so the app runs it as a child:

    python -m grpo_playground.data.preview RECIPE.yaml --stage grpo --rows 3    # one JSON object on stdout
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from grpo_playground.config import RunConfig
from grpo_playground.contracts.states import TRAINED_STAGES

PREVIEW_ROWS = 3
MAX_PREVIEW_ROWS = 10
MAX_FIELD_CHARS = 4000  # per shown text: a file's 10 MB cell must not travel to a browser


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_FIELD_CHARS:
        return text
    return f"{text[:MAX_FIELD_CHARS]}... [cut: {len(text):,} characters in all]"


def stage_source(cfg: RunConfig, stage: str) -> tuple[str, int]:
    """(source spec, number of examples) a stage trains on: SFT's, else GRPO's."""
    return (cfg.data.sft_source, cfg.data.n_sft) if stage == "sft" else (cfg.data.grpo_source, cfg.data.n_grpo)


@dataclass
class PreviewRow:
    prompt: str  # the rendered prompt: what the model reads before its first token
    answer: str  # the gold answer, as the reward functions get it
    problem: str
    level: int | None
    completion: str | None  # SFT: the target the model learns to write after the prompt


@dataclass
class DataPreview:
    stage: str
    source: str
    model: str
    rows: list[PreviewRow]
    rows_seen: int
    skipped: dict[str, int]  # reason -> rows

    def to_dict(self) -> dict:
        return asdict(self)


def preview(cfg: RunConfig, stage: str, rows: int = PREVIEW_ROWS) -> DataPreview:
    from grpo_playground.data import load_examples
    from grpo_playground.data.chat_template import render_examples
    from grpo_playground.models import load_tokenizer

    if stage not in TRAINED_STAGES:
        raise ValueError(f"stage {stage!r}: preview the data of 'sft' or 'grpo'")
    if not 1 <= rows <= MAX_PREVIEW_ROWS:
        raise ValueError(f"rows={rows}: preview between 1 and {MAX_PREVIEW_ROWS} rows")
    spec, n = stage_source(cfg, stage)
    tags = cfg.rewards.tags
    loaded = load_examples(spec, n=min(rows, n), tags=tags, with_solution=stage == "sft", seed=cfg.data.seed)
    rendered = render_examples(loaded.examples, load_tokenizer(cfg.model.name_or_path), tags,
                               cfg.data.prefill_reasoning)
    shown = [PreviewRow(_cut(r["prompt"]), _cut(str(r["answer"])), _cut(r["problem"]), r.get("level"),
                        _cut(r.get("completion"))) for r in rendered]
    return DataPreview(stage, spec, cfg.model.name_or_path, shown, loaded.rows_seen, dict(loaded.skipped))


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.config import load_recipe

    parser = argparse.ArgumentParser(prog="python -m grpo_playground.data.preview", description=__doc__.split("\n")[0])
    parser.add_argument("recipe", help="recipe YAML")
    parser.add_argument("--stage", default="grpo", choices=TRAINED_STAGES)
    parser.add_argument("--rows", type=int, default=PREVIEW_ROWS)
    args = parser.parse_args(argv)
    try:
        result = {"preview": preview(load_recipe(args.recipe), args.stage, args.rows).to_dict()}
    except (ValueError, OSError, RuntimeError, ImportError) as error:  # what a user's recipe or source can cause
        result = {"error": f"{type(error).__name__}: {error}" if not isinstance(error, ValueError) else str(error)}
    print(json.dumps(result))
    return 0 if "preview" in result else 1


if __name__ == "__main__":
    sys.exit(main())
