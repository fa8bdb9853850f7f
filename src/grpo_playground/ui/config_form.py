"""The run configuration as a Gradio form, built from the RunConfig dataclasses and their help metadata.

Nothing here lists fields by hand: adding a field to grpo_playground.config adds it to the form. Each field
maps to one component by its annotated type (numbers -> gr.Number, bools -> gr.Checkbox, choices ->
gr.Dropdown, the reward weights -> a table of every registered reward, tags -> one box per tag). The SFT and GRPO
sections show the product's fields; their "All TRL options" accordion holds one YAML box for any other field of
TRL's SFTConfig / GRPOConfig and the list of those fields, read from TRL's dataclasses (config/trl_fields.py).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, fields, replace

import gradio as gr

from grpo_playground.config import SECTIONS, ConfigError, RunConfig, config_from_dict, config_to_dict, recipe_from_text
from grpo_playground.config.recipe_io import MAX_RECIPE_BYTES, RUN_SECTION, safe_yaml, section_keys
from grpo_playground.config.run_config import TRL_OPTIONS
from grpo_playground.config.trl_fields import TRL_CLASSES
from grpo_playground.rewards import REWARDS
from grpo_playground.tags import Tags

WEIGHT_COLUMNS = ["reward", "weight", "what it scores"]
# words of a field name as people write them (the rest is lower case); a field's own `label` metadata wins
WORDS = {"sft": "SFT", "grpo": "GRPO", "gpu": "GPU", "gpus": "GPUs", "cpu": "CPU", "vllm": "vLLM", "lr": "learning-rate",
         "kl": "KL", "4bit": "4-bit", "num": "number of", "seq": "sequence", "swanlab": "SwanLab", "dtype": "data type",
         "optim": "optimizer", "eval": "eval", "lora": "LoRA"}


def human_label(name: str) -> str:
    """num_generations -> "Number of generations": a config key as a label (the key stays in the help)."""
    words = [WORDS.get(word, word) for word in name.split("_")]
    text = " ".join(words)
    return text[0].upper() + text[1:]


@dataclass(frozen=True)
class FormField:
    name: str
    kind: str  # bool | int | float | choice | text | int_list | text_list | weights | tag | trl
    help: str
    section: str | None = None  # None: a top-level field of RunConfig (the run name)
    choices: tuple = ()
    optional: bool = False
    tag: str | None = None  # for kind "tag": which of the four Tags fields
    title: str = ""  # the label shown (the field's `label` metadata, else its name in words)

    @property
    def label(self) -> str:
        return self.tag or self.name

    @property
    def key(self) -> str:
        """The recipe key, as in the YAML file and `--set`."""
        return ".".join(part for part in (self.section, self.name, self.tag) if part)

    @property
    def elem_id(self) -> str:
        return f"cfg-{self.section or RUN_SECTION}-{self.label}"

    def get(self, data: dict):
        if self.kind == "trl":  # the section's keys that are not the product's fields: its other TRL options
            named = section_keys(self.section)[0]
            return {key: value for key, value in data[self.section].items() if key not in named}
        value = data[self.section][self.name] if self.section else data[self.name]
        return value[self.tag] if self.tag else value

    def put(self, data: dict, value) -> None:
        target = data.setdefault(self.section, {}) if self.section else data
        if self.kind == "trl":
            target.update(value)
        elif self.tag:
            target.setdefault(self.name, {})[self.tag] = value
        else:
            target[self.name] = value


def _classify(field, hint) -> FormField | list[FormField]:
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = True, inner[0]
    meta = dict(field.metadata)
    help_text = meta.get("help", "")
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    kw = dict(name=field.name, help=help_text, optional=optional, title=meta.get("label") or human_label(field.name))
    if hint is Tags:
        return [FormField(tag=t.name, kind="tag", **{**kw, "title": human_label(t.name)}) for t in fields(Tags)]
    if origin is typing.Literal or meta.get("choices"):
        return FormField(kind="choice", choices=tuple(meta.get("choices") or args), **kw)
    if hint is bool:
        return FormField(kind="bool", **kw)
    if hint in (int, float):
        return FormField(kind=hint.__name__, **kw)
    if origin is list:
        return FormField(kind="int_list" if args[0] is int else "text_list", **kw)
    if origin is dict:
        return FormField(kind="weights", **kw)
    return FormField(kind="text", **kw)


def form_fields() -> list[FormField]:
    """Every editable field of RunConfig, in declaration order."""
    out: list[FormField] = []
    for f in fields(RunConfig):
        if f.name in SECTIONS:
            cls = SECTIONS[f.name]
            hints = typing.get_type_hints(cls)
            for sub in fields(cls):
                if sub.name == TRL_OPTIONS:
                    title = f"All TRL options ({TRL_CLASSES[f.name][1]})"
                    out.append(FormField(sub.name, "trl", sub.metadata["help"], f.name, optional=True, title=title))
                    continue
                got = _classify(sub, hints[sub.name])
                for item in got if isinstance(got, list) else [got]:
                    out.append(replace(item, section=f.name))
        else:
            out.append(_classify(f, typing.get_type_hints(RunConfig)[f.name]))
    return out


def _component(field: FormField, value):
    # the label in words, the key (as in the YAML file and --set) first in the help
    common = dict(label=field.title, info=f"{field.key}: {field.help}" if field.help else field.key, elem_id=field.elem_id)
    if field.kind == "bool":
        return gr.Checkbox(value=value, **common)
    if field.kind in ("int", "float") and field.optional:
        # gr.Number cannot be empty (it sends 0), and "none" differs from 0 here (e.g. no time budget)
        return gr.Textbox(value=_optional_text(value), placeholder="empty = none", **common)
    if field.kind in ("int", "float"):
        return gr.Number(value=value, precision=0 if field.kind == "int" else None, **common)
    if field.kind == "choice":
        return gr.Dropdown(choices=list(field.choices), value=value, **common)
    if field.kind == "text_list":
        return gr.Dropdown(choices=list(value or []), value=value, multiselect=True, allow_custom_value=True,
                           **common)
    if field.kind == "weights":
        gr.Markdown(f"**{field.title}** (`{field.key}`): {field.help} A weight of 0 turns a reward off.")
        return gr.Dataframe(value=weights_table(value), headers=WEIGHT_COLUMNS, datatype=["str", "number", "str"],
                            column_count=3, row_count=len(REWARDS), interactive=True, column_widths=["30%", "12%", "58%"],
                            static_columns=[0, 2], wrap=True, label=field.title, elem_id=field.elem_id)
    if field.kind == "int_list":
        return gr.Textbox(value=_list_text(value), placeholder="e.g. 1, 2, 3 (empty = all)", **common)
    if field.kind == "trl":
        return _trl_options(field, value)
    return gr.Textbox(value=value, **common)


TRL_COLUMNS = ["key", "type", "TRL's default", "what it does (TRL's help)"]


def trl_options_table(section: str) -> list[list]:
    """The section's TRL fields the form does not show as fields, one row each, from TRL's own dataclass: the stage's
    own (GRPOConfig's) first, then those it shares with every trainer (TrainingArguments')."""
    own = TRL_CLASSES[section][1]
    specs = sorted(section_keys(section)[1].values(), key=lambda spec: spec.owner != own)
    return [[spec.name, spec.annotation, repr(spec.default), spec.help] for spec in specs]


def _trl_options(field: FormField, value: dict):
    """One YAML box for the stage's other TRL options, and the list of them (closed: it is long)."""
    rows = trl_options_table(field.section)
    with gr.Accordion(f"{field.title}: {len(rows)} more fields", open=False,
                      elem_id=f"cfg-section-{field.section}-trl"):
        box = gr.Code(value=trl_options_text(value), language="yaml", label=f"{field.section}: other TRL options "
                      "(YAML, one `key: value` a line; TRL's names, as in the list below)",
                      elem_id=field.elem_id, lines=3, max_lines=12)
        gr.Dataframe(value=rows, headers=TRL_COLUMNS, datatype=["str"] * 4, interactive=False, wrap=True,
                     column_widths=["22%", "16%", "12%", "50%"], max_height=360,
                     label=f"TRL's {TRL_CLASSES[field.section][1]} fields not shown above")
    return box


