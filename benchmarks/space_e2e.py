"""The Space end to end: start the app as a Space starts (scripts/start.sh, a persistent data root, an owner token)
and drive it through its own API exactly as the browser does, one step after another, timing each.

    python -m benchmarks.space_e2e --recipe recipes/quick.yaml --out results/space_e2e_cpu.json --logs DIR  # CPU
    python -m benchmarks.space_e2e --gpu --recipe recipes/smollm2.yaml --out results/gpu/space_e2e.json \\
        --logs results/gpu/space_e2e --eval-n 600

Steps: start the app; /start the recipe (SFT then GRPO); follow /status, /metrics (the charts' rows) and /samples
(the latest group) until GRPO has logged a step; /stop it, wait until it has stopped, /resume it, follow it to the
end; /export it to GGUF; chat through /chat with the run's GRPO checkpoint (GPU: base + LoRA through vLLM, CPU: the
exported GGUF through llama.cpp); restart the app on the same data root and chat again (what a restarted Space's
first chat waits); /eval_start base, SFT and GRPO with each backend given; /compare_start a short "GRPO vs more SFT".
Each step records what was called, its seconds and its outcome in OUT (written after every step, so a killed run
keeps what it measured); the app's log and each job's log are copied under --logs. A failed step is recorded
and the steps that do not need it still run. Exit status 0 only when every step succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path

import yaml

from grpo_playground.config import config_from_dict

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Tom has 12 apples and buys 7 more. He gives 5 to a friend. How many apples does he have now?"
GOLD = "14"
FINAL_STATES = ("finished", "failed", "stopped", "paused")
# what a chat pane shows while its model server starts, or waits for another vLLM engine's start (ui.chat_tab)
STARTING = (" server starting: ", " server waiting: ")


class StepFailed(Exception):
    """A step's outcome was not what the product promises (the message says what was seen)."""


class Recorder:
    """The steps so far, written to OUT after each one."""

    def __init__(self, out: Path, meta: dict):
        self.out, self.result = out, {**meta, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": []}
        out.parent.mkdir(parents=True, exist_ok=True)

    def step(self, name: str, call: str, fn, *needs: str):
        """Run fn() as step `name`; returns its value, or None when it (or a step it needs) failed."""
        failed_needs = [n for n in needs if not self.ok(n)]
        entry = {"step": name, "call": call}
        start = time.monotonic()
        if failed_needs:
            entry.update(outcome="skipped", detail=f"needs {', '.join(failed_needs)}, which did not succeed")
            value = None
        else:
            try:
                value = fn()
                entry.update(outcome="ok", detail=value)
            except Exception as error:  # noqa: BLE001 - every failure is recorded, the run goes on
                value = None
                entry.update(outcome="failed", detail=f"{type(error).__name__}: {error}",
                             traceback=traceback.format_exc(limit=4))
        entry["seconds"] = round(time.monotonic() - start, 2)
        self.result["steps"].append(entry)
        print(f"[e2e] {name}: {entry['outcome']} in {entry['seconds']} s: {str(entry['detail'])[:300]}", flush=True)
        self.save()
        return value

    def ok(self, name: str) -> bool:
        return any(s["step"] == name and s["outcome"] == "ok" for s in self.result["steps"])

    def save(self) -> None:
        self.result["all_ok"] = all(s["outcome"] == "ok" for s in self.result["steps"])
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, indent=1, default=str))
        tmp.replace(self.out)


