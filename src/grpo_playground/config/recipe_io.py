"""RunConfig <-> plain dict <-> YAML recipe, losslessly, with type coercion and helpful errors.

A recipe is flat-ish YAML: top-level `name`, then one mapping per section whose keys are exactly the
dataclass fields (recipes/tiny-cpu.yaml). Unknown keys are errors that name the closest valid key.
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from pathlib import Path

from grpo_playground.config.run_config import SECTIONS, ConfigError, RunConfig, _did_you_mean
from grpo_playground.tags import Tags

MAX_RECIPE_BYTES = 256 * 1024


def config_to_dict(cfg: RunConfig) -> dict:
    out: dict = {"name": cfg.name}
    for section in SECTIONS:
        obj = getattr(cfg, section)
        out[section] = {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
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
    top_keys = {"name", *SECTIONS}
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
        hints = typing.get_type_hints(cls)
        valid = {f.name for f in fields(cls)}
        values = {}
        for key, value in raw.items():
            if key not in valid:
                raise ConfigError(f"{section}.{key}", value,
                                  f"unknown key{_did_you_mean(key, valid)}; valid: {', '.join(sorted(valid))}")
            values[key] = _coerce(f"{section}.{key}", value, hints[key])
        kwargs[section] = cls(**values)
    return RunConfig(**kwargs).validate()


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
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(path, value, "give a number, e.g. 2.0e-4") from None
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(path, value, "give text")
        return str(value)
    raise ConfigError(path, value, f"unsupported field type {hint}")


def _is_integral_text(value) -> bool:
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def load_recipe(path: str | Path) -> RunConfig:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"recipe {path} does not exist: pass a YAML file such as recipes/tiny-cpu.yaml")
    if path.stat().st_size > MAX_RECIPE_BYTES:
        raise ConfigError("recipe", str(path), f"file is larger than {MAX_RECIPE_BYTES // 1024} KiB: not a recipe")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError("recipe", str(path), f"is not valid YAML ({exc})") from None
    return config_from_dict(data or {})


def dump_recipe(cfg: RunConfig) -> str:
    import yaml

    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False, width=120)


def save_recipe(cfg: RunConfig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dump_recipe(cfg.validate()), encoding="utf-8")
    tmp.replace(path)
    return path


def apply_overrides(cfg: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `section.key=value` strings (values in YAML syntax), e.g. `grpo.max_steps=5` -> a new config."""
    import yaml

    data = config_to_dict(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or (section != "name" and not dot):
            raise ConfigError("override", item, "write section.key=value, e.g. grpo.max_steps=5")
        value = yaml.safe_load(raw)
        if section == "name":
            data["name"] = value
        elif section not in data:
            raise ConfigError(section, item, f"unknown section{_did_you_mean(section, data)}")
        else:
            data[section][name] = value
    return config_from_dict(data)
