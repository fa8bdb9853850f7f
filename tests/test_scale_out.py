"""`grpo-playground scale-out`: a recipe or a run as a verl / OpenRLHF GRPO job, scored by the Playground's rewards.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/test_scale_out.py

verl 0.9.1 and OpenRLHF 0.11.2 are installed without their dependencies (requirements-scale-out.txt): the written
configuration is checked against verl's own generated config and OpenRLHF's own argument parser, read from their
installed sources (neither is imported: both pull in Ray).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_playground.rewards import get_reward_funcs
from in_process_cli import run_main

ROOT = Path(__file__).resolve().parents[1]
RIGHT = "3 + 4 = 7\nThe answer is 7.<end_working_out><SOLUTION>7</SOLUTION>"
WRONG = "3 + 4 = 8\nThe answer is 8.<end_working_out><SOLUTION>8</SOLUTION>"
UNTAGGED = "3 + 4 = 7, so the answer is 7."


def scale_out(*args: str) -> subprocess.CompletedProcess:
    """`grpo-playground scale-out ARGS` in this process (the training tab's job below runs the CLI as a child)."""
    from grpo_playground.cli.scale_out import main

    return run_main(main, "scale-out", *args)


def load_by_path(path: Path):
    """As verl (utils.import_utils.load_module) and OpenRLHF (utils.agent) load a reward file: by its location."""
    spec = importlib.util.spec_from_file_location("custom_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_file(package: str, relative: str) -> Path:
    """A file of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"{package} is not installed: pip install --no-deps -r requirements-scale-out.txt"
    return Path(next(iter(spec.submodule_search_locations))) / relative


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scale") / "quick"
    proc = scale_out("--config", "quick", "--out", str(out), "--n-eval", "20")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "reward.py, run_verl.sh (verl 0.9.1), run_openrlhf.sh (OpenRLHF 0.11.2)" in proc.stdout
    return out


def test_the_reward_file_scores_as_the_playgrounds_grpo_trainer_does(written):
    from grpo_playground.config import load_recipe
    from grpo_playground.contracts.shipped import recipe_path

    cfg = load_recipe(recipe_path("quick"))
    funcs, weights = get_reward_funcs(cfg.rewards.weights, cfg.rewards.tags)  # what run_grpo hands GRPOTrainer
    reward = load_by_path(written / "reward.py")
    totals = {}
    for text in (RIGHT, WRONG, UNTAGGED):
        # GRPOTrainer's call: prompts, completions, the dataset's answer column
        trained = sum(w * f(prompts=["p"], completions=[[{"role": "assistant", "content": text}]], answer=["7"])[0]
                      for f, w in zip(funcs, weights))
        verl = reward.compute_score("generator:train", text, "7", {"index": 0})
        assert verl["score"] == pytest.approx(trained)
        assert set(verl) == {"score", *(f.__name__ for f in funcs)}  # each reward logged beside the total
        totals[text] = verl["score"]
    assert totals[RIGHT] > totals[WRONG] > totals[UNTAGGED]


def test_the_reward_file_keeps_the_recipes_format_gate_and_shaped_rewards(tmp_path):
    # a run trained with rewards.gate_on_format must be scored with the gate there too, and with its knobs
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.contracts.shipped import recipe_path

    sets = ["rewards.gate_on_format=true", "rewards.weights={check_answer: 1.0, repetition_penalty: 1.0}",
            "rewards.repetition_n_grams=2"]
    out = tmp_path / "gated"
    proc = scale_out("--config", "quick", "--out", str(out), "--n-eval", "5", *(f"--set={s}" for s in sets))
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = apply_overrides(load_recipe(recipe_path("quick")), sets)
    funcs, weights = get_reward_funcs(cfg.rewards.weights, cfg.rewards.tags,
                                      cfg.rewards.shaping(cfg.grpo.max_completion_length))
    reward = load_by_path(out / "reward.py")
    run_on = RIGHT + " and so on and so on"  # no strict match: the gate puts check_answer at its floor
    for text in (RIGHT, WRONG, run_on):
        trained = sum(w * f(prompts=["p"], completions=[text], answer=["7"])[0] for f, w in zip(funcs, weights))
        assert reward.compute_score("generator:train", text, "7")["score"] == pytest.approx(trained)
    assert reward.compute_score("generator:train", run_on, "7")["check_answer"] == -4.5


def test_openrlhf_queries_are_cut_to_the_response_before_scoring(written):
    reward = load_by_path(written / "reward.py")
    prompt = json.loads((written / "train.jsonl").read_text().splitlines()[0])["prompt"]
    queries = [prompt + RIGHT + "<|im_end|>", prompt + WRONG + "<|im_end|><|endoftext|>", prompt + UNTAGGED]
    out = reward.reward_func(queries, [prompt] * 3, ["7", "7", "7"])
    expected = [reward.compute_score("s", t, "7")["score"] for t in (RIGHT, WRONG, UNTAGGED)]
    assert out["rewards"].tolist() == pytest.approx(expected) and out["scores"].tolist() == pytest.approx(expected)
    assert set(out["extra_logs"]) == set(reward.compute_score("s", RIGHT, "7")) - {"score"}
    # scored as the query stands (prompt and end marker left in), the strict answer check would miss
    assert reward.compute_score("s", queries[0], "7")["score"] < expected[0]


def test_both_trainers_see_the_prompt_the_playground_trains_on(written):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from grpo_playground.models import hf_dir

    rows = pq.read_table(written / "train.parquet").to_pylist()
    strings = [json.loads(line) for line in (written / "train.jsonl").read_text().splitlines()]
    assert len(rows) == len(strings) == json.loads((written / "scale_out.json").read_text())["rows"]["train"]
    config = yaml.safe_load((written / "verl_grpo.yaml").read_text())
    tokenizer = AutoTokenizer.from_pretrained(hf_dir("tiny"))
    for row, string in zip(rows[:5], strings[:5]):
        assert row["reward_model"] == {"style": "rule", "ground_truth": string["answer"]}
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        # verl renders the messages with custom_chat_template: the exact string OpenRLHF gets, prefill included
        rendered = tokenizer.apply_chat_template(row["prompt"], chat_template=config["actor_rollout_ref"]["model"][
            "custom_chat_template"], add_generation_prompt=True, tokenize=False, enable_thinking=False)
        assert rendered == string["prompt"] and rendered.endswith("<start_working_out>")


def _keys(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in tree.items():
        out.append((f"{prefix}{key}", value))
        if isinstance(value, dict):
            out += _keys(value, f"{prefix}{key}.")
    return out


def test_the_verl_config_uses_only_verls_own_keys_and_values(written):
    generated = yaml.safe_load(package_file("verl", "trainer/config/_generated_ppo_trainer.yaml").read_text())
    known = dict(_keys(generated))
    ours = yaml.safe_load((written / "verl_grpo.yaml").read_text())
    assert ours.pop("defaults") == ["ppo_trainer", "_self_"] and ours.pop("hydra")
    for key, _ in _keys(ours):
        parent = key.rsplit(".", 1)[0]
        assert key in known or known.get(parent) == {}, f"{key} is not in verl 0.9.1's config"  # {}: a free dict
    actor = ours["actor_rollout_ref"]["actor"]
    core = package_file("verl", "trainer/ppo/core_algos.py").read_text()
    assert f'loss_agg_mode == "{actor["loss_agg_mode"]}"' in core or f'"{actor["loss_agg_mode"]}"' in core
    assert f'@register_policy_loss("{actor["policy_loss"]["loss_mode"]}")' in core
    assert ours["reward"]["custom_reward_function"] == {"path": str(written / "reward.py"), "name": "compute_score"}
    assert ours["algorithm"]["adv_estimator"] == "grpo" and ours["actor_rollout_ref"]["rollout"]["n"] == 8
    rows = ours["data"]["train_batch_size"] * ours["actor_rollout_ref"]["rollout"]["n"]
    assert rows % actor["ppo_micro_batch_size_per_gpu"] == 0  # verl splits each GPU's rows into micro batches


def openrlhf_parser() -> argparse.ArgumentParser:
    """OpenRLHF 0.11.2's own parser: the statements of train_ppo_ray's __main__ block up to parse_args()."""
    tree = ast.parse(package_file("openrlhf", "cli/train_ppo_ray.py").read_text())
    main = next(n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    # its standard-library imports (argparse, os, datetime: not Ray), then the parser's construction
    body = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
            and all((getattr(n, "module", None) or a.name).split(".")[0] in sys.stdlib_module_names for a in n.names)]
    for statement in main.body:
        if "parse_args" in ast.unparse(statement):
            break
        body.append(statement)
    scope: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "train_ppo_ray", "exec"), scope)
    return scope["parser"]


def test_the_openrlhf_script_parses_with_openrlhfs_own_arguments(written):
    import shlex

    script = (written / "run_openrlhf.sh").read_text()
    command = shlex.split(script.split("set -euo pipefail\n", 1)[1].replace("\\\n", " ").replace('"$@"', ""))
    assert command[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
    parser = openrlhf_parser()
    parser.exit_on_error = False
    args = parser.parse_args(command[3:])  # an unknown flag or a value outside its choices raises here
    values = vars(args)
    assert values["reward.remote_url"] == str(written / "reward.py")
    assert values["rollout.n_samples_per_prompt"] == 8 and values["algo.advantage.estimator"] == "group_norm"
    assert values["ds.lora.target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                "down_proj"]
    assert not values["data.apply_chat_template"]  # the prompts are already rendered


def make_sft_run(runs: Path) -> Path:
    """A run folder as the job leaves it after SFT: a real PEFT adapter on `tiny`, the recipe, a finished status."""
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model

    from grpo_playground.config import load_recipe, save_recipe
    from grpo_playground.contracts.shipped import recipe_path
    from grpo_playground.models import load_model_and_tokenizer
    from grpo_playground.run_layout import new_run_id, write_status

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer("tiny", device="cpu", trainable=False)
    run = runs / new_run_id("scale")
    get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"])).save_pretrained(run / "sft")
    tokenizer.save_pretrained(run / "sft")
    save_recipe(load_recipe(recipe_path("quick")), run / "recipe.yaml")
    write_status(run, state="finished", stage="sft")
    return run


def test_a_run_starts_verl_from_its_sft_adapter(tmp_path):
    run = make_sft_run(tmp_path / "runs")
    out = tmp_path / "out"
    proc = scale_out("--run", str(run), "--out", str(out), "--n-eval", "5", "--set", "grpo.max_steps=40",
                     "--set", "tracking.swanlab=auto")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load((out / "verl_grpo.yaml").read_text())
    assert config["trainer"]["logger"] == ["console", "swanlab"]
    # verl's SwanLab logger defaults to cloud mode, which waits for a login: "auto" is online only with a key
    export = next(line for line in (out / "run_verl.sh").read_text().splitlines() if "SWANLAB_MODE" in line)
    for key, mode in (("", "offline"), ("a-key", "cloud")):
        shown = subprocess.run(["bash", "-c", f"{export}; echo $SWANLAB_MODE"], capture_output=True, text=True,
                               env={"PATH": os.environ["PATH"], **({"SWANLAB_API_KEY": key} if key else {})})
        assert shown.stdout.strip() == mode
    assert config["actor_rollout_ref"]["model"]["lora_adapter_path"] == str((run / "sft").resolve())
    assert config["trainer"]["total_training_steps"] == 40
    assert "grpo-playground export --run" in proc.stdout  # OpenRLHF needs the merged SFT model: it says how


@pytest.mark.slow  # a scale-out job's child
def test_the_training_tab_writes_a_finished_run_as_a_job_to_download(tmp_path, monkeypatch):
    """Owner only, a background job like an export; the run view then offers the zip, and says why one failed."""
    import time
    import zipfile

    from grpo_playground.jobs.scale_outs import scale_out_state, start_scale_out
    from grpo_playground.run_layout import write_status
    from grpo_playground.ui import training_run_view
    from grpo_playground.ui.training_api import api_status

    monkeypatch.setenv("GRPO_PLAYGROUND_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("GRPO_PLAYGROUND_OWNER_TOKEN", "owner-secret")
    run = make_sft_run(tmp_path)
    with pytest.raises(PermissionError):
        start_scale_out(run.name, "wrong")
    write_status(run, state="running")
    with pytest.raises(RuntimeError, match="scale it out once it has stopped or finished"):
        start_scale_out(run.name, "owner-secret")
    write_status(run, state="finished")

    def finished() -> dict:
        deadline = time.monotonic() + 240
        while scale_out_state(run)["state"] in ("running", "none") and time.monotonic() < deadline:
            time.sleep(0.5)
        return scale_out_state(run)

    assert start_scale_out(run.name, "owner-secret")["state"] in ("running", "finished")
    state = finished()
    assert state["state"] == "finished", (run / "scale_out.log").read_text()[-2000:]
    assert "reward.py" in {Path(n).name for n in zipfile.ZipFile(state["zip"]).namelist()}
    assert api_status(run.name)["scale_out"]["zip"] == state["zip"]
    tick = training_run_view.poll(run.name, None, None, None)
    assert tick.scale_out_file["value"] == state["zip"] and tick.scale_out_file["visible"]
    assert tick.scale_out_status.startswith("**Written:** `scale_out.zip`")
    # an adapter vLLM (so verl) cannot load: the job fails and the tab says why, from the CLI's own words
    config = json.loads((run / "sft" / "adapter_config.json").read_text())
    (run / "sft" / "adapter_config.json").write_text(json.dumps({**config, "modules_to_save": ["embed_tokens"]}))
    start_scale_out(run.name, "owner-secret")
    state = finished()
    assert state["state"] == "failed" and "verl cannot start from this adapter" in state["reason"]
    assert not (run / "scale_out.zip").exists()  # the last attempt's zip went with it: nothing stale to download
    assert "Scale-out failed" in training_run_view.poll(run.name, None, None, None).scale_out_status


def test_bad_input_says_what_is_wrong_and_writes_nothing(tmp_path, written):
    before = sorted(p.name for p in written.iterdir())
    proc = scale_out("--config", "quick", "--out", str(written))
    assert proc.returncode == 2 and "is not empty" in proc.stderr
    assert sorted(p.name for p in written.iterdir()) == before
    proc = scale_out("--run", str(tmp_path), "--out", str(tmp_path / "a"))
    assert proc.returncode == 2 and "has no recipe.yaml" in proc.stderr and not (tmp_path / "a").exists()
    (tmp_path / "recipe.yaml").write_text((ROOT / "src/grpo_playground/recipes/quick.yaml").read_text())
    proc = scale_out("--run", str(tmp_path), "--out", str(tmp_path / "b"))
    assert proc.returncode == 2 and "no finished SFT adapter" in proc.stderr and not (tmp_path / "b").exists()
    proc = scale_out("--config", "no-such-recipe", "--out", str(tmp_path / "c"))
    assert proc.returncode == 2 and "error:" in proc.stderr and not (tmp_path / "c").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


def test_the_reward_file_needs_only_this_package_and_regex(written):
    """What docs/scale_out.md says to install where the trainer runs: this package (no dependencies) and regex."""
    code = ("import sys, importlib.util\nbefore = set(sys.modules)\n"
            f"spec = importlib.util.spec_from_file_location('r', {str(written / 'reward.py')!r})\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['grpo_playground', 'regex']"
