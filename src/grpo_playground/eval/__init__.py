"""Accuracy / format-rate evaluation. Torch-free at import; models load inside `evaluate` (a child process).

    from grpo_playground.eval import evaluate, summary_line
    result = evaluate("tiny", "generator:test", n=100)      # or: python -m pipelines.eval --model tiny ...
"""

from grpo_playground.eval.backends import BACKENDS, make_backend
from grpo_playground.eval.generation import Generation
from grpo_playground.eval.metrics import CompletionGrade, grade_completion, summarize
from grpo_playground.eval.runner import evaluate, evaluate_each, summary_line

__all__ = [
    "BACKENDS", "CompletionGrade", "Generation", "evaluate", "evaluate_each", "make_backend",
    "grade_completion", "summarize", "summary_line",
]
