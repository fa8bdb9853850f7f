"""Accuracy / format-rate evaluation. Torch-free at import; models load inside `evaluate` (a child process).

    from grpo_playground.eval import evaluate, summary_line
    result = evaluate("tiny", "generator:test", n=100)      # or: python -m pipelines.eval --model tiny ...
"""

from grpo_playground.eval.backends import BACKENDS, Generation, make_backend
from grpo_playground.eval.metrics import CompletionScore, score_completion, summarize
from grpo_playground.eval.runner import evaluate, run_recipe_settings, summary_line

__all__ = [
    "BACKENDS", "CompletionScore", "Generation", "evaluate", "make_backend", "run_recipe_settings",
    "score_completion", "summarize", "summary_line",
]
