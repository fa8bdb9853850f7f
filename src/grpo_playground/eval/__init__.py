"""Accuracy / format-rate evaluation. Torch-free at import; models load inside `evaluate` (a child process).

    from grpo_playground.eval.runner import evaluate, summary_line
    result = evaluate("tiny", "generator:test", n=100)      # or: python -m grpo_playground.cli.eval --model tiny ...

The app process imports nothing of eval/: what an eval wrote is read by grpo_playground.jobs.eval_results, and
its grading is grpo_playground.rewards.grading (the Chat tab grades a reply with it).
"""
