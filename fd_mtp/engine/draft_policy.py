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
  forget slowly, ``FORGET`` per step, towards the batch's rate (a slot's) or the prior (the
  batch's), so a position once judged bad is tried again; the batch's EMA is updated once per
  step with the sums over its slots). A new request starts from the batch's rates (one pseudo-trial each).
  Expected tokens of a step verifying ``k`` drafts: ``E(k) = 1 + sum_{j=1..k} prod_{i<j} a_i``,
  which is ``(1 - a^(k+1)) / (1 - a)`` when every ``a_i = a`` (`expected_tokens`); per position
  because real heads differ a lot between positions (the demo model: 0.9 for the first draft,
  0.06 for the second on held-out text).
* **costs** (`StepCostModel`, measured on a noisy machine; tests inject one): the target step
  time ``t(n)`` for ``n`` fed tokens, the MTP substep time ``d`` and the proposer's fixed time
  per call ``p``. Each is a **window** of the latest measurements (``window``, default 8) whose
  **median** is the estimate (the minimum while a window holds fewer than 3: timing noise on a
  loaded machine only ever adds time), so one slow step moves no estimate. ``t(n)`` is a
  least-squares line (weighted by the samples behind each point) through the per-``n``
  medians: the target's cost grows with the tokens it verifies. Measurements older than
  ``max_age`` cost observations are dropped, so every estimate is re-measured on a schedule.
* **choice**: for every substep count ``s`` in 1..S, the per-slot caps ``k_b`` in
  ``low_b..min(s, cap_b)`` that maximise the batch's expected tokens per second
  ``(n_plain + sum_b E(k_b, a_b)) / (t(n_plain + sum_b (1 + k_b)) + p + s' d)`` with ``E`` as
  above and ``s' = max(1, max_b k_b)``: for the linear ``t`` and a fixed ``s`` the ratio is
  maximised exactly by Dinkelbach's iteration (each slot independently takes the ``k`` that
  maximises ``E(k) - rate * slope * k``, then the rate is re-evaluated), all slots at once on
  arrays; the best ``s`` wins.
* **plain anchor and re-probing**: the plain step (``B`` tokens for ``B`` decoding slots) is
  measured, not extrapolated: while the cost model has no fresh measurement at a token count
  between ``B`` and ``1.25 B`` (none yet, or the last ones aged out), the next `probe_steps`
  steps verify no draft (a probe: the drafter still runs, the target step of ``B`` tokens is
  timed) and nothing is judged. Ageing makes the probe recur on a schedule.
