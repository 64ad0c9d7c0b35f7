"""The metrics the trainer adds each step: ``fgrpo/*`` focal diagnostics (``focal_metrics.py``) and
``val-core/<source>/pass@<k>`` on the validation sets (``val_pass_at_k.py``)."""
