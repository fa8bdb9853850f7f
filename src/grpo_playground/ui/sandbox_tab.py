"""The Reward sandbox tab: paste what a model really wrote, see every reward's score, the group's
advantages and why, before spending GPU hours on a regex that never matches.

Scores update live as the user edits (`.change`, trigger_mode="always_last": at most one pending run).
The same computation is the API endpoint `score`:

    from gradio_client import Client
    Client("http://127.0.0.1:7860/").predict(completions_text, "42", api_name="/score")

returns a table with one row per completion, one column per enabled reward, `total` and `advantage`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import gradio as gr
import pandas as pd

from grpo_playground.data.answers import normalize_number
from grpo_playground.owner import check_owner, owner_token_required
from grpo_playground.rewards import (
    DEFAULT_WEIGHTS,
    REWARDS,
    SCALE_MODES,
    DesignReport,
    GroupScore,
    RewardInputError,
    check_design,
    score_group,
)
from grpo_playground.rewards.equivalence import VISITOR
from grpo_playground.rewards.group import COULD_NOT_SCORE
from grpo_playground.rewards.scoring_request import check_gold, scoring_request
from grpo_playground.config import RewardSettings
from grpo_playground.rewards.shaping import DEFAULT_SHAPING
from grpo_playground.tags import DEFAULT_TAGS, Tags
from grpo_playground.ui.request_limits import visitor_of_request
from grpo_playground.ui.sandbox_input import MAX_PASTE_CHARS, join_group, read_completions_file, split_group
from grpo_playground.ui.sandbox_render import render_details, render_report
from grpo_playground.ui.handlers import handler, inputs

NAMES = list(REWARDS)
_W = "<start_working_out>6 x 7 = 42<end_working_out>"
# A group that shows every lesson at once: a correct answer, a near miss, a clean wrong answer, and the
# seed's gamed completion that rambles on after </SOLUTION> and still outscores the wrong one.
EXAMPLE_GROUP = [
    _W + "<SOLUTION>42</SOLUTION>",
    _W + "<SOLUTION>41</SOLUTION>",
    "<start_working_out>6 + 7 = 13<end_working_out><SOLUTION>13</SOLUTION>",
    "<start_working_out>6 + 7 = 13<end_working_out><SOLUTION>13</SOLUTION> Let me double-check: 6 + 7 is 13, and",
]
EXAMPLE_ANSWER = "42"
MAX_COMPLETION_TOKENS = 131072  # grpo.max_completion_length's own bound
SCORE_CONCURRENCY = 16  # score events at once; most finish in milliseconds, a few may wait seconds on a checker


def _custom_scores(code: str, completions: list[str], answer: str) -> list[float] | None:
    """Scores of the user's pasted reward, None when there is none; RewardInputError when it fails."""
    if not code or not code.strip():
        return None
    try:
        from grpo_playground.rewards.custom import run_custom_reward
    except ImportError:
        raise RewardInputError("custom rewards are not available in this version of the app") from None
    # Disabled on this server: run_custom_reward refuses with the way to enable it, never runs the code.
    result = run_custom_reward(code, completions, answer)
    if result.scores is None:
        raise RewardInputError(f"custom reward: {result.error}")
    return result.scores


# the shaped rewards' knobs, named as their recipe keys (rewards.<name>; the limit is grpo.max_completion_length)
KNOB_NAMES = ["gate_on_format", "max_completion_length", "overlong_buffer", "cosine_max_len", "repetition_n_grams",
              "repetition_max_penalty"]


@dataclass
class ScoreRequest:
    """The sandbox's boxes in the order the tab wires them; the names are what gradio_client callers pass as keywords
    (/score's parameters). A script may send anything: compute checks each value."""
    completions_text: str | None
    answer: str | None
    enabled: list | None
    scale: str | None
    tags: dict = inputs(list(DEFAULT_TAGS.to_dict()))  # Tags field -> its box's text
    custom_code: str | None
    owner_token: str | None
    knobs: dict = inputs(KNOB_NAMES)  # KNOB_NAMES -> its box's value
    weights: dict = inputs({f"weight_{name}": name for name in NAMES})  # reward name -> its weight box's value
    request: gr.Request | None = None  # the visitor's (Gradio fills it): their math-verify questions count against them


