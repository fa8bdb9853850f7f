"""`grpo-playground compare` (grpo_playground.experiments): the data sets it builds, and one end-to-end run of every arm on `tiny`."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_playground.config import load_recipe
from grpo_playground.data import load_examples
from grpo_playground.experiments.plan import ComparisonPlan
from grpo_playground.jobs import comparisons as jobs
from grpo_playground.contracts.layout import COMPARISON_JOB, COMPARISON_RESULT, COMPARISON_WORK, PROGRESS_FILE
from grpo_playground.contracts.process import read_json
from grpo_playground.experiments import checkpoints, children, data_sets, report, seed_regime
from grpo_playground.experiments.progress import ARMS, SCORED, STEPS, TUNED, mark

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RECIPE = ROOT / "recipes" / "tiny-cpu.yaml"


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def lora_sha256(adapter: Path) -> str:
    """The hash of an adapter folder's trained weights alone."""
    return hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()


def test_sets_from_real_files_are_disjoint_and_answer_only(tmp_path):
    # The GSM8K file (4 valid rows of 8) is both the held-out set (its first valid row) and the source of W and
    # of the fresh problems: both must skip the held-out row, and fresh must skip W.
    gsm8k = f"gsm8k:{FIXTURES / 'gsm8k_sample.jsonl'}"
    args = seed_regime.parse_args(["--worked", gsm8k, "--answers", f"dapo:{FIXTURES / 'dapo_sample.jsonl'}",
                                   "--eval-data", gsm8k, "--n-eval", "1", "--n-worked", "2", "--n-answers", "2"])
    cfg = load_recipe(RECIPE)
    sets = data_sets.build_sets(args, cfg, tmp_path)
    valid = [e["problem"] for e in load_examples(gsm8k).examples]
    worked, answers = rows(tmp_path / "worked.jsonl"), rows(tmp_path / "answers.jsonl")
    assert sets["worked"] == len(worked) == 2 and sets["answers"] == len(answers) == 2
    assert [r["problem"] for r in worked] == valid[1:3]
    assert all(r["generated_solution"] and "####" not in r["generated_solution"] for r in worked)
    assert all(set(r) == {"prompt", "solution"} for r in answers)  # the dapo schema: no worked solution
    assert data_sets.fresh_set(args, cfg, tmp_path, 10) == 1
    assert [r["problem"] for r in rows(tmp_path / "fresh.jsonl")] == valid[3:]


def test_too_small_a_file_says_what_to_change(tmp_path):
    args = seed_regime.parse_args(["--worked", f"gsm8k:{FIXTURES / 'gsm8k_sample.jsonl'}", "--n-worked", "50",
                                   "--n-eval", "4"])
    with pytest.raises(SystemExit, match="gave only 4 worked problems.*lower --n-worked"):
        data_sets.build_sets(args, load_recipe(RECIPE), tmp_path)


def test_bad_source_spec_is_refused_before_any_run(capsys):
    with pytest.raises(SystemExit):
        seed_regime.parse_args(["--answers", "dapo:answers.txt"])
    assert "must end in one of" in capsys.readouterr().err


