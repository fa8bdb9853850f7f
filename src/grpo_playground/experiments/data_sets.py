"""The seed regime's data sets, written once to <work>/data/ in the seed's own schemas: W (worked problems,
openmath columns), A (answers only, dapo columns), the pilot slice and the fresh worked problems, none of them among
the held-out prompts."""

from __future__ import annotations

from pathlib import Path

from grpo_playground.contracts.metrics import encode_record, read_records
from grpo_playground.contracts.process import read_json, write_json_atomic, write_text_atomic


def _reasoning(example: dict, tags) -> str:
    """The worked reasoning inside a normalized example's tagged completion (what openmath's column holds)."""
    text = example["completion"][0]["content"]
    return text.split(tags.reasoning_start, 1)[-1].split(tags.reasoning_end, 1)[0].strip()


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "".join(map(encode_record, rows)))


def worked_problems(data_dir: Path) -> list[str]:
    """W's questions, in order, as written to <work>/data/worked.jsonl."""
    return [row["problem"] for row in read_records(data_dir / "worked.jsonl")]


def _worked_rows(examples: list[dict], tags) -> list[dict]:
    return [{"problem": e["problem"], "generated_solution": _reasoning(e, tags), "expected_answer": e["answer"]}
            for e in examples]


def _answer_rows(examples: list[dict]) -> list[dict]:
    return [{"prompt": e["problem"], "solution": e["answer"]} for e in examples]


def eval_sources(args) -> list[tuple[str, int]]:
    """The held-out sources every arm is scored on, each with its number of prompts: --eval-data, then
    --eval-data-2 (its own column in the report) when given."""
    return [(args.eval_data, args.n_eval), *([(args.eval_data_2, args.n_eval_2)] if args.eval_data_2 else [])]


def held_out_problems(args, tags) -> set[str]:
    """Every held-out question (of both sources): W, A, the pilot slice and the fresh problems skip them."""
    from grpo_playground.data import load_examples

    return {e["problem"] for spec, n in eval_sources(args)
            for e in load_examples(spec, n=n, tags=tags, seed=args.eval_seed).examples}


def build_sets(args, cfg, data_dir: Path) -> dict:
    """W and A (and the eval prompts' questions), written once; a rerun reads the same files back."""
    from grpo_playground.data import load_examples

    tags = cfg.rewards.tags
    sizes_file = data_dir / "sets.json"
    if sizes := read_json(sizes_file):
        return sizes
    held_out = held_out_problems(args, tags)
    worked = load_examples(args.worked, n=args.n_worked + len(held_out), tags=tags, with_solution=True,
                           seed=cfg.data.seed)
    w = [e for e in worked.examples if e["problem"] not in held_out][: args.n_worked]
    if len(w) < args.n_worked:
        raise SystemExit(f"--worked {args.worked} gave only {len(w)} worked problems outside the held-out prompts "
                         f"({worked.summary()}): lower --n-worked or use a larger file")
    w_questions = {e["problem"] for e in w}
    # Another seed for the generator; a file is read in row order, so skip W's rows when both name one file.
    wanted = args.n_pilot + args.n_answers
    answers = load_examples(args.answers, n=wanted + args.n_worked + len(held_out), tags=tags,
                            seed=cfg.data.seed + 1)
    pool = [e for e in answers.examples if e["problem"] not in held_out and e["problem"] not in w_questions][:wanted]
    if len(pool) < wanted:
        raise SystemExit(f"--answers {args.answers} gave only {len(pool)} problems outside W and the held-out prompts "
                         f"({answers.summary()}), {wanted} wanted (--n-pilot + --n-answers): lower them or use a "
                         "larger file")
    pilot, a = pool[: args.n_pilot], pool[args.n_pilot:]  # the pilot slice: A's first rows, never trained on by an arm
    _write_jsonl(data_dir / "worked.jsonl", _worked_rows(w, tags))
    _write_jsonl(data_dir / "answers.jsonl", _answer_rows(a))
    if pilot:
        _write_jsonl(data_dir / "pilot.jsonl", _answer_rows(pilot))
    sizes = {"worked": len(w), "answers": len(a), "pilot": len(pilot), "held_out": len(held_out),
             "worked_skipped": worked.skipped, "answers_skipped": answers.skipped}
    write_json_atomic(sizes_file, sizes)
    return sizes


def fresh_set(args, cfg, data_dir: Path, n_fresh: int) -> int:
    """Worked problems of --worked that are in neither W nor the held-out prompts (at most n_fresh of them)."""
    from grpo_playground.data import load_examples

    path = data_dir / "fresh.jsonl"
    if path.exists():
        return sum(1 for _ in path.open())
    tags = cfg.rewards.tags
    w_questions = set(worked_problems(data_dir))
    held_out = held_out_problems(args, tags)
    # Same source and seed as W, drawn larger: W's problems come back first and are dropped by question.
    pool = load_examples(args.worked, n=args.n_worked + len(held_out) + n_fresh, tags=tags, with_solution=True,
                         seed=cfg.data.seed).examples
    fresh = [e for e in pool if e["problem"] not in w_questions and e["problem"] not in held_out][:n_fresh]
    if not fresh:
        raise SystemExit(f"--worked {args.worked} holds no worked problem beyond W: the fresh-SFT arm needs more rows")
    _write_jsonl(path, _worked_rows(fresh, tags))
    return len(fresh)