def trl_options_text(options: dict) -> str:
    import yaml

    return yaml.safe_dump(options, sort_keys=False, default_flow_style=False, width=120) if options else ""


def trl_options_from_text(field: FormField, text) -> dict:
    """The YAML box's mapping; a key the form shows as a field is refused (which value would win?)."""
    value = safe_yaml(str(text or ""), f"{field.section}'s TRL options") or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{field.section}.{TRL_OPTIONS}", value, "write one `key: value` a line, e.g. top_k: 50")
    for key in value:
        if key in section_keys(field.section)[0]:
            raise ConfigError(f"{field.section}.{key}", value[key], "is a field of the form above: set it there")
    return value


def build_form(cfg: RunConfig) -> tuple[list[FormField], list]:
    """Lay the form out (one accordion per section) inside the current Blocks; returns fields and components
    in the same order, for `values_from_config` / `config_from_values`."""
    specs = form_fields()
    data = config_to_dict(cfg)
    components = []
    by_section: dict = {}
    for spec in specs:
        by_section.setdefault(spec.section, []).append(spec)
    for section, section_specs in by_section.items():
        title = section or RUN_SECTION
        help_text = next((f.metadata.get("help", "") for f in fields(RunConfig) if f.name == section), "")
        # sections start closed: the setup fits one screen (a recipe is started as loaded; open what you edit)
        heading = f"{title}: {help_text}" if help_text else \
            f"{RUN_SECTION}: the run's name (in a recipe file: name: at the top, or under {RUN_SECTION}:)"
        with gr.Accordion(heading, open=section is None, elem_id=f"cfg-section-{title}"):
            # the weights table gets a row of its own: three to a row squeezed it to ~160 px
            tables = [s for s in section_specs if s.kind in ("weights", "trl")]
            boxes = [s for s in section_specs if s.kind not in ("weights", "trl")]
            for start in range(0, len(boxes), 3):
                with gr.Row():
                    for spec in boxes[start : start + 3]:
                        components.append(_component(spec, spec.get(data)))
            for spec in tables:
                components.append(_component(spec, spec.get(data)))
            by_section[section] = boxes + tables
    # components were created section by section: reorder specs the same way
    ordered = [spec for section_specs in by_section.values() for spec in section_specs]
    return ordered, components


