"""The launcher's reading of a model directory (fgrpo_verl/launch/models.py): parameters from the weight files a
load reads, with no download."""

import json

from fgrpo_verl.launch.models import architecture, missing_model

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
