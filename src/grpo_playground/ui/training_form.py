"""The Training tab's setup screen: pick, upload or save a recipe, edit it in the form, start it.

The form is built from the RunConfig dataclasses (ui/config_form.py); the CLI box shows the command that runs
the same recipe, with the form's edits as `--set` arguments.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from grpo_playground.contracts.states import JOB_STAGES
from grpo_playground.jobs.control import check_model_loads, start_run
from grpo_playground.cli.args import TrainArgs
from grpo_playground.config import ConfigError, RunConfig, config_from_dict, config_to_dict, dump_recipe, load_recipe
from grpo_playground.contracts.shipped import RECIPES_DIR, shipped_recipes
from grpo_playground.memory_budget import budget_note
from grpo_playground.jobs.data_preview import run_preview
from grpo_playground.owner import check_owner, owner_token_required
from grpo_playground.ui.config_form import FormField, build_form, config_from_values, form_problems, values_from_config
from grpo_playground.ui.data_preview import PreviewPart, build_preview, error_html, preview_html
from grpo_playground.ui.handlers import handler, rest, spread
from grpo_playground.ui.user_errors import USER_ERRORS

START_ID = "training-start"  # the skip link (ui/skip_link.py) moves the focus here
DEFAULT_RECIPE = "quick"  # the whole story (SFT, pre-flight, GRPO) in minutes on 2 CPU cores
INTRO = ("Edit a recipe, start it as a background job, and watch SFT teach the format and GRPO teach correctness "
         "in **2. Live run**. Jobs keep running when you close the browser; come back any time. **New here?** "
         "Press **Start**: the `quick` recipe plays the whole story (SFT, pre-flight, GRPO, a sample group) in "
         "about 4 minutes on 2 CPU cores.")


def initial_config() -> RunConfig:
    path = RECIPES_DIR / f"{DEFAULT_RECIPE}.yaml"
    return load_recipe(path) if path.exists() else RunConfig()


def _plain(text: str) -> str:
    """Text shown as written inside Markdown: keys such as grpo.max_completion_length or a value with * stay as they are."""
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", text)


def problems_markdown(problems: list[str]) -> str:
    """Every problem of the form, one a line, each naming the field and the fix."""
    count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
    return f"⚠ **Fix before starting ({count}):**\n" + "\n".join(f"- {_plain(p)}" for p in problems)


def cli_for_recipe(recipe_file: str, stage: str, overrides: list[str] = ()) -> str:
    return TrainArgs(Path(recipe_file), stage=stage, overrides=tuple(overrides)).shell("OMP_NUM_THREADS=1")


def _flat(data: dict, prefix: str = "") -> dict:
    """{"grpo": {"max_steps": 5}} -> {"grpo.max_steps": 5}; a section's dict values (weights, tags) stay whole."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and not prefix:
            out.update(_flat(value, f"{key}."))
        else:
            out[prefix + key] = value
    return out


def overrides_between(base: RunConfig, edited: RunConfig) -> list[str]:
    """The `--set section.key=value` arguments that turn recipe `base` into `edited` (values in YAML syntax)."""
    import yaml

    before, after = _flat(config_to_dict(base)), _flat(config_to_dict(edited))
    return [f"{key}={yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix('...').strip()}"
            for key, value in after.items() if before.get(key) != value]


@dataclass
class FormPart:
    recipe_pick: gr.Dropdown
    load: gr.Button
    upload: gr.File
    save: gr.Button
    saved: gr.File
    specs: list[FormField]
    fields: list  # one component per spec, in the same order
    stage: gr.Dropdown
    token: gr.Textbox
    start: gr.Button
    message: gr.Markdown
    cli: gr.Code
    loaded_from: gr.State  # (file name, its values) of the recipe the form was loaded from
    preview: PreviewPart


