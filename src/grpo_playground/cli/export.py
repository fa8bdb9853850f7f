"""Export a trained run (or a plain model) to GGUF for llama.cpp / Ollama, fully offline.

    grpo-playground export --run runs/RUN_ID --gguf q4_k_m                 # the grpo stage (sft if no grpo)
    grpo-playground export --run runs/RUN_ID --stage sft --gguf f16 q8_0 q4_k_m --lora-gguf
    grpo-playground export --model smollm2-135m --gguf q4_k_m               # a registry name or HF folder
    HF_TOKEN=... grpo-playground export --run runs/RUN_ID --push-to-hub you/my-reasoner

Writes lora/, merged/, NAME.<type>.gguf, Modelfile and export.json (with the greedy f16-vs-HF check) into
RUN_DIR/export/<stage>/ or exports/<model>/, and prints the written paths last, one per line.
Exit code 1 when a check failed or the push failed (the files are written anyway).
"""

from __future__ import annotations

import os
import sys

from grpo_playground.cli.args import ExportArgs
from grpo_playground.contracts.process import fail, keep_traceback


def main(argv: list[str] | None = None) -> int:
    from grpo_playground.export import export_run

    args = ExportArgs.parse_args(argv)
    keep_traceback()  # in a job: why it died goes to the file its supervisor reads
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    def say(message: str) -> None:
        print(f"[export] {message}", file=sys.stderr, flush=True)

    try:
        result = export_run(args.run, model=args.model, stage=args.stage, gguf=list(args.gguf), lora_gguf=args.lora_gguf,
                            out_dir=args.out, push_to_hub=args.push_to_hub, verify=not args.no_verify,
                            verify_tokens=args.verify_tokens, say=say)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        return fail(str(error), prefix="export failed")
    for problem in result["errors"]:
        say(f"PROBLEM: {problem}")
    if result.get("hub"):
        say(result["hub"]["message"])
    say(f"done in {result['seconds']} s")
    for path in result["files"].values():
        print(path)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
