"""One sampling seed per (run, benchmark, problem, sample block), derived from the single ``--seed``.

    seed(run, benchmark, problem_id, block) = first 8 bytes (little-endian) of
        SHA-256( JSON ["fgrpo-verl eval", seed, run, benchmark, problem_id, block] )  with the top bit cleared

(a 63-bit integer, which vLLM's ``SamplingParams.seed`` and ``torch.manual_seed`` both take). Block b holds samples
b*B .. b*B + B - 1 of the problem, B = ``--samples-per-request``. The JSON encoding keeps the fields apart (no two
different tuples give the same bytes), and SHA-256 makes the streams of different runs, benchmarks, problems and
blocks unrelated, so

- a rerun with the same --seed (and the same B) reproduces every request's seed, whatever the order, the other
  problems, the chunking, or an interruption and ``--resume``;
- two checkpoints compared on one benchmark do not share random streams (independent samples), nor do problems.
"""

from __future__ import annotations

import hashlib
import json


def request_seed(seed: int, run: str, benchmark: str, problem_id: str, block: int) -> int:
    payload = json.dumps(["fgrpo-verl eval", int(seed), str(run), str(benchmark), str(problem_id), int(block)])
    return int.from_bytes(hashlib.sha256(payload.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def blocks(n: int, block_size: int) -> list[tuple[int, int]]:
    """(block index, samples in it) covering n samples in blocks of ``block_size`` (the last may be shorter)."""
    return [(b, min(block_size, n - start)) for b, start in enumerate(range(0, n, block_size))]