def _number(name: str, value, whole: bool = True):
    """A knob's box as a number (a script may send anything), or the error naming the box."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and value != int(value)):
        raise RewardInputError(f"{name} {value!r}: give a {'whole ' if whole else ''}number")
    return int(value) if whole else float(value)


def shaping_from(chosen: dict, knobs: dict):
    """The knobs as a recipe's `rewards:` section holds them, checked by the same rules (errors name the key)."""
    limit = _number("max completion length", knobs["max_completion_length"])
    if not 1 <= limit <= MAX_COMPLETION_TOKENS:
        raise RewardInputError(f"max completion length {limit}: give the run's grpo.max_completion_length in "
                               f"tokens, 1 to {MAX_COMPLETION_TOKENS}")
    settings = RewardSettings(dict(chosen), gate_on_format=bool(knobs["gate_on_format"]),
                              overlong_buffer=_number("overlong buffer", knobs["overlong_buffer"]),
                              cosine_max_len=_number("cosine max length", knobs["cosine_max_len"]),
                              repetition_n_grams=_number("repetition n-gram size", knobs["repetition_n_grams"]),
                              repetition_max_penalty=_number("repetition max penalty", knobs["repetition_max_penalty"],
                                                             whole=False))
    settings.validate_knobs()
    return settings.shaping(limit)


def compute(req: ScoreRequest) -> tuple[GroupScore, DesignReport]:
    """Everything the tab and the API show; bad input raises RewardInputError / ValueError with the fix. Its
    math-verify questions count against the request's visitor (equivalence.VISITOR)."""
    token = VISITOR.set(visitor_of_request(req.request))
    try:
        return _compute(req)
    finally:
        VISITOR.reset(token)


def _compute(req: ScoreRequest) -> tuple[GroupScore, DesignReport]:
    code = req.custom_code
    if code and code.strip():  # running code is the owner's: checked before anything a stranger sent is read
        try:
            check_owner(req.owner_token, "running custom reward code")
        except PermissionError as exc:
            raise RewardInputError(str(exc)) from None
    tags = Tags(**req.tags)
    chosen = {name: w for name, w in req.weights.items() if name in (req.enabled or [])}
    for name in chosen:
        if chosen[name] is None:
            raise RewardInputError(f"weight of {name} is empty: give a number such as 1.0")
    shaping = shaping_from(chosen, req.knobs)
    completions = split_group(req.completions_text or "")
    answers = gold_answers(req.answer, len(completions), chosen)
    if code and code.strip() and len(answers) > 1:
        raise RewardInputError("a custom reward takes one gold answer for the group: give one answer, not one each")
    custom = _custom_scores(code, completions, answers[0]) if completions else None
    gold = answers[0] if len(answers) == 1 else answers
    # one budget for the whole request, design check included: others keep their share
    with scoring_request(sum(map(len, completions))):
        group = score_group(completions, gold, chosen, tags, req.scale, {"custom": custom} if custom else None,
                            shaping)
        return group, check_design(chosen, tags, shaping)


# Rewards that compare the answer as a decimal number (float ratios): a fraction gold is "not a plain number" to them
DECIMAL_REWARDS = ("check_answer", "check_answer_strict_nomatch", "check_numbers")


