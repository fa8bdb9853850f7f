"""Stop and Resume keep what was learned (issue 34): proven by the weights, not by the step counter.

A stage stopped at step k and resumed must end with the adapter an uninterrupted run of the same seed ends with
(CPU float32 runs are reproducible: the same data order, sampling and optimizer state); before the fix, a resumed
GRPO run with a KL term went on from the SFT adapter (TRL's frozen "ref/" adapter in the checkpoint made
transformers skip the trained one). A checkpoint the run cannot continue from fails before any step, saying why.
The jobs run in this process (run_job) on the embedded `tiny` model, with a few short steps.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from test_train_cli import RECIPE, SMALL as CLI_SMALL

from grpo_playground.config import apply_overrides, load_recipe
from grpo_playground.contracts.layout import METRICS_FILE, STATUS_FILE
from grpo_playground.training.job import run_job
from grpo_playground.training.run_folder import RunFolder

# test_train_cli's 4 short steps per stage, with learning rates that move the weights in so few steps (SFT's
# warm-up over 1 step, not the recipe's 10; GRPO at 1e-3)
SMALL = [*CLI_SMALL, "sft.warmup_steps=1", "grpo.learning_rate=1e-3"]
STOP_AT = 2  # the step after which Stop is pressed: checkpoint-2, then steps 3 and 4 after the resume


def train(run_dir: Path, stage: str, monkeypatch, resume: bool = False, stop_at: int | None = None,
          overrides: tuple[str, ...] = ()) -> str:
    """One job of `stage`; with stop_at, Stop is pressed once that step ends (the job saves and stops there)."""
    cfg = apply_overrides(load_recipe(RECIPE), [*SMALL, *overrides])
    with monkeypatch.context() as patch:
        if stop_at is not None:  # what a stop.request file does, on a step known in advance
            patch.setattr(RunFolder, "stop_requested", lambda folder: folder.read_status().get("step", 0) >= stop_at)
        return run_job(cfg, run_dir, stage=stage, resume=resume)


def adapter(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def distance(a: dict, b: dict) -> float:
    return sum(float((a[k] - b[k]).pow(2).sum()) for k in a) ** 0.5


def assert_same_adapter(a: dict, b: dict, what: str) -> None:
    import torch

    assert a.keys() == b.keys()
    far = [k for k in a if not torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6)]
    assert not far, f"{what}: {len(far)} of {len(a)} tensors differ (L2 distance {distance(a, b):.3g}), e.g. {far[:2]}"


def metric_rows(run_dir: Path, stage: str) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("stage") == stage and "loss" in r]


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / STATUS_FILE).read_text())


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> Path:
    """A run whose SFT stage finished: each GRPO case starts from a copy of it."""
    run_dir = tmp_path_factory.mktemp("sft") / "run"
    with pytest.MonkeyPatch.context() as patch:
        assert train(run_dir, "sft", patch) == "finished"
    return run_dir


def copy_of(run_dir: Path, target: Path) -> Path:
    shutil.copytree(run_dir, target)
    return target


@pytest.mark.slow
@pytest.mark.parametrize("beta", ["0.04", "0.0"])  # with TRL's frozen "ref" adapter in the checkpoint, and without
def test_grpo_stopped_and_resumed_ends_where_an_uninterrupted_run_ends(sft_run, tmp_path, monkeypatch, beta):
    kl = (f"grpo.beta={beta}",)
    whole = copy_of(sft_run, tmp_path / "whole")
    assert train(whole, "grpo", monkeypatch, overrides=kl) == "finished"

    resumed = copy_of(sft_run, tmp_path / "resumed")
    assert train(resumed, "grpo", monkeypatch, stop_at=STOP_AT, overrides=kl) == "stopped"
    checkpoint = resumed / "checkpoints" / "grpo" / f"checkpoint-{STOP_AT}"
    assert (checkpoint / "ref").is_dir() == (beta != "0.0")  # the layout that hid the trained adapter
    at_stop = adapter(checkpoint)
    assert train(resumed, "grpo", monkeypatch, resume=True, overrides=kl) == "finished"

    sft, final, expected = adapter(sft_run / "sft"), adapter(resumed / "grpo"), adapter(whole / "grpo")
    assert distance(at_stop, sft) > 0  # GRPO moved the policy before the stop: the test can tell the two apart
    assert_same_adapter(final, expected, "resumed run vs uninterrupted run")
    assert distance(final, at_stop) < distance(final, sft) or distance(at_stop, sft) < 1e-3
    # What evaluation, export and chat load from the resumed run (its stage folder, with PEFT's own loader) is that
    # continued policy
    from grpo_playground.models import load_model_and_tokenizer
    from grpo_playground.training.resume import adapter_differences

    consumer, _ = load_model_and_tokenizer(str(resumed / "grpo"), device="cpu", trainable=False)
    assert adapter_differences(consumer, resumed / "grpo") == []
    if beta != "0.0":  # the KL after the resume continues the stopped run's (0 meant: back at the reference)
        after = [r["kl"] for r in metric_rows(resumed, "grpo") if r["step"] > STOP_AT]
        same = [r["kl"] for r in metric_rows(whole, "grpo") if r["step"] > STOP_AT]
        assert after == pytest.approx(same, rel=1e-3, abs=1e-9) and all(k > 0 for k in after), (after, same)


@pytest.mark.slow
def test_sft_stopped_and_resumed_ends_where_an_uninterrupted_run_ends(tmp_path, monkeypatch):
    whole = tmp_path / "whole"
    assert train(whole, "sft", monkeypatch) == "finished"
    resumed = tmp_path / "resumed"
    assert train(resumed, "sft", monkeypatch, stop_at=STOP_AT) == "stopped"
    assert train(resumed, "sft", monkeypatch, resume=True) == "finished"
    assert_same_adapter(adapter(resumed / "sft"), adapter(whole / "sft"), "resumed SFT vs uninterrupted SFT")


@pytest.fixture
def stopped_grpo(sft_run, tmp_path, monkeypatch) -> Path:
    run_dir = copy_of(sft_run, tmp_path / "run")
    assert train(run_dir, "grpo", monkeypatch, stop_at=STOP_AT) == "stopped"
    return run_dir


def assert_refused_before_any_step(run_dir: Path, *words: str) -> None:
    state = status(run_dir)
    assert state["state"] == "failed", state
    assert all(word in state["reason"] for word in words), state["reason"]
    assert max(r["step"] for r in metric_rows(run_dir, "grpo")) == STOP_AT, "no step ran after the refusal"
    assert not (run_dir / "grpo").exists(), "no final adapter from a run that could not resume"


@pytest.mark.slow
def test_a_checkpoint_without_its_adapter_is_refused_before_any_step(stopped_grpo, monkeypatch):
    (stopped_grpo / "checkpoints" / "grpo" / f"checkpoint-{STOP_AT}" / "adapter_model.safetensors").unlink()
    assert train(stopped_grpo, "grpo", monkeypatch, resume=True) == "failed"
    assert_refused_before_any_step(stopped_grpo, "holds no trained adapter", "delete it")


@pytest.mark.slow
def test_a_resume_that_did_not_load_the_adapter_fails_instead_of_training_on(stopped_grpo, monkeypatch):
    """The check after the load does not trust the loader: a load that leaves the starting adapter (as
    transformers' own did) is caught before the first resumed step."""
    from grpo_playground.training import resume

    monkeypatch.setattr(resume, "load_adapters", lambda model, checkpoint: [])
    assert train(stopped_grpo, "grpo", monkeypatch, resume=True) == "failed"
    assert_refused_before_any_step(stopped_grpo, "is not the adapter saved in", "the recipe it was trained with")


@pytest.mark.slow
def test_a_recipe_whose_lora_no_longer_fits_the_checkpoint_is_refused(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    assert train(run_dir, "sft", monkeypatch, stop_at=STOP_AT) == "stopped"
    assert train(run_dir, "sft", monkeypatch, resume=True, overrides=("lora.r=8", "lora.alpha=16")) == "failed"
    state = status(run_dir)
    assert state["state"] == "failed" and "does not fit this run's model" in state["reason"], state
    assert "the recipe it was trained with" in state["reason"]
    assert max(r["step"] for r in metric_rows(run_dir, "sft")) == STOP_AT, "no step ran after the refusal"


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["grpo", "sft"])  # an experiment's grpo-A arm and its more-sft-W arm
def test_a_stage_started_from_an_adapter_folder_starts_from_its_weights(sft_run, stage):
    """model.name_or_path = another run's sft/ (how the comparison's arms start from sft-W): the policy is that
    adapter, tensor for tensor, even with a recipe whose lora section differs from the adapter's."""
    from grpo_playground.training.backend import adapter_lora, load_policy
    from grpo_playground.training.resume import adapter_differences

    start = sft_run / "sft"
    cfg = apply_overrides(load_recipe(RECIPE), [*SMALL, f"model.name_or_path={start}", "lora.r=8", "lora.alpha=8"])
    policy = load_policy(cfg, stage)
    assert adapter_differences(policy.model, start) == []
    config = policy.model.peft_config["default"]
    assert (config.r, config.lora_alpha) == (adapter_lora(start)["r"], adapter_lora(start)["lora_alpha"]) == (32, 64)


@pytest.mark.slow
def test_a_stage_from_an_adapter_keeps_the_bases_padded_embedding_rows(sft_run, tmp_path):
    """Qwen3 pads its embedding past its vocabulary (151,936 rows, 151,669 tokens). The GRPO stage, loading its
    SFT adapter, cut the rows to the tokenizer's length; vLLM, loading the base as saved, then sampled an id past
    the cut and the policy's forward failed ('device-side assert', H100, qwen3-1.7b through the app, 2026-12-07)."""
    from grpo_playground.models import load_model_and_tokenizer
    from grpo_playground.training.backend import load_policy

    model, tokenizer = load_model_and_tokenizer("tiny")
    padded = len(tokenizer) + 64
    model.resize_token_embeddings(padded)
    model.save_pretrained(tmp_path / "padded")
    tokenizer.save_pretrained(tmp_path / "padded")
    cfg = apply_overrides(load_recipe(RECIPE), [*SMALL, f"model.name_or_path={tmp_path / 'padded'}"])
    policy = load_policy(cfg, "grpo", sft_run / "sft")
    assert policy.model.get_input_embeddings().weight.shape[0] == padded


@pytest.mark.slow
def test_a_base_whose_vocabulary_was_padded_at_load_still_continues_its_adapter(sft_run):
    """When the loaded base's vocabulary size differs from its config.json's (on the H100, 2026-12-07: the GRPO stage
    cut Qwen3's padded embedding, the test above), PEFT's state dict adds the whole embedding and head: frozen base
    weights the SFT adapter never saved. Counted as missing, they failed the GRPO stage of qwen3-1.7b from its own
    SFT adapter. Only tensors the adapter holds are compared; a trained tensor that differs still fails."""
    import torch

    from grpo_playground.training.backend import load_policy
    from grpo_playground.training.resume import adapter_differences

    start = sft_run / "sft"
    cfg = apply_overrides(load_recipe(RECIPE), [*SMALL, f"model.name_or_path={start}"])
    model = load_policy(cfg, "grpo").model
    model.resize_token_embeddings(model.config.vocab_size + 64)
    assert adapter_differences(model, start) == []
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if "lora_B" in name).add_(1.0)
    assert [p for p in adapter_differences(model, start) if p.endswith("lora_B.weight differs")], \
        "a LoRA tensor unlike the adapter's must still count"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["deltas", "lora"])
