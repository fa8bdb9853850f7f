"""RunConfig <-> plain dict <-> YAML recipe, losslessly, with type coercion and helpful errors.

A recipe is flat-ish YAML: top-level `name`, then one mapping per section whose keys are exactly the
dataclass fields (recipes/tiny-cpu.yaml); `sft:` and `grpo:` also take any other field of TRL's SFTConfig /
GRPOConfig by TRL's name (config/trl_fields.py). Unknown keys are errors that name the closest valid key. The run's own
keys (`name`) may also sit in a `run:` section, as the form shows them (`run: {name: my-run}`); files are written
with them top-level.
"""

from __future__ import annotations

import functools
import math
import types
import typing
import warnings
from dataclasses import fields
from pathlib import Path

from grpo_playground.config.run_config import (PRODUCT_KEYS, RENAMED_KEYS, SECTIONS, TRL_OPTIONS, ConfigError,
                                               RunConfig, _did_you_mean)
from grpo_playground.config.trl_fields import TRL_CLASSES, coerce_trl, trl_fields
from grpo_playground.contracts.process import write_text_atomic
from grpo_playground.tags import Tags

MAX_RECIPE_BYTES = 256 * 1024
# A recipe has ~80 values two levels deep. Aliases can make a few hundred bytes expand into millions of nodes
# (a "billion laughs"); deep nesting exhausts the parser's recursion. Both are refused before any object is built.
MAX_YAML_NODES = 20_000
MAX_YAML_DEPTH = 16
MAX_ERROR_CHARS = 300  # a YAML error quotes the offending line: keep a stranger's text out of our messages
RUN_SECTION = "run"  # the form's section of RunConfig's own fields (not sections): top-level keys in a file


def run_keys() -> set[str]:
    """The keys of the `run:` section: RunConfig's fields that are not sections (the name)."""
    return {f.name for f in fields(RunConfig) if f.name not in SECTIONS}


def config_to_dict(cfg: RunConfig) -> dict:
    """The recipe as plain data; a stage's other TRL options sit in its section beside the named fields."""
    out: dict = {"name": cfg.name}
    for section in SECTIONS:
        obj = getattr(cfg, section)
        out[section] = {f.name: _plain(getattr(obj, f.name)) for f in fields(obj) if f.name != TRL_OPTIONS}
        out[section].update(getattr(obj, TRL_OPTIONS, {}))
    return out


def _plain(value):
    if isinstance(value, Tags):
        return value.to_dict()
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def config_from_dict(data: dict) -> RunConfig:
    """Build and validate a RunConfig; missing keys keep their defaults, unknown keys are errors."""
    if not isinstance(data, dict):
        raise ConfigError("recipe", type(data).__name__, "a recipe is a mapping of sections (model:, data:, ...)")
    data = _lift_run_section(data)
    top_keys = {*run_keys(), RUN_SECTION, *SECTIONS}
    unknown = _unknown_keys(data)
    if len(unknown) > 1:  # one at a time cost a user an upload per typo; a single one gets the detailed error below
        raise ConfigError("recipe", unknown, f"{len(unknown)} unknown keys: " + "; ".join(unknown)
                          + ". Fix or remove each")
    for key in data:
        if key not in top_keys:
            raise ConfigError(key, data[key], f"unknown section{_did_you_mean(key, top_keys)}; "
                                              f"valid: {', '.join(sorted(top_keys))}")
    kwargs: dict = {}
    if "name" in data:
        kwargs["name"] = _coerce("name", data["name"], str)
    for section, cls in SECTIONS.items():
        raw = data.get(section) or {}
        if not isinstance(raw, dict):
            raise ConfigError(section, raw, f"must be a mapping of {cls.__name__} fields")
        kwargs[section] = cls(**_section_values(section, cls, raw))
    return RunConfig(**kwargs).validate()


def section_keys(section: str) -> tuple[list[str], dict]:
    """The keys a section takes: its dataclass's fields and, in `sft:` / `grpo:`, TRL's config fields by TRL's names
    (less those the product sets itself)."""
    named = [f.name for f in fields(SECTIONS[section]) if f.name != TRL_OPTIONS]
    trl = {name: spec for name, spec in trl_fields(section).items() if name not in named and name not in PRODUCT_KEYS} \
        if section in TRL_CLASSES else {}
    return named, trl


