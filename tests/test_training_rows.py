"""A stage prepares the rows its steps can read, not the whole source: TRL tokenizes every SFT row before the first
step (18 s of one CPU thread for tiny-cpu's 20,000, for 2 steps as for 600)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rows(tmp_path, *overrides):
    from grpo_playground.config import apply_overrides, load_recipe
    from grpo_playground.models import load_tokenizer
    from grpo_playground.training.run_folder import RunFolder
    from grpo_playground.training.stages import training_rows

    cfg = apply_overrides(load_recipe(ROOT / "recipes" / "tiny-cpu.yaml"), ["data.n_sft=400", *overrides])
    return training_rows(cfg, load_tokenizer("tiny"), "sft", RunFolder(tmp_path))


def test_a_short_stage_prepares_a_draw_of_the_rows_its_steps_read(tmp_path, capsys):
    everything = rows(tmp_path / "all", "sft.max_steps=-1")  # the epochs bound it: every row
    assert len(everything) == 400
    short = rows(tmp_path / "short", "sft.max_steps=3", "sft.per_device_train_batch_size=4",
                 "sft.gradient_accumulation_steps=2")
    assert len(short) == 3 * 4 * 2
    order = {prompt: i for i, prompt in enumerate(everything["prompt"])}
    assert set(short["prompt"]) <= set(order)
    assert max(order[p] for p in short["prompt"]) > 24  # drawn from the whole source, not its first rows
    assert rows(tmp_path / "again", "sft.max_steps=3", "sft.per_device_train_batch_size=4",
                "sft.gradient_accumulation_steps=2")["prompt"] == short["prompt"]  # the same draw on a resume
    assert "sft: 24 of them prepared" in capsys.readouterr().out
