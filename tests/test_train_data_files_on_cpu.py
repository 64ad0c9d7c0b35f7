"""`fgrpo-verl train` checks its data files before Ray starts (fgrpo_verl/integration/validation.py, which verl's own
main_ppo runs too for fgrpo): verl opens them in the TaskRunner, after Ray and the workers started (a misspelt path
cost 47 s and a traceback). One line, exit 2, the key and the path; remote URIs are
verl's to fetch; `--cfg job` stays a print of the config."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.cli import train
from fgrpo_verl.integration.validation import check_data_files


def _config(train_files, val_files=None):
    return OmegaConf.create({"data": {"train_files": train_files, "val_files": val_files}})


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in ("train.parquet", "val.parquet", "more.jsonl"):
        (tmp_path / "data" / name).write_bytes(b"")
    return tmp_path


def test_existing_files_pass_in_every_form(data, monkeypatch):
    monkeypatch.setenv("HOME", str(data))
    check_data_files(_config("data/train.parquet", "data/val.parquet"))
    check_data_files(_config(["data/train.parquet", str(data / "data" / "more.jsonl")], ["~/data/val.parquet"]))
    check_data_files(_config("data/*.parquet", None))  # a pattern, as verl's loader (`datasets`) takes it


@pytest.mark.parametrize("uri", ["hdfs://nn/data/train.parquet", "s3://bucket/train.parquet", "gs://b/t.parquet"])
def test_remote_uris_are_not_checked(data, uri):
    check_data_files(_config([uri, "data/train.parquet"], uri))


@pytest.mark.parametrize("train_files, val_files, message", [
    ("data/trian.parquet", "data/val.parquet", "data.train_files=data/trian.parquet: no such file"),
    ("data/train.parquet", "data/test.parquet", "data.val_files=data/test.parquet: no such file"),
    (["data/train.parquet", "data/mor.jsonl"], "data/val.parquet", "data.train_files[1]=data/mor.jsonl: no such file"),
    ("~/data/trian.parquet", "data/val.parquet", "data.train_files=~/data/trian.parquet: no such file ("),
    ("data/*.parket", "data/val.parquet", "data.train_files=data/*.parket: no such file"),
])
def test_a_missing_file_names_the_key_and_the_path(data, monkeypatch, train_files, val_files, message):
    monkeypatch.setenv("HOME", str(data))
    with pytest.raises(ValueError) as exc:
        check_data_files(_config(train_files, val_files))
    assert message in str(exc.value) and "\n" not in str(exc.value)
    if str(train_files).startswith("~"):
        assert str(data / "data" / "trian.parquet") in str(exc.value)  # where `~` points


@pytest.fixture(autouse=True)
def own_process_state(monkeypatch):
    """`train` exports its groups' environment (backend=cpu: VERL_PLATFORM=cpu) and resolves verl's platform, as it
    does in its own process. Here it runs inside the suite's process: it starts from an unresolved platform, and
    both go back afterwards, so nothing leaks into the tests that follow."""
    from verl.plugin.platform import platform_manager

    saved = dict(os.environ)
    monkeypatch.setattr(platform_manager, "_current_platform", None)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def no_training(monkeypatch):
    """`train`'s last step recorded instead of run; Ray may not start."""
    import ray

    started = []

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init was called")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(train, "_run_main_ppo", lambda argv: started.append(argv))
    return started


CPU = ["algo=grpo", "backend=cpu", "trainer.logger=[console]", "--verbose"]


def test_train_with_a_misspelt_data_path_stops_before_ray_in_one_line(data, no_training, capsys):
    code = cli_main(["train", *CPU, "data.train_files=[data/train.parquet,data/trian.parquet]",
                     "data.val_files=data/val.parquet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and no_training == []
    assert err[-1] == ("fgrpo-verl train: error: data.train_files[1]=data/trian.parquet: no such file (relative to "
                       f"{data})"), err


def test_train_with_its_data_files_present_goes_on_to_verl(data, no_training):
    assert cli_main(["train", *CPU, "data.train_files=data/train.parquet", "data.val_files=data/val.parquet"]) == 0
    assert len(no_training) == 1


def test_cfg_job_prints_without_checking_the_data_files(data, no_training, capsys):
    # `--cfg job` shows a config, also one written for another machine's files: no check, no warning
    assert cli_main(["train", *CPU, "data.train_files=data/trian.parquet", "--cfg", "job"]) == 0
    assert len(no_training) == 1 and "--cfg" in no_training[0]
    assert "trian.parquet" not in capsys.readouterr().err