def _section_values(section: str, cls, raw: dict) -> dict:
    """The one check of a section's keys and values: a field of the product's is coerced to its annotation, any
    other TRL field to TRL's (into trl_options); anything else is an error naming the closest key."""
    hints = typing.get_type_hints(cls)
    named, trl = section_keys(section)
    values: dict = {}
    for key, value in raw.items():
        key = current_key(section, key, {*named, *trl}, raw)
        if key in named:
            values[key] = _coerce(f"{section}.{key}", value, hints[key])
        elif key in trl:
            values.setdefault(TRL_OPTIONS, {})[key] = coerce_trl(f"{section}.{key}", value, trl[key])
        elif key in PRODUCT_KEYS and section in TRL_CLASSES:
            raise ConfigError(f"{section}.{key}", value, f"the product sets this TRL field: {PRODUCT_KEYS[key]}")
        else:
            where = f"; or any field of TRL's {TRL_CLASSES[section][1]}" if trl else ""
            raise ConfigError(f"{section}.{key}", value, f"unknown key{_did_you_mean(str(key), [*named, *trl])}; "
                                                         f"valid: {', '.join(sorted(named))}{where}")
    return values


def _unknown_keys(data: dict) -> list[str]:
    """Every key of a recipe that RunConfig lacks (a renamed TRL key and any TRL field of sft:/grpo: count as
    known), each with the closest name."""
    top = {*run_keys(), RUN_SECTION, *SECTIONS}
    unknown = [f"{key}{_did_you_mean(str(key), top)}" for key in data if key not in top]
    for section in SECTIONS:
        raw = data.get(section)
        named, trl = section_keys(section)
        valid = {*named, *trl, *(PRODUCT_KEYS if section in TRL_CLASSES else ())}
        if isinstance(raw, dict):
            unknown += [f"{section}.{key}{_did_you_mean(str(key), valid)}" for key in raw
                        if key not in valid and RENAMED_KEYS.get(key) not in valid]
    return unknown


def _lift_run_section(data: dict) -> dict:
    """`run: {name: x}` -> `name: x`; an unknown key of the section names the closest one, and a key given both
    there and top-level is an error (which one would win?)."""
    if RUN_SECTION not in data:
        return data
    raw, valid = data[RUN_SECTION] or {}, run_keys()
    if not isinstance(raw, dict):
        raise ConfigError(RUN_SECTION, raw, "must be a mapping of the run's own keys, e.g. {name: my-run}")
    lifted = {key: value for key, value in data.items() if key != RUN_SECTION}
    for key, value in raw.items():
        if key not in valid:
            raise ConfigError(f"{RUN_SECTION}.{key}", value,
                              f"unknown key{_did_you_mean(str(key), valid)}; valid: {', '.join(sorted(valid))}")
        if key in data:
            raise ConfigError(f"{RUN_SECTION}.{key}", value, f"is set top-level too ({key}: {data[key]!r}): keep one")
        lifted[key] = value
    return lifted


def current_key(section: str, key: str, valid: set[str], given: dict) -> str:
    """`key`, or the TRL name it was renamed to (RENAMED_KEYS), with a warning that says so; an old key given beside
    its new name is an error (which one would win?)."""
    new = RENAMED_KEYS.get(key)
    if new is None or new not in valid:
        return key
    if new in given:
        raise ConfigError(f"{section}.{key}", given[key], f"is the old name of {section}.{new}, which is set too: "
                                                          f"keep only {new}")
    warnings.warn(f"{section}.{key} is now {section}.{new} (TRL's name): the old key is read for this release; "
                  f"did you mean {new}? Rename it in the recipe", FutureWarning, stacklevel=3)
    return new


