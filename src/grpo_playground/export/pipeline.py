"""export_run: a trained run (or a plain model) -> LoRA copy, merged HF model, GGUF files, GGUF LoRA adapter,
Ollama Modelfile, optional hub upload, and export.json with the checks. Runs in a child process (it
imports torch); the UI starts it with `cli.args.ExportArgs(...).command()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from grpo_playground.config.run_settings import run_settings
from grpo_playground.data.chat_template import run_template
from grpo_playground.export.converters import lora_job, run_conversions
from grpo_playground.export.gguf_files import check_types, model_gguf_jobs, quantize_types
from grpo_playground.export.hub import push_folder
from grpo_playground.export.modelfile import write_modelfile
from grpo_playground.contracts.layout import (
    ADAPTER_CONFIG, BASE_MODEL_SUFFIX, EXPORT_LOG, EXPORT_LORA_DIR, EXPORT_MERGED_DIR, EXPORT_RESULT, LORA_GGUF_SUFFIX,
)
from grpo_playground.contracts.process import write_json_atomic
from grpo_playground.contracts.states import TRAINED_STAGES
from grpo_playground.run_layout import adapter_dir, export_dir, exports_dir
from grpo_playground.tags import DEFAULT_TAGS, Tags


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:60] or "model"


def pick_stage(run_dir: Path, stage: str | None) -> str:
    """The stage whose adapter to export: the given one, else grpo when it exists, else sft."""
    if stage is not None and stage not in TRAINED_STAGES:
        raise ValueError(f"unknown stage {stage!r}: use one of {', '.join(TRAINED_STAGES)}")
    latest_first = tuple(reversed(TRAINED_STAGES))
    for candidate in [stage] if stage else latest_first:
        if (adapter_dir(run_dir, candidate) / ADAPTER_CONFIG).is_file():
            return candidate
    present = [s for s in latest_first if adapter_dir(run_dir, s).is_dir()]
    raise FileNotFoundError(
        f"{run_dir} has no {stage or 'grpo/ or sft/'} LoRA adapter (adapter_config.json); stages present: "
        f"{present or 'none'}: wait for the stage to finish, or pick another with --stage"
    )


def _merged_model(adapter_dir: Path | None, model: str | None, target: Path, served: tuple[Tags, bool] | None = None):
    """Load base (+ adapter, merged into the weights) in float32, save it as a plain HF folder in target;
    `served` (a run's tags and prefill) bakes the run's chat template (data.chat_template.run_template) into the
    saved tokenizer, so every consumer of the GGUF (llama.cpp chat, llama-server, LM Studio) prompts the model as
    training did, even when the client sends no system prompt."""
    from grpo_playground.models import load_model_and_tokenizer

    loaded, tokenizer = load_model_and_tokenizer(str(adapter_dir or model), dtype="float32", device="cpu", trainable=False)
    if adapter_dir is not None:
        loaded = loaded.merge_and_unload()
    loaded.eval()
    if served and tokenizer.chat_template:
        tokenizer.chat_template = run_template(tokenizer.chat_template, *served)
    loaded.save_pretrained(target)
    tokenizer.save_pretrained(target)
    _fix_byte_level_decoder(target / "tokenizer.json")
    return loaded, tokenizer


def _base_with_tokenizer(base: Path, merged: Path, target: Path) -> Path:
    """The base model's weights and config (symlinks, no copy) with the merged folder's tokenizer files:
    base GGUF + GGUF LoRA must chat like the merged file (same vocabulary, same template and prefill)."""
    model_files = {"config.json", "generation_config.json"}
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for item in base.iterdir():
        if item.name in model_files or item.suffix == ".safetensors" or item.name.endswith(".safetensors.index.json"):
            (target / item.name).symlink_to(item.resolve())
    for item in merged.iterdir():
        if item.is_file() and not (target / item.name).exists() and item.suffix != ".safetensors":
            shutil.copyfile(item, target / item.name)
    return target


def _fix_byte_level_decoder(tokenizer_json: Path) -> None:
    """A byte-level BPE needs a ByteLevel decoder. Tokenizers that transformers rebuilds from a GGUF (the
    dequantized smollm2) get a SentencePiece-style ByteFallback decoder instead; llama.cpp's converter then
    writes an SPM vocab that crashes llama.cpp at run time. Decoding is the same for these vocabularies."""
    if not tokenizer_json.is_file():
        return
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    pre, decoder = data.get("pre_tokenizer") or {}, data.get("decoder") or {}
    byte_level = pre.get("type") == "ByteLevel" or any(p.get("type") == "ByteLevel" for p in pre.get("pretokenizers", []))
    parts = decoder.get("decoders", [decoder])
    if byte_level and any(p.get("type") == "ByteFallback" for p in parts):
        data["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        tokenizer_json.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


@contextlib.contextmanager
def _recorded(result_file: Path, result: dict):
    """export.json says how the export goes, for the UI to read like training's status.json: "running" from the
    start, then "finished" with the files and checks, or "failed" with the error (which is raised on)."""
    write_json_atomic(result_file, result)
    try:
        yield
    except BaseException as error:
        result.update(state="failed", error=f"{type(error).__name__}: {error}"[:500])
        write_json_atomic(result_file, result)
        raise
    result["state"] = "finished"
    write_json_atomic(result_file, result)


def export_run(
    run_dir: str | Path | None = None,
    *,
    model: str | None = None,
    stage: str | None = None,
    gguf: list[str] | tuple[str, ...] = ("q4_k_m",),
    lora_gguf: bool = False,
    out_dir: str | Path | None = None,
    push_to_hub: str | None = None,
    verify: bool = True,
    verify_tokens: int = 24,
    tags: Tags | None = None,
    say=print,
) -> dict:
    """Export a run's LoRA stage (or a plain model) and return the export.json content.

    tags: None takes the run's recipe. A run's export writes its chat template with the run's system prompt (used
    when a conversation has none) and its prefill of the opening reasoning tag, so llama.cpp and Ollama prompt the
    model as training did.

    Files in out_dir (default RUN_DIR/export/<stage>/ or exports/<model>/): `lora/` (the adapter),
    `merged/` (HF folder), `<name>.<type>.gguf` for each type (f16 always), with lora_gguf also
    `<name>.lora.gguf` plus `<name>.base.f16.gguf` to run it on, `Modelfile`, `export.json` (its "state": running,
    finished or failed, with "error"), `export.log`.
    """
    from grpo_playground.models import hf_dir, resolve_model

    if (run_dir is None) == (model is None):
        raise ValueError("give exactly one of a run folder (--run RUN_DIR) or a model (--model NAME_OR_DIR)")
    types = check_types(gguf)
    started = time.time()
    adapter = None
    if run_dir is not None:
        run_dir = Path(run_dir).resolve()
        if not run_dir.is_dir():
            raise FileNotFoundError(f"run folder {run_dir} does not exist: give a folder under runs/")
        stage = pick_stage(run_dir, stage)
        adapter, name = adapter_dir(run_dir, stage), _slug(f"{run_dir.name}-{stage}")
        out = Path(out_dir or export_dir(run_dir, stage)).resolve()
        base_spec = resolve_model(str(adapter)).base
        settings = run_settings(adapter)
    else:
        if lora_gguf:
            raise ValueError("--lora-gguf needs a run with a LoRA adapter (--run RUN_DIR), not a plain --model")
        base_spec = resolve_model(model)
        name = _slug(base_spec.name if "/" not in base_spec.name and os.sep not in base_spec.name else Path(base_spec.name).name)
        out = Path(out_dir or exports_dir() / name).resolve()
        settings = None
    tags = tags or (settings.tags if settings else DEFAULT_TAGS)
    prefill = settings.prefill_reasoning if settings else False
    out.mkdir(parents=True, exist_ok=True)
    log = out / EXPORT_LOG
    result: dict = {"state": "running", "started": started, "source": str(run_dir or model), "stage": stage,
                    "base_model": base_spec.name, "dir": str(out), "tags": tags.to_dict(), "prefill_reasoning": prefill,
                    "files": {}, "checks": {}, "errors": []}

    with _recorded(out / EXPORT_RESULT, result):
        if adapter is not None:
            say(f"copying the LoRA adapter {adapter} -> {out / EXPORT_LORA_DIR}")
            shutil.copytree(adapter, out / EXPORT_LORA_DIR, dirs_exist_ok=True)
            result["files"]["lora"] = str(out / EXPORT_LORA_DIR)
        say(f"{'merging the adapter into' if adapter else 'loading'} {base_spec.name} (float32)")
        merged_dir = out / EXPORT_MERGED_DIR
        hf_model, tokenizer = _merged_model(adapter, model, merged_dir, (tags, prefill) if adapter is not None else None)
        result["files"]["merged"] = str(merged_dir)

        say(f"writing GGUF {', '.join(types)} (f16 is always written: the reference for the checks)")
        files, jobs = model_gguf_jobs(merged_dir, out, name, types)
        if lora_gguf:  # converted by the same child as the merged model's files
            say("writing the GGUF LoRA adapter and the base f16 GGUF it runs on")
            base_dir = _base_with_tokenizer(hf_dir(base_spec), merged_dir, out / "base")
            lora_file = out / f"{name}{LORA_GGUF_SUFFIX}"
            base_files, base_jobs = model_gguf_jobs(base_dir, out, f"{name}{BASE_MODEL_SUFFIX}", [])
            jobs += [lora_job(out / EXPORT_LORA_DIR, base_dir, lora_file), *base_jobs]
        run_conversions(jobs, log)
        quantize_types(files, out, name, types)
        result["files"].update({f"gguf_{t}": str(p) for t, p in files.items()})
        if lora_gguf:
            shutil.rmtree(base_dir)
            result["files"]["lora_gguf"] = str(lora_file)
            result["files"]["base_gguf_f16"] = str(base_files["f16"])

        main_gguf = files[types[0]]
        result["modelfile"] = write_modelfile(out, main_gguf, tokenizer, tags)
        result["files"]["modelfile"] = result["modelfile"]["path"]

        if verify:
            from grpo_playground.export.verify import check_answers, compare_greedy

            say(f"checking: greedy f16 GGUF vs HF ({verify_tokens} tokens per prompt)")
            result["checks"]["greedy_f16"] = compare_greedy(hf_model, tokenizer, files["f16"], tags=tags, max_new_tokens=verify_tokens)
            if lora_gguf:
                result["checks"]["greedy_base_plus_lora"] = compare_greedy(
                    hf_model, tokenizer, Path(result["files"]["base_gguf_f16"]), Path(result["files"]["lora_gguf"]),
                    tags=tags, max_new_tokens=verify_tokens)
            for gguf_type in types:
                if gguf_type != "f16":
                    # a run's file is asked as a bare client would: one user message, no system prompt
                    result["checks"][f"answers_{gguf_type}"] = check_answers(files[gguf_type], tags, system=adapter is None)
            for key, check in result["checks"].items():
                if check.get("match") is False:
                    bad = [c for c in check["cases"] if not c["match"]]
                    result["errors"].append(
                        f"{key}: {len(bad)}/{len(check['cases'])} prompts differ; first at token {bad[0]['first_difference']}: "
                        f"HF {bad[0]['hf']!r} vs GGUF {bad[0]['gguf']!r}")
                if check.get("answers") is False:
                    result["errors"].append(f"{key}: {check['file']} loaded but gave an empty answer")

        if push_to_hub:
            say(f"pushing {out} to the hub repo {push_to_hub}")
            result["hub"] = push_folder(out, push_to_hub)
            if not result["hub"]["pushed"]:
                result["errors"].append(result["hub"]["message"])
        result["files"]["export_json"] = str(out / EXPORT_RESULT)
        result["seconds"] = round(time.time() - started, 1)
    return result
