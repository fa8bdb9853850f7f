"""Copy the browser tests' screenshot regions into docs/images/, optimized: the docs' pictures come from the app itself.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_sandbox_tab.py tests/browser/test_e2e_accessibility.py
    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/browser/test_e2e_collapse.py tests/browser/test_e2e_flow.py
    .venv/bin/python scripts/docs_images.py [NAME ...]      # NAME: sandbox-dark, chat-scored, ... (default: all found)

The tests save each region as artifacts/screenshots/e2e-<name>.png (tests/browser/test_e2e_flow.py:region_screenshot);
this writes docs/images/<name>.png as a 256-colour PNG (a third of the size, no visible loss on the app's flat
colours). An image the docs embed that no test region makes is named, as it cannot be retaken automatically.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
REGIONS = ROOT / "artifacts" / "screenshots"
IMAGES = ROOT / "docs" / "images"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def embedded() -> set[str]:
    """Names of the docs/images pictures that README.md and docs/*.md embed."""
    return {name for doc in DOCS for name in re.findall(r"images/([\w.-]+)\.png", doc.read_text(encoding="utf-8"))}


def optimized_copy(source: Path, target: Path) -> None:
    image = Image.open(source).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(target, optimize=True)


def main(names: list[str]) -> int:
    wanted = set(names) or embedded()
    missing = []
    for name in sorted(wanted):
        source = REGIONS / f"e2e-{name}.png"
        if not source.is_file():
            missing.append(name)
            continue
        target = IMAGES / f"{name}.png"
        optimized_copy(source, target)
        print(f"{target.relative_to(ROOT)} <- {source.relative_to(ROOT)} "
              f"({source.stat().st_size // 1024} KB -> {target.stat().st_size // 1024} KB)")
    if missing:
        print("no region for " + ", ".join(missing) + ": run the browser tests above first (they write "
              "artifacts/screenshots/e2e-<name>.png), or give the picture a region_screenshot", file=sys.stderr)
    return 1 if missing and names else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
