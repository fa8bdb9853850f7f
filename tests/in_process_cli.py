"""A CLI's main(argv) run in the test process, its exit status and output kept as a child's would be: this process
has imported torch, transformers and PEFT already, where a child pays seconds to import them again."""

from __future__ import annotations

import io
import subprocess
from contextlib import redirect_stderr, redirect_stdout


def run_main(main, command: str, *args: str) -> subprocess.CompletedProcess:
    """`grpo-playground COMMAND ARGS` through `main`; argparse's usage errors come back as their exit status."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit:
            code = exit.code
    return subprocess.CompletedProcess(["grpo-playground", command, *args], code, out.getvalue(), err.getvalue())
