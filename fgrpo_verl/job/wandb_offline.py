"""Offline W&B runs after a hard kill: drop the abandoned steps before the next start logs them again.

Each start of a run in ``WANDB_MODE=offline`` writes its own folder ``<WANDB_DIR>/wandb/offline-run-<time>-<id>``
with the same run id. After a hard kill (node failure, preemption without notice) the killed start has logged
steps k+1..j past its last checkpoint k; the next start resumes from k and logs k+1.. again, with other values.
``wandb sync`` of both folders would keep the first values (W&B drops non-monotonic steps). So every start runs,
before training,

    python -m fgrpo_verl.job.wandb_offline trim WANDB_ROOT RUN_ID K

which rewrites the run's existing offline folders without the history records of steps > K (K = the checkpoint
the start resumes from). The folders then hold steps 1..K and the new start k+1..: synced in order they are the
resumed trajectory, once each.

The file format (``run-<id>.wandb``): a 7-byte header (``:W&B``, magic 0xBEE1 little-endian, version 0), then
LevelDB-style log records in 32 KiB blocks: CRC-32 (IEEE, over the type byte and payload) u32, length u16,
type u8 (1 full, 2 first, 3 middle, 4 last), payload; fewer than 7 bytes left in a block are zero padding.
Each payload is a ``wandb_internal_pb2.Record``. Written here from that description: wandb ships no Python reader
or writer for it, nor a way to drop steps from an offline run. The format is wandb's own, so the trim runs only
under the wandb versions it was tested with (:data:`TESTED_WANDB`, setup.py's range; the test writes a real
offline run with the installed wandb): under any other it refuses in one line and leaves the folders as they are
(the job goes on; slurm/lifecycle.sh says what that leaves for ``wandb sync``).
"""

from __future__ import annotations

import glob
import os
import struct
import sys
import zlib
from pathlib import Path

TESTED_WANDB = ">=0.31,<0.32"
HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _checksum(kind: int, chunk: bytes) -> int:
    # W&B's writer uses the IEEE CRC-32 over the type byte and the chunk, unmasked (LevelDB itself uses a
    # masked CRC-32C); checked against W&B's own files in tests/test_wandb_offline_on_cpu.py
    return zlib.crc32(bytes([kind]) + chunk)


def read_payloads(path: Path) -> list[bytes]:
    """The record payloads of a ``.wandb`` file, in order (checksums verified). A file cut short inside a record
    (a hard kill mid-write, even inside the header) yields the complete records before the cut."""
    data = Path(path).read_bytes()
    if len(data) < len(HEADER) and HEADER.startswith(data):
        return []  # killed between creating the file and writing its header: no record yet
    if data[:7] != HEADER:
        raise ValueError(f"{path}: not a W&B transaction log (header {data[:7]!r})")
    pos, pending, payloads = 7, b"", []
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        # zero padding: the end; a record cut short: the writer was killed inside it (what came before is complete)
        if kind == 0 or pos + 7 + length > len(data):
            break
        chunk = data[pos + 7 : pos + 7 + length]
        if _checksum(kind, chunk) != crc:
            raise ValueError(f"{path}: checksum mismatch at byte {pos}")
        pos += 7 + length
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            payloads.append(pending)
    return payloads


def write_payloads(path: Path, payloads: list[bytes]) -> None:
    """A ``.wandb`` file holding ``payloads`` (written next to ``path``, then renamed over it)."""
    out = bytearray(HEADER)
    for payload in payloads:
        rest, first = payload, True
        while first or rest:  # an empty payload is one empty record
            room = BLOCK - len(out) % BLOCK
            if room < 7:
                out += b"\0" * room
                room = BLOCK
            chunk, rest = rest[: room - 7], rest[room - 7 :]
            kind = (_FULL if not rest else _FIRST) if first else (_LAST if not rest else _MIDDLE)
            out += struct.pack("<IHB", _checksum(kind, chunk), len(chunk), kind) + chunk
            first = False
    # the rename is atomic; the fsyncs make it durable, so a node that dies right after the job's start never
    # leaves an empty or half-written history in place of the original
    tmp = Path(f"{path}.fgrpo-tmp")
    with open(tmp, "wb") as f:
        f.write(bytes(out))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(Path(path).parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def history_step(payload: bytes) -> int | None:
    """The step of a history record, None for any other record."""
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record()
    record.ParseFromString(payload)
    if record.WhichOneof("record_type") != "history":
        return None
    if record.history.HasField("step"):
        return int(record.history.step.num)
    for item in record.history.item:
        if (item.key or "/".join(item.nested_key)) == "_step":
            return int(float(item.value_json))
    return None


def trim(wandb_root: Path, run_id: str, keep_through: int) -> list[tuple[Path, int]]:
    """Drop history of steps > ``keep_through`` from every offline folder of ``run_id`` under ``wandb_root``
    (``$WANDB_DIR``, whose ``wandb/`` holds the folders). Returns (file, records dropped) per changed file."""
    changed = []
    # an explicit id may hold glob characters (`[`, `*`): they name themselves, not other runs' folders
    for folder in sorted((Path(wandb_root) / "wandb").glob(f"offline-run-*-{glob.escape(run_id)}")):
        path = folder / f"run-{run_id}.wandb"
        if not path.is_file():
            continue
        payloads = read_payloads(path)
        kept = [p for p in payloads if (step := history_step(p)) is None or step <= keep_through]
        if len(kept) != len(payloads):
            write_payloads(path, kept)
            changed.append((path, len(payloads) - len(kept)))
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4 or args[0] != "trim" or not args[3].isdigit():
        print("usage: python -m fgrpo_verl.job.wandb_offline trim WANDB_ROOT RUN_ID KEEP_THROUGH_STEP", file=sys.stderr)
        return 2
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    installed = version("wandb")
    if installed not in SpecifierSet(TESTED_WANDB):
        print(f"fgrpo: error: not trimming W&B's offline folders of run {args[2]}: wandb {installed} is installed and "
              f"its offline format is tested for wandb{TESTED_WANDB} only (setup.py)", file=sys.stderr)
        return 1
    for path, dropped in trim(Path(args[1]), args[2], int(args[3])):
        print(f"[fgrpo] {path}: dropped {dropped} history record(s) after step {args[3]} (abandoned by a hard kill)")
        # `wandb sync` marks what it uploaded and skips it later: the server keeps the abandoned steps, and
        # the steps this start logs again are dropped there as non-monotonic
        if Path(f"{path}.synced").exists():
            print(
                f"[fgrpo] warning: {path.parent} was uploaded by `wandb sync` before this trim: W&B's copy of run "
                f"{args[2]} keeps the abandoned steps after {args[3]}. Sync a run's folders once it has finished; "
                "to repair this one, delete the run in W&B and sync all its folders again with --include-synced",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
