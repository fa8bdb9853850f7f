"""Accuracy / format-rate evaluation. Torch-free at import; models load inside `evaluate` (a child process).

    from grpo_playground.eval.runner import evaluate, summary_line
    result = evaluate("tiny", "generator:test", n=100)      # or: python -m grpo_playground.cli.eval --model tiny ...

This package file imports nothing: the app process imports only `eval.results` (what an eval wrote) and
`eval.metrics` (how eval grades a reply), and importing either loads this file first, never the runner.
"""
