"""A run's override list (Recipe.run_overrides): each plain key once, at the value Hydra would apply anyway."""

from __future__ import annotations

from fgrpo_verl.config.compose import compose
from fgrpo_verl.launch.recipe import load_recipe


def _raw(recipe, run, extra):
    return [*recipe.common, *run.overrides, *extra, f"trainer.project_name={recipe.project}"]


def test_a_command_line_value_replaces_the_runs_own_line_and_the_config_is_unchanged():
    recipe = load_recipe("paper_main")
    # a run of the App. P curves: the recipe's common `validation=off`, then its own `validation=aime25`
    run = next(r for r in recipe.runs if "validation=aime25" in r.overrides)
    extra = ["algorithm.fgrpo.gamma=0.7", "+trainer.save_per_epoch=true", "trainer.total_epochs=3"]
    listed = recipe.run_overrides(run, extra)
    keys = [o.split("=", 1)[0] for o in listed]
    assert len(keys) == len(set(keys)), listed
    assert "algorithm.fgrpo.gamma=0.7" in listed and not [o for o in listed if o.startswith("algorithm.fgrpo.gamma=0")
                                                           and o != "algorithm.fgrpo.gamma=0.7"]
    assert "validation=aime25" in listed and "validation=off" not in listed
    assert "trainer.total_epochs=3" in listed and "trainer.total_epochs=10" not in listed
    # Hydra composes the full list (every line, later wins) to the same config
    assert compose(listed) == compose(_raw(recipe, run, extra))


def test_added_and_deleted_keys_keep_their_order():
    recipe = load_recipe("paper_main")
    run = recipe.runs[0]
    extra = ["+a.b=1", "++a.b=2", "~x"]
    listed = recipe.run_overrides(run, extra)
    assert listed[-4:-1] == extra and listed[-1] == f"trainer.project_name={recipe.project}"
    assert recipe.run_overrides(run) == _raw(recipe, run, [])  # nothing repeated: nothing dropped
