"""Training, run INSIDE the job process (python -m pipelines.train): SFT and GRPO stages, callbacks that
write the run folder, pre-flight, SwanLab, and the doctor.

Only `doctor` is torch-free and safe for the UI to import (`from grpo_playground.training.doctor import
diagnose`); everything else imports torch / transformers / trl.

    from grpo_playground.training.job import run_job        # run_job(cfg, run_dir, stage="all", resume=False)
"""
