"""The preflight's reading of a model directory (fgrpo_verl/preflight/models.py): parameters from the weight files a
load reads, and whether they are all there, with no download."""

import json

from fgrpo_verl.preflight.models import architecture, missing_model

CONFIG = {"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
          "max_position_embeddings": 128, "torch_dtype": "bfloat16"}


def _model(tmp_path, files: dict[str, int]):
    tmp_path.mkdir(parents=True)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    for name, size in files.items():
        (tmp_path / name).write_bytes(b"\0" * size)
    return tmp_path


def test_a_repository_shipping_safetensors_and_bin_copies_counts_its_weights_once(tmp_path):
    both = _model(tmp_path / "both", {"model.safetensors": 2000, "pytorch_model.bin": 2000})
    assert architecture(str(both)).params == 1000  # 2,000 bytes of bf16, not 4,000
    assert missing_model(str(both)) is None


def test_bin_only_and_sharded_safetensors_count_every_shard(tmp_path):
    bins = _model(tmp_path / "bins", {"pytorch_model-00001-of-00002.bin": 600, "pytorch_model-00002-of-00002.bin": 400})
    assert architecture(str(bins)).params == 500
    shards = _model(tmp_path / "shards", {"model-00001-of-00002.safetensors": 300,
                                          "model-00002-of-00002.safetensors": 100, "pytorch_model.bin": 400})
    assert architecture(str(shards)).params == 200


def test_a_directory_without_weights_is_named_as_such(tmp_path):
    bare = _model(tmp_path / "bare", {})
    what, _fix = missing_model(str(bare))
    assert what.endswith("has no weight files (*.safetensors, pytorch_model*.bin)")


def test_an_index_counts_its_shards_and_not_a_consolidated_copy(tmp_path):
    shards = {"model-00001-of-00002.safetensors": 1000, "model-00002-of-00002.safetensors": 1000}
    model = _model(tmp_path / "indexed", {**shards, "consolidated.safetensors": 2000})
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert architecture(str(model)).params == 1000


def _index(model, name: str, shards: list[str]) -> None:
    (model / name).write_text(json.dumps({"weight_map": {f"w{i}": shard for i, shard in enumerate(shards)}}))


SAFE = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
BIN = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]


def test_a_complete_safetensors_download_is_complete_whatever_the_bin_index_lists(tmp_path):
    """A repository that ships both formats, downloaded as safetensors only (``hf download`` with
    ``--include '*.safetensors' '*.json'``), keeps the .bin index without its shards: the safetensors index is the one
    a load reads, and the model is whole; one safetensors shard missing is named, from that index."""
    model = _model(tmp_path / "safe", {SAFE[0]: 600, SAFE[1]: 400})
    _index(model, "model.safetensors.index.json", SAFE)
    _index(model, "pytorch_model.bin.index.json", BIN)
    assert missing_model(str(model)) is None and architecture(str(model)).params == 500
    (model / SAFE[1]).unlink()
    what, _fix = missing_model(str(model))
    assert what.endswith(f"lacks 1 of the 2 weight shards its model.safetensors.index.json lists ({SAFE[1]}, ...)")


def test_a_bin_download_is_read_from_its_own_index(tmp_path):
    """The other way round: .bin shards with both indexes (no safetensors shard here) are read, and checked, by the
    .bin index."""
    model = _model(tmp_path / "bin", {BIN[0]: 600, BIN[1]: 400})
    _index(model, "model.safetensors.index.json", SAFE)
    _index(model, "pytorch_model.bin.index.json", BIN)
    assert missing_model(str(model)) is None and architecture(str(model)).params == 500
    (model / BIN[0]).unlink()
    assert "its pytorch_model.bin.index.json lists" in missing_model(str(model))[0]
