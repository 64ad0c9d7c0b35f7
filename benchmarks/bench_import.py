"""What installing fgrpo-verl costs a process that imports verl but does not select fgrpo.

Side by side, in one run: ``python -c "import verl"`` with fgrpo-verl's entry point loaded (verl's default,
``VERL_USE_EXTERNAL_PLUGINS=auto``) and with entry points switched off (``VERL_USE_EXTERNAL_PLUGINS=none``), the
environment otherwise identical. The two variants alternate (A B B A ...) so load from other processes hits both
alike; each child's wall time is measured by this process around the child, its peak RSS with ``os.wait4``.
Also checked once per variant: the platform verl auto-detects afterwards, the environment variables the import
changed, and the modules it imported. Targets: wall ratio <= 1.05, peak RSS difference <= +10 MB,
identical platform, no environment variable changed by the plugin.

Usage: python benchmarks/bench_import.py [--repeats 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {"plugin": "auto", "no_plugin": "none"}

PROBE = """
import json, os, sys
before = dict(os.environ)
import verl
from verl.plugin.platform.platform_manager import get_platform
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(json.dumps({"modules": len(sys.modules), "env_changed": changed, "platform": get_platform().device_name}))
"""


def _env(policy: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    env["VERL_USE_EXTERNAL_PLUGINS"] = policy
    return env


def time_import(policy: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one ``python -c "import verl"``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import verl"], env=_env(policy),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"python -c 'import verl' failed with VERL_USE_EXTERNAL_PLUGINS={policy}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def probe(policy: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], env=_env(policy), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=10, help="imports per variant (median reported)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    load_before = os.getloadavg()
    probes = {name: probe(policy) for name, policy in VARIANTS.items()}
    time_import("auto")  # warm the page cache once; not timed
    samples = {name: [] for name in VARIANTS}
    for rep in range(args.repeats):
        order = list(VARIANTS) if rep % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            samples[name].append(time_import(VARIANTS[name]))
    load_after = os.getloadavg()

    result = {"repeats": args.repeats, "load_avg_1m_before_after": [load_before[0], load_after[0]]}
    for name in VARIANTS:
        walls, rss = zip(*samples[name])
        result[name] = {"wall_s_median": statistics.median(walls), "peak_rss_mib_median": statistics.median(rss),
                        **probes[name]}
    p, n = result["plugin"], result["no_plugin"]
    result["wall_ratio"] = p["wall_s_median"] / n["wall_s_median"]
    result["peak_rss_diff_mib"] = p["peak_rss_mib_median"] - n["peak_rss_mib_median"]
    result["same_platform"] = p["platform"] == n["platform"]
    result["env_changed_by_plugin"] = sorted(set(p["env_changed"]) ^ set(n["env_changed"]))

    print(f"python -c 'import verl', {args.repeats} alternating runs per variant, "
          f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print(f"{'variant':>10} {'wall (s)':>9} {'peak RSS (MiB)':>15} {'modules':>8} {'platform':>9}")
    for name in VARIANTS:
        r = result[name]
        print(f"{name:>10} {r['wall_s_median']:9.2f} {r['peak_rss_mib_median']:15.1f} {r['modules']:8d} {r['platform']:>9}")
    print(f"wall ratio plugin / no_plugin = {result['wall_ratio']:.3f} (target <= 1.05); peak RSS difference = "
          f"{result['peak_rss_diff_mib']:+.1f} MiB (target <= +10); same platform: {result['same_platform']}; "
          f"environment variables changed by the plugin: {result['env_changed_by_plugin'] or 'none'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