class App:
    """The app as a Space runs it: scripts/start.sh on a data root, its whole output in LOGS/app-N.log."""

    def __init__(self, data_root: Path, token: str, port: int, logs: Path, extra_env: dict[str, str]):
        self.data_root, self.token, self.port, self.logs = data_root, token, port, logs
        self.url = f"http://127.0.0.1:{port}/"
        self.env = {**os.environ, "GRPO_PLAYGROUND_DATA_ROOT": str(data_root), "GRPO_PLAYGROUND_OWNER_TOKEN": token,
                    "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), **extra_env}
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout_s: float = 180) -> dict:
        self.starts += 1
        log = open(self.logs / f"app-{self.starts}.log", "wb")
        began = time.monotonic()
        self.process = subprocess.Popen(["bash", str(ROOT / "scripts" / "start.sh")], cwd=ROOT, env=self.env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.monotonic() - began < timeout_s:
            if self.process.poll() is not None:
                raise StepFailed(f"the app exited with {self.process.returncode} (see app-{self.starts}.log)")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as reply:
                    if reply.status == 200:
                        return {"serving_after_s": round(time.monotonic() - began, 2), "url": self.url}
            except OSError:
                time.sleep(0.5)
        raise StepFailed(f"the app did not answer {self.url} within {timeout_s} s")

    def stop(self) -> dict:
        """Stop the app as a Space restart does (SIGTERM to its session); jobs it started run on."""
        if self.process is None or self.process.poll() is not None:
            return {"was_running": False}
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        return {"was_running": True, "exit": self.process.returncode}


def client_for(url: str):
    from gradio_client import Client

    return Client(url, verbose=False)


def wait_for(what: str, poll, done, timeout_s: float, every_s: float = 2.0):
    """poll() until done(value); returns the last value, or raises StepFailed after timeout_s."""
    end = time.monotonic() + timeout_s
    while True:
        value = poll()
        if done(value):
            return value
        if time.monotonic() > end:
            raise StepFailed(f"{what}: not reached within {timeout_s} s (last: {str(value)[:400]})")
        time.sleep(every_s)


class GpuWatch:
    """While a GPU step runs: nvidia-smi's peak memory use and every holder the app's processes recorded in
    gpu_share's registry (<cache>/gpu_share: chat servers, training jobs, with the bytes each claimed), sampled
    every `every_s` seconds, so the record shows how one card was shared (or who was refused)."""

    def __init__(self, data_root: Path, every_s: float = 3.0):
        import threading

        self.registry, self.every_s = data_root / "cache" / "gpu_share", every_s
        self.peak_used_mib, self.total_mib, self.holders = 0, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            used, total = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total",
                                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                         timeout=20).stdout.split("\n")[0].split(",")
            self.peak_used_mib, self.total_mib = max(self.peak_used_mib, int(used)), int(total)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        for path in self.registry.glob("*.json"):
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            self.holders[path.stem] = {k: entry.get(k) for k in ("what", "bytes")} | {
                "gib": round(int(entry.get("bytes") or 0) / 2**30, 1)}

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        self._sample()

    def summary(self) -> dict:
        return {"gpu_peak_used_mib": self.peak_used_mib, "gpu_total_mib": self.total_mib,
                "gpu_share_holders_seen": self.holders}


def watched(data_root: Path | None, fn):
    """fn() with a GpuWatch around it (data_root None: no GPU), its summary merged into fn's result."""
    if data_root is None:
        return fn
    def run():
        with GpuWatch(data_root) as watch:
            value = fn()
        return {**value, **watch.summary()}
    return run


def recipe_text(path: Path, overrides: list[str]) -> str:
    """The recipe as the form would send it, with KEY=VALUE edits (section.key=value) a user makes in the form."""
    recipe = yaml.safe_load(path.read_text())
    for item in overrides:
        key, _, raw = item.partition("=")
        section, _, field = key.partition(".")
        recipe.setdefault(section, {})[field] = yaml.safe_load(raw)
    return yaml.safe_dump(recipe, sort_keys=False)


def grpo_rows(metrics: list[dict]) -> list[dict]:
    return [row for row in metrics if row.get("stage") == "grpo" and "reward" in row]


def chart_keys_seen(metrics: list[dict], beta: float) -> dict:
    """Which of the Training tab's chart series have data in the GRPO rows (KL only with beta > 0: without a
    reference model TRL logs none, and the chart's title says so)."""
    rows = grpo_rows(metrics)
    keys = set().union(*(row.keys() for row in rows)) if rows else set()
    wanted = ["reward", "reward_std", *(["kl"] if beta > 0 else []), "completions/mean_length",
              "completions/clipped_ratio", "frac_reward_zero_std"]
    return {"grpo_rows": len(rows), "per_reward_means": sorted(k for k in keys if k.startswith("rewards/") and k.endswith("/mean")),
            "series": {k: k in keys for k in wanted}, "timing_phases": sorted(k for k in keys if k.startswith("timing/"))}


