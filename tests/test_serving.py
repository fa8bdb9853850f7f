"""Chat backends as real child processes: a llama.cpp server on the packaged SmolLM2 GGUF, streamed over
OpenAI-compatible HTTP; crash, report, restart; the vLLM command line and its "cannot run here" message."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grpo_playground.models import MODELS, gguf_path
from grpo_playground.serving import (
    LLAMA_CPP,
    VLLM,
    BackendUnavailable,
    ChatError,
    ChatTarget,
    ServerFailed,
    ServerPool,
    discover_targets,
    llamacpp_command,
    llamacpp_server,
    stream_chat,
    vllm_command,
    vllm_server,
    vllm_unavailable_reason,
)
from grpo_playground.serving.backends import nvidia_gpu_present

QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smollm2_gguf():
    return str(gguf_path(MODELS["smollm2-135m"]))


@pytest.mark.slow  # a llama.cpp chat server
def test_llamacpp_server_streams_then_stops(smollm2_gguf):
    server = llamacpp_server(smollm2_gguf).start()
    try:
        assert server.state() == "running" and server.healthy()
        pieces = list(stream_chat(server.base_url, "x", QUESTION, temperature=0.0, max_tokens=12))
        assert len(pieces) > 1, "the reply should arrive in several streamed pieces"
        assert "".join(pieces).strip()
    finally:
        server.stop()
    assert server.state() == "stopped" and not server.healthy()


@pytest.mark.slow  # llama.cpp chat servers
def test_a_crashed_server_is_reported_and_restarted(smollm2_gguf):
    pool = ServerPool(max_servers=1)
    target = ChatTarget(LLAMA_CPP, smollm2_gguf, None, "smollm2")
    try:
        server, name, crash = pool.server_for(target)
        assert crash is None
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        assert server.state() == "crashed (exit -9)"
        again, name, crash = pool.server_for(target)
        assert crash is not None and "crashed (exit -9)" in crash and "log tail" in crash
        assert again.state() == "running"
        assert "".join(stream_chat(again.base_url, name, QUESTION, temperature=0.0, max_tokens=4))
    finally:
        pool.stop_all()


def test_a_broken_gguf_fails_with_the_server_log(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ServerFailed, match="crashed|did not answer") as caught:
        llamacpp_server(broken).start()
    assert "log tail" in str(caught.value)


def test_llamacpp_command_line(tmp_path):
    command = llamacpp_command(tmp_path / "m.q4_k_m.gguf", 8123, lora=tmp_path / "a.lora.gguf", gpu_layers=0)
    assert command[1:3] == ["-m", "llama_cpp.server"]
    text = " ".join(command)
    assert f"--model {tmp_path / 'm.q4_k_m.gguf'}" in text and "--port 8123" in text and "--host 127.0.0.1" in text
    assert f"--lora_path {tmp_path / 'a.lora.gguf'}" in text and "--n_gpu_layers 0" in text


def lora_dir(path, rank):
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": rank, "base_model_name_or_path": "Qwen/Qwen3-0.6B"}))
    return path


def test_vllm_command_serves_loras_unmerged(tmp_path):
    sft, grpo = lora_dir(tmp_path / "sft", 32), lora_dir(tmp_path / "grpo", 32)
    command = vllm_command("Qwen/Qwen3-0.6B", {"sft": sft, "grpo": grpo}, 8200)
    # run by this Python: no `vllm` script needed on PATH (the GPU machine carries vLLM as a bundle)
    assert command[:5] == [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "Qwen/Qwen3-0.6B"]
    assert "--enable-lora" in command
    assert command[command.index("--max-lora-rank") + 1] == "64"
    assert command[command.index("--lora-modules") + 1:][:2] == [f"sft={sft}", f"grpo={grpo}"]
    assert command[command.index("--port") + 1] == "8200"
    # an adapter of rank 100 needs vLLM's next allowed maximum
    big = vllm_command("Qwen/Qwen3-0.6B", {"big": lora_dir(tmp_path / "big", 100)}, 8200)
    assert big[big.index("--max-lora-rank") + 1] == "128"
    with pytest.raises(ValueError, match="LoRA name"):
        vllm_command("Qwen/Qwen3-0.6B", {"bad name!": sft}, 8200)
    eager = vllm_command("Qwen/Qwen3-0.6B", {"sft": sft}, 8200, extra_args=("--enforce-eager",))
    assert eager[-1] == "--enforce-eager"


def tag_registered_lora(path: Path) -> Path:
    """What a run with data.register_tags writes when the tags were new tokens: PEFT trainable_token_indices."""
    lora_dir(path, 16)
    config = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**config, "trainable_token_indices": {"embed_tokens": [49152, 49153]}}))
    return path


def test_vllm_refuses_a_tag_registered_adapter_and_names_the_fix(tmp_path):
    from grpo_playground.serving.backends import vllm_adapter_problem
    from grpo_playground.serving.client import load_lora

    tagged, plain = tag_registered_lora(tmp_path / "tagged"), lora_dir(tmp_path / "plain", 16)
    assert vllm_adapter_problem(plain) is None
    problem = vllm_adapter_problem(tagged)
    assert "registered tag tokens" in problem and "export the merged model" in problem
    assert "data.register_tags: false" in problem
    with pytest.raises(ValueError, match="register_tags: false"):
        vllm_command("Qwen/Qwen3-0.6B", {"plain": plain, "tagged": tagged}, 8200)
    # hot-loading is refused before any request: no server listens on this port, and no connection error is raised
    with pytest.raises(ChatError, match="export the merged model"):
        load_lora("http://127.0.0.1:9", "tagged", str(tagged))
    with pytest.raises(ValueError, match="not a PEFT LoRA folder"):
        vllm_adapter_problem(tmp_path / "nothing")


def test_vllm_env_turns_the_flashinfer_sampler_off_where_flashinfer_is_missing():
    import importlib.util

    from grpo_playground.serving.backends import vllm_env

    env = vllm_env()
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env.get("VLLM_USE_FLASHINFER_SAMPLER") == (None if importlib.util.find_spec("flashinfer") else "0")


@pytest.mark.skipif(nvidia_gpu_present(), reason="this machine has a GPU")
def test_vllm_says_plainly_why_it_cannot_run_here(tmp_path):
    reason = vllm_unavailable_reason()
    assert "no NVIDIA GPU" in reason and "llama.cpp" in reason and "pipelines.export" in reason
    with pytest.raises(BackendUnavailable, match="vLLM backend cannot run here"):
        vllm_server("Qwen/Qwen3-0.6B", {"sft": lora_dir(tmp_path / "sft", 8)})


def test_discovery_finds_exports_and_run_adapters(tmp_path, monkeypatch):
    runs, exports = tmp_path / "runs", tmp_path / "exports"
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(runs))
    monkeypatch.setenv("GRPO_PLAYGROUND_EXPORTS_DIR", str(exports))
    export = runs / "r1" / "export" / "grpo"
    export.mkdir(parents=True)
    for name in ("r1-grpo.q4_k_m.gguf", "r1-grpo.lora.gguf", "r1-grpo.base.f16.gguf"):
        (export / name).write_bytes(b"GGUF")
    lora_dir(runs / "r1" / "grpo", 8)
    (exports / "tiny").mkdir(parents=True)
    (exports / "tiny" / "tiny.q8_0.gguf").write_bytes(b"GGUF")
    targets = discover_targets()
    by_label = {t.label: t for t in targets}
    assert len(by_label) == len(targets)
    assert "llama.cpp · smollm2-135m" in by_label
    assert by_label["llama.cpp · tiny · q8_0"].lora is None
    paired = by_label["llama.cpp · r1 · grpo · f16 + GGUF LoRA"]
    assert paired.model.endswith("r1-grpo.base.f16.gguf") and paired.lora.endswith("r1-grpo.lora.gguf")
    assert by_label["llama.cpp · r1 · grpo · q4_k_m"].model.endswith("r1-grpo.q4_k_m.gguf")
    adapter = by_label["vLLM · r1 · grpo · LoRA on Qwen3-0.6B"]
    assert adapter.model == "Qwen/Qwen3-0.6B" and adapter.lora == str(runs / "r1" / "grpo")


def test_an_offline_machine_lists_no_hub_model_it_cannot_load(tmp_path, monkeypatch):
    """The H200 Space run listed Qwen3-0.6B ... 8B for vLLM with the hub unreachable: each would fail at Send."""
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty hub cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    hub = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # a hub that answers
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.server_address[1]}")
        online = {t.label for t in discover_targets()}
    finally:
        hub.shutdown()
        hub.server_close()
    assert "vLLM · qwen3-8b" in online
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = {t.label for t in discover_targets()}
    assert not any("qwen3" in label for label in offline)
    assert "vLLM · tiny" in offline and "llama.cpp · smollm2-135m" in offline  # local models stay


def test_chat_labels_name_the_run_stage_and_quantization_up_front(tmp_path, monkeypatch):
    """Issue 22 item 6: entries were long relative paths cut in the dropdown, so f16 and q4_k_m looked alike."""
    runs = tmp_path / "runs"
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(runs))
    monkeypatch.setenv("GRPO_PLAYGROUND_EXPORTS_DIR", str(tmp_path / "exports"))
    run = runs / "20261201-093012-quick-ab12"
    (run / "export" / "grpo").mkdir(parents=True)
    for quant in ("f16", "q4_k_m"):
        (run / "export" / "grpo" / f"quick-grpo.{quant}.gguf").write_bytes(b"GGUF")
    lora_dir(run / "sft", 8)
    lora_dir(run / "grpo", 8)  # on a GGUF model's converted folder (models.loading's cache)
    config = json.loads((run / "grpo" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "/data/cache/models/smollm2-135m-449235ffa596"
    (run / "grpo" / "adapter_config.json").write_text(json.dumps(config))
    for folder in ("a", "b"):  # the same file name in two export folders
        (tmp_path / "exports" / folder).mkdir(parents=True)
        (tmp_path / "exports" / folder / "m.q8_0.gguf").write_bytes(b"GGUF")
    labels = [t.label for t in discover_targets()]
    assert "llama.cpp · quick · grpo · f16 (12-01 09:30)" in labels
    assert "llama.cpp · quick · grpo · q4_k_m (12-01 09:30)" in labels
    assert "vLLM · quick · sft · LoRA on Qwen3-0.6B (12-01 09:30)" in labels
    assert "vLLM · quick · grpo · LoRA on smollm2-135m (12-01 09:30)" in labels
    # what a ~30-character dropdown shows still tells the two quantizations apart
    assert len({label[:34] for label in labels if label.startswith("llama.cpp · quick · grpo")}) == 2
    twins = sorted(label for label in labels if label.startswith("llama.cpp · m · q8_0"))
    assert twins == [f"llama.cpp · m · q8_0 [{tmp_path / 'exports' / f / 'm.q8_0.gguf'}]" for f in ("a", "b")]


# The llama.cpp eval backend against transformers on one exported model: tests/test_export.py
# (test_qwen_architectures_convert_decode_and_evaluate_like_hf), beside the export it reads.
def test_eval_backend_refuses_a_non_gguf_model_clearly(tmp_path):
    from grpo_playground.eval.engine_backends import LlamaCppBackend

    with pytest.raises(ValueError, match="needs a .gguf file"):
        LlamaCppBackend(str(tmp_path))


@pytest.mark.slow  # the smoke CLI and its chat server
def test_chat_smoke_cli_proves_a_backend(smollm2_gguf):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "pipelines.chat_smoke", *args], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)

    ok = run("--backend", "llama.cpp", "--model", smollm2_gguf, "--max-tokens", "8")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(ok.stdout.splitlines()[0])["reply"].strip()
    if not nvidia_gpu_present():
        refused = run("--backend", "vllm", "--model", "Qwen/Qwen3-0.6B")
        assert refused.returncode == 1 and "vLLM backend cannot run here" in refused.stderr


def test_vllm_prompts_a_run_the_way_its_training_did(tmp_path):
    import shutil

    from grpo_playground.serving.backends import run_chat_template

    run = tmp_path / "run"
    adapter = lora_dir(run / "sft", 8)
    shutil.copyfile(ROOT / "assets" / "tiny" / "chat_template.jinja", adapter / "chat_template.jinja")
    assert run_chat_template(adapter, tmp_path / "t.jinja") is None  # no recipe: nothing known about prefill
    shutil.copyfile(ROOT / "recipes" / "tiny-cpu.yaml", run / "recipe.yaml")  # prefill_reasoning: true
    written = run_chat_template(adapter, tmp_path / "t.jinja")
    from jinja2 import Template

    rendered = Template(written.read_text()).render(messages=[{"role": "user", "content": "q"}], add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n<start_working_out>")
    assert rendered.startswith("<|im_start|>system\nYou are given a problem.")  # the run's system prompt by default
    command = vllm_command("assets/tiny", {"sft": adapter}, 8300, chat_template=written)
    assert command[command.index("--chat-template") + 1] == str(written)


def test_vllm_server_is_built_with_the_runs_template_and_hot_loading(tmp_path, monkeypatch):
    import shutil

    from grpo_playground.serving import backends

    run = tmp_path / "run"
    adapter = lora_dir(run / "grpo", 16)
    shutil.copyfile(ROOT / "assets" / "tiny" / "chat_template.jinja", adapter / "chat_template.jinja")
    shutil.copyfile(ROOT / "recipes" / "tiny-cpu.yaml", run / "recipe.yaml")
    # Only the machine check is bypassed: the server is built, not started (that needs a GPU and vllm).
    monkeypatch.setattr(backends, "vllm_unavailable_reason", lambda: None)
    server = backends.vllm_server("assets/tiny", {"grpo": adapter}, log_file=tmp_path / "whole.log")
    assert server.process is None and server.health_path == "/health"
    assert server.log_file == tmp_path / "whole.log"  # the proof keeps the whole log beside its results
    assert server.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    template = Path(server.command[server.command.index("--chat-template") + 1])
    assert template.read_text().endswith('{{ "<start_working_out>" }}{% endif %}')
    assert server.command[server.command.index("--port") + 1] == str(server.port)


SLOW_START = """
import http.server, os, sys, time
print("loading weights of a model", flush=True)
time.sleep(float(sys.argv[2]))
print("Starting vLLM server on", flush=True)
os.chdir(sys.argv[3])
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def slow_server(tmp_path, warm_up=None, delay=2.5):
    """A real child that logs a stage, takes `delay` s to listen, then answers GET /v1/models (a file)."""
    from grpo_playground.child_process import free_port
    from grpo_playground.serving.process import ManagedServer

    (tmp_path / "www" / "v1").mkdir(parents=True)
    (tmp_path / "www" / "v1" / "models").write_text("{}")
    port = free_port()
    return ManagedServer("fake", [sys.executable, "-c", SLOW_START, str(port), str(delay), str(tmp_path / "www")], port,
                         stages=(("loading weights", "loading the weights"), ("Starting vLLM server on", "serving")),
                         warm_up=warm_up, log_file=tmp_path / "server.log")