def build_form_part() -> FormPart:
    """The recipe form on the left; on the right, in view beside it, what a user does first: pick a recipe,
    Start, read the equivalent command; then upload or save a recipe file."""
    cfg = initial_config()
    with gr.Row():
        with gr.Column(scale=3):
            specs, fields = build_form(cfg)
        with gr.Column(scale=2):
            gr.Markdown(INTRO)
            with gr.Row(equal_height=True):
                recipe_pick = gr.Dropdown(shipped_recipes(), value=DEFAULT_RECIPE if DEFAULT_RECIPE in shipped_recipes()
                                          else None, label="Shipped recipe", scale=2, elem_id="training-recipe")
                load = gr.Button("Load recipe", scale=1)
            with gr.Row(equal_height=True):
                stage = gr.Dropdown(list(JOB_STAGES), value="all", label="Stage", scale=2,
                                    info="all: SFT then GRPO; preflight: only sample a few groups and score them")
                start = gr.Button("Start", variant="primary", scale=1, elem_id=START_ID)
            token = gr.Textbox(label="Owner token", type="password", visible=owner_token_required(),
                               info="needed to start, stop, resume, export and save a recipe file on a shared app; visitors can watch")
            message = gr.Markdown(elem_id="training-form-msg")
            default_file = f"recipes/{DEFAULT_RECIPE}.yaml"
            cli = gr.Code(cli_for_recipe(default_file, "all"), label="Equivalent CLI (the loaded recipe plus your edits)",
                          language="shell", elem_id="training-cli", wrap_lines=True, lines=1, max_lines=4,
                          show_line_numbers=False)
            with gr.Row():
                upload = gr.File(label="Upload a recipe (.yaml)", file_types=[".yaml", ".yml"], type="filepath",
                                 height=120, scale=2)
                save = gr.Button("Save recipe", scale=1)
            saved = gr.File(label="Your recipe", interactive=False, visible=False)  # shown once saved
            preview = build_preview()
    return FormPart(recipe_pick, load, upload, save, saved, specs, fields, stage, token, start, message, cli,
                    gr.State((default_file, config_to_dict(cfg))), preview)


@dataclass
class Loaded:
    """The form after a recipe was loaded (or refused: every value gr.skip(), the message says why)."""
    values: list = spread()  # one per form field
    message: object = field(default_factory=gr.skip)
    cli: object = field(default_factory=gr.skip)
    loaded_from: object = field(default_factory=gr.skip)


@dataclass
class Uploaded(Loaded):
    upload: object = field(default_factory=gr.skip)  # None clears a refused file from the upload box


@dataclass
class PickRequest:
    recipe_pick: str | None


@dataclass
class UploadRequest:
    upload: str | None  # the uploaded file's path


@dataclass
class CheckRequest:
    stage: str | None
    loaded_from: tuple | list  # (file name, its values) of the recipe the form was loaded from
    values: list = rest()  # the form's fields' values, in the order the form built them


@dataclass
class FormRequest:
    """Start and the data preview: the stage, the owner token and the form."""
    stage: str | None
    token: str | None
    values: list = rest()


@dataclass
class SaveRequest:
    token: str | None
    values: list = rest()


@dataclass
class Checked:
    message: str
    cli: object = field(default_factory=gr.skip)


@dataclass
class Saved:
    saved: object
    cli: str
    loaded_from: tuple