def test_every_arm_trains_and_is_scored_on_the_same_prompts(finished_comparison):
    """The session's shared comparison (tests/shared_comparison.py: this experiment in the panel's job, its plan with
    a pilot slice of 4 problems, so with the tuned control as a fifth scored row)."""
    work, out = finished_comparison.folder / COMPARISON_WORK, finished_comparison.folder / COMPARISON_RESULT
    result = json.loads(out.with_suffix(".json").read_text())
    assert set(result["eval"]) == set(SCORED)
    assert all(result["eval"][arm]["n"] == 8 and result["steps"][arm] >= 1 for arm in SCORED)
    assert result["sft_w"]["steps"] == 3 and len(result["sft_w"]["rounds"]) == 1
    assert sum(part["n"] for part in result["by_template"].values()) == 8
    assert {arm: d["n"] for arm, d in result["grpo_minus"].items()} == {
        "sft_w": 8, "sft_w+more_sft_w": 8, TUNED: 8, "sft_w+fresh_sft": 8}
    # The control continues SFT on W itself at a tenth of the recipe's lr, for GRPO's measured time.
    control = (work / "more_sft_w" / "recipe.yaml").read_text()
    assert "worked.jsonl" in control and "learning_rate: 0.0002" in control
    assert result["seconds"]["sft_w+more_sft_w"] <= result["seconds"]["sft_w+grpo_a"] + 5
    assert "| sft_w+grpo_a |" in out.with_suffix(".md").read_text()
    # The app follows the run through progress.json: every step done, each arm with the folder it trained in.
    progress = json.loads((work / PROGRESS_FILE).read_text())["steps"]
    assert list(progress) == list(STEPS) and {s["state"] for s in progress.values()} == {"done"}
    assert progress["sft_w+grpo_a"]["run_dir"] == str(work / "grpo_a")
    # sft-W's rounds with their sampled format rates (the app shows them: the step count restarts every round)
    assert progress["sft_w"]["rounds"] == result["sft_w"]["rounds"] and progress["sft_w"]["round"] == 1
    # the tuned control scores the more-SFT arm's checkpoints and final adapter: real weights, each one trained past
    # sft-W and distinct from the others, the scored adapter the chosen candidate's
    tuned, more = result["control_tuned"], work / "more_sft_w"
    candidates = {c["name"]: more / "sft" if c["name"] == "final" else more / "checkpoints" / "sft" / c["name"]
                  for c in tuned["candidates"]}
    assert len(candidates) >= 2 and Path(tuned["adapter"]) == candidates[tuned["chosen"]]
    digests = {name: lora_sha256(path) for name, path in candidates.items()}
    assert len(set(digests.values())) == len(digests)
    assert lora_sha256(work / "sft_w_round0" / "sft") not in digests.values()


def test_only_sft_w_stops_after_it_and_a_run_without_it_goes_on_from_there(finished_comparison, tmp_path):
    """On a copy of the shared comparison's folder, the arms and the report moved aside: --only-sft-w stops after
    sft-W (the GPU session trains it while vLLM's parts still travel); the arms brought back as another lease
    returns them, the run without it goes on from that sft-W and the arms it finds instead of training them again."""
    folder = finished_comparison.copy_into(tmp_path / "runs")
    work, out = folder / COMPARISON_WORK, folder / COMPARISON_RESULT
    plan = ComparisonPlan(**read_json(folder / COMPARISON_JOB)["meta"]["plan"])
    argv = jobs.experiment_command(folder, plan)[3:]  # the job's own arguments (python -m MODULE ARGS)
    assert argv[argv.index("--work") + 1] == str(work)
    expected = json.loads(out.with_suffix(".json").read_text())
    logs = {path: path.read_text() for path in work.glob("*.log")}  # each step's output, sft-W's rounds included
    for path in out.parent.glob(f"{out.name}.*"):
        path.unlink()
    aside = tmp_path / "aside"
    aside.mkdir()
    for path in work.iterdir():
        if path.name != "data" and not path.name.startswith("sft_w_round0"):
            path.rename(aside / path.name)  # progress.json too: this run writes its own
    assert seed_regime.main([*argv, "--only-sft-w"]) == 0
    progress = json.loads((work / PROGRESS_FILE).read_text())["steps"]
    assert progress["sft_w"]["state"] == "done"
    assert progress["sft_w"]["sha256"] == checkpoints.adapter_sha256(work / "sft_w_round0" / "sft")
    assert not (work / "grpo_a").exists() and not out.with_suffix(".json").exists()
    for path in aside.iterdir():
        if path.name != PROGRESS_FILE:
            path.rename(work / path.name)
    assert seed_regime.main(argv) == 0
    assert {path: path.read_text() for path in logs} == logs  # no step trained or scored again
    result = json.loads(out.with_suffix(".json").read_text())
    assert {k: result[k] for k in ("eval", "steps", "seconds", "grpo_minus")} == \
        {k: expected[k] for k in ("eval", "steps", "seconds", "grpo_minus")}


