"""Evaluation: per-completion judgements (table of cases), summaries with standard errors, and real model runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_job_record import wait_for

from grpo_playground.rewards.grading import grade_completion, summarize
from grpo_playground.tags import Tags

ROOT = Path(__file__).resolve().parents[1]
WORK = "so 6 * 7 = 42 apples.<end_working_out>"


@pytest.mark.parametrize(
    "text, answer, in_format, correct, lenient, rechecks",
    [
        (WORK + "<SOLUTION>42</SOLUTION>", "42", True, True, True, False),  # the recipe's format, right answer
        (WORK + "<SOLUTION>41</SOLUTION>", "42", True, False, False, False),  # in format, wrong answer
        (WORK + "<SOLUTION> 42 </SOLUTION>\n", "42", True, True, True, False),  # spaces and a trailing newline are fine
        (WORK + "<SOLUTION>1,600</SOLUTION>", "1600", True, True, True, False),  # same number, with a comma
        (WORK + "<SOLUTION>-10</SOLUTION>", "-10", True, True, True, False),  # negative answers
        (WORK + "<SOLUTION>3.50</SOLUTION>", "3.5", True, True, True, False),  # same value, other spelling
        (WORK + "<SOLUTION>42", "42", False, False, True, False),  # truncated: never closed, only lenient counts
        (WORK + "<SOLUTION>42</SOLUTION> done", "42", False, False, True, False),  # text after the answer breaks strict
        ("<SOLUTION>42</SOLUTION>", "42", False, False, True, False),  # no <end_working_out> before the answer
        ("The answer is 42.", "42", False, False, True, False),  # plain prose: the base model's habit
        ("It is 42. Wait, let me re-check: 6 * 7 = 41", "42", False, False, False, True),  # last number decides lenient
        ("Let me double-check the sum: 42", "42", False, False, True, True),
        ("", "42", False, False, False, False),  # empty completion
    ],
)
def test_score_completion(text, answer, in_format, correct, lenient, rechecks):
    score = grade_completion(text, answer)
    assert (score.in_format, score.correct, score.lenient_correct, score.rechecks) == (in_format, correct, lenient, rechecks)


def test_score_with_custom_tags():
    tags = Tags("<think>", "</think>", "<answer>", "</answer>")
    assert grade_completion("x</think><answer>7</answer>", "7", tags).correct
    assert not grade_completion(WORK + "<SOLUTION>7</SOLUTION>", "7", tags).in_format


def test_summarize_rates_standard_errors_and_levels():
    texts = [WORK + "<SOLUTION>42</SOLUTION>", WORK + "<SOLUTION>41</SOLUTION>", "42", "nothing"]
    scores = [grade_completion(t, "42", n_tokens=n) for t, n in zip(texts, (10, 20, 30, 40))]
    summary = summarize(scores, levels=[1, 1, 2, None])
    assert summary["n"] == 4
    assert summary["format_rate"] == 0.5 and summary["format_rate_se"] == 0.25  # sqrt(.5 * .5 / 4)
    assert summary["accuracy"] == 0.25 and summary["accuracy_se"] == round(math.sqrt(0.25 * 0.75 / 4), 4)
    assert summary["lenient_accuracy"] == 0.5
    assert summary["mean_completion_tokens"] == 25.0
    assert summary["mean_completion_tokens_se"] == round(math.sqrt(sum((x - 25) ** 2 for x in (10, 20, 30, 40)) / 3 / 4), 2)
    assert summary["per_level"] == {
        "1": {"n": 2, "accuracy": 0.5, "accuracy_se": 0.3536, "format_rate": 1.0},
        "2": {"n": 1, "accuracy": 0.0, "accuracy_se": 0.0, "format_rate": 0.0},
    }
    assert "per_level" not in summarize(scores)
    with pytest.raises(ValueError):
        summarize([])


# --- real model runs (the embedded `tiny`) ------------------------------------------------------------------

EVAL_ARGS = dict(data="generator:test", n=12, batch_size=12, max_new_tokens=40)


@pytest.fixture(scope="module")
def tiny() -> str:
    from grpo_playground.models import resolve_model

    if not (Path(resolve_model("tiny").location) / "config.json").is_file():
        pytest.skip("assets/tiny is not built yet (python -m pipelines.build_tiny)")
    return "tiny"


@pytest.fixture(scope="module")
def adapter_run(tiny, tmp_path_factory) -> Path:
    """A second checkpoint: a real PEFT adapter on `tiny` (random, non-zero LoRA weights) saved as a run's sft
    stage, with a recipe that turns the prefill off, the way the training job lays out a run folder."""
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model

    from grpo_playground.config import RunConfig, save_recipe
    from grpo_playground.models import load_model_and_tokenizer

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(tiny, device="cpu", trainable=False)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    run = tmp_path_factory.mktemp("runs") / "20260101-000000-eval-test-beef"
    peft_model.save_pretrained(run / "sft")
    tokenizer.save_pretrained(run / "sft")
    config = RunConfig()
    config.model.name_or_path = tiny
    config.data.prefill_reasoning = False
    save_recipe(config, run / "recipe.yaml")
    return run


@pytest.mark.slow  # the eval CLI's real generation
def test_cli_prints_json_last_and_tiny_has_no_format_before_sft(tiny, tmp_path, capsys):
    from grpo_playground.cli.eval import main  # in this process: a child would pay for the eval stack's import

    out = tmp_path / "tiny.json"
    code = main(["--model", tiny, "--data", EVAL_ARGS["data"], "--n", "12", "--batch-size", "12",
                 "--max-new-tokens", "40", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-2000:]
    summary = json.loads(printed.out.strip().splitlines()[-1])
    for key in ("format_rate", "accuracy", "lenient_accuracy", "mean_completion_tokens", "recheck_rate", "accuracy_se", "per_level"):
        assert key in summary
    assert summary["n"] == 12
    assert summary["format_rate"] <= 0.1  # pretrained without tags: it does not speak the format before SFT
    saved = json.loads(out.read_text())
    assert len(saved["completions"]) == 12 and saved["settings"]["prefill_reasoning"] is True
    assert saved["example_prompt"].endswith("<start_working_out>")


def test_bad_arguments_fail_with_a_message(capsys):
    from grpo_playground.cli.eval import main  # in this process: a child would pay for the eval stack's import

    assert main(["--model", "no-such-model", "--n", "2"]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err


def test_reproducible_and_checkpoints_differ(tiny, adapter_run):
    from grpo_playground.eval.runner import evaluate, summary_line

    def numbers(result):
        timings = ("seconds", "generate_seconds", "engine_seconds")
        return {k: v for k, v in summary_line(result).items() if k not in (*timings, "model", "settings")}

    first, second = evaluate(tiny, **EVAL_ARGS), evaluate(tiny, **EVAL_ARGS)
    assert numbers(first) == numbers(second)
    assert [c["text"] for c in first["completions"]] == [c["text"] for c in second["completions"]]

    other = evaluate(str(adapter_run / "sft"), **EVAL_ARGS)
    assert other["settings"]["recipe"] == str(adapter_run / "recipe.yaml")
    assert other["settings"]["prefill_reasoning"] is False  # taken from the run's recipe
    assert not other["example_prompt"].endswith("<start_working_out>")
    assert numbers(other) != numbers(first)
    assert [c["text"] for c in other["completions"]] != [c["text"] for c in first["completions"]]


@pytest.mark.slow  # an evaluation job's children
def test_eval_panel_runs_a_background_job_and_compares(tiny, adapter_run, monkeypatch):
    """The panel starts one child process for all checkpoints and returns at once; its state comes back from disk
    (so a closed browser loses nothing), and the table and chart list every saved result, rates in percent."""
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(adapter_run.parent))
    from grpo_playground.jobs import eval_results as store
    from grpo_playground.jobs.evals import eval_job_state
    from grpo_playground.ui.eval_panel import refresh, run_evals

    choices = dict(store.list_checkpoints())
    sft = choices[f"{adapter_run.name}/sft"]
    assert choices["tiny"] == "tiny"
    with pytest.raises(ValueError, match="neither a registry model"):
        store.check_checkpoint("/etc")
    started = time.monotonic()
    message = run_evals(["tiny", sft], "generator:test", 4, 4, 24, token="")
    assert time.monotonic() - started < 10  # a job, not a request held open
    assert message.startswith("Started evaluating 2 checkpoint(s) on 4 examples") and "Evaluating" in refresh(
        "generator:test", None)[0]
    with pytest.raises(Exception, match="already running"):
        run_evals(["tiny"], "generator:test", 4, 4, 24, token="")
    wait_for(lambda: eval_job_state()["state"] != "running", 400)
    status, log, table, chart, verdict, choices, shown = refresh("generator:test", None)
    assert "tiny: done" in status and f"{adapter_run.name}/sft: done" in status, log
    assert sorted(table["checkpoint"]) == sorted(["tiny", f"{adapter_run.name}/sft"])
    assert table["accuracy %"].between(0, 100).all() and "format_rate %" in table.columns
    bars = json.loads(chart["value"].plot)["data"]["values"]
    assert len(bars) == 8 and all(0 <= bar["low"] <= bar["value"] <= bar["high"] <= 100 for bar in bars)
    assert f"{adapter_run.name}/sft" in [label for label, _ in choices["choices"]]
    assert len(store.load_results()) == 2  # saved as files: they survive the browser and the app
    again = refresh("generator:test", shown)
    assert all(x == {"__type__": "update"} for x in again[2:6])  # nothing new: not re-sent


def test_a_stopped_evaluation_job_ends_its_whole_chain(tiny, tmp_path, monkeypatch):
    """Stop ends the running child and the checkpoints still waiting (one process group), and says so."""
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    from grpo_playground.cli.args import EvalArgs
    from grpo_playground.jobs.evals import eval_job_state, start_eval_job, stop_eval_job
    from grpo_playground.contracts.process import read_json

    def evaluating() -> list[int]:
        """Evaluations writing into this test's folder (found by their command line, whatever their group)."""
        found = []
        for entry in Path("/proc").iterdir():
            try:
                cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            except OSError:
                continue  # ended meanwhile
            if EvalArgs.MODULE.encode() in cmdline and str(tmp_path).encode() in cmdline:
                found.append(int(entry.name))
        return found

    start_eval_job(["tiny", "tiny"], "generator:test", 2000, 4, 256)
    pid = read_json(tmp_path / "evals" / "eval_job.json")["pid"]
    # the supervisor marks its first step running just after it writes its pid
    wait_for(lambda: eval_job_state()["items"][0]["state"] != "pending", 30)
    assert [i["state"] for i in eval_job_state()["items"]] == ["running", "pending"]
    wait_for(evaluating, 60)  # the supervisor's child, the evaluation itself
    assert evaluating(), "the first checkpoint's evaluation never started"
    assert stop_eval_job().startswith(f"Stopped the evaluation (pid {pid})")
    wait_for(lambda: eval_job_state()["state"] != "running", 30)
    state = eval_job_state()
    assert state["state"] == "stopped" and [i["state"] for i in state["items"]] == ["stopped", "stopped"]
    assert stop_eval_job() == "No evaluation is running."
    wait_for(lambda: not evaluating(), 30)
    assert not evaluating(), f"left running after Stop: {evaluating()}"


