"""`fgrpo-verl train`'s Hydra flags (fgrpo_verl/cli/train.py): what Hydra would answer with its whole usage text is
one line naming the flag and its valid values, through the real entry point's error handling."""

import pytest

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.cli.train import split_hydra_args


@pytest.mark.parametrize("flag", ["--cfg", "-c"])
def test_cfg_with_a_value_hydra_does_not_know_is_one_line_naming_the_choices(flag, capsys):
    assert cli_main(["train", "backend=cpu", flag, "jobs"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "Traceback" not in err
    assert f"Hydra flag {flag} takes one of job, hydra, all, got 'jobs'; did you mean 'job'?" in err


@pytest.mark.parametrize("value", ["job", "hydra", "all"])
def test_cfg_values_hydra_knows_pass_through(value):
    assert split_hydra_args(["--cfg", value, "algo=grpo"]) == (["--cfg", value], ["algo=grpo"])