def test_a_carried_sft_w_whose_weights_changed_is_refused(finished_comparison, tmp_path):
    """On a copy of the shared comparison's folder: given the hash lease 1 printed, a run refuses to start from an
    sft-W whose weights changed since, before anything runs, and goes on from the same weights unchanged."""
    folder = finished_comparison.copy_into(tmp_path / "runs")
    plan = ComparisonPlan(**read_json(folder / COMPARISON_JOB)["meta"]["plan"])
    argv = jobs.experiment_command(folder, plan)[3:]  # the job's own arguments (python -m MODULE ARGS)
    work, out = folder / COMPARISON_WORK, folder / COMPARISON_RESULT
    progress = (work / PROGRESS_FILE).read_text()  # names sft-W's folder: the copy's, as if restored in its place
    (work / PROGRESS_FILE).write_text(progress.replace(str(finished_comparison.folder), str(folder)))
    sft_hash = json.loads(progress)["steps"]["sft_w"]["sha256"]
    weights = work / "sft_w_round0" / "sft" / "adapter_model.safetensors"
    kept = weights.read_bytes()
    weights.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))  # one bit of the trained weights
    out.with_suffix(".json").unlink()
    with pytest.raises(SystemExit, match=f"has sha256 {checkpoints.adapter_sha256(weights.parent)}, not the "
                                         f"{sft_hash} every arm must start from"):
        seed_regime.main([*argv, "--sft-w-sha256", sft_hash])
    assert not out.with_suffix(".json").exists()
    weights.write_bytes(kept)
    assert seed_regime.main([*argv, "--sft-w-sha256", sft_hash]) == 0  # every step finished: read back, not rerun
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["sft_w_sha256"] == sft_hash and set(result["start_sha256"].values()) == {sft_hash}


def run_fake_experiment(*argv: str) -> None:
    """The experiment's CLI on tests/fake_experiment.py (this driver, training and scoring without a model)."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fake_experiment.py"), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow  # the experiment's child and its (fake) training children
def test_without_a_pilot_slice_four_arms_are_scored_and_no_tuned_control(tmp_path):
    """The CLI's default (no --n-pilot; the panel always has a pilot slice, so the shared comparison does too): the
    driver scores the four arms alone, its pre-flights sample the held-out set. The fake experiment runs it
    (tests/fake_experiment.py: this driver, training and scoring without a model): what is checked is the driver's."""
    out = tmp_path / "result"
    run_fake_experiment("--n-worked", "16", "--n-answers", "16", "--n-eval", "8", "--minutes", "0.01",
                        "--round-steps", "3", "--format-target", "0", "--preflight-prompts", "1",
                        "--work", str(tmp_path / "work"), "--out", str(out))
    result = json.loads(out.with_suffix(".json").read_text())
    assert set(result["eval"]) == set(ARMS) and result["control_tuned"] is None
    assert {arm: d["n"] for arm, d in result["grpo_minus"].items()} == {
        "sft_w": 8, "sft_w+more_sft_w": 8, "sft_w+fresh_sft": 8}
    assert "eval_source: generator:test" in (tmp_path / "work" / "sft_w_round0" / "recipe.yaml").read_text()
    assert not list((tmp_path / "work").glob("eval_control_*"))
    assert "Tuned control" not in out.with_suffix(".md").read_text()


