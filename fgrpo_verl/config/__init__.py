"""The shipped Hydra configs: where they are (``paths.py``) and composing + validating them as ``fgrpo-verl train``
does (``compose.py``)."""