def test_saved_results_are_parsed_once_per_change_not_at_every_tick(tmp_path, monkeypatch):
    """Every open page's timer lists the results every 2 s and a file holds every completion (megabytes for GSM8K's
    test set): a file is read again only when it changes, and a deleted one leaves the list."""
    from grpo_playground.jobs import eval_results as store

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    summary = {"model": "tiny", "data": "generator:test", "n": 2, "format_rate": 0.5, "accuracy": 0.5,
               "lenient_accuracy": 0.5, "mean_completion_tokens": 9.0, "recheck_rate": 0.0}
    files = [store.evals_dir() / f"2099010{i}-000000-tiny.json" for i in (1, 2)]
    for path in files:
        path.write_text(json.dumps({**summary, "completions": ["<SOLUTION>1</SOLUTION>"] * 1000}))
    (store.evals_dir() / "20990103-000000-half.json").write_text('{"accuracy": 0.')  # caught half-written
    reads = []
    real_read = store.read_json
    monkeypatch.setattr(store, "read_json", lambda path: reads.append(path.name) or real_read(path))
    first = store.load_results()
    assert [r["file"] for r in first] == [files[1].name, files[0].name] and "completions" not in first[0]
    assert len(reads) == 3
    first[0]["accuracy"] = 0.0  # a caller's change stays its own
    assert store.load_results() == [{**summary, "file": files[1].name}, {**summary, "file": files[0].name}]
    assert len(reads) == 3  # nothing changed: nothing parsed
    files[0].write_text(json.dumps({**summary, "accuracy": 0.75}))
    files[1].unlink()
    assert [(r["file"], r["accuracy"]) for r in store.load_results()] == [(files[0].name, 0.75)]
    assert reads[3:] == [files[0].name]