def test_template_split_separates_prompts_whose_template_w_taught():
    worked = ["Ana has 3 apples. She buys 4 more. How many apples?"]
    def completions(*correct):
        problems = ["Ben has 10 apples. He buys 2 more. How many apples?",  # W's template, other numbers and names
                    "Ben has 10 apples. He buys 2 more. How many apples?",
                    "A train goes 60 km in 2 hours. How fast is it?",
                    "A train goes 90 km in 3 hours. How fast is it?"]
        return {"completions": [{"problem": p, "correct": c} for p, c in zip(problems, correct)]}
    full = {"sft_w": completions(0, 0, 0, 0), "sft_w+grpo_a": completions(1, 0, 1, 1),
            "sft_w+more_sft_w": completions(1, 1, 0, 0), "sft_w+fresh_sft": completions(1, 1, 1, 1)}
    split = report.template_split(worked, full)
    assert split["template_in_w"]["n"] == 2 and split["template_not_in_w"]["n"] == 2
    assert split["template_in_w"]["accuracy"]["sft_w+more_sft_w"] == 1.0
    assert split["template_not_in_w"]["accuracy"]["sft_w+grpo_a"] == 1.0
    assert split["template_in_w"]["grpo_minus"]["sft_w+more_sft_w"]["difference"] == -0.5
    assert split["template_not_in_w"]["grpo_minus"]["sft_w+more_sft_w"]["difference"] == 1.0


def gsm8k_shaped(path: Path, split: str, n: int) -> str:
    """Generator problems written as GSM8K rows (question, answer ending '#### N'): the real file's shape, not its data."""
    from grpo_playground.data.generator import generate_problems

    rows = [{"question": p.question, "answer": "\n".join(p.solution_steps) + f"\n#### {p.answer}"}
            for p in generate_problems(n, split=split, seed=3, levels=[1])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"gsm8k:{path}"


def test_pilot_slice_and_second_held_out_set_are_kept_out_of_w_and_a(tmp_path):
    train, test = gsm8k_shaped(tmp_path / "train.jsonl", "train", 30), gsm8k_shaped(tmp_path / "test.jsonl", "test", 5)
    args = seed_regime.parse_args(["--worked", "generator:train?levels=1", "--answers", train, "--n-answers", "20",
                                   "--n-pilot", "6", "--eval-data", test, "--n-eval", "5", "--n-worked", "4",
                                   "--eval-data-2", "generator:train?levels=1", "--n-eval-2", "3"])
    sets = data_sets.build_sets(args, load_recipe(RECIPE), tmp_path / "data")
    assert (sets["answers"], sets["pilot"], sets["held_out"]) == (20, 6, 8)
    pilot = [r["prompt"] for r in rows(tmp_path / "data" / "pilot.jsonl")]
    answers = [r["prompt"] for r in rows(tmp_path / "data" / "answers.jsonl")]
    worked_rows = rows(tmp_path / "data" / "worked.jsonl")
    worked = [r["problem"] for r in worked_rows]
    # the generator's W ends each reasoning with tiny's pretraining cue (results/tiny_copy_rate.md)
    assert all(r["generated_solution"].endswith(f"\nThe answer is {r['expected_answer']}.") for r in worked_rows)
    second = [e["problem"] for e in load_examples("generator:train?levels=1", n=3).examples]
    assert pilot == [json.loads(line)["question"] for line in (tmp_path / "train.jsonl").open()][:6]
    assert not set(pilot) & set(answers) and not set(second) & set(worked)  # the 2nd held-out set is the generator's


def test_a_carried_sft_w_with_another_hash_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit, match="holds no finished sft-W adapter"):
        seed_regime.main(["--work", str(tmp_path), "--sft-w-sha256", "0" * 64])
    with pytest.raises(SystemExit):
        seed_regime.parse_args(["--pilot", "lr:sft.learning_rate=1"])
    assert "NAME:grpo.KEY=VALUE" in capsys.readouterr().err
    adapter = tmp_path / "sft_w_round0" / "sft"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    mark(tmp_path, "sft_w", "done", tmp_path / "sft_w_round0", base_sha256="a" * 64)
    found = checkpoints.adapter_sha256(adapter)
    checkpoints.carried_sft_w(tmp_path, found, "a" * 64)  # the same adapter on the same base: accepted
    with pytest.raises(SystemExit, match="not the a+ sft-W was trained on"):
        checkpoints.carried_sft_w(tmp_path, found, "b" * 64)


