"""``fgrpo-verl recipes [RECIPE]``: the shipped recipes, or one recipe's runs (names for ``launch --only``)."""

from __future__ import annotations

import argparse

HELP = "List the shipped recipes (runs, what they reproduce), or one recipe's runs with their overrides."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", default=None,
                        help="a recipe file or shipped recipe name: list its runs (default: list the shipped recipes)")


def run(args: argparse.Namespace) -> int:
    from fgrpo_verl.launch.recipe import load_recipe
    from fgrpo_verl.config.paths import recipes_dir

    if args.recipe is None:
        recipes = [load_recipe(str(path)) for path in sorted(recipes_dir().glob("*.yaml"))]
        width = max(len(r.name) for r in recipes)
        print("\n".join(f"{r.name:<{width}}  {len(r.runs):>3} runs  {r.reproduces}" for r in recipes))
        print(f"(in {recipes_dir()}; `fgrpo-verl recipes NAME` lists a recipe's runs, `fgrpo-verl launch NAME "
              "--dry-run` prints their job scripts)")
        return 0
    recipe = load_recipe(args.recipe)
    width = max(len(run.name) for run in recipe.runs)
    print(f"recipe {recipe.name} ({recipe.path}): {len(recipe.runs)} runs, W&B project {recipe.project}; "
          f"reproduces {recipe.reproduces}")
    if recipe.common:
        print(f"every run: {' '.join(recipe.common)}")
    for run in recipe.runs:
        variant = f" [variant {run.variant}]" if run.variant else ""
        print(f"  {run.name:<{width}}  {' '.join(run.overrides)}{variant}")
    return 0