def gold_answers(text: str | None, n_completions: int, rewards=()) -> list[str]:
    """The gold answer box: one answer for the group, or one per completion separated by lines `---` (what an
    uploaded file with an answer per row fills in). Each must be a number the chosen `rewards` can compare, and is
    given to them in its canonical spelling ("$1,000" -> "1000"), as the data loaders give training its golds."""
    answers = split_group(text or "") or [""]
    if len(answers) > 1 and len(answers) != n_completions:
        raise RewardInputError(f"{len(answers)} gold answers for {n_completions} completions: give one answer for "
                               "the group, or exactly one per completion (separated by lines ---)")
    decimal = [name for name in rewards if name in DECIMAL_REWARDS]
    canonical = []
    for gold in answers:
        gold = check_gold(gold)  # present, bounded, a final answer (the chat's and the sandbox's one check)
        number = normalize_number(gold)
        if number is None and decimal:
            raise RewardInputError(
                f"the gold answer {gold!r} is not a decimal number, and {', '.join(decimal)} compare decimals: give "
                "it as one (3/4 -> 0.75), or score it with answer_equivalence alone (math-verify reads fractions "
                "and LaTeX)")
        canonical.append(number or gold)
    return canonical


# a fraction as a model writes it: 3/4, -3 / 4, \frac{3}{4}, \dfrac{3}{4}
FRACTION = re.compile(r"^\s*-?\d+\s*/\s*\d+\s*$|\\d?frac\{")


def fraction_answer_hint(group: GroupScore) -> str | None:
    """The answer side of gold_answers' refusal: completions that answered a fraction while a chosen reward compares
    decimals score as "not a number" even where they equal the gold (gold 0.75, answer 3/4: -4.5 and no word why)."""
    decimal = [name for name in group.names if name in DECIMAL_REWARDS]
    fractions = [(i, c.strict_answer) for i, c in enumerate(group.completions, 1) if c.strict_answer is not None
                 and normalize_number(c.strict_answer) is None and FRACTION.search(c.strict_answer)]
    if not decimal or not fractions:
        return None
    which = ", ".join(f"#{i}" for i, _ in fractions)
    return (f"Hint: the answer {fractions[0][1].strip()!r} of completion {which} is not a decimal number, and "
            f"{', '.join(decimal)} compare decimals: it scores as not a number even where it equals the gold. Score "
            "with answer_equivalence (math-verify reads fractions and LaTeX), or have the model answer in decimals "
            "(3/4 -> 0.75).")


def _frame(group: GroupScore) -> pd.DataFrame:
    headers, rows = group.table()
    return pd.DataFrame([[COULD_NOT_SCORE if math.isnan(v) else round(v, 6) for v in row] for row in rows],
                        columns=headers)


@dataclass
class ScoreView:
    table: object  # the scores' frame, hidden on an error (an empty one showed a placeholder headed "1 | 2 | 3")
    report: str
    details: str  # per-completion cards


@handler(ScoreRequest, errors=ValueError)
def score_table(req: ScoreRequest) -> pd.DataFrame:
    """The `score` API: the table, or a gr.Error whose message says what to fix."""
    group, _ = compute(req)
    return _frame(group)


@handler(ScoreRequest, errors=ValueError)
def score_view(req: ScoreRequest) -> ScoreView:
    """The live view; errors go in the report, never a crash."""
    try:
        group, design = compute(req)
    except ValueError as exc:
        return ScoreView(gr.update(value=None, visible=False), render_report(None, None, [f"Error: {exc}"]), "")
    hint = fraction_answer_hint(group)
    return ScoreView(gr.update(value=_frame(group), visible=True), render_report(group, design, [hint] if hint else []),
                     render_details(group))


@dataclass
class UploadRequest:
    path: str | None


@dataclass
class UploadAnswer:
    completions: object = field(default_factory=gr.update)  # unchanged unless a file was read
    answer: object = field(default_factory=gr.update)


@handler(UploadRequest, errors=(ValueError, OSError))
def upload_file(req: UploadRequest) -> UploadAnswer:
    if not req.path:
        return UploadAnswer()
    completions, answer = read_completions_file(req.path)
    return UploadAnswer(join_group(completions), answer if answer is not None else gr.update())