@pytest.mark.slow  # the experiment's child and its (fake) training children
def test_gsm8k_regime_split_over_two_leases_starts_every_arm_from_one_checkpoint(tmp_path):
    """The GPU plan on tiny: lease 1 trains sft-W, the pilots and GRPO; lease 2 gets the work folder back without
    weights but with sft-W's adapter, checks its hash, trains the two SFT arms and reports both held-out columns.
    The fake experiment runs it (tests/fake_experiment.py: this driver, no model): what is checked is the driver's
    bookkeeping. The weights' side, on the session's real comparison: a changed sft-W adapter is refused
    (test_a_carried_sft_w_whose_weights_changed_is_refused) and the tuned control's candidates are distinct trained
    weights (test_every_arm_trains_and_is_scored_on_the_same_prompts)."""
    train, test = gsm8k_shaped(tmp_path / "train.jsonl", "train", 40), gsm8k_shaped(tmp_path / "test.jsonl", "test", 6)
    work, out = tmp_path / "work", tmp_path / "result"
    # T of 0.6 s: the fake's steps take 0.05 s, so each arm still takes several steps and the control its checkpoints
    argv = ["--worked", "generator:train?levels=1", "--answers", train, "--eval-data", test, "--n-eval", "6",
            "--eval-data-2", "generator:test?levels=1", "--n-eval-2", "6", "--n-worked", "12", "--n-answers", "16",
            "--n-pilot", "4", "--minutes", "0.01", "--round-steps", "3", "--format-target", "0",
            "--preflight-prompts", "1", "--work", str(work), "--out", str(out),
            "--set", "sft.per_device_train_batch_size=4", "--set", "grpo.per_device_train_batch_size=8",
            "--set", "grpo.max_completion_length=32"]
    pilots = ["--pilot", "recipe", "--pilot", "hot:grpo.temperature=1.3,grpo.beta=0.0", "--pilot-minutes", "0.01"]
    run_fake_experiment(*argv, *pilots, "--only-arms", "grpo_a")
    assert not out.with_suffix(".json").exists() and not (work / "more_sft_w").exists()
    progress = json.loads((work / PROGRESS_FILE).read_text())["steps"]
    sft_hash = progress["sft_w"]["sha256"]
    assert progress["sft_w+grpo_a"]["start_sha256"] == sft_hash
    chosen = json.loads((work / "pilots.json").read_text())
    assert [r["name"] for r in chosen["runs"]] == ["recipe", "hot"] and chosen["chosen"] in ("recipe", "hot")
    if chosen["chosen"] == "hot":  # the GRPO arm trains with the chosen pilot's settings
        assert "temperature: 1.3" in (work / "grpo_a" / "recipe.yaml").read_text()
    # what comes back from lease 1: everything but the weights (bench tgz), and sft-W's adapter on its own
    for weights in work.glob("[gp]*/*/*.safetensors"):
        weights.unlink()
    grpo_log = (work / "grpo_a.log").read_text()
    def written(paths) -> dict[Path, tuple[bytes, int]]:
        return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in paths}

    grpo_scores = written(work.glob("eval*_sft_w_grpo_a.json"))  # both held-out columns
    assert len(grpo_scores) == 2
    adapter = Path(progress["sft_w"]["run_dir"]) / "sft"
    kept = {p: p.read_bytes() for p in adapter.iterdir() if p.suffix in (".safetensors", ".json")}
    next(iter(kept)).write_bytes(b"another checkpoint")
    with pytest.raises(SystemExit, match="not the .* every arm must start from"):
        seed_regime.main([*argv, *pilots, "--sft-w-sha256", sft_hash])  # refused before anything runs
    for p, data in kept.items():
        p.write_bytes(data)
    run_fake_experiment(*argv, *pilots, "--sft-w-sha256", sft_hash)
    assert (work / "grpo_a.log").read_text() == grpo_log  # GRPO ran once, in lease 1
    # and was scored there: lease 2, without its weights, reads its evaluations back
    assert written(grpo_scores) == grpo_scores
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["sft_w_sha256"] == sft_hash and set(result["start_sha256"].values()) == {sft_hash}
    assert set(result["start_sha256"]) == set(ARMS[1:])
    (second,) = result["second_eval"]
    assert second["source"] == "generator:test?levels=1" and result["sources"]["eval"] == test
    for column in (result, second):
        assert {arm: e["n"] for arm, e in column["eval"].items()} == dict.fromkeys(SCORED, 6)
        assert all(d["n"] == 6 and d["se"] >= 0 for d in column["grpo_minus"].values())
    md = out.with_suffix(".md").read_text()
    assert "accuracy % on `generator:test?levels=1`" in md and md.count("paired on the same prompts") == 2
    assert f"sha256 {sft_hash[:16]}... (checked at each arm)" in md and "| hot |" in md
    # the tuned control: the more-SFT arm's checkpoints scored on the pilot slice, the best one scored as an arm
    tuned = result["control_tuned"]
    assert [c["name"] for c in tuned["candidates"]][-1] == "final" and len(tuned["candidates"]) >= 2
    assert [c["step"] for c in tuned["candidates"]] == sorted(c["step"] for c in tuned["candidates"])
    best = max(c["accuracy"] for c in tuned["candidates"])
    assert tuned["chosen"] == [c["name"] for c in tuned["candidates"] if c["accuracy"] == best][-1]
    for column in (result, second):
        assert column["eval"][TUNED]["n"] == 6 and TUNED in column["grpo_minus"]
    # the scored adapter is the chosen checkpoint's folder
    assert Path(tuned["adapter"]) == (work / "more_sft_w" / "sft" if tuned["chosen"] == "final"
                                      else work / "more_sft_w" / "checkpoints" / "sft" / tuned["chosen"])
    assert f"Tuned control ({TUNED})" in md and f"chosen: `{tuned['chosen']}`" in md


