"""Categorical simulation of concentration inside the correct set (paper §5.1, App. J, Fig. 2).

The setup (from Hu et al.'s BroRL, as in the paper): a softmax policy p = softmax(z) over 128,000 actions, of
which 10,000 are correct (R = +1) and 118,000 incorrect (R = -1). Initial logits: one "anchor" correct action at
5.0, the other correct actions at 3.0, incorrect at 0.0, so Q_pos = 0.630, anchor 4.65e-4, other correct 6.30e-5.

One training step of one run (one row of the logit matrix ``z``):

    1. p = softmax(z)
    2. draw N actions i.i.d. from p and keep only their per-action counts c_i (Σ_i c_i = N)
    3. X = Σ_{i correct} c_i,   μ̂ = X / N,   R̄ = (X R_c + (N - X) R_w) / N,   r̃_i = R_i - R̄   (mean-centred, no std)
    4. w_i = c_i r̃_i / N, so the group sum (1/N) Σ_j r̃_j f(p_{a_j}) over the N samples equals Σ_i w_i f(p_i)
    5. g = (1 - μ̂)^γ (eq. 12, ``fgrpo_verl.focal.focal_weight``) scales the objective; its gradient in z is
           surrogate "log"    L = g Σ_i w_i log p_i     ∂L/∂z_k = g (w_k - p_k Σ_i w_i)
           surrogate "linear" L = g Σ_i w_i p_i         ∂L/∂z_k = g p_k (w_k - Σ_i w_i p_i)   (∂p_i/∂z_k = p_i(δ_ik - p_k))
    6. ascend: Adam on the logits with learning rate η (β = 0.9, 0.999, ε = 1e-8), or plain SGD z += η ∇L

Metrics after every step: Q_pos = Σ_{correct} p_i and the retained positive mass (eq. 26)

    M_ret = 1 - Σ_{correct} max(0, p0_i - p_i) / Σ_{correct} p0_i

(1: no correct action lost mass; about 0: the correct mass has concentrated onto a few actions).

Which update reproduces Fig. 2. The paper prints the linear surrogate (1/N) Σ r̃_j p_j with η = 1e-2 but not the
optimiser. Plain gradient ascent on it moves nothing: its gradient is O(η p_i^2) with p_i ≈ 6e-5, and after
1,000 steps Q_pos is 0.63008 -> 0.63008 at N = 2, 64, 1024, 8192 and 131072 (measured, see docs/theory.md). The same holds for SGD on the
log surrogate. With Adam (lr η), the log surrogate reproduces all of the paper's findings (Q_pos grows for every N;
M_ret ≈ 1 at small N, collapses at intermediate N, recovers at N = 2^17; γ = 1 retains more in the collapse
zone) and the linear surrogate does not (M_ret collapses at N = 2^17 too, because its expected gradient itself
favours the anchor). The default is therefore ``surrogate="log", optimizer="adam"``; the literal reading is one
flag away (``--surrogate linear --optimizer sgd``).

The scale-matched control (paper App. N): ``controls`` adds, for each listed γ, plain GRPO runs (γ = 0) at
learning rate η · m_γ (``fgrpo_verl.theory.mean_shrink``). The result's configuration axis holds the γ runs first,
then the controls (``SimulationConfig.configurations``). Control rows get their own sampling generators (blocks
after the γ runs' blocks), so adding controls leaves the γ runs bit for bit as they were.

Everything is vectorised over runs: all (N, configuration, seed) combinations are rows of one (runs, actions) tensor;
sampling is an inverse-CDF search per run (``CountSampler``) plus one ``index_add_`` into per-action counts, so
no Python loop touches actions or draws.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from fgrpo_verl.focal import focal_weight
from fgrpo_verl.theory._checks import group_size_array, real_array, whole
from fgrpo_verl.theory.shrink import configurations

SURROGATES = ("log", "linear")
OPTIMIZERS = ("adam", "sgd")
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class CategoricalSetup:
    """The action space and initial policy (paper §5.1); defaults are the paper's (``fgrpo-verl simulate`` sets only
    the two sizes, which are checked)."""

    num_actions: int = 128_000  # |A|
    num_correct: int = 10_000  # |P|; action 0 is the anchor, actions 0..num_correct-1 are correct
    anchor_logit: float = 5.0  # z of the single anchor correct action
    correct_logit: float = 3.0  # z of every other correct action
    incorrect_logit: float = 0.0  # z of every incorrect action
    reward_correct: float = 1.0  # R_c
    reward_incorrect: float = -1.0  # R_w

    def __post_init__(self):
        for name in ("num_actions", "num_correct"):
            whole(name, getattr(self, name))
        if not 1 <= self.num_correct < self.num_actions:
            raise ValueError(
                f"num_correct={self.num_correct!r} is invalid for num_actions={self.num_actions}: need 1 <= num_correct < num_actions"
            )

    def initial_logits(self, dtype=torch.float64) -> torch.Tensor:
        z = torch.full((self.num_actions,), self.incorrect_logit, dtype=dtype)
        z[: self.num_correct] = self.correct_logit
        z[0] = self.anchor_logit
        return z

    def initial_masses(self) -> dict:
        """Q_pos, the anchor's probability and one other correct action's probability at step 0."""
        p = torch.softmax(self.initial_logits(torch.float64), 0)
        return {
            "q_pos": float(p[: self.num_correct].sum()),
            "anchor": float(p[0]),
            "other_correct": float(p[1]) if self.num_correct > 1 else float("nan"),
        }


@dataclass(frozen=True)
class SimulationConfig:
    """One sweep: every combination of group size, configuration (each γ, then each control) and seed is one
    independent run."""

    group_sizes: tuple  # N values (whole numbers >= 1)
    gammas: tuple  # focal strengths γ >= 0 (0 = plain mean-centred policy gradient)
    seeds: int  # independent replicas per (N, γ)
    steps: int  # training steps per run (paper: 1,000)
    lr: float = 1e-2  # η (paper: 1e-2)
    surrogate: str = "log"  # "log" or "linear", see the module docstring
    optimizer: str = "adam"  # "adam" or "sgd", see the module docstring
    seed: int = 0  # seeds the sampling generators (one per group size, see CountSampler)
    setup: CategoricalSetup = field(default_factory=CategoricalSetup)
    controls: tuple = ()  # γ values whose scale-matched control (γ = 0 at lr · m_γ) is added; see the module docstring

    def __post_init__(self):
        # the same refusals as every theory function's (theory/_checks.py); group sizes kept as Python ints
        object.__setattr__(self, "group_sizes", tuple(group_size_array("group_sizes", self.group_sizes).tolist()))
        for name in ("gammas", "controls"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        real_array("gammas", self.gammas, low=0.0, high=math.inf, high_open=True)
        if self.controls:  # a scale-matched control needs γ > 0: m_0 = 1 is GRPO itself
            real_array("controls", self.controls, low=0.0, high=math.inf, low_open=True, high_open=True)
        for name, values, what in (("group_sizes", self.group_sizes, "N"), ("controls", self.controls, "gamma")):
            if len(set(values)) != len(values):  # repeated gammas: the configurations check below
                raise ValueError(f"{name}={values!r} repeats a value: list each {what} once")
        for name, low in (("seeds", 1), ("steps", 1), ("seed", 0)):
            whole(name, getattr(self, name), low)
        real_array("lr", self.lr, low=0.0, high=math.inf, low_open=True, high_open=True)
        for name, valid in (("surrogate", SURROGATES), ("optimizer", OPTIMIZERS)):
            if getattr(self, name) not in valid:
                raise ValueError(f"{name}={getattr(self, name)!r} is invalid: valid {name}s are {', '.join(valid)}")
        labels = [c.name for c in self.configurations]
        if len(set(labels)) != len(labels):
            raise ValueError(f"gammas={self.gammas!r} give repeated configurations {labels}: list each gamma once")

    @property
    def configurations(self) -> list:
        """The result's configuration axis: one ``RunConfig`` per γ, then one per control."""
        return configurations(self.gammas, self.lr, self.controls)


