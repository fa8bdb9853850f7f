"""`evaluate(model, data, n, ...)`: render prompts, generate greedily in batches, score, summarize.

Runs in its own process (pipelines/eval.py), never in the UI. When the model is a run's adapter folder
(runs/<id>/sft or runs/<id>/grpo), the run's recipe supplies the tags and the prefill setting it was trained
with (grpo_playground.config.run_settings), so the eval prompt is the training prompt.
"""

from __future__ import annotations

import inspect
import sys
import time

from grpo_playground.data import load_examples
from grpo_playground.data.chat_template import render_prompt
from grpo_playground.eval.backends import make_backend
from grpo_playground.rewards.grading import grade_completion, summarize
from grpo_playground.config.run_settings import run_settings
from grpo_playground.tags import DEFAULT_TAGS, Tags

MAX_N = 10_000
MAX_NEW_TOKENS = 4096
MAX_BATCH = 512


def _check_bounds(n: int, batch_size: int, max_new_tokens: int) -> None:
    for name, value, high in (("n", n, MAX_N), ("batch_size", batch_size, MAX_BATCH), ("max_new_tokens", max_new_tokens, MAX_NEW_TOKENS)):
        if not isinstance(value, int) or not 1 <= value <= high:
            raise ValueError(f"{name}={value!r}: use an integer between 1 and {high}")


def evaluate(
    model: str,
    data: str = "generator:test",
    n: int = 100,
    batch_size: int = 16,
    max_new_tokens: int = 256,
    tags: Tags | None = None,
    prefill_reasoning: bool | None = None,
    enable_thinking: bool = False,
    seed: int = 0,
    backend: str = "transformers",
    device: str | None = None,
    dtype: str | None = None,
    log=lambda message: print(message, file=sys.stderr, flush=True),
    engine=None,
    engine_seconds: float = 0.0,
) -> dict:
    """Evaluate `model` on the first `n` examples of `data`; returns the summary plus every scored completion.

    engine: an already started backend set to `model` (evaluate_each shares one across checkpoints), which took
    engine_seconds to start (counted in this result's `seconds`; 0 for the checkpoints after the first).

    tags / prefill_reasoning: None takes the run's recipe when `model` is a run folder, else the defaults
    (the recipe's tags, prefill on: the RunConfig default).
    """
    _check_bounds(n, batch_size, max_new_tokens)
    from_run = run_settings(model)
    tags = tags or (from_run.tags if from_run else DEFAULT_TAGS)
    run_prefill = from_run.prefill_reasoning if from_run else True
    prefill = run_prefill if prefill_reasoning is None else prefill_reasoning
    loaded = load_examples(data, n=n, tags=tags, seed=seed)
    examples = loaded.examples
    if not examples:
        raise ValueError(f"data source {data!r} gave no usable examples ({loaded.summary()})")
    log(f"eval: {loaded.summary()}")

    started = time.monotonic()
    if engine is None:
        engine = make_backend(backend, model, device=device, dtype=dtype)
        engine_seconds = time.monotonic() - started
    engine_ready = time.monotonic()
    prompts = [render_prompt(engine.tokenizer, e["prompt"], tags, prefill, enable_thinking) for e in examples]
    # Batches of similar length waste less compute on padding; the order is fixed, so results are reproducible.
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    generations = [None] * len(prompts)
    step = len(order) if getattr(engine, "schedules_batches", False) else batch_size  # vLLM batches by itself
    for start in range(0, len(order), step):
        chunk = order[start : start + step]
        for i, generation in zip(chunk, engine.generate([prompts[i] for i in chunk], max_new_tokens)):
            generations[i] = generation
        log(f"eval: {min(start + step, len(order))}/{len(order)} completions ({time.monotonic() - started:.0f} s)")

    scores = [grade_completion(g.text, e["answer"], tags, g.n_tokens, g.truncated) for g, e in zip(generations, examples)]
    summary = summarize(scores, [e["level"] for e in examples])
    settings = {
        "backend": backend, "batch_size": batch_size, "max_new_tokens": max_new_tokens, "prefill_reasoning": prefill,
        "enable_thinking": enable_thinking, "tags": tags.to_dict(), "seed": seed,
        "recipe": str(from_run.recipe) if from_run else None,
    }
    completions = [
        {"problem": e["problem"], "answer": e["answer"], "level": e["level"], "text": g.text, **s.to_dict()}
        for e, g, s in zip(examples, generations, scores)
    ]
    return {
        "model": model, "data": data, **summary, "skipped": loaded.skipped,
        # seconds: model load + generation; generate_seconds: generation alone (vLLM's engine start is ~50 s)
        "seconds": round(time.monotonic() - engine_ready + engine_seconds, 1),
        "generate_seconds": round(time.monotonic() - engine_ready, 2), "engine_seconds": round(engine_seconds, 1),
        "settings": settings, "example_prompt": prompts[0],
        "completions": completions,
    }


def evaluate_each(models: list[str], backend: str = "transformers", device: str | None = None,
                  dtype: str | None = None, **kwargs):
    """evaluate() each model in turn, yielding its result; checkpoints a started engine can switch to (vLLM: the
    base and its adapters) share it, so three checkpoints of one run cost one engine start."""
    defaults = inspect.signature(evaluate).parameters  # before an engine starts, with evaluate()'s own defaults
    _check_bounds(*(kwargs.get(name, defaults[name].default) for name in ("n", "batch_size", "max_new_tokens")))
    engine = None
    for i, model in enumerate(models):
        began, started_one = time.monotonic(), False
        if engine is None or not getattr(engine, "switch_to", lambda _: False)(model):
            _close(engine)
            family = {"family": tuple(models[i + 1:])} if backend == "vllm" else {}
            engine, started_one = make_backend(backend, model, device=device, dtype=dtype, **family), True
        yield evaluate(model, backend=backend, device=device, dtype=dtype, engine=engine,
                       engine_seconds=time.monotonic() - began if started_one else 0.0, **kwargs)
    _close(engine)


def _close(engine) -> None:
    if engine is not None and hasattr(engine, "close"):
        engine.close()


def summary_line(result: dict) -> dict:
    """The result without the per-completion detail: what the CLI prints last and the UI tabulates."""
    return {k: v for k, v in result.items() if k not in ("completions", "example_prompt")}