@pytest.mark.slow  # a fresh interpreter imports the panel (gradio)
def test_panel_module_does_not_import_torch():
    code = ("import sys\nimport grpo_playground.ui.eval_panel\n"
            "bad = [m for m in ('torch', 'transformers', 'datasets', 'peft', 'trl') if m in sys.modules]\nassert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))


def test_eval_results_api_through_the_app(app_url):
    from gradio_client import Client

    from grpo_playground.jobs import eval_results as store

    saved = {"model": "tiny", "data": "generator:test", "n": 2, "format_rate": 0.5, "accuracy": 0.5, "accuracy_se": 0.35,
             "lenient_accuracy": 1.0, "mean_completion_tokens": 12.0, "recheck_rate": 0.0, "completions": [{"text": "x"}]}
    (store.evals_dir() / "20260101-000000-tiny.json").write_text(json.dumps(saved))
    (store.evals_dir() / "20260101-000001-broken.json").write_text("{half a file")
    listed = Client(app_url, verbose=False).predict(api_name="/eval_results")
    mine = [r for r in listed if r["file"].startswith("20260101-")]  # the session's app also holds other tests' results
    assert [r["file"] for r in mine] == ["20260101-000000-tiny.json"]  # the unreadable file is left out
    assert mine[0]["accuracy"] == 0.5 and "completions" not in mine[0]


def test_backends_stop_at_the_templates_end_of_turn(tiny):
    from grpo_playground.eval.generation import end_of_turn_ids
    from grpo_playground.models import load_tokenizer

    tokenizer = load_tokenizer(tiny)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in end_of_turn_ids(tokenizer)


@pytest.mark.slow  # the eval CLI in children
def test_eval_speed_times_each_backend_through_the_eval_cli(tiny, tmp_path):
    """benchmarks.eval_speed's plumbing on CPU: a real transformers eval is timed; vLLM (no GPU here) fails with
    its reason kept in the log; a backend past its time limit is stopped and reported."""
    from benchmarks import eval_speed

    out = tmp_path / "speed.json"
    code = eval_speed.main(["--out", str(out), "--model", tiny, "--n", "4", "--max-new-tokens", "16",
                            "--backends", "transformers", "vllm", "--timeout-s", "240"])
    summary = json.loads(out.read_text())
    transformers, vllm = summary["backends"]
    assert code == 1  # not every backend finished
    assert transformers["exit_code"] == 0 and transformers["n"] == 4
    assert 0 < transformers["generate_seconds"] <= transformers["seconds"] <= transformers["wall_s"]
    assert transformers["completions_per_s"] > 0 and Path(transformers["results"]).is_file()
    assert vllm["exit_code"] == 2 and "vLLM backend cannot run here" in Path(vllm["log"]).read_text()
    assert "times_slower_than_transformers" not in vllm and summary["same_completions"] is None

    eval_speed.main(["--out", str(out), "--model", tiny, "--n", "4", "--backends", "transformers", "--timeout-s", "1"])
    stopped = json.loads(out.read_text())["backends"][0]
    assert stopped["error"] == "timed out" and stopped["exit_code"] is None


@pytest.mark.slow  # the eval CLI in a child
def test_the_eval_cli_evaluates_several_checkpoints_in_one_process(tiny, adapter_run, tmp_path, capsys):
    """Repeated --model / --out: each checkpoint written to its own file (how the Evaluate tab's vLLM job shares
    one engine start across base, SFT and GRPO); a count mismatch is refused before anything loads."""
    from grpo_playground.cli.eval import main

    outs = [tmp_path / "base.json", tmp_path / "sft.json"]
    arguments = ["--model", tiny, "--out", str(outs[0]), "--model", str(adapter_run / "sft"), "--out", str(outs[1]),
                 "--n", "4", "--max-new-tokens", "16"]
    # a child, as a job runs it: in this process the engine would start in under the 0.1 s engine_seconds counts
    done = subprocess.run([sys.executable, "-m", "pipelines.eval", *arguments], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["model"] for r in lines] == [tiny, str(adapter_run / "sft")]
    first, second = (json.loads(o.read_text()) for o in outs)
    assert first["n"] == second["n"] == 4 and first["completions"] != second["completions"]
    assert first["engine_seconds"] > 0 and first["seconds"] >= first["generate_seconds"]
    with pytest.raises(SystemExit) as bad:  # in this process: argparse's error exit, as a child's would be
        main(arguments[:-4] + ["--model", tiny])
    assert bad.value.code == 2 and "give one --out per --model" in capsys.readouterr().err


@pytest.mark.slow  # an evaluation job's child
def test_a_vllm_evaluation_job_runs_every_checkpoint_in_one_process(tiny, tmp_path, monkeypatch):
    """The Evaluate tab's vLLM job: one pipelines.eval for all checkpoints (one engine start, one --out each). On
    this CPU machine that one process refuses with vLLM's reason, once, and every checkpoint reads failed."""
    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    from grpo_playground.jobs.evals import eval_job_state, start_eval_job

    start_eval_job(["tiny", "smollm2-135m"], "generator:test", 5, 8, 32, backend="vllm")
    wait_for(lambda: eval_job_state()["state"] != "running", 120)
    state = eval_job_state()
    assert [i["state"] for i in state["items"]] == ["failed", "failed"], state
    log = (tmp_path / "evals" / "eval.log").read_text()
    assert log.count("error: vLLM backend cannot run here") == 1, log  # one process for both checkpoints
    steps = json.loads((tmp_path / "evals" / "eval_job.json").read_text())["steps"]
    # its record says so, not its log: the exit and the eval CLI's own error, which each checkpoint shows
    assert [(s["state"], s["reason"].split(":")[0]) for s in steps] == [("failed", "exit 2")]
    assert "vLLM backend cannot run here" in steps[0]["reason"] == state["items"][0]["reason"]
    from grpo_playground.ui.eval_panel import job_status
    assert "smollm2-135m: FAILED (exit 2: vLLM backend cannot run here" in job_status(state)  # the tab says why
