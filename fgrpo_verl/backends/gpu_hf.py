"""Backend ``gpu_hf``: verl's GPU stack with the ``hf`` rollout instead of vLLM (``hydra_configs/backend/gpu_hf.yaml``).

Importing this module (verl does, through ``VERL_USE_EXTERNAL_MODULES``) registers the rollout and nothing else:
no platform, no patched verl function; the platform stays whatever verl detects.
"""

from fgrpo_verl.backends import hf_rollout

hf_rollout.register()
