"""fgrpo-verl: F-GRPO (arXiv 2602.06717) focal advantage scaling as a verl plugin.

Importing this package is cheap and imports no verl; verl loads :mod:`fgrpo_verl.integration.plugin` itself.
"""

__version__ = "0.1.0"
