"""UI side of training jobs: run folders, child processes (start / stop / resume), the queue, live files.

No torch here: the UI imports this package. The job itself is `python -m grpo_playground.cli.train` run by
`python -m grpo_playground.jobs.supervisor RUN/job.json` in its own session, as every kind of job is (see
docs/ARCHITECTURE.md, "Background jobs"). Each name is imported from the module that defines it (runs, control, feed,
exports, ...); this package re-exports nothing.
"""