def test_the_first_rollout_after_a_resume_syncs_the_checkpoints_policy_into_vllm(stopped_grpo, monkeypatch, mode):
    """Colocated vLLM cannot run here: at the resumed run's first rollout (where TRL 1.14.2 syncs, its last synced
    step being -1 in a new trainer), the product's sync of that mode runs against a stand-in engine with vLLM's
    layout (tests/test_vllm_sync.py), beside TRL's "ref" adapter; what it hands vLLM must be checkpoint-k's policy."""
    from types import SimpleNamespace

    import torch
    from test_vllm_sync import PACKED, FakeVllmModel, _merged

    from grpo_playground.models import load_model_and_tokenizer
    from grpo_playground.training import stages, vllm_sync

    handed = {}

    def with_engine(trainer, backend, timer):
        stages_instrument(trainer, backend, timer)
        base = {vllm_sync.hf_name(n).replace(".base_layer", ""): p.detach().clone()
                for n, p in trainer.model.named_parameters() if ".lora_" not in n}
        engine = FakeVllmModel(base)
        llm = SimpleNamespace(llm_engine=SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
            model_runner=SimpleNamespace(model=engine)))), reset_prefix_cache=lambda: None, generate=None)
        generation = SimpleNamespace(mode="colocate", tensor_parallel_size=1, enable_sleep_mode=False, llm=llm,
                                     _dist=SimpleNamespace(is_fsdp=False, is_zero3=False), model=trainer.model)
        request = lambda name, number, path: SimpleNamespace(lora_int_id=number, lora_path=path)  # noqa: E731
        sync = vllm_sync.DeltaSync(generation) if mode == "deltas" else \
            vllm_sync.AdapterSync(generation, stopped_grpo / "served", request=request)
        rollout = trainer._generate_single_turn

        def first_rollout_syncs(*args, **kwargs):
            if not handed:
                assert "ref" in trainer.model.peft_config  # beta > 0: the frozen reference sits beside the policy
                sync()
                handed["step"] = trainer.state.global_step
                handed["weights"] = {n: p.detach().clone() for n, p in engine.named_parameters()}
                handed["adapter"] = sync.current.lora_path if mode == "lora" else None
            return rollout(*args, **kwargs)

        trainer._generate_single_turn = first_rollout_syncs

    stages_instrument = stages.instrument_grpo
    monkeypatch.setattr(stages, "instrument_grpo", with_engine)
    assert train(stopped_grpo, "grpo", monkeypatch, resume=True) == "finished"
    assert handed["step"] == STOP_AT

    checkpoint = stopped_grpo / "checkpoints" / "grpo" / f"checkpoint-{STOP_AT}"
    if mode == "lora":  # the adapter vLLM serves is checkpoint-k's (in bf16, as written for vLLM)
        served, saved = adapter(Path(handed["adapter"])), adapter(checkpoint)
        assert served.keys() == saved.keys()
        for key in saved:
            torch.testing.assert_close(served[key], saved[key].to(torch.bfloat16), msg=key)
        return
    at_stop, _ = load_model_and_tokenizer(str(checkpoint), device="cpu", trainable=False)  # its root adapter
    expected = FakeVllmModel(_merged(at_stop))
    assert PACKED == expected.packed_modules_mapping
    for name, tensor in expected.named_parameters():
        torch.testing.assert_close(handed["weights"][name], tensor, msg=name)


