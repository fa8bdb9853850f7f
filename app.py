"""GRPO Playground web app.

    python app.py                      # serves http://127.0.0.1:7860
    GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT=7860 python app.py   # e.g. in a Space

Importing this module builds `demo` without starting a server (tests launch it themselves).
The UI process never imports torch / transformers / trl: training, model servers and custom reward
code all run in child processes.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from grpo_playground.ui.app import build_demo, launch  # noqa: E402

demo = build_demo()

if __name__ == "__main__":
    launch(demo)
