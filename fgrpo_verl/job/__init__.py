"""What runs inside a training job, beside verl's trainer: stop at a step boundary when Slurm asks
(``preempt.py``), resume only from a logged step (``resume_point.py``), a checkpoint each epoch
(``save_per_epoch.py``), the W&B run identity and rows (``tracking.py``), a run directory's checkpoint layout
(``checkpoints.py``) and the training run's quiet terminal (``quiet.py``).

The launcher (``fgrpo_verl.launch``, login node) imports these; nothing here imports the launcher.
"""