def text_of(message: dict | None) -> str:
    """A chatbot message's text: Gradio sends a string or a list of content blocks."""
    content = (message or {}).get("content") or ""
    if isinstance(content, list):
        return "".join(block.get("text", "") if isinstance(block, dict) else str(block) for block in content)
    return str(content)


def reply_text(pane: list | None) -> str:
    """A chat pane's reply so far: its last message's text when that is the assistant's. Gradio leaves out an
    assistant message that has no text yet, so until the reply begins the last message is the question."""
    last = pane[-1] if pane else None
    return text_of(last) if isinstance(last, dict) and last.get("role") == "assistant" else ""


def chat_once(client, token: str, keys: list[str], max_tokens: int) -> dict:
    """One question to up to three checkpoints through /chat (streamed); seconds to the first reply text and in all."""
    began = time.monotonic()
    first, progress = None, []
    job = client.submit(QUESTION, GOLD, *(keys + ["", "", ""])[:3], 0.0, 1.0, max_tokens, "",
                        ["match_format_approximately", "check_answer", "check_numbers"], token, api_name="/chat")
    # poll the streamed outputs (iterating the job blocks forever when the app refuses the request)
    seen, last, last_progress = 0, None, None
    while True:
        done = job.done()
        outputs = job.outputs()
        for update in outputs[seen:]:
            texts = [reply_text(pane) for pane in update[: len(keys)]]
            starting = [t for t in texts if any(m in t for m in STARTING)]  # "server starting: 42 s (stage)"
            if starting:
                last_progress = time.monotonic() - began
                if starting[-1][:120] not in progress[-1:]:
                    progress.append(starting[-1][:120])
            if first is None and any(t and not any(m in t for m in STARTING) for t in texts):
                first = time.monotonic() - began
        seen, last = len(outputs), (outputs[-1] if outputs else last)
        if done:
            break
        time.sleep(0.05)
    job.result()  # the app's error, if it refused or failed the request
    if last is None:
        raise StepFailed("/chat returned nothing")
    replies = [reply_text(pane) for pane in last[: len(keys)]]
    if not all(replies) or any(r.startswith("[no reply") for r in replies):
        raise StepFailed(f"a checkpoint did not reply: {replies} notes: {last[4]}")
    return {"checkpoints": keys, "send_to_first_token_s": round(first or 0.0, 2),
            "last_start_progress_s": None if last_progress is None else round(last_progress, 2),
            "total_s": round(time.monotonic() - began, 2), "start_progress_shown": progress[:3] + progress[-2:],
            "replies": [r[:400] for r in replies], "scores": str(last[3])[:1500], "notes": str(last[4])[:800]}