def knob_defaults() -> dict:
    """KNOB_NAMES -> the recipe's defaults (RewardSettings') and grpo.max_completion_length's."""
    settings = RewardSettings()
    return {"gate_on_format": settings.gate_on_format, "max_completion_length": DEFAULT_SHAPING.max_completion_length,
            **{name: getattr(settings, name) for name in KNOB_NAMES[2:]}}


def _knob_boxes() -> dict:
    """The gate and the limit in view; the shaped rewards' other knobs folded (their defaults are open-r1's)."""
    values = knob_defaults()
    with gr.Row():
        gate = gr.Checkbox(values["gate_on_format"], label="gate correctness on format", elem_id="sandbox-gate",
                           info="rewards.gate_on_format: answer checks count only when the strict format matches, "
                                "else score their lowest value")
        limit = gr.Number(values["max_completion_length"], precision=0, minimum=1, maximum=MAX_COMPLETION_TOKENS,
                          label="max completion length (tokens)",
                          info="grpo.max_completion_length, the limit soft_overlong punishes near")
    with gr.Accordion("Knobs of cosine_scaled, soft_overlong, repetition_penalty", open=False):
        with gr.Row():
            boxes = {name: gr.Number(values[name], precision=None if name == "repetition_max_penalty" else 0,
                                     label=f"rewards.{name}", min_width=140) for name in KNOB_NAMES[2:]}
    return {"gate_on_format": gate, "max_completion_length": limit, **boxes}


def _registry_table() -> str:
    rows = [f"| `{s.name}` | {s.score_range[0]:g} .. {s.score_range[1]:g} | {s.description} {s.notes} |"
            for s in REWARDS.values()]
    return "| reward | range | scores |\n|---|---|---|\n" + "\n".join(rows)


def _custom_reward_box():
    """The code box when the owner enabled custom rewards; otherwise a hidden box and the reason."""
    try:
        from grpo_playground.rewards.custom import ENABLE_ENV, EXAMPLE_REWARD, custom_reward_enabled
    except ImportError:
        gr.Markdown("Custom rewards are not available in this version of the app.")
        return gr.Code(value="", visible=False, label="custom reward code")
    if not custom_reward_enabled():
        gr.Markdown(
            f"Running pasted Python is **off** on this server: a public app must not run strangers' code. "
            f"Its owner can start the app with `{ENABLE_ENV}=1` to allow it (in a separate process with CPU, "
            "memory, output and 2 s wall-clock limits; see docs/custom_rewards.md for what that does not stop)."
        )
        return gr.Code(value="", visible=False, label="custom reward code")
    gr.Markdown("Define `reward(completions, answer, **kwargs) -> list[float]`; its scores join the total as "
                "column `custom` (weight 1). Leave empty to skip. Runs in a limited child process, 2 s per group.")
    code = gr.Code(value="", language="python", label="custom reward code", elem_id="sandbox-custom-code")
    gr.Button("Insert an example", size="sm").click(lambda: EXAMPLE_REWARD, None, code, api_visibility="private")
    return code


@dataclass(frozen=True)
class SandboxInputs:
    """The boxes another tab may fill (the Training tab sends a run's sample group and settings), by name."""
    completions: gr.Textbox
    answer: gr.Textbox
    enabled: gr.CheckboxGroup
    weights: dict[str, gr.Number]  # reward name -> its weight box
    scale: gr.Radio
    tags: dict[str, gr.Textbox]  # Tags field -> its box
    knobs: dict[str, gr.components.Component]  # KNOB_NAMES -> its box (gate_on_format: a checkbox)


