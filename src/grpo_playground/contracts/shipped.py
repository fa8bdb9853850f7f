"""What the package ships as package data (inside the wheel, beside the code): the embedded `tiny` model and the
recipes. The checkout's top-level assets/ and recipes/ are links to these folders, so the documented paths
(`--config recipes/quick.yaml`) keep working."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TINY_DIR = PACKAGE_DIR / "assets" / "tiny"
RECIPES_DIR = PACKAGE_DIR / "recipes"


def shipped_recipes() -> list[str]:
    """The names of the shipped recipes (quick, tiny-cpu, ...)."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file: `name_or_path` itself when it exists, else the shipped recipe of that name (`quick`), so an
    installed product trains without a checkout; unchanged when neither exists (the loader then names it)."""
    path = Path(name_or_path)
    shipped = RECIPES_DIR / f"{path.name.removesuffix('.yaml')}.yaml"
    return path if path.exists() or path.parent != Path(".") or not shipped.is_file() else shipped