def copy_logs(data_root: Path, logs: Path) -> None:
    """Every job's log (runs, evaluations, comparisons, exports, model servers) under LOGS/jobs/, no weights, no
    model or compile caches."""
    dest = logs / "jobs"
    for path in data_root.rglob("*"):
        parts = path.relative_to(data_root).parts
        if path.is_file() and (path.suffix in (".log", ".txt", ".jsonl") or path.name.endswith(".json")) \
                and path.stat().st_size < 20_000_000 and parts[:1] != ("hf",) \
                and parts[:2] not in (("cache", "compile"), ("cache", "models")):
            target = dest / path.relative_to(data_root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.space_e2e", description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "quick.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="edit the recipe as a user would in the form, e.g. grpo.max_steps=20")
    parser.add_argument("--gpu", action="store_true", help="chat and evaluate through vLLM (a GPU machine)")
    parser.add_argument("--data-root", type=Path, default=None, help="stands in for the Space's /data (default: a new temp folder)")
    parser.add_argument("--port", type=int, default=7861)
    parser.add_argument("--token", default="e2e-owner-token")
    parser.add_argument("--eval-n", type=int, default=20)
    parser.add_argument("--eval-backends", default=None, help="comma list (default: vllm,transformers with --gpu, else transformers)")
    parser.add_argument("--compare-minutes", type=float, default=0.1)
    parser.add_argument("--compare-recipe", default=None, help="default: recipe:<the recipe's name>")
    parser.add_argument("--compare-plan", default="40,200,40,10,3,0.5", metavar="W,A,HELD_OUT,STEPS,ROUNDS,FORMAT",
                        help="the comparison's worked examples, answers, held-out problems, SFT steps a round, "
                             "rounds at most and format target, as the panel's fields")
    parser.add_argument("--skip", default="", help="comma list of steps to leave out (export, chat, restart, eval, compare)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds a training, export, eval or comparison may take")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "space_e2e_cpu.json")
    parser.add_argument("--logs", type=Path, default=None, help="default: OUT without .json")
    args = parser.parse_args(argv)
    logs = args.logs or args.out.with_suffix("")
    logs.mkdir(parents=True, exist_ok=True)
    data_root = args.data_root or Path(__import__("tempfile").mkdtemp(prefix="space-data-"))
    data_root.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    backends = (args.eval_backends or ("vllm,transformers" if args.gpu else "transformers")).split(",")
    recorder = Recorder(args.out, {"recipe": str(args.recipe.relative_to(ROOT) if args.recipe.is_relative_to(ROOT) else args.recipe),
                                   "overrides": args.set, "gpu": args.gpu, "data_root": str(data_root)})
    app = App(data_root, args.token, args.port, logs, {})
    token, ctx = args.token, {}
    try:
        _drive(recorder, app, token, ctx, args, skip, backends)
    finally:
        recorder.step("app_stop", "SIGTERM to scripts/start.sh", app.stop)
        copy_logs(data_root, logs)
        recorder.save()
    failed = [s["step"] for s in recorder.result["steps"] if s["outcome"] != "ok"]
    print(f"[e2e] {len(recorder.result['steps']) - len(failed)} steps ok; not ok: {failed or 'none'}", flush=True)
    return 0 if not failed else 1