def create_sandbox_tab() -> SandboxInputs:
    initial = score_view(join_group(EXAMPLE_GROUP), EXAMPLE_ANSWER, list(DEFAULT_WEIGHTS), "group",
                         *DEFAULT_TAGS.as_list(), "", "", *knob_defaults().values(),
                         *(DEFAULT_WEIGHTS.get(n, 1.0) for n in NAMES))
    gr.Markdown(
        "Paste real completions of your model (one, or a group separated by lines `---`) and the gold answer. "
        "Each reward's score, the group's advantages and the reasons update as you type."
    )
    with gr.Row():
        with gr.Column(scale=2):
            # first in the column: opened, its boxes sit beside the report that shows their effect (or error)
            with gr.Accordion("Format tags", open=False, elem_id="sandbox-tags"):
                with gr.Row():
                    tag_boxes = [gr.Textbox(v, label=k, max_length=64, min_width=140)
                                 for k, v in DEFAULT_TAGS.to_dict().items()]
            completions = gr.Textbox(join_group(EXAMPLE_GROUP), lines=14, max_lines=30, label="completions",
                                     max_length=MAX_PASTE_CHARS,
                                     info="one per block; separate blocks with a line ---", elem_id="sandbox-completions")
            answer = gr.Textbox(EXAMPLE_ANSWER, label="gold answer", max_length=1000, lines=1, max_lines=8,
                                info="a number; or one per completion, separated by lines --- (an uploaded file "
                                     "with an answer per row fills them in)", elem_id="sandbox-answer")
            upload = gr.File(label="or upload a .jsonl / .csv of completions (column or key `completion`, "
                                   "optional `answer`; at most 1 MB)", file_types=[".jsonl", ".csv"], type="filepath")
            with gr.Accordion("Reward functions, weights, advantage scaling", open=True):
                enabled = gr.CheckboxGroup(NAMES, value=list(DEFAULT_WEIGHTS), label="enabled reward functions",
                                           elem_id="sandbox-enabled")
                with gr.Row():
                    weights = [gr.Number(DEFAULT_WEIGHTS.get(n, 1.0), label=f"weight: {n}", min_width=160)
                               for n in NAMES]
                scale = gr.Radio(list(SCALE_MODES), value="group", label="advantage scaling",
                                 info="group: (r - mean) / (std + 1e-4), TRL's default; none: r - mean (Dr. GRPO)")
                knobs = _knob_boxes()
            with gr.Accordion("What each reward scores", open=False):
                gr.Markdown(_registry_table())
            with gr.Accordion("Custom reward (Python)", open=False):
                code = _custom_reward_box()
                token = gr.Textbox("", label="Owner token (custom code runs for the owner only)", type="password",
                                   visible=owner_token_required(), max_length=256)
        with gr.Column(scale=3):
            report = gr.Markdown(initial[1], elem_id="sandbox-report")
            # wrap: long reward names (check_answer_strict_nomatch) would push `total` and `advantage` out of view
            table = gr.Dataframe(initial[0]["value"], label="scores (one row per completion)", interactive=False,
                                 wrap=True, elem_id="sandbox-table")
            details = gr.HTML(initial[2], elem_id="sandbox-details")
            score_button = gr.Button("score", visible=False)

    inputs = [completions, answer, enabled, scale, *tag_boxes, code, token, *knobs.values(), *weights]
    # Scoring has its own pool of event slots: a request that waits on math-verify or custom code (blocked,
    # not computing) must not hold one of the app's few default slots while cheap requests queue behind it.
    scoring = {"concurrency_id": "score", "concurrency_limit": SCORE_CONCURRENCY}
    # one event for every input: always_last orders one event's runs, so with one event per box a slow paste's
    # result could land after a quicker untick's and show scores for the rewards of before
    gr.on([component.change for component in inputs], score_view, inputs, [table, report, details],
          trigger_mode="always_last", api_visibility="private", show_progress="hidden", **scoring)
    score_button.click(score_table, inputs, [table], api_name="score", **scoring)
    upload.upload(upload_file, upload, [completions, answer], api_visibility="private")
    return SandboxInputs(completions, answer, enabled, dict(zip(NAMES, weights)), scale,
                         dict(zip(DEFAULT_TAGS.to_dict(), tag_boxes)), knobs)
