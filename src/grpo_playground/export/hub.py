"""Upload an export folder to the Hugging Face Hub with huggingface_hub (only when HF_TOKEN is set)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ID_HINT = "a hub repo id looks like your-name/my-reasoner"


def push_folder(folder: Path, repo_id: str) -> dict:
    """Create (if needed) and fill a model repo; returns {"pushed": bool, "message": str, "url"?: str}."""
    token = os.environ.get("HF_TOKEN")
    if not token:
        return {"pushed": False, "message": "not pushed: set HF_TOKEN (a write token from "
                "https://huggingface.co/settings/tokens) to push the export to the hub"}
    if repo_id.count("/") != 1 or len(repo_id) > 96:
        return {"pushed": False, "message": f"not pushed: {repo_id!r} is not a repo id; {REPO_ID_HINT}"}
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="model", exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                                   commit_message="GRPO Playground export", ignore_patterns=["*.log"])
    except Exception as error:  # network, auth, quota: all end the same way for the user
        return {"pushed": False, "message": f"push to {repo_id} failed ({type(error).__name__}: {error}); "
                "the files are still in the export folder"}
    return {"pushed": True, "message": f"pushed to {repo_id}", "url": getattr(commit, "commit_url", str(commit))}
