"""Training-data preparation for the paper's LLM runs (DeepScaleR)."""