def test_vllm_scoring_asks_the_eval_cli_for_a_batch_it_takes(tmp_path, monkeypatch):
    """All 1,319 GSM8K test prompts through vLLM: the eval CLI takes at most MAX_BATCH a batch (it refused 1,319)."""
    from grpo_playground.cli.args import EvalArgs
    from grpo_playground.eval.runner import MAX_BATCH, _check_bounds

    commands = []

    def fake_run(command, log):
        commands.append(command)
        (tmp_path / "a.json").write_text("{}")

    monkeypatch.setattr(children, "run", fake_run)
    children.evaluate_together({"a": "tiny"}, {"a": tmp_path / "a.json"}, 1319, 256, "generator:test", 0, "vllm")
    args = EvalArgs.parse_args(commands[0][commands[0].index(EvalArgs.MODULE) + 1:])
    assert args.batch_size == MAX_BATCH and args.n == 1319
    _check_bounds(args.n, args.batch_size, args.max_new_tokens)  # what the CLI checks before its engine starts


def test_the_report_lists_a_failed_pilot_beside_the_ones_that_trained():
    result = json.loads((Path(__file__).resolve().parents[1] / "results" / "learning_seed_regime_gpu.json").read_text())
    curve = {"rewards/check_answer/mean": [0.1, 0.2, 0.3, 0.4], "frac_reward_zero_std": [0.5, 0.4, 0.3, 0.2]}
    result["pilots"] = {"minutes": 1.5, "n": 300, "chosen": "recipe", "overrides": [], "runs": [
        {"name": "recipe", "overrides": [], "steps": 40, "seconds": 90, "reward": curve, "accuracy": 0.5,
         "accuracy_se": 0.03, "minus_chosen": None},
        {"name": "lr4e-5", "overrides": ["grpo.learning_rate=4e-5"], "failed": "pipelines.train failed (exit 1): NaN"}]}
    md = report.report(result)
    assert "| recipe | the recipe | 40 |" in md and "| lr4e-5 | grpo.learning_rate=4e-5 | failed: pipelines.train" in md
