"""Tasks whose data, tokenizer, reward and model are built locally (no hub downloads)."""
