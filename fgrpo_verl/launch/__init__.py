"""``fgrpo-verl launch``, the login node's side: one Slurm job per recipe run (recipe.py: the format, render.py: the
job script). What the jobs run on the compute nodes is fgrpo_verl/job/.

    plan_jobs()    (plan.py) load the recipe, compose + validate every selected run with verl, check what verl's
                   worker start-up would refuse and whether it fits (preflight.py), give it its identity
                   (identity.py), check its steps against its data (steps.py), render its job script
    run_states()   (submit.py) queued / running / done / failed / not started per planned run (queue.py)
    submit_jobs()  (submit.py) skip runs that are done, queued or running; write the scripts, record and ``sbatch``
                   the rest
"""

from fgrpo_verl.launch.plan import plan_jobs
from fgrpo_verl.launch.submit import Submitted, run_states, submit_jobs

__all__ = ["Submitted", "plan_jobs", "run_states", "submit_jobs"]
