"""`fgrpo-verl train`'s arguments: its own output flags, Hydra's flags passed to Hydra with their values, the
overrides composed and validated by fgrpo-verl first (fgrpo_verl/cli/train.py)."""

import pytest

from fgrpo_verl.cli.train import split_args


@pytest.mark.parametrize("args, flags, overrides", [
    (["backend=cpu", "--cfg", "job"], ["--cfg", "job"], ["backend=cpu"]),
    (["--info", "x=1"], ["--info"], ["x=1"]),
    (["--info", "defaults", "--resolve", "~trainer.logger"], ["--info", "defaults", "--resolve"], ["~trainer.logger"]),
    (["--package", "algorithm", "--cfg", "job", "algo=grpo"], ["--package", "algorithm", "--cfg", "job"], ["algo=grpo"]),
])
def test_hydras_flags_keep_their_values_and_the_overrides_are_the_rest(args, flags, overrides):
    assert split_args(args) == (flags, overrides, None)


@pytest.mark.parametrize("arg, message", [
    ("-m", "use `fgrpo-verl launch"),
    ("--config-name=other", "fgrpo-verl train's config is fgrpo_trainer"),
    ("-cp", "fgrpo-verl train's config is fgrpo_trainer"),
])
def test_a_sweep_or_another_config_is_refused_saying_where_to_go(arg, message):
    # ValueErrors: the CLI prints them as one `error:` line with exit status 2 (fgrpo_verl/cli/errors.py)
    with pytest.raises(ValueError, match=message):
        split_args(["algo=grpo", arg])