def _coerce(path: str, value, hint):
    """Convert a YAML value to the field's annotated type, or raise ConfigError saying what was expected."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(path, value, inner[0])
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(path, value, f"choose one of {', '.join(map(str, args))}")
        return value
    if hint is Tags:
        if isinstance(value, Tags):
            return value
        if not isinstance(value, dict):
            raise ConfigError(path, value, "give the four tags as a mapping: reasoning_start, reasoning_end, ...")
        valid = {f.name for f in fields(Tags)}
        for key in value:
            if key not in valid:
                raise ConfigError(f"{path}.{key}", value[key], f"unknown tag{_did_you_mean(key, valid)}")
        try:
            return Tags(**{k: str(v) for k, v in value.items()})
        except ValueError as exc:
            raise ConfigError(path, value, str(exc)) from None
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, value, "give a list, e.g. [a, b]")
        return [_coerce(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, value, "give a mapping, e.g. {check_answer: 1.0}")
        return {_coerce(path, k, args[0]): _coerce(f"{path}.{k}", v, args[1]) for k, v in value.items()}
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(path, value, "give true or false")
    if hint is int:
        if isinstance(value, bool) or not (isinstance(value, int) or _is_integral_text(value)):
            raise ConfigError(path, value, "give a whole number")
        return int(value)
    if hint is float:
        # PyYAML reads `2e-4` (no dot) as a string: accept any numeric text.
        if isinstance(value, bool):
            raise ConfigError(path, value, "give a number")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(path, value, "give a number, e.g. 2.0e-4") from None
        if not math.isfinite(number):  # `.nan`, `.inf`, `1e999`: would pass every range check
            raise ConfigError(path, value, "give a finite number (not NaN or infinity)")
        return number
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(path, value, "give text")
        return str(value)
    raise ConfigError(path, value, f"unsupported field type {hint}")


def _is_integral_text(value) -> bool:
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def load_recipe(path: str | Path) -> RunConfig:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"recipe {path} does not exist: pass a YAML file such as recipes/tiny-cpu.yaml")
    if path.stat().st_size > MAX_RECIPE_BYTES:
        raise ConfigError("recipe", str(path), f"file is larger than {MAX_RECIPE_BYTES // 1024} KiB: not a recipe")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # an image or archive picked by mistake: say so, not the codec's words
        raise ConfigError("recipe", path.name, f"is not a text file (byte {exc.start} is not UTF-8): a recipe is "
                                               "YAML text such as recipes/quick.yaml") from None
    return recipe_from_text(text, path.name)


def recipe_from_text(text: str, source: str = "recipe") -> RunConfig:
    """A RunConfig from recipe text (a file's, or what an API client sends), checked in memory like a file."""
    return config_from_dict(safe_yaml(text, source) or {})


def safe_yaml(text: str, source: str = "recipe"):
    """yaml.safe_load with bounds: size, nesting depth and alias expansion are checked on the node graph
    before any Python object is built. Errors quote no more than MAX_ERROR_CHARS of the input."""
    import yaml

    if len(text.encode("utf-8", "surrogatepass")) > MAX_RECIPE_BYTES:
        raise ConfigError("recipe", source, f"is larger than {MAX_RECIPE_BYTES // 1024} KiB: not a recipe")
    loader = _bounded_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError("recipe", source, f"is not valid YAML: {_short(_yaml_problem(exc))}") from None
    finally:
        loader.dispose()


def _short(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " ..."


@functools.cache
def _bounded_loader() -> type:
    import yaml  # imported when first needed, as everywhere in this module

    class BoundedLoader(yaml.SafeLoader):
        """Refuses nesting deeper than MAX_YAML_DEPTH while composing (before recursion can run out)."""

        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    raise yaml.YAMLError(f"nesting deeper than {MAX_YAML_DEPTH} levels: a recipe is two levels deep")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _check_expanded_size(root) -> None:
    """Count nodes as the constructed value would hold them (an alias counts its whole target each time),
    memoised per node so counting itself stays linear; a cycle is refused too."""
    import yaml

    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise yaml.YAMLError("an alias refers to its own parent (a recursive structure): not a recipe")
        active.add(key)
        children = node.value if isinstance(node.value, list) else []
        total = 1
        for child in children:
            total += sum(size(n) for n in child) if isinstance(child, tuple) else size(child)
            if total > MAX_YAML_NODES:
                raise yaml.YAMLError(f"more than {MAX_YAML_NODES:,} values once aliases are expanded: not a recipe")
        active.discard(key)
        sizes[key] = total
        return total

    size(root)


def _yaml_problem(exc) -> str:
    """Where and what, without the parser's file path: 'line 3, column 7: mapping values are not allowed here'."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}{problem} (fix that line; keys are `section:` then indented `key: value`)"


def dump_recipe(cfg: RunConfig) -> str:
    import yaml

    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False, width=120)


def save_recipe(cfg: RunConfig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, dump_recipe(cfg.validate()))
    return path


def override_keys_help(width: int = 100) -> str:
    """Every key `--set` takes, section by section, read from the dataclasses (so the list cannot drift)."""
    import textwrap

    lines = ["keys for --set SECTION.KEY=VALUE, the recipe file's own keys (values in YAML syntax):",
             "  " + ", ".join(f"{key} (or {RUN_SECTION}.{key})" for key in sorted(run_keys()))]
    for section, cls in SECTIONS.items():
        keys = ", ".join(f"{section}.{name}" for name in section_keys(section)[0])
        if section in TRL_CLASSES:
            keys += f", and any other field of TRL's {TRL_CLASSES[section][1]} by its name except those the product " \
                    f"sets ({', '.join(sorted(PRODUCT_KEYS))})"
        lines += textwrap.wrap(keys, width, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines)


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `section.key=value` strings (values in YAML syntax), e.g. `grpo.max_steps=5` -> a new config."""
    data = config_to_dict(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or (section not in run_keys() and not dot):
            raise ConfigError("override", item, "write section.key=value, e.g. grpo.max_steps=5")
        value = safe_yaml(raw, "override")
        if section in run_keys():
            data[section] = value
        elif section == RUN_SECTION:
            data.update(_lift_run_section({RUN_SECTION: {name: value}}))  # run.name=x: the key checked, then top-level
        elif section not in data:
            raise ConfigError(section, item, f"unknown section{_did_you_mean(section, data)}")
        else:
            named, trl = section_keys(section)
            data[section][current_key(section, name, {*named, *trl}, {})] = value
    return config_from_dict(data)
