"""What runs inside a job, on the compute nodes: stop at a step boundary when Slurm asks (``preempt.py``), resume
only from a logged step (``resume_point.py``), a checkpoint each epoch (``save_per_epoch.py``), the W&B run identity
and rows (``tracking.py``), a run directory's checkpoint layout (``checkpoints.py``) and run record
(``run_record.py``), a local Ray start retried on a busy machine (``ray_start.py``); and what the job scripts (slurm/)
run on each node: its Ray network settings, private session directory and the nodes that joined its Ray cluster
(``node_net.py``), whether W&B answers (``wandb_online.py``) and the offline W&B trim after a hard kill
(``wandb_offline.py``).

The launcher (``fgrpo_verl.launch``, login node) imports these; nothing here imports the launcher.
"""