def wire_form(part: FormPart, started: list, on_start) -> None:
    """The form's listeners. Start sends `on_start(info)` (values for the `started` components: the run view
    follows the new run)."""
    specs, fields = part.specs, part.fields

    def loaded(config, source) -> Loaded:
        return Loaded(values_from_config(specs, config), f"Loaded {source}.", cli_for_recipe(source, "all"),
                      (source, config_to_dict(config)))

    def load_failed(message) -> Loaded:
        """The form keeps its values (a raised error would mark every field as failed); the message says why."""
        return Loaded([gr.skip()] * len(fields), f"**{message}**")

    @handler(PickRequest)
    def load_shipped(req: PickRequest) -> Loaded:
        name = req.recipe_pick
        if name not in shipped_recipes():
            return load_failed(f"no shipped recipe {name!r}: pick one of {', '.join(shipped_recipes())}")
        return loaded(load_recipe(RECIPES_DIR / f"{name}.yaml"), f"recipes/{name}.yaml")

    @handler(UploadRequest)
    def load_uploaded(req: UploadRequest) -> Uploaded:
        """The form from an uploaded file; a refused file leaves the upload box (it stayed there as if loaded)."""
        path = req.upload
        if not path:
            return Uploaded([gr.skip()] * len(fields))
        try:
            return Uploaded(**vars(loaded(load_recipe(path), f"{Path(path).name}")))
        except USER_ERRORS as exc:
            return Uploaded(**vars(load_failed(f"{Path(path).name} was not loaded: {exc}")), upload=None)

    @handler(CheckRequest)
    def check_form(req: CheckRequest) -> Checked:
        values = req.values
        try:
            config = config_from_values(specs, values)
        except USER_ERRORS:
            return Checked(problems_markdown(form_problems(specs, values)))
        try:
            check_model_loads(config)  # valid, but would it load here? said now, not by a failed job
        except ValueError as exc:
            return Checked(problems_markdown([str(exc)]))
        file, base = req.loaded_from
        try:
            edits = overrides_between(config_from_values(specs, values_from_config(specs, config_from_dict(base))),
                                      config)
        except USER_ERRORS:
            edits = []
        return Checked("Recipe is valid." + budget_note(config), cli_for_recipe(file, req.stage, edits))

    @handler(SaveRequest)
    def save_form(req: SaveRequest) -> Saved:
        check_owner(req.token, "saving a recipe file")  # a stranger's click writes nothing to disk
        config = config_from_values(specs, req.values)
        # In Gradio's temp folder: served from there as it is, and deleted with it (Blocks(delete_cache=...)).
        folder = Path(get_upload_folder())
        folder.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="recipe-", dir=folder)) / f"{config.name}.yaml"
        path.write_text(dump_recipe(config), encoding="utf-8")
        return Saved(gr.update(value=str(path), visible=True), cli_for_recipe(path.name, "all"),
                     (path.name, config_to_dict(config)))

    @handler(FormRequest)
    def start_from_form(req: FormRequest) -> dict:
        try:
            check_owner(req.token)
            config = config_from_values(specs, req.values)
        except (ConfigError, ValueError):
            raise gr.Error("Fix the recipe before starting: " + "; ".join(form_problems(specs, req.values)),
                           print_exception=False) from None
        return on_start(start_run(config, req.stage, req.token))

    @handler(FormRequest)
    def preview_data(req: FormRequest) -> str:
        """The form's data source rendered by the form's model: its rows, or what to fix, in the preview box."""
        try:
            config = config_from_values(specs, req.values)
        except (ConfigError, ValueError):
            return error_html("fix the recipe first: " + "; ".join(form_problems(specs, req.values)))
        try:
            return preview_html(run_preview(config, req.stage, req.token))
        except USER_ERRORS as exc:
            return error_html(str(exc))

    ui = dict(api_visibility="private")
    part.preview.button.click(preview_data, [part.preview.stage, part.token, *fields], part.preview.output,
                              concurrency_limit=1, **ui)
    loaded_outputs = [*fields, part.message, part.cli, part.loaded_from]
    part.load.click(load_shipped, part.recipe_pick, loaded_outputs, **ui)
    part.upload.upload(load_uploaded, part.upload, [*loaded_outputs, part.upload], **ui)
    # always_last: an edit made while the previous check is still running is checked too (gradio's default, "once",
    # dropped it, and the message kept describing the form before that edit)
    gr.on([c.input for c in fields] + [part.stage.change], check_form, [part.stage, part.loaded_from, *fields],
          [part.message, part.cli], trigger_mode="always_last", **ui)
    part.save.click(save_form, [part.token, *fields], [part.saved, part.cli, part.loaded_from], **ui)
    part.start.click(start_from_form, [part.stage, part.token, *fields], started, **ui)