def test_a_starting_server_says_what_it_does_and_for_how_long_then_warms_up_before_ready(tmp_path):
    import re
    import threading
    import time

    seen_while_warming = []
    server = slow_server(tmp_path, warm_up=lambda s: seen_while_warming.append((s.phase, s.progress(), s.healthy())))
    assert server.progress() is None  # not started
    starting = threading.Thread(target=server.start)
    starting.start()
    progress = []
    try:
        while starting.is_alive():
            progress.append(server.progress())
            time.sleep(0.2)
        starting.join()
        # while the child slept, the pane could say what it was doing and for how long
        assert any(p and re.fullmatch(r"starting: [12] s \(loading the weights\)", p) for p in progress), progress
        # the warm-up ran once the server answered, before start() returned (ready = warmed)
        assert len(seen_while_warming) == 1
        phase, text, healthy = seen_while_warming[0]
        assert phase == "warming up" and healthy and re.fullmatch(r"starting: \d+ s \(warming up the kernels\)", text)
        assert server.phase == "ready" and server.progress() is None and server.startup_s >= 2.5
    finally:
        server.stop()
    assert server.phase == "stopped"


def test_a_failed_warm_up_fails_the_start_and_stops_the_server(tmp_path):
    def broken(server):
        raise ChatError("the adapter did not answer")

    server = slow_server(tmp_path, warm_up=broken, delay=0.1)
    with pytest.raises(ChatError, match="did not answer"):
        server.start()
    assert server.state() == "stopped" and server.phase == "stopped" and not server.healthy()


