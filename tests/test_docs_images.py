"""The docs' pictures come from the app: each one README.md and docs/*.md embed is a region a browser test saves
(tests/browser/*: region_screenshot), and scripts/docs_images.py copies a region as a smaller PNG of the same size.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def docs_images():
    spec = importlib.util.spec_from_file_location("docs_images", ROOT / "scripts" / "docs_images.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_embedded_picture_is_a_region_a_browser_test_saves():
    tests = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests" / "browser").glob("test_*.py"))
    regions = set(re.findall(r'region_screenshot\(page, "([\w-]+)"', tests))
    embedded = docs_images().embedded()
    assert {"sandbox-dark", "sandbox-zero-variance", "chat-scored"} <= embedded
    assert embedded <= regions, f"pictures no test retakes (hand-made, they go stale): {sorted(embedded - regions)}"
    assert all((ROOT / "docs" / "images" / f"{name}.png").is_file() for name in embedded)


def test_a_region_is_copied_as_a_smaller_png_of_the_same_size(tmp_path):
    source = tmp_path / "e2e-x.png"
    Image.open(ROOT / "docs" / "images" / "sandbox-dark.png").convert("RGB").save(source)
    target = tmp_path / "x.png"
    docs_images().optimized_copy(source, target)
    copied = Image.open(target)
    assert copied.size == Image.open(source).size and copied.mode == "P"
    assert target.stat().st_size < source.stat().st_size