SAVE_MINUTES = 0.08  # a checkpoint every 4.8 s of the stage
# steps 1-2 run at tiny's pace (about a second together, a few on a loaded machine); from step 3 each takes 5 s more
SLOW_FROM, SLOW_S, LAST = 3, 5.0, 4  # two timed checkpoints (3, 4): the run resumes from the first


def pace(monkeypatch) -> None:
    """Steps from SLOW_FROM on outlast one save period each: the pace changes mid-stage, as on a loaded machine."""
    status = RunFolder.status

    def slow_status(folder, **updates):
        if "eta_s" in updates and updates.get("step", 0) >= SLOW_FROM:  # RunCallback.on_step_end, before its clocks
            time.sleep(SLOW_S)
        return status(folder, **updates)

    monkeypatch.setattr(RunFolder, "status", slow_status)


@pytest.mark.slow
def test_save_minutes_spaces_checkpoints_in_time_and_they_resume(tmp_path, monkeypatch, capsys):
    """sft.save_minutes (issue 36): the Trainer saves when another period of the stage's time has passed, whatever
    the step count: none in the fast first steps, one at each slow step. Such a checkpoint resumes like any other:
    a run resumed from one ends with the adapter the uninterrupted run ends with."""
    timed = (f"sft.max_steps={LAST}", f"sft.save_minutes={SAVE_MINUTES}", "sft.save_steps=1000",
             "sft.save_total_limit=10")
    whole = tmp_path / "whole"
    with monkeypatch.context() as slowed:
        pace(slowed)
        assert train(whole, "sft", monkeypatch, overrides=timed) == "finished"
    saved = whole / "checkpoints" / "sft"
    steps = sorted(int(p.name.split("-")[-1]) for p in saved.glob("checkpoint-*"))
    assert steps == list(range(SLOW_FROM, LAST + 1)), steps  # by step count (save_steps) only the last would save
    weights = [adapter(saved / f"checkpoint-{step}") for step in steps]
    assert all(distance(a, b) > 0 for a, b in zip(weights, weights[1:]))  # each holds the weights of its own step
    # resume from a time-saved checkpoint: the later one and the final adapter gone, as if the run had died there
    resumed = copy_of(whole, tmp_path / "resumed")
    for path in (resumed / "checkpoints" / "sft" / f"checkpoint-{LAST}", resumed / "sft"):
        shutil.rmtree(path)
    capsys.readouterr()
    assert train(resumed, "sft", monkeypatch, resume=True, overrides=timed) == "finished"
    assert f"sft: resuming from checkpoint-{LAST - 1}" in capsys.readouterr().out
    assert_same_adapter(adapter(resumed / "sft"), adapter(whole / "sft"), "resumed from a timed checkpoint vs whole")
