"""The names of the files and folders the app, the jobs and the CLIs share (docs/ARCHITECTURE.md "Run folder").

Only names here: the paths built from them live in grpo_playground.run_layout. tests/test_run_layout.py greps that
no other module types one.
"""


def job_record(stem: str) -> str:
    """A background job's record in its folder: export -> export_job.json (a training run's: JOB_FILE)."""
    return f"{stem}_job.json"


def job_log(stem: str) -> str:
    """A background job's output in its folder: export -> export.log (a training run's: LOG_FILE)."""
    return f"{stem}.log"


# --- files in runs/<run_id>/ ----------------------------------------------------------------------------------
RECIPE_FILE = "recipe.yaml"  # the RunConfig the job runs (saved once, by whoever creates the run)
STATUS_FILE = "status.json"  # state, stage, step... (atomic writes: write_status)
RESUMES_KEY = "resumes"  # in status.json: how often the run was resumed (jobs.resume_run counts them)
LOG_FILE = "log.txt"  # the job's stdout + stderr
METRICS_FILE = "metrics.jsonl"  # one row per step
SAMPLES_FILE = "samples.jsonl"  # one GRPO group per logging step
DOCTOR_FILE = "doctor.jsonl"  # the doctor's findings
PREFLIGHT_FILE = "preflight.json"  # the pre-flight report
JOB_FILE = "job.json"  # the job's record (grpo_playground.jobs.record), written by the UI and its supervisor
STOP_FILE = "stop.request"  # created by the UI to ask for a stop
TRACEBACK_FILE = "traceback.txt"  # the training CLI's uncaught exception, if it died of one (contracts.process)
CHECKPOINTS_DIR = "checkpoints"  # checkpoints/<stage>/checkpoint-N/ (resume)
SWANLAB_DIR = "swanlog"  # SwanLab's offline logs, for a later `swanlab sync`
ADAPTER_CONFIG = "adapter_config.json"  # a finished stage's LoRA folder <stage>/ holds it (PEFT's name)
EXPORT_DIR = "export"  # export/<stage>/: lora/, merged/, *.gguf, Modelfile, export.json, export.log
EXPORT_RESULT = "export.json"  # the export's result and state, inside the export folder
EXPORT_LOG = job_log("export")  # the export's output (in the run folder for the UI's job; converters' in export/<stage>/)
EXPORT_JOB = job_record("export")  # written by the UI: the export process's pid and its export folder
SCALE_OUT_DIR = "scale_out"  # the run as a verl / OpenRLHF job (grpo_playground.export.scale_out), and its .zip
SCALE_OUT_RESULT = "scale_out.json"  # inside that folder: what it starts from, its rows, what does not carry over
SCALE_OUT_LOG = job_log(SCALE_OUT_DIR)  # the UI's scale-out job's output
SCALE_OUT_JOB = job_record(SCALE_OUT_DIR)  # the UI's scale-out job's record

# --- inside an export folder (export/<stage>/ or exports/<model>/) -------------------------------------------
EXPORT_LORA_DIR = "lora"  # a copy of the stage's LoRA adapter
EXPORT_MERGED_DIR = "merged"  # the merged HF model and its tokenizer (eval and chat render prompts with it)
LORA_GGUF_SUFFIX = ".lora.gguf"  # NAME.lora.gguf: the LoRA as a GGUF adapter...
BASE_MODEL_SUFFIX = ".base"  # ...and the base model it runs on, at f16 (GGUF files are NAME.<type>.gguf):
BASE_GGUF_SUFFIX = BASE_MODEL_SUFFIX + ".f16.gguf"  # NAME.base.f16.gguf

CONVERTER_GGUF_TYPES = ("f32", "f16", "bf16")  # NAME.<type>.gguf written by llama.cpp's converter...
QUANT_GGUF_TYPES = ("q8_0", "q6_k", "q5_k_m", "q4_k_m", "q4_0")  # ...and requantized from the f16 file
GGUF_TYPES = CONVERTER_GGUF_TYPES + QUANT_GGUF_TYPES


def traceback_of(job_record: str) -> str:
    """Where a background job's step writes why it failed, beside the job's record: export_job.json ->
    export_job.traceback.txt (a training run's step: TRACEBACK_FILE)."""
    return job_record.removesuffix(".json") + ".traceback.txt"


def base_gguf_of(lora_gguf_name: str) -> str:
    """The file name of the base GGUF that a NAME.lora.gguf adapter runs on."""
    return lora_gguf_name[: -len(LORA_GGUF_SUFFIX)] + BASE_GGUF_SUFFIX


# --- in the runs directory --------------------------------------------------------------------------------------
GPU_LOCK = ".gpu.lock"  # the training slot: an exclusive flock held by whichever job trains
EVALS_DIR = "evals"  # <runs>/evals/*.json: the Evaluate tab's results
EVAL_JOB = job_record("eval")  # <runs>/evals/: the evaluation job's pid and plan
EVAL_LOG = job_log("eval")  # <runs>/evals/: its output
COMPARISONS_DIR = "comparisons"  # <runs>/comparisons/<id>/: one "GRPO vs more SFT" experiment each, holding
COMPARISON_STEM = "comparison"  # the stem of its job's files:
COMPARISON_JOB = job_record(COMPARISON_STEM)  # its pid, plan and command (written by the UI),
COMPARISON_LOG = job_log(COMPARISON_STEM)  # its output, RECIPE_FILE (a copy of the recipe it runs),
COMPARISON_WORK = "work"  # the experiment's --work folder (data, run folders, PROGRESS_FILE)
COMPARISON_RESULT = "comparison_result"  # and its --out: comparison_result.json and .md
PROGRESS_FILE = "progress.json"  # the experiment's steps in order and each one's state