def weights_table(weights: dict) -> list[list]:
    """One row per registered reward (the registry is the list, not this module): name, weight, description."""
    return [[name, float(weights.get(name, 0.0)), spec.description] for name, spec in REWARDS.items()]


def _optional_text(value) -> str:
    return "" if value is None else str(value)


def _list_text(value) -> str:
    return ", ".join(str(v) for v in value) if value else ""


def values_from_config(specs: list[FormField], cfg: RunConfig) -> list:
    data = config_to_dict(cfg)
    values = []
    for spec in specs:
        value = spec.get(data)
        if spec.kind == "weights":
            value = weights_table(value)
        elif spec.kind == "int_list":
            value = _list_text(value)
        elif spec.kind == "trl":
            value = trl_options_text(value)
        elif spec.kind in ("int", "float") and spec.optional:
            value = _optional_text(value)
        values.append(value)
    return values


def _table_rows(value) -> list[list]:
    if hasattr(value, "values") and hasattr(value, "columns"):  # a pandas DataFrame from the UI
        return value.values.tolist()
    if isinstance(value, dict) and "data" in value:  # the API form of a Dataframe
        return value["data"]
    return list(value or [])


def config_from_values(specs: list[FormField], values: list) -> RunConfig:
    """Rebuild and validate a RunConfig from form values; raises ConfigError naming the field."""
    data: dict = {}
    for spec, value in zip(specs, values):
        if spec.kind == "weights":
            value = {str(row[0]): float(row[1]) for row in _table_rows(value)
                     if row and row[1] not in (None, "") and float(row[1]) != 0}
        elif spec.kind == "int_list":
            parts = [p.strip() for p in str(value or "").split(",") if p.strip()]
            value = parts or None
        elif spec.kind == "trl":
            value = trl_options_from_text(spec, value)
        elif spec.kind in ("int", "float") and spec.optional:
            value = str("" if value is None else value).strip() or None  # the config coerces the text
        elif spec.kind in ("int", "float") and value is None:
            value = _default(spec)
        spec.put(data, value)
    return config_from_dict(data)


def form_problems(specs: list[FormField], values: list) -> list[str]:
    """Every problem of the form's values, not only the first: each field is tried alone on the defaults (so one
    bad value cannot hide the next), then the recipe as a whole (the checks across fields). [] when valid."""
    try:
        config_from_values(specs, values)
        return []
    except (ConfigError, ValueError) as whole:
        first = str(whole)
    defaults = values_from_config(specs, RunConfig())
    problems = []
    for index, spec in enumerate(specs):
        trial = list(defaults)
        trial[index] = values[index]
        try:
            config_from_values(specs, trial)
        except ConfigError as exc:
            # a tag's problem names its tags mapping; the TRL options box's, any key of its section
            if exc.path.startswith(spec.key.rsplit(".", 1)[0] if spec.tag or spec.kind == "trl" else spec.key):
                problems.append(str(exc))
        except ValueError as exc:  # a value the form could not even read (text in a weight cell)
            problems.append(f"{spec.key}: {exc}")
    return list(dict.fromkeys(problems + [first]))  # the whole recipe's first problem, when no field showed it


def _default(spec: FormField):
    """An emptied number box falls back to the field's default rather than failing."""
    cls = SECTIONS[spec.section] if spec.section else RunConfig
    return next(f.default for f in fields(cls) if f.name == spec.name)


def config_from_yaml_text(text: str) -> RunConfig:
    """A RunConfig from recipe text (API clients send YAML), with the same checks as a recipe file, in memory:
    jobs.create_run saves it once into the run folder and the job reads it there."""
    if len(text.encode()) > MAX_RECIPE_BYTES:
        raise ValueError(f"the recipe is larger than {MAX_RECIPE_BYTES // 1024} KiB: send a recipe, not data")
    return recipe_from_text(text, "the recipe text")
