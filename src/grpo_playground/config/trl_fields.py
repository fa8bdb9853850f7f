"""TRL's SFTConfig / GRPOConfig fields (name, type, default, help), read from the installed sources, not imported.

The `sft:` and `grpo:` sections of a recipe take these fields by TRL's own names. The UI process must not import
TRL (it pulls in torch), so the dataclasses are read with `ast` from the files pip installed, following each class's
bases (GRPOConfig -> trl's _BaseConfig -> transformers' TrainingArguments): a field that a TRL upgrade adds is known
here with no code change. tests/test_trl_options.py checks this reading against `dataclasses.fields` of the classes.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

from grpo_playground.config.run_config import ConfigError

# stage -> (module, class) of the TRL config it builds
TRL_CLASSES = {"sft": ("trl.trainer.sft_config", "SFTConfig"), "grpo": ("trl.trainer.grpo_config", "GRPOConfig")}
# transformers' package __init__ is lazy (a table of names, no imports a parser can follow): where its class lives
LAZY_HOMES = {("transformers", "TrainingArguments"): "transformers.training_args"}
PLAIN_TYPES = ("bool", "int", "float", "str", "dict", "list", "None")


@dataclass(frozen=True)
class Expression:
    """A default that is no literal (`default_optim`, `list()`): its source text, shown as written."""

    text: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class TrlField:
    name: str
    annotation: str  # as written in TRL's source: "int | None", "IntervalStrategy | str"
    types: tuple[str, ...]  # the annotation's members by name: ("int", "None"); an enum class stands for its values
    default: object  # the literal default, else an Expression (a default_factory's call, a variable)
    help: str
    owner: str  # the class that declares it last: GRPOConfig, _BaseConfig, TrainingArguments
    choices: tuple = ()

    def describe(self) -> str:
        """'a whole number or null': what the field takes, in words."""
        words = {"bool": "true or false", "int": "a whole number", "float": "a number", "str": "text",
                 "dict": "a mapping", "list": "a list", "None": "null"}
        return " or ".join(dict.fromkeys(words.get(t, "text") for t in self.types))


def _module_file(module: str) -> Path:
    """The source file of a dotted module, found from its top-level package alone (importing nothing)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{top} is not installed: pip install -r requirements.txt")
    base = Path(next(iter(spec.submodule_search_locations)), *rest)
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


@functools.cache
def _parsed(module: str) -> ast.Module:
    return ast.parse(_module_file(module).read_text(encoding="utf-8"))


def _resolve(module: str, name: str) -> tuple[str, str]:
    """Where `name`, as used in `module`, is defined: (module, class name)."""
    for node in _parsed(module).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, name
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    package = module.rsplit(".", node.level)[0] if node.level else ""
                    source = ".".join(part for part in (package, node.module) if part)
                    source = LAZY_HOMES.get((source, alias.name), source)
                    return _resolve(source, alias.name)
    raise LookupError(f"class {name} not found in {module}")


def _union(node) -> list[str]:
    """The members of an annotation, by name: `int | None` -> [int, None]; Optional[X] and Union[...] alike."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union(node.left) + _union(node.right)
    if isinstance(node, ast.Constant):
        return ["None"] if node.value is None else [type(node.value).__name__]
    if isinstance(node, ast.Subscript):
        outer = _union(node.value)[0]
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Optional":
            return _union(inner[0]) + ["None"]
        if outer == "Union":
            return [member for item in inner for member in _union(item)]
        return [outer]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return ["str"]


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return Expression(ast.unparse(node))


def _class_fields(module: str, name: str) -> dict[str, TrlField]:
    """The init fields of a dataclass and its bases, base first (a subclass's field replaces its base's, in place)."""
    module, name = _resolve(module, name)
    node = next(n for n in _parsed(module).body if isinstance(n, ast.ClassDef) and n.name == name)
    out: dict[str, TrlField] = {}
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.update(_class_fields(module, base.id))
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)) or item.target.id[0] == "_":
            continue
        default, meta = None, {}
        if isinstance(item.value, ast.Call) and getattr(item.value.func, "id", "") == "field":
            keywords = {k.arg: k.value for k in item.value.keywords}
            if _literal(keywords["init"]) is False if "init" in keywords else False:
                continue
            if "default" in keywords:
                default = _literal(keywords["default"])
            elif "default_factory" in keywords:
                default = Expression(ast.unparse(keywords["default_factory"]) + "()")
            meta = _literal(keywords["metadata"]) if "metadata" in keywords else {}
            meta = meta if isinstance(meta, dict) else {}  # a help text built by code is shown as none
        elif item.value is not None:
            default = _literal(item.value)
        members = tuple(dict.fromkeys(_union(item.annotation)))
        out[item.target.id] = TrlField(item.target.id, ast.unparse(item.annotation), members, default,
                                       str(meta.get("help", "")), name, tuple(meta.get("choices") or ()))
    return out


@functools.cache
def trl_fields(stage: str) -> dict[str, TrlField]:
    """Every init field of the stage's TRL config (`sft` -> SFTConfig, `grpo` -> GRPOConfig), in TRL's order."""
    return _class_fields(*TRL_CLASSES[stage])


def coerce_trl(path: str, value, spec: TrlField):
    """A recipe's value for a TRL field, as the field's annotation takes it, or ConfigError saying what it takes.

    The types are TRL's; ranges and cross-field rules are TRL's too (its `__post_init__`, when the job builds it)."""
    types = spec.types
    if value is None and "None" in types:
        return None
    if spec.choices and value not in spec.choices:
        raise ConfigError(path, value, f"choose one of {', '.join(map(str, spec.choices))}")
    if value is None:
        pass
    elif isinstance(value, bool) or (isinstance(value, str) and "bool" in types and "str" not in types and
                                     value.lower() in ("true", "false")):
        if "bool" in types:
            return value if isinstance(value, bool) else value.lower() == "true"
    elif isinstance(value, dict):
        if "dict" in types:
            return value
    elif isinstance(value, (list, tuple)):
        if "list" in types:
            return list(value)
    else:
        number = _number(value)
        if "int" in types and number is not None and float(number).is_integer() and not isinstance(value, float):
            return int(number)
        if "float" in types and number is not None:
            if not math.isfinite(number):
                raise ConfigError(path, value, "give a finite number (not NaN or infinity)")
            return float(number)
        if any(t not in PLAIN_TYPES for t in types) or "str" in types:  # an enum (IntervalStrategy) takes its value
            return str(value)
    raise ConfigError(path, value, f"give {spec.describe()} (TRL's {spec.annotation})")


def _number(value):
    """PyYAML reads `2e-4` (no dot) as text: numeric text counts as a number."""
    try:
        return float(value) if not isinstance(value, (int, float)) else value
    except (TypeError, ValueError, OverflowError):
        return None
