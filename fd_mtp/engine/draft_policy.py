"""How many drafts each step verifies: `FixedDraftPolicy` and `AdaptiveDraftPolicy`.

The speculative runner asks its policy, once per step and before the proposer drafts, for a
`DraftPlan`: how many MTP substeps to run (``num_steps``), how many drafts each slot may have
verified at the next step (``caps``, 0..K) and which slots to switch off for good (``drop``).
The runner applies a plan through the ops' normal paths only: ``num_steps`` is the
``num_model_step`` of ``draft_model_preprocess`` and the number of substeps; a cap truncates the
slot's ``seq_lens_this_time`` (1 + drafts, as ``draft_model_postprocess`` left it) to
``1 + cap``, so ``speculate_verify`` reads fewer drafts; a dropped slot gets the proposer's
``batch_drop`` flag, so ``draft_model_preprocess`` stops drafting for it and
``draft_model_postprocess`` gives it ``seq_lens_this_time = 1`` (plain decoding). Greedy output
is the same for every plan (verification accepts only what plain decoding would emit).

`AdaptiveDraftPolicy` (``SpeculativeConfig.draft_policy = "adaptive"``), in the spirit of
SGLang's EMA-driven tiers, TensorRT-LLM's acceptance gate and vLLM's per-batch draft length:

* **acceptance**: per slot and for the batch, EMAs of the conditional acceptance rate ``a_i`` of
  each draft position ``i`` (a step that verified ``d`` drafts and accepted ``m`` counts a success
  at positions ``0..m-1`` and, when ``m < d``, a failure at position ``m``; positions not tried
  keep their value). A new request starts from the batch's rates (one pseudo-trial each).
  Expected tokens of a step verifying ``k`` drafts: ``E(k) = 1 + sum_{j=1..k} prod_{i<j} a_i``,
  which is ``(1 - a^(k+1)) / (1 - a)`` when every ``a_i = a`` (`expected_tokens`); per position
  because real heads differ a lot between positions (the demo model: 0.9 for the first draft,
  0.06 for the second on held-out text).
* **costs** (`StepCostModel`, measured; tests inject one): target step time ``t(n)`` for ``n`` fed
  tokens (a line through the EMA of the step time at each measured ``n``), the MTP substep time
  ``d`` and the proposer's fixed time per call ``p`` (EMAs).
* **choice**: for every substep count ``s`` in 1..S, each drafting slot takes ``k_b = min(s,
  cap_b)`` and then, slot by slot, the ``k_b`` in ``0..min(s, cap_b)`` that maximises the batch's
  expected tokens per second ``sum_b E(k_b, a_b) / (t(sum_b (1 + k_b)) + p + s' d)`` with
  ``E`` as above and ``s' = max(1, max_b k_b)``; the best ``s`` wins. If
  plain decoding (``B / t(B)``, no proposer) is faster than the best plan, every slot votes
  "off" (reason ``"batch_cost"``); a slot whose own best is 0 drafts votes "off" (reason
  ``"low_acceptance"``). A slot that votes "off" ``adaptive_off_patience`` steps in a row is
  dropped (its drafter stops: switching back on would need the draft's KV cache of every token
  decoded meanwhile). A request drafts at least one token during its first
  ``adaptive_warmup_steps`` decode steps (no vote then) so its acceptance is measured. Votes
  wait until the proposer was measured ``min_samples`` times. The plain step itself (``B``
  tokens for ``B`` decoding slots) is measured, not extrapolated: while it was not, a step
  verifies no draft (a probe: the drafter still runs, the target step of ``B`` tokens is
  timed; once per batch size, as the cost model keeps its measurements).
* **batch gate** (TensorRT-LLM's acceptance gate, per batch): once slots were switched off
  for "batch_cost" (confident, after the patience), new requests start switched off, except
  the first after every ``explore_every`` (64) steps, whose acceptance keeps the judgement
  current; a confident judgement that speculation pays reopens the gate. When every running
  request is off, the runner skips the proposer (plain decoding).
* **per request**: ``SamplingParams.max_draft_tokens`` caps ``k_b`` (0: dropped at insertion,
  reason ``"request"``).

`DraftPolicyMetrics` records the chosen ``k`` per decoding slot and step (histogram), the substeps
per step (histogram), the recent history (step, mean k, substeps) and the reasons of every switch
off. Pure numpy; the clock is the caller's (the runner passes measured seconds).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

#: why a slot stopped drafting
OFF_REASONS = ("request", "low_acceptance", "batch_cost")


def expected_tokens(k, a):
    """Expected tokens emitted by a step that verifies ``k`` drafts of per-position acceptance
    ``a``: ``(1 - a^(k+1)) / (1 - a)`` (``k + 1`` at ``a = 1``), elementwise.

    >>> [round(float(x), 3) for x in expected_tokens(np.array([0, 1, 3]), 0.5)]
    [1.0, 1.5, 1.875]
    """
    k = np.asarray(k, dtype=np.float64)
    a = np.clip(np.asarray(a, dtype=np.float64), 0.0, 1.0)
    safe = np.where(a < 1.0 - 1e-9, a, 0.5)
    geo = (1.0 - safe ** (k + 1.0)) / (1.0 - safe)
    return np.where(a < 1.0 - 1e-9, geo, k + 1.0)


def expected_tokens_table(a) -> np.ndarray:
    """``[n, K + 1]`` expected tokens of a step verifying ``k = 0..K`` drafts, from ``[n, K]``
    conditional per-position acceptance rates: ``1 + sum_{j=1..k} prod_{i<j} a_i``.

    >>> expected_tokens_table(np.array([[0.5, 0.5, 0.5], [0.9, 0.1, 1.0]])).round(3).tolist()
    [[1.0, 1.5, 1.75, 1.875], [1.0, 1.9, 1.99, 2.08]]
    """
    a = np.clip(np.asarray(a, dtype=np.float64), 0.0, 1.0)
    reach = np.cumprod(a, axis=1)  # probability that drafts 0..j are all accepted
    return np.concatenate([np.ones((a.shape[0], 1)), 1.0 + np.cumsum(reach, axis=1)], axis=1)


@dataclass
class DraftPlan:
    """One step's drafting decision.

    Attributes:
        num_steps: MTP substeps to run (>= 1).
        caps: ``[B]`` int, drafts each slot may have verified at the next step (0..K).
        drop: ``(slot, reason)`` pairs to switch off now.
    """

    num_steps: int
    caps: np.ndarray
    drop: list = field(default_factory=list)


@dataclass
class DraftPolicyMetrics:
    """What a policy chose: ``k_histogram[k]`` = decoding slot-steps whose verified drafts were
    capped at ``k`` (0 for switched-off slots); ``steps_histogram[s]`` = steps that ran ``s``
    MTP substeps; ``history``: the latest (step number, mean k over the decoding slots,
    substeps) triples (at most 4096);
    ``off_reasons``: switches off per reason (`OFF_REASONS`)."""

    num_speculative_tokens: int
    k_histogram: list = field(default_factory=list)
    steps_histogram: Counter = field(default_factory=Counter)
    history: deque = field(default_factory=lambda: deque(maxlen=4096))
    off_reasons: Counter = field(default_factory=Counter)

    def __post_init__(self):
        self.k_histogram = list(self.k_histogram) or [0] * (self.num_speculative_tokens + 1)

    def summary(self) -> str:
        """One line: the k histogram, the substep histogram and the switch-off reasons."""
        ks = " ".join(f"{k}:{n}" for k, n in enumerate(self.k_histogram))
        steps = " ".join(f"{s}:{n}" for s, n in sorted(self.steps_histogram.items()))
        off = ", ".join(f"{r} {n}" for r, n in sorted(self.off_reasons.items())) or "none"
        return f"draft length k histogram [{ks}], substeps [{steps}], switched off: {off}"


class StepCostModel:
    """Measured step costs of this engine.

    * target: ``t(n)`` seconds for a step feeding ``n`` tokens: an EMA of the measured time at each
      ``n`` seen, then a least-squares line through those points (one point: a line through the
      origin's half, ``t(n) = t0 (1 + n / n0) / 2``; slope and intercept clamped >= 0);
      `samples` says how often ``n`` itself was measured;
    * proposer: ``d`` seconds per MTP substep (forward) and ``p`` seconds per call outside the
      forwards (EMAs).

    Args:
        weight: EMA weight of a new measurement, in (0, 1].
        skip_first: measurements ignored at each token count (and for the proposer) before the
            EMA starts: the first step of a new shape pays one-time costs.

    >>> m = StepCostModel(weight=1.0)
    >>> m.observe_target(4, 0.010); m.observe_target(12, 0.014)
    >>> round(m.target_time(8) * 1e3, 3)
    12.0
    """

    def __init__(self, weight: float = 0.2, skip_first: int = 0):
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"StepCostModel: weight must be in (0, 1], got {weight!r}")
        self.weight = float(weight)
        self.skip_first = int(skip_first)
        self._seen: Counter = Counter()
        self._count: Counter = Counter()
        self._target: dict[int, float] = {}
        self._line: tuple[float, float] | None = None
        self.substep: float | None = None
        self.fixed: float | None = None

    def _ema(self, old, new):
        return new if old is None else (1.0 - self.weight) * old + self.weight * new

    def observe_target(self, tokens: int, seconds: float) -> None:
        """A measured target step (forward, sampling, verify, update) feeding ``tokens`` tokens."""
        n = int(tokens)
        if n <= 0 or not seconds > 0:
            return
        self._seen[n] += 1
        if self._seen[n] <= self.skip_first:
            return
        self._target[n] = self._ema(self._target.get(n), float(seconds))
        self._count[n] += 1
        self._line = None

    def samples(self, tokens) -> int:
        """Measurements taken into account at ``tokens`` fed tokens (``"proposer"``: of the
        proposer)."""
        return self._count[tokens if tokens == "proposer" else int(tokens)]

    def observe_proposer(self, substeps: int, forward_seconds: float, run_seconds: float) -> None:
        """A measured proposer call that ran ``substeps`` MTP forwards."""
        if substeps > 0 and forward_seconds > 0:
            self._seen["proposer"] += 1
            if self._seen["proposer"] <= self.skip_first:
                return
            self._count["proposer"] += 1
            self.substep = self._ema(self.substep, forward_seconds / substeps)
            self.fixed = self._ema(self.fixed, max(run_seconds - forward_seconds, 0.0))

    @property
    def ready(self) -> bool:
        """Whether both the target and the proposer have been measured."""
        return bool(self._target) and self.substep is not None

    def _fit(self) -> tuple[float, float]:
        if self._line is None:
            n = np.array(sorted(self._target), dtype=np.float64)
            t = np.array([self._target[int(x)] for x in n])
            if n.size == 1:
                alpha, beta = t[0] / 2, t[0] / (2 * n[0])
            else:
                beta, alpha = np.polyfit(n, t, 1)
                if beta < 0:
                    alpha, beta = float(t.mean()), 0.0
                if alpha < 0:
                    beta, alpha = float((n * t).sum() / (n * n).sum()), 0.0
            self._line = (float(alpha), float(beta))
        return self._line

    def target_time(self, tokens) -> float:
        """Estimated seconds of a target step feeding ``tokens`` tokens (needs a measurement)."""
        if not self._target:
            raise ValueError("StepCostModel.target_time: no target step measured yet")
        alpha, beta = self._fit()
        return alpha + beta * float(tokens)

    @property
    def per_token(self) -> float:
        """The target's marginal seconds per fed token (the fitted slope)."""
        return self._fit()[1]

    def proposer_time(self, substeps: int) -> float:
        """Estimated seconds of a proposer call running ``substeps`` MTP forwards (0: none)."""
        if substeps <= 0:
            return 0.0
        return (self.fixed or 0.0) + substeps * (self.substep or 0.0)


class FixedDraftPolicy:
    """Every drafting slot verifies ``min(K, SamplingParams.max_draft_tokens)`` drafts, with the
    configured ``num_model_steps`` substeps; ``max_draft_tokens = 0`` drops the slot.

    Args:
        max_num_seqs: B. num_speculative_tokens: K. num_model_steps: substeps per step.
    """

    adaptive = False

    def __init__(self, max_num_seqs: int, num_speculative_tokens: int, num_model_steps: int):
        self.K = int(num_speculative_tokens)
        self.num_model_steps = int(num_model_steps)
        self.cap = np.full(max_num_seqs, self.K, np.int64)
        self.off = np.zeros(max_num_seqs, bool)
        self.metrics = DraftPolicyMetrics(self.K)
        self._num_plans = 0

    def start(self, slot: int, max_draft_tokens: int | None) -> None:
        """A request enters ``slot`` (its first prefill chunk) with its per-request cap."""
        cap = self.K if max_draft_tokens is None else min(int(max_draft_tokens), self.K)
        self.cap[slot] = cap
        self.off[slot] = cap == 0
        if cap == 0:
            self.metrics.off_reasons["request"] += 1

    def release(self, slot: int) -> None:
        """The slot's request left (finished or preempted)."""
        self.cap[slot] = self.K
        self.off[slot] = False

    def observe(self, slot: int, drafted: int, emitted: int) -> None:
        """A decode step of ``slot`` verified ``drafted`` drafts and emitted ``emitted`` tokens."""

    def observe_costs(self, **measured) -> None:
        """Measured step costs (unused by a fixed policy)."""

    def _record(self, caps, decoding, num_steps):
        for k in caps[decoding]:
            self.metrics.k_histogram[int(k)] += 1
        self.metrics.steps_histogram[int(num_steps)] += 1
        mean = float(caps[decoding].mean()) if decoding.any() else 0.0
        self.metrics.history.append((self._num_plans, mean, int(num_steps)))
        self._num_plans += 1

    def plan(self, decoding: np.ndarray) -> DraftPlan:
        """The plan of this step; ``decoding``: ``[B]`` bool, slots that decode this step."""
        caps = np.where(self.off, 0, self.cap)
        self._record(caps, decoding, self.num_model_steps)
        return DraftPlan(self.num_model_steps, caps, [])


class AdaptiveDraftPolicy(FixedDraftPolicy):
    """Chooses substeps and per-slot caps each step (see the module docstring).

    Args:
        max_num_seqs, num_speculative_tokens, num_model_steps: as `FixedDraftPolicy`;
            ``num_model_steps`` is the most substeps a step may run.
        ema: weight of the newest step in the acceptance EMAs.
        warmup_steps: decode steps a request drafts (>= 1 token) before it may be switched off.
        off_patience: consecutive "off" votes that switch a slot off.
        adapt_steps: choose the substep count (MTP without n-gram extension); False: always
            ``num_model_steps`` (hybrid mode: the n-gram drafts fill up to K).
        cost_model: a `StepCostModel` (default: a new one; tests inject theirs).
        prior: the batch acceptance assumed before anything is measured.
        min_samples: proposer measurements needed before a slot may be voted off.
        explore_every: while the batch gate is closed, the first new request after this many
            steps drafts (an exploration).
    """

    adaptive = True

    def __init__(
        self,
        max_num_seqs: int,
        num_speculative_tokens: int,
        num_model_steps: int,
        *,
        ema: float = 0.3,
        warmup_steps: int = 2,
        off_patience: int = 2,
        adapt_steps: bool = True,
        cost_model: StepCostModel | None = None,
        prior: float = 0.5,
        min_samples: int = 3,
        explore_every: int = 64,
    ):
        super().__init__(max_num_seqs, num_speculative_tokens, num_model_steps)
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"AdaptiveDraftPolicy: ema must be in (0, 1], got {ema!r}")
        self.decay = 1.0 - float(ema)
        self.warmup_steps = int(warmup_steps)
        self.off_patience = int(off_patience)
        self.adapt_steps = bool(adapt_steps)
        self.min_samples = int(min_samples)
        if not (isinstance(explore_every, int) and explore_every >= 1):
            raise ValueError(
                f"AdaptiveDraftPolicy: explore_every must be an int >= 1, got {explore_every!r}"
            )
        self.explore_every = explore_every
        self.gate_closed = False  # the last confident judgement: plain decoding is faster
        self._closed_steps = 0  # steps planned since the gate closed or the last exploration
        self.costs = StepCostModel(skip_first=1) if cost_model is None else cost_model
        B, K = max_num_seqs, self.K
        # per-slot state (the one owner): EMA sums of successes and trials per draft position,
        # decode steps seen, consecutive "off" votes
        self.succ = np.zeros((B, K))
        self.trials = np.zeros((B, K))
        self.seen = np.zeros(B, np.int64)
        self.streak = np.zeros(B, np.int64)
        self.batch_succ = np.full(K, float(prior))
        self.batch_trials = np.ones(K)

    @property
    def batch_acceptance(self) -> np.ndarray:
        """``[K]``: the batch's EMA of the conditional acceptance rate per draft position."""
        return self.batch_succ / self.batch_trials

    def acceptance(self, slots=None) -> np.ndarray:
        """``[n, K]`` per-slot EMA acceptance per position, the batch's as a one-trial prior."""
        s = slice(None) if slots is None else slots
        return (self.succ[s] + self.batch_acceptance) / (self.trials[s] + 1.0)

    def start(self, slot: int, max_draft_tokens: int | None) -> None:
        """As `FixedDraftPolicy.start`; while the batch gate is closed (slots were switched off
        because plain decoding was faster), a new request starts switched off (reason
        ``"batch_cost"``), except the first one after every `explore_every` steps with the gate
        closed, which drafts so that the policy keeps measuring whether speculation pays."""
        super().start(slot, max_draft_tokens)
        self.succ[slot] = self.trials[slot] = 0.0
        self.seen[slot] = self.streak[slot] = 0
        if self.off[slot] or not self.gate_closed:
            return
        if self._closed_steps >= self.explore_every:
            self._closed_steps = 0  # this one explores
            return
        self.off[slot] = True
        self.metrics.off_reasons["batch_cost"] += 1

    def observe(self, slot: int, drafted: int, emitted: int) -> None:
        if drafted <= 0:
            return
        d = min(int(drafted), self.K)
        m = max(0, min(int(emitted) - 1, d))
        tried = min(m + 1, d)  # positions 0..m-1 accepted, position m rejected (when m < d)
        hit = np.zeros(self.K)
        hit[:m] = 1.0
        for succ, trials in (
            (self.succ[slot], self.trials[slot]),
            (self.batch_succ, self.batch_trials),
        ):
            succ[:tried] = self.decay * succ[:tried] + hit[:tried]
            trials[:tried] = self.decay * trials[:tried] + 1.0
        self.seen[slot] += 1

    def observe_costs(
        self,
        *,
        tokens: int,
        target_seconds: float,
        substeps: int = 0,
        forward_seconds: float = 0.0,
        proposer_seconds: float = 0.0,
    ) -> None:
        """A decode step's measured costs: the target part feeding ``tokens`` tokens, and the
        proposer call (``substeps`` MTP forwards taking ``forward_seconds`` of its
        ``proposer_seconds``)."""
        self.costs.observe_target(tokens, target_seconds)
        self.costs.observe_proposer(substeps, forward_seconds, proposer_seconds)

    def _best_caps(self, s: int, limit, a, warm, n_plain: int):
        """Per-slot caps when a slot may verify up to ``s`` drafts, and the plan's expected rate
        (tokens / second)."""
        costs = self.costs
        k = np.minimum(limit, s)
        low = np.where(warm, np.minimum(1, k), 0)
        table = expected_tokens_table(a)  # [n, K + 1]
        E = table[np.arange(k.size), k]
        total_e = n_plain + float(E.sum())
        beta = costs.per_token
        shared = costs.proposer_time(s if self.adapt_steps else self.num_model_steps)
        t_now = costs.target_time(n_plain + float((1 + k).sum())) + shared
        # one coordinate pass: each slot's best k with the others fixed, judged by the target's
        # marginal cost (the substeps are shared by the batch; the plan is priced again below
        # with the substeps its caps need)
        for i in range(k.size):
            cand = np.arange(low[i], k[i] + 1)
            e_i = table[i, cand]
            t = t_now + beta * (cand - k[i])
            j = int(np.argmax((total_e - E[i] + e_i) / t))
            total_e += e_i[j] - E[i]
            t_now = float(t[j])
            E[i], k[i] = e_i[j], cand[j]
        steps = max(1, int(k.max(initial=0))) if self.adapt_steps else self.num_model_steps
        tokens = n_plain + float((1 + k).sum())
        return k, total_e / (costs.target_time(tokens) + costs.proposer_time(steps))

    def plan(self, decoding: np.ndarray) -> DraftPlan:
        B = self.cap.size
        if self.gate_closed:
            self._closed_steps += 1
        drafting = decoding & ~self.off
        caps = np.where(self.off, 0, self.cap).astype(np.int64)
        if not self.costs.ready or not drafting.any():
            # nothing measured yet (the engine's first steps): as configured; no slot drafts:
            # one substep (nothing runs)
            steps = 1 if self.costs.ready and self.adapt_steps else self.num_model_steps
            self._record(caps, decoding, steps)
            return DraftPlan(steps, caps, [])
        slots = np.flatnonzero(drafting)
        limit = caps[slots]
        a = self.acceptance(slots)
        warm = self.seen[slots] < self.warmup_steps
        n_plain = int((decoding & self.off).sum())
        best = None
        for s in range(1, self.num_model_steps + 1) if self.adapt_steps else [self.K]:
            k, r = self._best_caps(s, limit, a, warm, n_plain)
            if best is None or r > best[1] * (1 + 1e-9):
                best = (k, r)
        k, r = best
        n_dec = int(decoding.sum())
        plain_rate = n_dec / self.costs.target_time(n_dec)
        drop = []
        reason = "low_acceptance"
        confident = self.costs.samples("proposer") >= self.min_samples
        if not self.costs.samples(n_dec):
            vote = np.zeros(slots.size, bool)  # probe: time the plain step before judging it
            k = np.zeros_like(k)
        elif r < plain_rate:
            reason = "batch_cost"
            vote = ~warm & confident
            k = np.where(warm, np.minimum(k, 1), 0)

        else:
            vote = (k == 0) & ~warm & confident
            self.gate_closed = self.gate_closed and not confident
        self.streak[slots] = np.where(vote, self.streak[slots] + 1, 0)
        for b in slots[self.streak[slots] >= self.off_patience]:
            drop.append((int(b), reason))
            self.off[b] = True
            self.metrics.off_reasons[reason] += 1
        if reason == "batch_cost" and drop and not self.gate_closed:
            # slots switched off for the batch's cost (after the patience): close the gate
            self.gate_closed, self._closed_steps = True, 0
        new_caps = np.zeros(B, np.int64)
        new_caps[slots] = k
        new_caps[self.off] = 0
        still = drafting & ~self.off
        if self.adapt_steps:
            num_steps = max(1, int(new_caps[still].max()) if still.any() else 1)
        else:
            num_steps = self.num_model_steps
        self._record(new_caps, decoding, num_steps)
        return DraftPlan(num_steps, new_caps, drop)


def make_draft_policy(spec_config, max_num_seqs: int, cost_model: StepCostModel | None = None):
    """The policy of ``spec_config.draft_policy`` for ``max_num_seqs`` slots."""
    K, steps = spec_config.num_speculative_tokens, spec_config.num_model_steps
    if spec_config.draft_policy == "fixed":
        return FixedDraftPolicy(max_num_seqs, K, steps)
    return AdaptiveDraftPolicy(
        max_num_seqs,
        K,
        steps,
        ema=spec_config.adaptive_ema,
        warmup_steps=spec_config.adaptive_warmup_steps,
        off_patience=spec_config.adaptive_off_patience,
        adapt_steps=not spec_config.hybrid_mode,
        cost_model=cost_model,
    )
