"""`StepCostModel`: the measured step costs an adaptive draft policy weighs drafts against
(fd_mtp.engine.draft_policy): the target's step time per fed token count, the MTP substep time
and the proposer's fixed time per call, each the median of a window of the latest measurements."""

from __future__ import annotations

from collections import Counter, deque

import numpy as np


class _Window:
    """The latest ``size`` measurements of one quantity; `estimate` is their median (the minimum
    while fewer than 3), cached until the next measurement."""

    __slots__ = ("_estimate", "items")

    def __init__(self, size: int):
        self.items: deque = deque(maxlen=size)
        self._estimate = None

    def add(self, value: float) -> None:
        self.items.append(value)
        self._estimate = None

    @property
    def estimate(self) -> float | None:
        if self._estimate is None and self.items:
            v = sorted(self.items)
            n = len(v)
            self._estimate = (v[(n - 1) // 2] + v[n // 2]) / 2 if n >= 3 else v[0]
        return self._estimate


class StepCostModel:
    """Measured step costs of this engine, robust to a noisy machine.

    * target: ``t(n)`` seconds for a step feeding ``n`` tokens: per ``n``, a window of the latest
      ``window`` measurements whose median (the minimum while fewer than 3) is the point at
      ``n``; then a least-squares line through those points, each weighted by its samples (one
      point: ``t(n) = t0 (1 + n / n0) / 2``; slope and intercept clamped >= 0);
    * proposer: ``d`` seconds per MTP substep (forward) and ``p`` seconds per call outside the
      forwards, medians of windows likewise.

    Every ``observe_target`` call is one tick; measurements older than ``max_age`` ticks no
    longer count (a token count whose measurements all aged out has no point until measured
    again: the policy re-probes it).

    Args:
        window: measurements kept per quantity, >= 1.
        skip_first: measurements ignored at each token count (and for the proposer) before the
            window fills: the first step of a new shape pays one-time costs.
        max_age: ticks a measurement counts for (None: for ever).

    >>> m = StepCostModel(window=5)
    >>> for s in (0.010, 0.011, 0.100, 0.010):  # one 10x-slow step among four
    ...     m.observe_target(4, s)
    >>> for s in (0.014, 0.015, 0.014):
    ...     m.observe_target(12, s)
    >>> round(m.target_time(4) * 1e3, 3), round(m.target_time(8) * 1e3, 3)
    (10.5, 12.25)
    """

    def __init__(self, window: int = 8, skip_first: int = 0, max_age: int | None = None):
        if not (isinstance(window, int) and window >= 1):
            raise ValueError(f"StepCostModel: window must be an int >= 1, got {window!r}")
        if max_age is not None and not (isinstance(max_age, int) and max_age >= 1):
            raise ValueError(f"StepCostModel: max_age must be None or an int >= 1, got {max_age!r}")
        self.window = window
        self.skip_first = int(skip_first)
        self.max_age = max_age
        self.tick = 0
        self._seen: Counter = Counter()
        self._count: Counter = Counter()
        # target measurements: one ring of (token count, seconds, tick), newest last
        cap = max_age if max_age is not None else 4096
        self._n = np.zeros(cap, np.int64)
        self._t = np.zeros(cap)
        self._at = np.full(cap, -(1 << 62), np.int64)
        self._next = 0
        self._substep = _Window(window)
        self._fixed = _Window(window)
        self._line: tuple[float, float] | None = None
        self._points: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def observe_target(self, tokens: int, seconds: float) -> None:
        """A measured target step (forward, sampling, verify, update) feeding ``tokens`` tokens."""
        n = int(tokens)
        self.tick += 1
        self._line = self._points = None
        if n <= 0 or not seconds > 0:
            return
        self._seen[n] += 1
        if self._seen[n] <= self.skip_first:
            return
        i = self._next % self._n.size
        self._n[i], self._t[i], self._at[i] = n, float(seconds), self.tick
        self._next += 1
        self._count[n] += 1

    def samples(self, tokens) -> int:
        """Measurements taken into account at ``tokens`` fed tokens (``"proposer"``: of the
        proposer), over the model's life."""
        return self._count[tokens if tokens == "proposer" else int(tokens)]

    def observe_proposer(self, substeps: int, forward_seconds: float, run_seconds: float) -> None:
        """A measured proposer call that ran ``substeps`` MTP forwards."""
        if substeps > 0 and forward_seconds > 0:
            self._seen["proposer"] += 1
            if self._seen["proposer"] <= self.skip_first:
                return
            self._count["proposer"] += 1
            self._substep.add(forward_seconds / substeps)
            self._fixed.add(max(run_seconds - forward_seconds, 0.0))

    def points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(n, seconds, samples)``: every token count with fresh measurements (ascending), the
        robust estimate of its window (its latest ``window`` fresh measurements: their median,
        the minimum while fewer than 3) and the window's size. Whole-array work, no loop."""
        if self._points is None:
            fresh = self._at > self.tick - (self.max_age or (1 << 62))
            fresh &= self._at > -(1 << 61)
            n, t, at = self._n[fresh], self._t[fresh], self._at[fresh]
            if not n.size:
                self._points = (n, t, n)
                return self._points
            # newest first within each token count, keep the latest `window`
            order = np.lexsort((-at, n))
            n, t = n[order], t[order]
            start = np.concatenate(([0], (n[1:] != n[:-1]).nonzero()[0] + 1))
            rank = np.arange(n.size) - start.repeat(np.diff(np.append(start, n.size)))
            keep = rank < self.window
            n, t = n[keep], t[keep]
            # per token count: values ascending, then the middle (or the minimum below 3)
            order = np.lexsort((t, n))
            n, t = n[order], t[order]
            start = np.concatenate(([0], (n[1:] != n[:-1]).nonzero()[0] + 1))
            c = np.diff(np.append(start, n.size))
            lo, hi = start + (c - 1) // 2, start + c // 2
            est = np.where(c >= 3, (t[lo] + t[hi]) / 2, t[start])
            self._points = (n[start], est, c)
        return self._points

    def fresh_near(self, tokens: int, ratio: float = 1.25) -> bool:
        """Whether a token count in ``[tokens, ratio * tokens]`` has fresh measurements (the
        plain step's anchor)."""
        n = self.points()[0]
        return bool(((n >= tokens) & (n <= ratio * tokens)).any())

    @property
    def substep(self) -> float | None:
        return self._substep.estimate

    @property
    def fixed(self) -> float | None:
        return self._fixed.estimate

    @property
    def ready(self) -> bool:
        """Whether both the target and the proposer have been measured."""
        return self.points()[0].size > 0 and self.substep is not None

    def _fit(self) -> tuple[float, float]:
        if self._line is None:
            n, t, c = self.points()
            if not n.size:
                raise ValueError("StepCostModel.target_time: no target step measured yet")
            n = n.astype(np.float64)
            w = c.astype(np.float64)  # least squares weighted by the samples behind each point
            if n.size == 1:
                alpha, beta = t[0] / 2, t[0] / (2 * n[0])
            else:
                sw = w.sum()
                mn, mt = (w * n).sum() / sw, (w * t).sum() / sw
                beta = (w * (n - mn) * (t - mt)).sum() / (w * (n - mn) ** 2).sum()
                alpha = mt - beta * mn
                if beta < 0:
                    alpha, beta = mt, 0.0
                if alpha < 0:
                    beta, alpha = (w * n * t).sum() / (w * n * n).sum(), 0.0
            self._line = (float(alpha), float(beta))
        return self._line

    def target_time(self, tokens) -> float:
        """Estimated seconds of a target step feeding ``tokens`` tokens (needs a measurement)."""
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
