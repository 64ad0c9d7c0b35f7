"""What runs inside a training job, beside verl's trainer: stop at a step boundary when Slurm asks
(``preempt.py``), resume only from a logged step (``resume_point.py``), a checkpoint each epoch
(``save_per_epoch.py``) and the W&B run identity and rows (``tracking.py``).

The launcher (``fgrpo_verl.launch``, login node) imports these; nothing here imports the launcher.
"""
