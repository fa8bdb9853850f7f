"""Training, run INSIDE the job process (python -m pipelines.train): SFT and GRPO stages, callbacks that
write the run folder, pre-flight, SwanLab. The app process never imports this package (tests/test_import_graph.py):
the run folder's layout is grpo_playground.run_layout, the doctor's rules grpo_playground.doctor.

    from grpo_playground.training.job import run_job        # run_job(cfg, run_dir, stage="all", resume=False)
"""
