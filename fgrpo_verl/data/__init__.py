"""Record files (the benchmarks' and DeepScaleR's readers, verl parquet rows) and DeepScaleR's preparation."""
