"""Which weights an experiment ran: the base model's hash, a checkpoint folder's hash, and the check that a
carried sft-W is the one every arm must start from."""

from __future__ import annotations

import hashlib
from pathlib import Path

from grpo_playground.contracts.layout import PROGRESS_FILE
from grpo_playground.contracts.process import read_json


def weights_sha256(name_or_path: str) -> str:
    """Which base weights ran (a path override and the registry's `tiny` can be compared by this)."""
    from grpo_playground.models import hf_dir

    return hashlib.sha256((hf_dir(name_or_path) / "model.safetensors").read_bytes()).hexdigest()


def adapter_sha256(adapter: str | Path) -> str:
    """One hash of a checkpoint folder's weights and configs (what an arm starts from), file names included."""
    digest = hashlib.sha256()
    for path in sorted(Path(adapter).iterdir()):
        if path.suffix in (".safetensors", ".json"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def carried_sft_w(work: Path, expected: str, base_sha256: str | None = None) -> None:
    """Refuse to start unless the finished sft-W in `work` (carried from an earlier lease) has the expected hash, and
    (given `base_sha256`) sits on the base weights it was trained on: each lease converts the base model anew."""
    entry = (read_json(work / PROGRESS_FILE) or {}).get("steps", {}).get("sft_w", {})
    adapter = Path(entry.get("run_dir", work / "sft_w_round0")) / "sft"
    if entry.get("state") != "done" or not adapter.is_dir():
        raise SystemExit(f"--sft-w-sha256 given but {work} holds no finished sft-W adapter ({adapter} missing): "
                         "restore the earlier lease's work folder and its sft-W adapter there first "
                         "(BENCHMARKS.md, the GSM8K seed regime's plan)")
    found = adapter_sha256(adapter)
    if found != expected:
        raise SystemExit(f"sft-W adapter {adapter} has sha256 {found}, not the {expected} every arm must start from: "
                         "carry the adapter that the earlier lease brought back, unchanged")
    if base_sha256 and entry.get("base_sha256") and entry["base_sha256"] != base_sha256:
        raise SystemExit(f"the base model's weights here have sha256 {base_sha256}, not the {entry['base_sha256']} "
                         "sft-W was trained on: use the same model and package versions as the earlier lease")