* **switching off**: if plain decoding (``B / t(B)``, no proposer) is faster than the best
  plan, the step verifies at most one draft per slot (what keeps the acceptance measured) and
  the batch counts a losing step; only
  after ``off_windows * window`` losing steps in a row (several windows of evidence, each
  judgement made on medians) do the slots vote "off" (reason ``"batch_cost"``). A slot whose
  own best is 0 drafts votes "off" (reason ``"low_acceptance"``). A slot that votes "off"
  ``adaptive_off_patience`` steps in a row (``max(adaptive_off_patience, window)`` for
  ``"low_acceptance"``: a slot's EMA is noisier than the batch's) is dropped (its drafter stops: switching back on
  would need the draft's KV cache of every token decoded meanwhile). A request drafts at least
  one token during its first ``adaptive_warmup_steps`` decode steps (no vote then) so its
  acceptance is measured. Votes wait until the proposer was measured ``min_samples`` times.
* **batch gate** (TensorRT-LLM's acceptance gate, per batch): once slots were switched off
  for "batch_cost" (confident, after the patience), new requests start switched off, except
  the first after every ``explore_every`` (64) steps, whose acceptance keeps the judgement
  current; a confident judgement that speculation pays reopens the gate. When every running
  request is off, the runner skips the proposer (plain decoding).
* **per request**: ``SamplingParams.max_draft_tokens`` caps ``k_b`` (0: dropped at insertion,
  reason ``"request"``).

`DraftPolicyMetrics` records the chosen ``k`` per decoding slot and step (histogram), the substeps
per step (histogram), the recent history (step, mean k, substeps) and the reasons of every switch
off. Pure numpy, whole-batch arrays (no loop over slots). The clock is ``clock`` (default
``time.perf_counter``): the runner reads it at the start and end of each step and passes the
measured seconds (`observe_costs`); tests pass their own clock or their own seconds.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from .step_cost import StepCostModel

#: why a slot stopped drafting
OFF_REASONS = ("request", "low_acceptance", "batch_cost")
#: per-step decay of the batch's acceptance counts at a draft position some slot tried (its
#: memory: about 10 steps of the whole batch; a slot's own EMA uses ``ema``)
BATCH_DECAY = 0.9
#: per-step decay of acceptance counts at a draft position not tried
FORGET = 0.98


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


class FixedDraftPolicy:
    """Every drafting slot verifies ``min(K, SamplingParams.max_draft_tokens)`` drafts, with the
    configured ``num_model_steps`` substeps; ``max_draft_tokens = 0`` drops the slot.

    Args:
        max_num_seqs: B. num_speculative_tokens: K. num_model_steps: substeps per step.
    """

    adaptive = False
    #: what the runner reads the step's start and end from
    clock = staticmethod(time.perf_counter)

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
        self.observe_batch(np.array([slot]), np.array([drafted]), np.array([emitted]))

    def observe_batch(self, slots, drafted, emitted) -> None:
        """`observe` for every decoding slot of a step at once (``[n]`` arrays)."""

    def observe_costs(self, **measured) -> None:
        """Measured step costs (unused by a fixed policy)."""

    def _record(self, caps, decoding, num_steps):
        hist = np.bincount(caps[decoding], minlength=self.K + 1)
        self.metrics.k_histogram = [a + int(b) for a, b in zip(self.metrics.k_histogram, hist)]
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
        cost_model: a `StepCostModel` (default: a new one with ``window``, ``max_age`` and
            ``skip_first=1``; tests inject theirs).
        prior: the batch acceptance assumed before anything is measured.
        min_samples: proposer measurements needed before a slot may be voted off.
        explore_every: while the batch gate is closed, the first new request after this many
            steps drafts (an exploration).
        window: steps per window of evidence (and the default cost model's window).
        off_windows: windows of consecutive steps in which plain decoding must be judged faster
            before the slots vote "off" for the batch's cost.
        probe_steps: steps of one probe of the plain step.
        max_age: the default cost model's ``max_age`` (cost observations a measurement counts
            for; this is the re-probing schedule).
        clock: seconds as a float (default ``time.perf_counter``): what the runner times the
            step with.
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
        window: int = 8,
        off_windows: int = 2,
        probe_steps: int = 3,
        max_age: int = 256,
        clock=None,
    ):
        super().__init__(max_num_seqs, num_speculative_tokens, num_model_steps)
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"AdaptiveDraftPolicy: ema must be in (0, 1], got {ema!r}")
        for name, value in (
            ("explore_every", explore_every),
            ("window", window),
            ("off_windows", off_windows),
            ("probe_steps", probe_steps),
        ):
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"AdaptiveDraftPolicy: {name} must be an int >= 1, got {value!r}")
        self.decay = 1.0 - float(ema)
        self.warmup_steps = int(warmup_steps)
        self.off_patience = int(off_patience)
        self.adapt_steps = bool(adapt_steps)
        self.min_samples = int(min_samples)
        self.explore_every = explore_every
        self.window = window
        self.off_windows = off_windows
        self.probe_steps = probe_steps
        if clock is not None:
            self.clock = clock
        self.gate_closed = False  # the last confident judgement: plain decoding is faster
        self._closed_steps = 0  # steps planned since the gate closed or the last exploration
        self._losing = 0  # consecutive steps judged: plain decoding is faster
        self._probing = 0  # probe steps left
        self.costs = (
            StepCostModel(window=window, skip_first=1, max_age=max_age)
            if cost_model is None
            else cost_model
        )
        B, K = max_num_seqs, self.K
        # per-slot state (the one owner): EMA sums of successes and trials per draft position,
        # decode steps seen, consecutive "off" votes
        self.succ = np.zeros((B, K))
        self.trials = np.zeros((B, K))
        self.seen = np.zeros(B, np.int64)
        self.streak = np.zeros(B, np.int64)
        self.prior = float(prior)
        self.batch_succ = np.zeros(K)
        self.batch_trials = np.zeros(K)

    @property
    def batch_acceptance(self) -> np.ndarray:
        """``[K]``: the batch's EMA of the conditional acceptance rate per draft position, with
        ``prior`` as one pseudo-trial."""
        return (self.batch_succ + self.prior) / (self.batch_trials + 1.0)

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

    def observe_batch(self, slots, drafted, emitted) -> None:
        """Acceptance of one step's decoding slots: a slot that verified ``d`` drafts and emitted
        ``e`` tokens accepted ``m = e - 1`` (successes at positions ``0..m-1``, a failure at
        ``m`` when ``m < d``; slots with ``d = 0`` say nothing). The batch's EMA takes one
        update per step, the sums over its slots (so its memory is in steps, whatever the
        batch size)."""
        slots = np.asarray(slots, np.int64)
        d = np.minimum(np.asarray(drafted, np.int64), self.K)
        keep = d > 0
        if not keep.any():
            return
        slots, d = slots[keep], d[keep]
        m = np.clip(np.asarray(emitted, np.int64)[keep] - 1, 0, d)
        pos = np.arange(self.K)
        tried = pos < np.minimum(m + 1, d)[:, None]  # [n, K]
        hit = (pos < m[:, None]).astype(np.float64)
        g = self.decay
        # positions a slot did not try forget slowly (FORGET), back towards the batch's rate
        self.succ[slots] = np.where(tried, g * self.succ[slots] + hit, FORGET * self.succ[slots])
        self.trials[slots] = np.where(
            tried, g * self.trials[slots] + 1.0, FORGET * self.trials[slots]
        )
        # the batch EMA: one update per step with the step's counts (steps, not slots, age it);
        # a position no slot tried forgets slowly (FORGET per step), back towards the prior, so
        # a position once judged bad is tried again
        any_tried = tried.any(axis=0)
        decay = np.where(any_tried, BATCH_DECAY, FORGET)
        self.batch_succ = decay * self.batch_succ + (hit * tried).sum(axis=0)
        self.batch_trials = decay * self.batch_trials + tried.sum(axis=0)
        self.seen[slots] += 1

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

    def _best_caps(self, limit, table, warm, n_plain: int):
        """The best plan over the substep counts: for each ``s``, the per-slot caps when a slot
        may verify up to ``s`` drafts (Dinkelbach's iteration on the ratio), all ``s`` and all
        slots at once on arrays; returns the caps of the best ``s`` (the smallest within 1e-9)
        and its expected rate (tokens / second)."""
        costs = self.costs
        S = self.num_model_steps
        s = np.arange(1, S + 1) if self.adapt_steps else np.array([self.K])
        top = np.minimum(limit[None, :], s[:, None])  # [m, n]
        low = np.where(warm[None, :], np.minimum(1, top), 0)
        cols = np.arange(table.shape[1])
        allowed = (cols >= low[..., None]) & (cols <= top[..., None])  # [m, n, K + 1]
        masked = np.where(allowed, table[None], -np.inf)
        rows = np.arange(table.shape[0])
        alpha, beta = costs._fit()
        fixed, substep = costs.fixed or 0.0, costs.substep or 0.0
        shared = alpha + fixed + substep * (s if self.adapt_steps else S)  # [m]
        k = top

        def rate_of(k):
            e = table[rows, k]  # [m, n]
            return (n_plain + np.add.reduce(e, axis=1)) / (
                shared + beta * (n_plain + np.add.reduce(1 + k, axis=1))
            )

        rate = rate_of(k)
        for _ in range(8):
            cand = np.argmax(masked - (rate * beta)[:, None, None] * cols, axis=2)
            new = rate_of(cand)
            better = new > rate * (1 + 1e-12)
            if not better.any():
                break
            k = np.where(better[:, None], cand, k)
            rate = np.where(better, new, rate)
        steps = np.maximum(1, k.max(axis=1)) if self.adapt_steps else np.full(s.size, S)
        tokens = n_plain + np.add.reduce(1 + k, axis=1)
        e = np.add.reduce(table[rows, k], axis=1)
        r = (n_plain + e) / (alpha + beta * tokens + fixed + substep * steps)
        i = int((r >= r.max() / (1 + 1e-9)).nonzero()[0][0])
        return k[i], float(r[i])

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
        n_dec = int(decoding.sum())
        if self._probing == 0 and not self.costs.fresh_near(n_dec):
            self._probing = self.probe_steps  # no fresh plain step near this batch: probe
        if self._probing:
            # a probe: the target step of n_dec tokens is timed; nothing is judged
            self._probing -= 1
            new_caps = np.zeros(B, np.int64)
            steps = 1 if self.adapt_steps else self.num_model_steps
            self._record(new_caps, decoding, steps)
            return DraftPlan(steps, new_caps, [])
        limit = caps[slots]
        table = expected_tokens_table(self.acceptance(slots))
        warm = self.seen[slots] < self.warmup_steps
        n_plain = int((decoding & self.off).sum())
        k, r = self._best_caps(limit, table, warm, n_plain)
        plain_rate = n_dec / self.costs.target_time(n_dec)
        drop = []
        reason = "low_acceptance"
        confident = self.costs.samples("proposer") >= self.min_samples
        if r < plain_rate:
            # plain decoding is judged faster: verify at most one draft per slot (the cheapest
            # step that still measures the acceptance the judgement rests on); vote off only
            # after off_windows windows of such steps in a row
            self._losing += 1
            reason = "batch_cost"
            vote = ~warm & confident & (self._losing >= self.off_windows * self.window)
            k = np.minimum(k, 1)
        else:
            self._losing = 0
            vote = (k == 0) & ~warm & confident
            self.gate_closed = self.gate_closed and not confident
        self.streak[slots] = np.where(vote, self.streak[slots] + 1, 0)
        # a slot's own "no draft" votes (noisier: its EMA) need a window of them in a row
        patience = (
            self.off_patience if reason == "batch_cost" else max(self.off_patience, self.window)
        )
        gone = slots[self.streak[slots] >= patience]
        if gone.size:
            drop = [(int(b), reason) for b in gone]
            self.off[gone] = True
            self.metrics.off_reasons[reason] += int(gone.size)
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
