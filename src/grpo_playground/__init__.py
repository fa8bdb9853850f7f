"""GRPO Playground: SFT then GRPO for small math reasoners, with the reward signal made visible.

Rooms (each a subpackage; the UI process imports only the torch-free ones):
  tags, rewards   pure-Python reward engine (TRL reward signature), no torch
  data            problem generator, dataset adapters, chat-template helpers
  models          model registry and loaders (torch imported lazily, inside functions)
  config          the typed run configuration and its YAML recipe round trip
  training        SFT / GRPO stages, TRL callbacks, the doctor (run inside the job process)
  jobs            run folders, child-process runner, queue (UI side: reads files, sends signals)
  serving         chat backends as child processes (llama.cpp server, vLLM)
  export          LoRA merge, GGUF conversion and quantization
  ui              Gradio tabs
"""

__version__ = "0.1.0"