def test_the_log_stage_is_the_marker_seen_last(tmp_path):
    from grpo_playground.serving.backends import VLLM_STAGES
    from grpo_playground.serving.process import log_stage

    log = tmp_path / "vllm.log"
    assert log_stage(log, VLLM_STAGES) is None  # no log yet
    # lines of vLLM 0.22's own start log on the H200 (results/gpu/h200_chat/vllm_chat.server.log)
    log.write_text("INFO [core.py:112] Initializing a V1 LLM engine (v0.22.0) with config: ...\n"
                   "INFO [gpu_model_runner.py:5037] Starting to load model /tmp/m...\n"
                   "INFO [backends.py:1089] Using cache directory: /root/.cache/vllm/torch_compile_cache/aa/rank_0_0\n")
    assert log_stage(log, VLLM_STAGES).startswith("compiling the model")
    with open(log, "a") as handle:
        handle.write("Capturing CUDA graphs (decode, FULL):  40%|####      | 2/5\n")
    assert log_stage(log, VLLM_STAGES) == "capturing CUDA graphs"


def test_vllm_chat_server_is_shaped_for_chat_and_caches_its_compilation_on_the_data_root(tmp_path, monkeypatch):
    from grpo_playground.serving import backends

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path / "data" / "cache"))  # what start.sh sets on a Space
    for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):  # (torch sets the latter once it has compiled)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))  # a variable already set is kept
    env = backends.vllm_env()
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "data" / "cache" / "compile" / "vllm")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "data" / "cache" / "compile" / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "mine")

    command = vllm_command("Qwen/Qwen3-0.6B", {"sft": lora_dir(tmp_path / "sft", 16)}, 8200, 0.05, stream_interval=2)
    assert command[command.index("--max-num-seqs") + 1] == str(backends.CHAT_MAX_SEQS)
    assert command[command.index("--max-loras") + 1] == "3"  # three panes, three adapters of one base, one batch
    assert json.loads(command[command.index("--compilation-config") + 1]) == {"cudagraph_capture_sizes": [1, 2, 4, 8, 16]}
    assert command[command.index("--stream-interval") + 1] == "2"
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.05"
    assert "--stream-interval" not in vllm_command("Qwen/Qwen3-0.6B", {}, 8200)
    assert "--enforce-eager" not in command  # no eager mode behind the user's back

    monkeypatch.setattr(backends, "vllm_unavailable_reason", lambda: None)
    monkeypatch.setattr(backends, "vllm_has_engine_arg", lambda name: False)  # a vLLM without --stream-interval
    server = backends.vllm_server("assets/tiny", {"sft": tmp_path / "sft"}, gpu_memory_utilization=0.07)
    assert server.stages == backends.VLLM_STAGES
    # the engine process forked from the API server (vllm serve's CLI would spawn it: torch and vLLM imported
    # twice), its process group on the loopback address, the compile caches as every other engine's
    assert server.env["VLLM_WORKER_MULTIPROC_METHOD"] == "fork" and server.env["VLLM_HOST_IP"] == "127.0.0.1"
    assert server.env["VLLM_CACHE_ROOT"] == env["VLLM_CACHE_ROOT"]
    # its whole log on the data root, beside the caches, where the owner reads it after a restart
    assert server.log_file.parent == tmp_path / "data" / "cache" / "server_logs"
    assert "--kv-cache-memory-bytes" not in server.command  # this vLLM would not know the flag
    # a vLLM that knows it gets a fixed KV cache for CHAT_MAX_SEQS chats, not one profiled beside a growing job
    monkeypatch.setattr(backends, "vllm_has_engine_arg", lambda name: True)
    command = backends.vllm_server("assets/tiny", {}, gpu_memory_utilization=0.07).command
    config = backends.base_config("assets/tiny")
    kv = int(command[command.index("--kv-cache-memory-bytes") + 1])
    assert kv == backends.chat_kv_cache_bytes(config) == 2 * backends.CHAT_MAX_SEQS * backends.CHAT_TOKENS_PER_SEQ \
        * 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * 2 * (
            config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    assert kv < backends.chat_need_bytes(config)  # inside the share the pool sized the server by
    pooled = ServerPool()._new_server(ChatTarget(VLLM, "assets/tiny", str(tmp_path / "sft")))
    assert pooled.warm_up is not None and pooled.start_guard is not None  # warmed, and started alone on the GPU
    assert "--stream-interval" not in server.command
    assert server.command[server.command.index("--max-model-len") + 1] == "1024"  # the tiny model's own length
    assert server.command[server.command.index("--gpu-memory-utilization") + 1] == "0.07"
    assert server.env["VLLM_CACHE_ROOT"] == env["VLLM_CACHE_ROOT"]


def test_vllm_options_are_read_from_the_installed_vllm_source(tmp_path, monkeypatch):
    import importlib

    from grpo_playground.serving.backends import vllm_has_engine_arg

    package = tmp_path / "site" / "vllm"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "engine" / "arg_utils.py").write_text("class EngineArgs:\n    max_num_seqs: int = 128\n"
                                                     "    stream_interval: int = SchedulerConfig.stream_interval\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    assert vllm_has_engine_arg("stream_interval") and vllm_has_engine_arg("max_num_seqs")
    assert not vllm_has_engine_arg("no_such_option") and not vllm_has_engine_arg("interval")


def test_server_logs_stay_on_the_data_root_and_only_the_newest_are_kept(tmp_path, monkeypatch):
    from grpo_playground.serving import process

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "server_logs"
    folder.mkdir(parents=True)
    for i in range(process.KEPT_SERVER_LOGS + 5):  # older servers' logs (and a vLLM server's chat template)
        (folder / f"20000101-0000{i:02d}-x.log").write_text("old")
    (folder / "20000101-000000-x.jinja").write_text("{{ messages }}")
    log = process.new_log_file()
    logs = sorted(folder.glob("*.log"))
    assert log in logs and len(logs) == process.KEPT_SERVER_LOGS + 1  # the kept ones, then the new one
    assert not (folder / "20000101-000000-x.log").exists() and not (folder / "20000101-000000-x.jinja").exists()
    assert (folder / f"20000101-0000{process.KEPT_SERVER_LOGS + 4:02d}-x.log").exists()


def test_a_vllm_start_waits_for_another_engine_starting_on_the_gpu_and_says_so(tmp_path, monkeypatch):
    """gpu_share.engine_start: one vLLM engine sizes its memory at a time (a chat server profiling while a GRPO job's
    engine started crashed on the H200). A server whose start must wait shows what it waits for, then starts."""
    import threading
    import time

    from grpo_playground import gpu_share

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    server = slow_server(tmp_path, delay=0.5)
    server.start_guard = lambda on_wait: gpu_share.engine_start("the chat server of smollm2", on_wait)
    other_started, release = threading.Event(), threading.Event()

    def other_engine():  # e.g. a training job's rollout engine, starting first (another open of the lock file)
        with gpu_share.engine_start("the GRPO job of run r1"):
            other_started.set()
            release.wait(10)

    holder = threading.Thread(target=other_engine)
    holder.start()
    assert other_started.wait(5)
    starting = threading.Thread(target=server.start)
    starting.start()
    try:
        time.sleep(1.5)
        assert server.process is None  # not launched while the other engine starts
        assert server.progress().startswith("waiting: ") and \
            "the chat server of smollm2 waits for another vLLM engine on this GPU to finish starting" in server.progress()
        release.set()
        starting.join(20)
        assert server.phase == "ready" and server.startup_s < 5  # the start itself, from its launch
        with gpu_share.engine_start("a later engine", on_wait=lambda why: pytest.fail(why)):  # the lock is free again
            pass
    finally:
        release.set()
        holder.join(5)
        server.stop()


def test_an_engine_start_goes_ahead_after_its_longest_wait(tmp_path, monkeypatch):
    import fcntl
    import time

    from grpo_playground import gpu_share

    monkeypatch.setenv("GRPO_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "gpu_share").mkdir(parents=True)
    fd = os.open(tmp_path / "cache" / "gpu_share" / "engine_start.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a start that never ends (a hung process still holding it)
    said, began = [], time.monotonic()
    with gpu_share.engine_start("the evaluation of base", said.append, timeout_s=1.0):
        waited = time.monotonic() - began
    os.close(fd)
    assert 1.0 <= waited < 3 and said == ["the evaluation of base waits for another vLLM engine on this GPU to "
                                          "finish starting"]