def _drive(rec: Recorder, app: App, token: str, ctx: dict, args, skip: set[str], backends: list[str]) -> None:
    gpu_root = app.data_root if args.gpu else None  # where the GPU steps' GpuWatch reads the share registry
    rec.step("app_start", "bash scripts/start.sh", app.start)
    def connect():
        ctx["client"] = client_for(app.url)
        return {"endpoints": sorted(ctx["client"].view_api(print_info=False, return_format="dict")["named_endpoints"])}

    rec.step("connect", "gradio_client.Client(url)", connect, "app_start")
    if "client" not in ctx:
        return
    client = ctx["client"]

    def start():
        recipe = recipe_text(args.recipe, args.set)
        ctx["beta"] = config_from_dict(yaml.safe_load(recipe)).grpo.beta
        summary = client.predict(recipe, "all", token, api_name="/start")
        ctx["run"] = summary["run_id"]
        return {"run_id": summary["run_id"], "state": summary["state"]}

    rec.step("train_start", "/start (recipe YAML, stage all, owner token)", start, "connect")
    status = lambda: client.predict(ctx["run"], api_name="/status")  # noqa: E731

    def first_grpo_steps():
        seen = wait_for("GRPO's second logged step", lambda: client.predict(ctx["run"], api_name="/metrics"),
                        lambda m: len(grpo_rows(m)) >= 2 or status()["state"] in FINAL_STATES, args.timeout)
        sft = [r for r in seen if r.get("stage") == "sft" and "loss" in r]
        return {"sft_rows": len(sft), "sft_last_loss": sft[-1]["loss"] if sft else None,
                **chart_keys_seen(seen, ctx["beta"])}

    rec.step("follow_to_grpo", "/metrics until GRPO logged 2 steps", first_grpo_steps, "train_start")

    def samples():
        group = client.predict(ctx["run"], api_name="/samples")
        if not group:
            raise StepFailed("no sample group while GRPO runs")
        return {k: (v if k != "completions" else [str(c)[:200] for c in v[:2]]) for k, v in group.items()
                if k in ("step", "stage", "answer", "rewards", "advantages", "completions", "total")}

    rec.step("samples", "/samples (the latest group)", samples, "follow_to_grpo")

    def stop_resume():
        stopped_at = client.predict(ctx["run"], token, api_name="/stop")
        info = wait_for("the run stopped", status, lambda s: s["state"] in FINAL_STATES, 300)
        if info["state"] != "stopped":
            raise StepFailed(f"after /stop the run is {info['state']!r}, not 'stopped'")
        step = info["status"].get("step")
        client.predict(ctx["run"], token, api_name="/resume")
        return {"asked_at_step": (stopped_at.get("status") or {}).get("step"), "stopped_at_step": step,
                "stage": info["status"].get("stage")}

    rec.step("stop_resume", "/stop, /status until stopped, /resume", stop_resume, "follow_to_grpo")

    if args.gpu and "chat" not in skip:
        def chat_beside_training():
            """One GPU shared: a vLLM chat server asked for while the resumed run trains fits beside it, or is
            refused with a message naming what to stop; the run goes on either way."""
            targets = client.predict(api_name="/chat_targets")
            sft = [t["key"] for t in targets if t["backend"] == "vllm" and t.get("lora") and ctx["run"] in t["lora"]
                   and t["lora"].endswith("sft")]  # the run's SFT adapter: there while its GRPO trains
            if not sft:
                raise StepFailed(f"no vLLM entry of the run's SFT adapter: {targets}")
            before = status()["state"]
            try:
                reply = chat_once(client, token, sft[:1], 128)
            except Exception as error:  # noqa: BLE001 - a refusal is a valid outcome when it says what to stop
                reply = {"refused": str(error)[:1500]}
                if "stop" not in reply["refused"].lower():
                    raise
            return {"run_state_when_asked": before, "run_state_after": status()["state"], **reply}

        rec.step("chat_beside_training", "/chat_targets, /chat (vLLM, the run's SFT adapter) while the run trains",
                 watched(gpu_root, chat_beside_training), "stop_resume")

    def finish():
        info = wait_for("the run finished", status, lambda s: s["state"] in FINAL_STATES and s["state"] != "stopped"
                        or s["state"] == "failed", args.timeout, every_s=3)
        if info["state"] != "finished":
            raise StepFailed(f"the run ended {info['state']!r}: {info['status']}")
        metrics = client.predict(ctx["run"], api_name="/metrics")
        rows = grpo_rows(metrics)
        steps = [r["step"] for r in rows]
        if len(steps) != len(set(steps)):
            raise StepFailed(f"duplicate GRPO rows after the resume: steps {steps}")
        return {"status": info["status"], "grpo_steps": steps[-1] if steps else 0, "first_reward": rows[0]["reward"],
                "last_reward": rows[-1]["reward"], **chart_keys_seen(metrics, ctx["beta"]),
                "median_step_s": sorted(r.get("timing/step_s", 0) for r in rows)[len(rows) // 2] if rows else None}

    rec.step("train_finish", "/status until finished; /metrics", finish, "stop_resume")

    if "export" not in skip:
        def export():
            types = ["q8_0"]
            client.predict(ctx["run"], types, token, api_name="/export")
            info = wait_for("the export finished", status,
                            lambda s: (s.get("export") or {}).get("state") in ("finished", "failed"), args.timeout, 3)
            export_info = info["export"]
            if export_info.get("state") != "finished":
                raise StepFailed(f"export ended {export_info}")
            return export_info

        rec.step("export", "/export (run id, [q8_0], token), /status until its export finished", export, "train_finish")

    def chat_keys(gguf: bool = not args.gpu) -> list[str]:
        """The run's GRPO checkpoint as /chat_targets lists it: its exported GGUF (llama.cpp) or base + LoRA (vLLM)."""
        targets = client.predict(api_name="/chat_targets")
        run = ctx["run"]
        if gguf:
            mine = [t["key"] for t in targets if t["backend"] != "vllm" and run in t["model"] and "grpo" in t["model"]]
        else:
            mine = [t["key"] for t in targets if t["backend"] == "vllm" and t.get("lora") and run in t["lora"]
                    and "grpo" in t["lora"]]
        if not mine:
            raise StepFailed(f"/chat_targets lists no {'GGUF' if gguf else 'vLLM'} entry of run {run}: {targets}")
        return mine[:1]

    if "chat" not in skip:
        rec.step("chat", "/chat_targets, /chat (streamed) with the run's GRPO checkpoint",
                 lambda: chat_once(client, token, chat_keys(), 256), "train_finish")
        rec.step("chat_again", "/chat, the server already running", lambda: chat_once(client, token, chat_keys(), 256),
                 "chat")
        if args.gpu:  # the exported GGUF through llama.cpp too, where the machine has it
            rec.step("chat_gguf", "/chat with the run's exported GGUF (llama.cpp)",
                     lambda: chat_once(client, token, chat_keys(gguf=True), 256), "export")
    if "restart" not in skip and "chat" not in skip:
        rec.step("app_restart", "SIGTERM, bash scripts/start.sh on the same data root",
                 lambda: {**app.stop(), **app.start()}, "chat")

        def chat_after_restart():
            ctx["client"] = client_for(app.url)
            return chat_once(ctx["client"], token, chat_keys(), 256)

        rec.step("chat_after_restart", "/chat on the restarted app (caches on the data root)", chat_after_restart,
                 "app_restart")
    client = ctx["client"]

    if "eval" not in skip:
        def evaluate(backend: str):
            def run():
                choices = client.predict(api_name="/eval_checkpoints")
                values = [v for label, v in choices if ctx["run"] in label]
                base = next(v for label, v in choices if label == yaml.safe_load(args.recipe.read_text())["model"]["name_or_path"])
                picked = [base] + values
                began = time.monotonic()
                client.predict(picked, "generator:test", args.eval_n, 128 if args.gpu else 16, 256, backend, token,
                               api_name="/eval_start")
                state = wait_for(f"the {backend} evaluation", lambda: client.predict(api_name="/eval_status"),
                                 lambda s: s["state"] != "running", args.timeout, 3)
                wall = time.monotonic() - began
                bad = [i["label"] for i in state["items"] if i["state"] != "done"]
                if bad:
                    raise StepFailed(f"not evaluated: {bad} ({state['state']})")
                results = {r["file"]: r for r in client.predict(api_name="/eval_results")}
                rows = {i["label"]: {**{k: results[Path(i["out"]).name].get(k) for k in
                                        ("accuracy", "format_rate", "lenient_accuracy", "n", "seconds", "engine_seconds",
                                         "generate_seconds")},
                                     "backend": results[Path(i["out"]).name]["settings"]["backend"]}
                        for i in state["items"]}
                return {"backend": backend, "wall_s": round(wall, 1), "checkpoints": rows}
            return run

        def eval_step(backend: str) -> None:
            rec.step(f"eval_{backend}", f"/eval_checkpoints, /eval_start (base, sft, grpo; {backend}), /eval_status",
                     watched(gpu_root, evaluate(backend)), "train_finish")

        eval_step(backends[0])

    if "compare" not in skip:
        def compare():
            recipe = args.compare_recipe or f"recipe:{args.recipe.stem}"
            n_worked, n_answers, n_eval, round_steps, rounds, target = args.compare_plan.split(",")
            started = client.predict(recipe, args.compare_minutes, int(n_worked), int(n_answers), int(n_eval), "1-2",
                                     int(round_steps), int(rounds), float(target), token, api_name="/compare_start")
            state = wait_for("the comparison", lambda: client.predict(started.get("id", ""), api_name="/compare_status"),
                             lambda s: s.get("state") not in ("running", "waiting"), args.timeout, 3)
            if state.get("state") != "finished":
                raise StepFailed(f"the comparison ended {state.get('state')!r}: {str(state)[:600]}")
            return {k: v for k, v in state.items() if k in ("id", "state", "result", "steps")}

        rec.step("compare", "/compare_start (GRPO vs more SFT), /compare_status until finished",
                 watched(gpu_root, compare), "connect")

    # the slower backends last: what a short lease cuts off is the reference, not the product's path
    for backend in backends[1:] if "eval" not in skip else []:
        eval_step(backend)
    walls = {s["detail"]["backend"]: s["detail"]["wall_s"] for s in rec.result["steps"]
             if s["step"].startswith("eval_") and s["outcome"] == "ok"}
    if len(walls) > 1 and "transformers" in walls:
        rec.result["eval_wall_ratio_vs_transformers"] = {b: round(w / walls["transformers"], 3) for b, w in walls.items()}

if __name__ == "__main__":
    sys.exit(main())
