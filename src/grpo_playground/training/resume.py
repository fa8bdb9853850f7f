"""Resuming a stage from its checkpoint: the trained adapter's weights go back into the policy, and are checked.

A checkpoint is what transformers' Trainer saves: the PEFT model's adapters as PEFT lays them out (the trained
"default" adapter at the folder's root, any other adapter in a subfolder of its name: TRL's frozen KL reference
"ref/" when beta > 0), plus optimizer.pt, scheduler.pt, rng_state.pth and trainer_state.json.

Trainer._load_from_checkpoint (transformers 5.17) reads that layout wrongly: when any subfolder holds an adapter, it
takes every adapter to live in a subfolder and loads only those, so a GRPO checkpoint with "ref/" gave back the
frozen reference and never the trained adapter: the resumed run went on from the SFT policy while the step count,
the schedule and the optimizer's moments carried on (issue 34). Here the loader is replaced, for whatever trainer
runs (TRL's, the product's, Unsloth's), by one that puts each adapter of the checkpoint into the adapter of that
name, in place (the optimizer's state, loaded after, maps onto the same tensors). The optimizer, scheduler and RNG
state are still Trainer's own. Then, before the first step, ResumeCheck compares the policy in the trainer with
the checkpoint's adapter on disk: a run that cannot continue from its checkpoint fails saying what to do, never
going on quietly from an earlier policy.

With vLLM rollouts the engine gets the resumed weights at the first rollout: TRL syncs whenever the step differs
from the last synced one (-1 in a new trainer, so always after a resume), in every `grpo.weight_sync` mode, and
Unsloth's fast_inference reads the LoRA's live tensors at each generation.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback

from grpo_playground.training.vllm_sync import ADAPTER  # the trained adapter's name (the root of a checkpoint)

ADAPTER_FILE = "adapter_model.safetensors"


class ResumeError(RuntimeError):
    """A checkpoint the run cannot continue from; the message says which and what to do."""


def _name(checkpoint: Path) -> str:
    return f"checkpoints/{checkpoint.parent.name}/{checkpoint.name}"  # short: the run's status keeps 300 characters


def _what_to_do(checkpoint: Path) -> str:
    return (f"resume with the recipe it was trained with (model, lora, data.register_tags), or delete "
            f"{_name(checkpoint)} to resume from the one before")


def checkpoint_adapters(checkpoint: Path) -> dict[str, Path]:
    """Adapter name -> its weights file in a checkpoint, as PEFT's save_pretrained lays them out."""
    found = {ADAPTER: checkpoint / ADAPTER_FILE} if (checkpoint / ADAPTER_FILE).is_file() else {}
    for sub in sorted(p for p in checkpoint.iterdir() if p.is_dir()):
        if (sub / ADAPTER_FILE).is_file():
            found[sub.name] = sub / ADAPTER_FILE
    return found


def load_adapters(model, checkpoint: Path) -> list[str]:
    """Each adapter of the checkpoint into the model's adapter of that name, in place; returns the names loaded."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    files = checkpoint_adapters(checkpoint)
    if ADAPTER not in files:
        raise ResumeError(f"{_name(checkpoint)} holds no trained adapter (no {ADAPTER_FILE}: cut short?). "
                          f"What to do: delete it to resume from the checkpoint before it, or start a new run")
    loaded = []
    for name, path in files.items():
        if name not in model.peft_config:
            continue  # e.g. a "ref" saved by a trainer that this run's does not keep (beta changed to 0)
        try:
            set_peft_model_state_dict(model, load_file(str(path)), adapter_name=name)
        except RuntimeError as exc:  # shapes that differ: the LoRA of the recipe is not the checkpoint's
            raise ResumeError(f"the adapter in {_name(checkpoint)} does not fit this run's model (LoRA shapes "
                              f"differ; the log lists them). What to do: {_what_to_do(checkpoint)}") from exc
        loaded.append(name)
    return loaded


def adapter_differences(model, checkpoint: Path) -> list[str]:
    """How the model's trained adapter differs from the checkpoint's on disk (empty: the same tensors)."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    path = checkpoint / ADAPTER_FILE
    if not path.is_file():
        return [f"no {ADAPTER_FILE} in {checkpoint}"]
    saved, current = load_file(str(path)), get_peft_model_state_dict(model, adapter_name=ADAPTER)
    # PEFT's "auto" adds the whole embedding and head when the model's vocabulary size differs from its base's
    # config.json (registered tags; a resized base): they count where the adapter saved them
    lean = get_peft_model_state_dict(model, adapter_name=ADAPTER, save_embedding_layers=False)
    current = {key: value for key, value in current.items() if key in saved or key in lean}
    problems = [f"{key} missing from the checkpoint" for key in sorted(current.keys() - saved.keys())]
    problems += [f"{key} unknown to the model" for key in sorted(saved.keys() - current.keys())]
    for key in sorted(saved.keys() & current.keys()):
        mine = current[key].detach().to("cpu")
        if mine.shape != saved[key].shape or not torch.equal(mine, saved[key].to(mine.dtype)):
            problems.append(f"{key} differs")
    return problems


class ResumeCheck(TrainerCallback):
    """Before the first resumed step: the policy in the trainer must be the checkpoint's adapter, tensor for tensor."""

    def __init__(self, checkpoint: Path, log):
        self.checkpoint, self.log = checkpoint, log

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        problems = adapter_differences(model, self.checkpoint)
        if problems:
            self.log(f"not resumed: {len(problems)} tensors unlike the checkpoint's: {'; '.join(problems[:5])}")
            raise ResumeError(f"the policy loaded to resume is not the adapter saved in {_name(self.checkpoint)} "
                              f"({len(problems)} tensors differ). What to do: {_what_to_do(self.checkpoint)}")
        self.log(f"resumed policy checked: its adapter equals {self.checkpoint.name}'s on disk")


def resume_from(trainer, checkpoint: Path, log) -> None:
    """Make `trainer.train(resume_from_checkpoint=checkpoint)` load the trained adapter, and check it did."""
    def load(resume_from_checkpoint, model=None):
        target = trainer.accelerator.unwrap_model(model if model is not None else trainer.model)
        names = load_adapters(target, Path(resume_from_checkpoint))
        log(f"loaded the adapters {', '.join(names)} from {Path(resume_from_checkpoint).name}")

    trainer._load_from_checkpoint = load  # see the module's docstring: Trainer's own skips the root adapter
    trainer.add_callback(ResumeCheck(checkpoint, log))
