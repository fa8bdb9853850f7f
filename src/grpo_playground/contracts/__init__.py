"""The contracts layer: what crosses a process boundary, defined once.

Pure data and standard library only; every other module may import it and it imports nothing of the package
(tests/test_import_graph.py holds that). Each module names one kind of contract:

- layout: the file and folder names of a run folder, an export folder and the runs directory
- states: job states and training stages (str enums: the JSON on disk keeps the same strings)
- metrics: TRL's metric keys, and the one JSONL encoder/decoder (NaN and infinities travel and come back as floats)
- findings: the doctor's Finding (the doctor, the reward design check and the UI share it)
- process: start ticks, liveness, killing a process group, a log's tail, atomic JSON writes
"""