@dataclass
class SimulationResult:
    """Per-step metrics with axes (step 0..steps, N, configuration, seed); step 0 is the initial policy. The
    configuration axis is ``config.configurations``: the γ runs in ``config.gammas`` order, then the controls."""

    config: SimulationConfig
    q_pos: np.ndarray  # correct mass Q_pos
    m_ret: np.ndarray  # retained positive mass M_ret (eq. 26)
    anchor: np.ndarray  # the anchor action's probability
    final_entropy: np.ndarray  # (N, configuration, seed) policy entropy in nats after the last step
    seconds: float  # wall time of the run loop


class CountSampler:
    """Per-action counts of N i.i.d. draws from every row of p, with all buffers allocated once.

    Rows come in contiguous blocks that share one N (``block_sizes``: a list of (rows, N)). Inverse CDF with the
    cumulative sum in float64, so actions of mass 1e-9 keep their share. The N uniforms of a row are generated
    already sorted (normalised partial sums of N + 1 exponentials are distributed as uniform order statistics),
    which keeps numpy's binary searches cache-friendly; the order of the draws does not matter for the counts.

    Speed: the blocks run on ``workers`` threads (torch and numpy release the GIL), each block with its own
    generator seeded from (seed, block), so results do not depend on thread timing. The large buffers are
    allocated once: a fresh 100 MB tensor per step costs more in page faults than the arithmetic.
    """

    def __init__(self, runs: int, actions: int, block_sizes: list, seed: int, workers: int = 2):
        from concurrent.futures import ThreadPoolExecutor

        self.actions = actions
        self.cdf = torch.empty(runs, actions, dtype=torch.float64)
        total = sum(rows * n for rows, n in block_sizes)
        self.flat = torch.empty(total, dtype=torch.int64)  # row * actions + action, for every draw
        self.ones = torch.ones(total)
        self.blocks = []
        row0 = off = 0
        for b, (rows, n) in enumerate(block_sizes):
            self.blocks.append(
                {
                    "rows": slice(row0, row0 + rows),
                    "n": n,
                    "generator": torch.Generator().manual_seed(seed * 1_000_003 + b),
                    "spacings": torch.empty(rows, n + 1, dtype=torch.float64),  # exponentials, then partial sums
                    "u": torch.empty(rows, n, dtype=torch.float64),  # sorted uniforms scaled to the row total
                    "idx": self.flat[off : off + rows * n].view(rows, n),
                    "row_offset": torch.arange(row0 * actions, (row0 + rows) * actions, actions).unsqueeze(1),
                    "cost": rows * (actions + 4 * n),
                }
            )
            row0, off = row0 + rows, off + rows * n
        self.order = sorted(range(len(self.blocks)), key=lambda b: -self.blocks[b]["cost"])  # longest first
        self.pool = ThreadPoolExecutor(workers) if workers > 1 else None

    def _draw_block(self, blk: dict, p: torch.Tensor) -> None:
        n, cdf = blk["n"], self.cdf[blk["rows"]]
        torch.cumsum(p[blk["rows"]], dim=1, dtype=torch.float64, out=cdf)
        spacings, u, idx = blk["spacings"], blk["u"], blk["idx"]
        spacings.uniform_(0.0, 1.0, generator=blk["generator"]).neg_().log1p_().neg_().cumsum_(1)  # E = -log(1-U)
        torch.mul(spacings[:, :n], cdf[:, -1:] / spacings[:, n:], out=u)
        cdf_np, u_np, idx_np = cdf.numpy(), u.numpy(), idx.numpy()
        for r in range(idx_np.shape[0]):  # a loop over runs; numpy's search is ~2x torch's on sorted keys
            idx_np[r] = np.searchsorted(cdf_np[r], u_np[r], side="right")
        # side="right" skips zero-mass actions; the clamp guards u rounding up to the total (probability ~1e-16).
        idx.clamp_max_(self.actions - 1).add_(blk["row_offset"])

    def __call__(self, p: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        draw = map if self.pool is None else self.pool.map  # longest block first; a block's error is raised here
        list(draw(lambda b: self._draw_block(self.blocks[b], p), self.order))
        out.zero_().view(-1).index_add_(0, self.flat, self.ones.to(out.dtype))  # .to: no copy at the same dtype
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def surrogate_gradient_(counts: torch.Tensor, p: torch.Tensor, n_col, gamma_col, setup: CategoricalSetup, surrogate: str):
    """Steps 3-5 of the module docstring, in place: per-action counts (runs, actions) -> ∇_z of g · surrogate.

    ``n_col`` (runs, 1) holds each run's N and ``gamma_col`` (runs,) its γ, both float64.
    """
    ncorrect, r_c, r_w = setup.num_correct, setup.reward_correct, setup.reward_incorrect
    x = counts[:, :ncorrect].sum(1, dtype=torch.float64).unsqueeze(1)  # X: correct draws per run
    mu_hat = x / n_col
    r_bar = (x * r_c + (n_col - x) * r_w) / n_col
    g = focal_weight(mu_hat.squeeze(1), gamma_col).unsqueeze(1)  # (runs, 1)
    # w_i = g c_i r̃_i / N; r̃ takes one value on the correct and one on the incorrect actions.
    w = counts
    w[:, :ncorrect].mul_((g * (r_c - r_bar) / n_col).to(w.dtype))
    w[:, ncorrect:].mul_((g * (r_w - r_bar) / n_col).to(w.dtype))
    if surrogate == "log":
        # ∂/∂z_k Σ_i w_i log p_i = w_k - p_k Σ_i w_i, and Σ_i w_i = g/N Σ_j r̃_j = 0 exactly: the gradient is w.
        return w
    return w.sub_((w * p).sum(1, keepdim=True)).mul_(p)  # p_k (w_k - Σ_i w_i p_i)


def simulate(config: SimulationConfig, progress: bool = False, dtype=torch.float32, workers: int = 2) -> SimulationResult:
    """Run every (N, γ, seed) combination of ``config`` side by side; see the module docstring for the math.

    The logits and Adam moments are float32 by default (a logit moves by at most ~η per Adam step, far above
    float32 resolution); sampling and every metric are computed in float64.
    """
    import time

    from tqdm.auto import tqdm

    setup = config.setup
    configs = config.configurations
    parts = (configs[: len(config.gammas)], configs[len(config.gammas):])  # the γ runs, then the controls
    # rows: (N, γ, seed) of the γ runs, then (N, control, seed); rows sharing one N and part are contiguous
    grid = [(n, c, s) for part in parts for n, c, s in itertools.product(config.group_sizes, part, range(config.seeds))]
    runs, ncorrect = len(grid), setup.num_correct
    block_sizes = [(len(part) * config.seeds, int(n)) for part in parts if part for n in config.group_sizes]
    n_col = torch.tensor([float(n) for n, _, _ in grid], dtype=torch.float64).unsqueeze(1)  # (runs, 1)
    gamma_col = torch.tensor([c.gamma for _, c, _ in grid], dtype=torch.float64)  # (runs,)
    # contiguous row ranges sharing one learning rate: the update is applied per range with a scalar lr, so the
    # γ runs take exactly the arithmetic they take without controls
    lr_ranges = []
    for r, (_, c, _) in enumerate(grid):
        if lr_ranges and lr_ranges[-1][2] == c.lr:
            lr_ranges[-1][1] = r + 1
        else:
            lr_ranges.append([r, r + 1, c.lr])

    z = setup.initial_logits(dtype).unsqueeze(0).repeat(runs, 1)
    p = torch.empty_like(z)
    row_max = torch.empty(runs, 1, dtype=dtype)
    counts = torch.empty_like(z)  # per-action sample counts, then (in place) the gradient
    sampler = CountSampler(runs, setup.num_actions, block_sizes, seed=config.seed, workers=workers)

    def softmax_(z, p):  # in place into p: no 100 MB allocation per step
        torch.amax(z, dim=1, keepdim=True, out=row_max)
        torch.sub(z, row_max, out=p).exp_()
        return p.div_(p.sum(1, keepdim=True))

    p0_correct = torch.softmax(setup.initial_logits(torch.float64), 0)[:ncorrect]
    p0_correct_mass = float(p0_correct.sum())
    adam = config.optimizer == "adam"
    if adam:
        b1, b2 = ADAM_BETAS
        m, v, denom = torch.zeros_like(z), torch.zeros_like(z), torch.empty_like(z)

    shape = (config.steps + 1, len(config.group_sizes), len(configs), config.seeds)
    q_pos, m_ret, anchor = (np.empty(shape) for _ in range(3))
    split = len(config.group_sizes) * len(parts[0]) * config.seeds

    def grid_of(per_run: torch.Tensor) -> np.ndarray:
        """(runs,) in row order -> (N, configuration, seed)."""
        v = per_run.numpy()
        main = v[:split].reshape(len(config.group_sizes), len(parts[0]), config.seeds)
        ctrl = v[split:].reshape(len(config.group_sizes), len(parts[1]), config.seeds)
        return np.concatenate([main, ctrl], axis=1)

    def record(t, p):
        pc = p[:, :ncorrect].to(torch.float64)
        q_pos[t] = grid_of(pc.sum(1))
        lost = (p0_correct.unsqueeze(0) - pc).clamp_min_(0.0).sum(1)
        m_ret[t] = grid_of(1.0 - lost / p0_correct_mass)
        anchor[t] = grid_of(pc[:, 0])

    start = time.perf_counter()
    softmax_(z, p)
    record(0, p)
    try:
        for t in tqdm(range(1, config.steps + 1), desc=f"simulate {runs} runs", unit="step", disable=not progress):
            sampler(p, out=counts)
            grad = surrogate_gradient_(counts, p, n_col, gamma_col, setup, config.surrogate)
            if adam:
                m.lerp_(grad, 1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                # η m̂ / (sqrt(v̂) + ε), m̂ = m / (1 - β1^t), v̂ = v / (1 - β2^t), rearranged to save one pass:
                # = η sqrt(1 - β2^t) / (1 - β1^t) · m / (sqrt(v) + ε sqrt(1 - β2^t))
                c2 = math.sqrt(1 - b2**t)
                torch.sqrt(v, out=denom).add_(ADAM_EPS * c2)
                for lo, hi, lr in lr_ranges:  # ascent on the surrogate
                    z[lo:hi].addcdiv_(m[lo:hi], denom[lo:hi], value=lr * c2 / (1 - b1**t))
            else:
                for lo, hi, lr in lr_ranges:
                    z[lo:hi].add_(grad[lo:hi], alpha=lr)
            softmax_(z, p)
            record(t, p)
    finally:
        sampler.close()
    seconds = time.perf_counter() - start
    p64 = p.to(torch.float64)
    entropy = grid_of(-(p64 * torch.log(p64.clamp_min(1e-300))).sum(1))
    return SimulationResult(config=config, q_pos=q_pos, m_ret=m_ret, anchor=anchor, final_entropy=entropy, seconds=seconds)


def concentration_zone(group_sizes, final_m_ret, threshold: float = 0.5):
    """Regimes I / II / III of Fig. 2(c), derived from the data rather than hard-coded.

    Zone II (concentration) spans the group sizes whose final M_ret (γ = 0, mean over seeds) is below
    ``threshold``: from the first such N to the last. Zone I lies below it, zone III above. Returns
    (first_n, last_n) of zone II, or None when no N falls below the threshold.
    """
    hits = np.flatnonzero(np.asarray(final_m_ret) < threshold)
    return (int(group_sizes[hits[0]]), int(group_sizes[hits[-1]])) if hits.size else None
