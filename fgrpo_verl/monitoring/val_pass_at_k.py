"""Unbiased pass@k (Chen et al. 2021) from verl's validation samples: ``val-core/<data_source>/pass@<k>``.

verl's own ``best@N`` is a bootstrap *with* replacement (biased low). Here, for every validation prompt with n
samples of which c are correct, pass@k = 1 - C(n-c, k)/C(n, k) (``fgrpo_verl.pass_at_k``), averaged over
the prompts of each data source, for k = 1, 2, 4, ... and k = n (n = ``actor_rollout_ref.rollout.val_kwargs.n``;
if prompts of a source have different n, the smallest one bounds k).

A sample is correct when its core variable is ``> success_threshold`` (``algorithm.fgrpo.success_threshold``, the
rule the focal weight uses). The core variable is verl's: ``acc`` where the reward function reports it for the
source, else the summed ``reward``. A NaN or infinite value raises ``ValueError`` (as training does for rewards)
instead of counting as incorrect. Sessions that verl expected but that failed (``expected_acc_counts``) count as
samples that were not correct.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from fgrpo_verl.pass_at_k import ks_up_to, pass_at_k

PREFIX = "val-core"


def validation_pass_at_k(
    data_sources,
    sample_uids,
    infos: dict,
    success_threshold: float,
    expected_counts: dict | None = None,
) -> dict[str, float]:
    """``{"val-core/<source>/pass@<k>": mean over prompts}`` from verl's per-sample validation lists.

    Args:
        data_sources: (S,) data source of each sample.
        sample_uids: (S,) prompt uid of each sample (samples of one prompt share it).
        infos: verl's ``reward_extra_infos_dict``: ``"reward"`` (S floats) and optionally ``"acc"`` (S values, None
            where a sample has none).
        success_threshold: a sample is correct when its core variable is > this.
        expected_counts: ``{(data_source, uid): n}`` sessions verl asked for; missing ones count as not correct.
    """
    if "reward" not in infos:
        raise ValueError(f"validation infos lack 'reward'; got keys {sorted(infos)}")
    if not (len(data_sources) == len(sample_uids) == len(infos["reward"])):
        raise ValueError(
            f"validation lists differ in length: data_sources {len(data_sources)}, sample_uids {len(sample_uids)}, "
            f"reward {len(infos['reward'])}"
        )
    acc = infos.get("acc")
    sources_with_acc = set()
    if acc is not None:
        sources_with_acc = {str(s) for s, a in zip(data_sources, acc) if a is not None}

    correct = defaultdict(int)
    seen = defaultdict(int)
    for i, (source, uid) in enumerate(zip(data_sources, sample_uids)):
        source = str(source)
        value = acc[i] if source in sources_with_acc else infos["reward"][i]
        if value is None:  # a sample of an acc source whose reward function did not report acc
            continue
        if not math.isfinite(float(value)):
            # training raises on a non-finite reward (fgrpo_verl.focal); counting it as "not correct" would hide it
            raise ValueError(
                f"validation {'acc' if source in sources_with_acc else 'reward'} of sample {i} (data_source "
                f"{source!r}, uid {uid!r}) is {value!r}; expected a finite number (fix the reward function)"
            )
        key = (source, str(uid))
        seen[key] += 1
        correct[key] += int(float(value) > success_threshold)
    for (source, uid), n in (expected_counts or {}).items():
        key = (str(source), str(uid))
        seen[key] = max(seen[key], int(n))

    by_source = defaultdict(list)
    for key, n in seen.items():
        if n > 0:
            by_source[key[0]].append((n, correct[key]))
    metrics = {}
    for source, pairs in sorted(by_source.items()):
        n, c = (np.array(col, dtype=np.int64) for col in zip(*pairs))
        smallest = int(n.min())
        for k in sorted({*ks_up_to(smallest, k_max=smallest), smallest}):  # 1, 2, 4, ... and n itself
            metrics[f"{PREFIX}/{source}/pass@{k}"] = float(pass_at_k(n, c, k).mean())
    return metrics
