"""The draft-length policies (fd_mtp.engine.draft_policy) with injected costs: no model.

The adaptive policy's decisions are checked against the throughput objective it states
(``sum E(k_b, a_b) / (t(tokens) + proposer time)``) on hand-made acceptance histories and cost
models: cheap drafts and high acceptance draft the most, expensive drafts and low acceptance
switch speculation off (after the warm-up and the patience, with the reason), a request's cap
is respected, and a bad request in a good batch is switched off alone. Most of these use
windows of one step (``window=1, off_windows=1, probe_steps=1``: every measurement replaces
the last) to pin the decision logic; the robustness tests at the end run the policy's defaults
on a simulated engine whose step times come from an injected clock: a single 10x-slow step
changes nothing, a genuinely expensive draft switches speculation off, the plain step is
re-probed on a schedule.
"""

import numpy as np
import pytest

from fd_mtp.config import SpeculativeConfig
from fd_mtp.engine.draft_policy import (
    AdaptiveDraftPolicy,
    FixedDraftPolicy,
    StepCostModel,
    expected_tokens,
    expected_tokens_table,
    make_draft_policy,
)
from fd_mtp.engine.sampling_params import SamplingParams


def costs(alpha=0.010, beta=0.0005, substep=0.002, fixed=0.0005, tokens=(2, 4, 16)):
    """A cost model measured at ``tokens``: t(n) = alpha + beta n exactly; the proposer three
    times."""
    m = StepCostModel(window=1)
    for n in tokens:
        m.observe_target(n, alpha + n * beta)
    for _ in range(3):
        m.observe_proposer(2, 2 * substep, 2 * substep + fixed)
    return m


def policy(B=4, K=3, steps=3, cost=None, **kw):
    """One-step windows (see the module docstring) unless ``kw`` says otherwise."""
    kw = {"window": 1, "off_windows": 1, "probe_steps": 1, **kw}
    return AdaptiveDraftPolicy(B, K, steps, cost_model=cost or costs(), **kw)


def feed(p, slot, accept_rate, steps=20, drafted=3, seed=0):
    """``steps`` decode steps of ``slot`` whose drafts are accepted with ``accept_rate`` each."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        m = 0
        while m < drafted and rng.random() < accept_rate:
            m += 1
        p.observe(slot, drafted, m + 1)


def test_expected_tokens_is_the_geometric_formula():
    a = np.array([0.0, 0.3, 0.9, 1.0])
    for k in range(6):
        want = [1.0] + [(1 - x ** (k + 1)) / (1 - x) for x in a[1:3]] + [k + 1.0]
        np.testing.assert_allclose(expected_tokens(k, a), want)


def test_per_position_table_equals_the_formula_for_equal_rates():
    a = np.array([[0.3] * 5, [0.8] * 5])
    for k in range(6):
        np.testing.assert_allclose(expected_tokens_table(a)[:, k], expected_tokens(k, a[:, 0]))
    # a weak second position caps the gain of longer drafts
    t = expected_tokens_table(np.array([[0.9, 0.05, 0.9]]))
    assert t[0, 3] - t[0, 1] < 0.1


def test_cost_model_fits_a_line_and_clamps():
    m = StepCostModel(window=1)
    with pytest.raises(ValueError, match="no target step"):
        m.target_time(3)
    m.observe_target(10, 0.02)
    assert m.target_time(10) == pytest.approx(0.02)  # one point: half fixed, half per token
    assert m.target_time(20) == pytest.approx(0.03)
    m.observe_target(30, 0.04)
    assert m.per_token == pytest.approx(0.001) and m.target_time(0) == pytest.approx(0.01)
    m.observe_proposer(3, 0.006, 0.007)
    assert m.proposer_time(2) == pytest.approx(0.001 + 2 * 0.002) and m.proposer_time(0) == 0.0
    decreasing = StepCostModel(window=1)
    decreasing.observe_target(1, 0.02)
    decreasing.observe_target(2, 0.01)
    assert decreasing.per_token == 0.0  # noise never makes extra tokens free or negative
    for bad in ({"window": 0}, {"window": 1.5}, {"max_age": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            StepCostModel(**bad)
    cold = StepCostModel(window=1, skip_first=1)
    cold.observe_target(5, 1.0)  # a new shape's first step: one-time costs, ignored
    cold.observe_proposer(1, 1.0, 1.0)
    assert not cold.ready
    cold.observe_target(5, 0.01)
    cold.observe_proposer(1, 0.002, 0.003)
    assert cold.ready and cold.target_time(5) == pytest.approx(0.01)


def test_ema_tracks_the_recent_acceptance():
    p = policy(ema=0.5)
    for _ in range(10):
        p.observe(0, 3, 4)  # every draft accepted
    assert (p.acceptance([0])[0] > 0.95).all()
    for _ in range(10):
        p.observe(0, 3, 1)  # none accepted: only position 0 was tried
    a = p.acceptance([0])[0]
    assert a[0] < 0.1 and (a[1:] > 0.9).all()  # untried positions keep (forget slowly)
    for _ in range(10):
        p.observe(0, 3, 2)  # the first accepted, the second rejected
    a = p.acceptance([0])[0]
    assert a[0] > 0.9 and a[1] < 0.1 and a[2] > 0.85
    p.observe(1, 0, 1)  # a step without drafts says nothing
    assert (p.trials[1] == 0).all()


def test_cheap_drafts_and_high_acceptance_draft_the_most():
    p = policy()
    for b in range(4):
        p.start(b, None)
        feed(p, b, 0.95, seed=b)
    plan = p.plan(np.ones(4, bool))
    assert plan.num_steps == 3 and plan.caps.tolist() == [3, 3, 3, 3] and plan.drop == []


def test_the_choice_maximises_expected_tokens_per_second():
    c = costs(beta=0.001, substep=0.001)
    p = policy(cost=c)
    for b in range(4):
        p.start(b, None)
        feed(p, b, 0.8, seed=b)
    plan = p.plan(np.ones(4, bool))
    a = p.acceptance(np.arange(4))
    assert len(set(np.round(a[:, 0], 6))) > 1  # different acceptance per slot

    table = expected_tokens_table(a)

    def rate(caps):
        caps = np.asarray(caps)
        steps = max(1, int(caps.max()))
        t = c.target_time((1 + caps).sum()) + c.proposer_time(steps)
        return table[np.arange(4), caps].sum() / t

    best_uniform = max(rate([k] * 4) for k in range(1, 4))
    assert rate(plan.caps) >= best_uniform * (1 - 1e-9)
    assert plan.num_steps == max(plan.caps) >= 1
    assert rate(plan.caps) > 4 / c.target_time(4)  # and speculation beats plain decoding here
    # no single slot can do better by changing its own cap alone
    for b in range(4):
        for k in range(4):
            other = plan.caps.copy()
            other[b] = k
            assert rate(other) <= rate(plan.caps) * (1 + 1e-9)


def test_expensive_drafts_switch_speculation_off_after_warmup_and_patience():
    p = policy(cost=costs(substep=0.05), warmup_steps=2, off_patience=3)
    decoding = np.array([True, True, False, False])
    for b in (0, 1):
        p.start(b, None)
    plans = []
    for step in range(8):
        plans.append(p.plan(decoding))
        for b in (0, 1):
            if not p.off[b]:
                p.observe(b, int(plans[-1].caps[b]), 1 if step % 2 else 2)
    # warm-up: one draft each (measured acceptance), no vote
    assert plans[0].caps.tolist()[:2] == [1, 1] and plans[1].caps.tolist()[:2] == [1, 1]
    # then one draft each (what keeps the acceptance measured), and after three votes in a
    # row: off, reason batch_cost
    assert [pl.caps[:2].tolist() for pl in plans[2:4]] == [[1, 1], [1, 1]]
    dropped = [(i, pl.drop) for i, pl in enumerate(plans) if pl.drop]
    assert dropped == [(4, [(0, "batch_cost"), (1, "batch_cost")])]
    assert p.off[:2].all() and p.metrics.off_reasons == {"batch_cost": 2}
    assert plans[-1].caps[:2].tolist() == [0, 0]
    assert p.metrics.k_histogram[0] >= 4 and p.metrics.k_histogram[1] == 8
    assert "batch_cost 2" in p.metrics.summary()


def test_the_plain_step_is_timed_before_speculation_is_judged_too_costly():
    c = costs(substep=0.05, tokens=(4, 16))  # the plain step (2 tokens) never measured
    p = policy(cost=c, warmup_steps=1, off_patience=1)
    decoding = np.array([True, True, False, False])
    for b in (0, 1):
        p.start(b, None)
        p.observe(b, 3, 1)
    probe = p.plan(decoding)
    assert probe.caps[:2].tolist() == [0, 0] and probe.drop == [] and not p.off.any()
    c.observe_target(2, 0.011)  # the probe step's target time
    plan = p.plan(decoding)
    assert plan.drop == [(0, "batch_cost"), (1, "batch_cost")]


def test_a_good_batch_also_probes_an_unmeasured_plain_step_once():
    c = costs(substep=0.0001, tokens=(4, 16))
    p = policy(cost=c)
    decoding = np.array([True, True, False, False])
    for b in (0, 1):
        p.start(b, None)
        feed(p, b, 0.95, seed=b)
    assert p.plan(decoding).caps[:2].tolist() == [0, 0]  # the probe
    c.observe_target(2, 0.011)
    plan = p.plan(decoding)
    assert plan.caps[:2].tolist() == [3, 3] and plan.drop == []


def test_no_switch_off_before_the_proposer_was_measured_enough():
    c = StepCostModel(window=1)
    for n in (4, 8):
        c.observe_target(n, 0.01 + 0.001 * n)
    c.observe_proposer(1, 0.05, 0.06)  # one expensive measurement only
    p = policy(cost=c, warmup_steps=1, off_patience=1, min_samples=2)
    for b in range(4):
        p.start(b, None)
        p.observe(b, 3, 1)
    assert p.plan(np.ones(4, bool)).drop == []
    c.observe_proposer(1, 0.05, 0.06)
    assert len(p.plan(np.ones(4, bool)).drop) == 4


def test_the_batch_gate_starts_new_requests_off_but_keeps_exploring():
    c = costs(substep=0.05)
    p = policy(cost=c, warmup_steps=1, off_patience=1, explore_every=3)
    decoding = np.array([True, True, False, False])
    for b in (0, 1):
        p.start(b, None)
        p.observe(b, 3, 1)
    assert p.plan(decoding).drop == [(0, "batch_cost"), (1, "batch_cost")] and p.gate_closed
    starts = []
    for _ in range(5):
        p.plan(decoding)  # steps pass (both slots off)
        p.start(2, None)
        starts.append(bool(p.off[2]))
        p.release(2)
    # after every 3 steps with the gate closed, one new request explores
    assert starts == [True, True, False, True, True]
    assert p.metrics.off_reasons["batch_cost"] == 6
    p.start(3, 0)  # switched off by its request: reason "request"
    assert p.off[3] and p.metrics.off_reasons["request"] == 1
    # a confident judgement that speculation pays reopens the gate
    c.observe_proposer(1, 0.00001, 0.00002)  # drafting became cheap (window 1: replaces)
    c.observe_target(1, 0.0105)
    for b in (0, 1):
        p.release(b)
    p.plan(decoding)
    p.plan(decoding)
    p.start(0, None)  # explores
    assert not p.off[0]
    feed(p, 0, 1.0)
    p.plan(np.array([True, False, False, False]))
    assert not p.gate_closed
    p.start(1, None)
    assert not p.off[1]  # the gate is open: no request starts off
    with pytest.raises(ValueError, match="explore_every"):
        policy(explore_every=0)


def test_a_bad_request_in_a_good_batch_is_switched_off_alone():
    p = policy(cost=costs(beta=0.004, substep=0.001), warmup_steps=1, off_patience=2)
    for b in range(4):
        p.start(b, None)
    for b in range(3):
        feed(p, b, 0.97, seed=b)
    feed(p, 3, 0.0)
    drops = []
    for _ in range(3):
        plan = p.plan(np.ones(4, bool))
        drops += plan.drop
    assert drops == [(3, "low_acceptance")]
    assert plan.caps[3] == 0 and (plan.caps[:3] >= 1).all() and plan.num_steps >= 2
    # the slot's next request starts afresh
    p.release(3)
    p.start(3, None)
    assert not p.off[3] and p.seen[3] == 0


def test_request_caps_and_switch_off_by_request():
    p = policy()
    p.start(0, 1)
    p.start(1, 0)
    p.start(2, 7)  # above K: K
    p.start(3, None)
    for b in (0, 2, 3):
        feed(p, b, 1.0, seed=b)
    plan = p.plan(np.ones(4, bool))
    assert plan.caps.tolist() == [1, 0, 3, 3]
    assert p.off.tolist() == [False, True, False, False]
    assert p.metrics.off_reasons == {"request": 1}
    f = FixedDraftPolicy(3, 2, 2)
    f.start(0, 1)
    f.start(1, 0)
    f.start(2, None)
    plan = f.plan(np.ones(3, bool))
    assert plan.caps.tolist() == [1, 0, 2] and plan.num_steps == 2 and plan.drop == []
    assert f.metrics.k_histogram == [1, 1, 1]  # the switched-off slot counts as k = 0


def test_before_any_measurement_the_configured_k_runs():
    p = AdaptiveDraftPolicy(2, 3, 3, cost_model=StepCostModel())
    p.start(0, None)
    plan = p.plan(np.array([True, False]))
    assert plan.num_steps == 3 and plan.caps.tolist() == [3, 3]


def test_make_draft_policy_follows_the_config():
    fixed = make_draft_policy(SpeculativeConfig(num_speculative_tokens=2), 4)
    assert type(fixed) is FixedDraftPolicy
    cfg = SpeculativeConfig(
        num_speculative_tokens=3,
        num_model_steps=1,
        mtp_strategy="with_ngram",
        draft_policy="adaptive",
        adaptive_ema=0.5,
        adaptive_warmup_steps=4,
        adaptive_off_patience=5,
    )
    p = make_draft_policy(cfg, 4)
    assert isinstance(p, AdaptiveDraftPolicy)
    assert (p.decay, p.warmup_steps, p.off_patience, p.adapt_steps) == (0.5, 4, 5, False)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("draft_policy", "auto", "draft_policy must be one of"),
        ("adaptive_ema", 0.0, "adaptive_ema must be a number in"),
        ("adaptive_ema", True, "adaptive_ema must be a number in"),
        ("adaptive_warmup_steps", 0, "adaptive_warmup_steps must be"),
        ("adaptive_off_patience", 1.5, "adaptive_off_patience must be an int"),
        ("draft_sampling", 1, "draft_sampling must be a bool"),
    ],
)
def test_bad_policy_settings_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig(**{field: value})


def test_settings_that_do_not_fit_together_are_refused():
    with pytest.raises(
        ValueError, match=r"draft_policy='adaptive' needs a draft model \(method 'mtp'"
    ):
        SpeculativeConfig(method="ngram", draft_policy="adaptive")
    with pytest.raises(ValueError, match="needs verification='rejection'"):
        SpeculativeConfig(draft_sampling=True)
    with pytest.raises(ValueError, match="without the n-gram extension"):
        SpeculativeConfig(
            num_speculative_tokens=3,
            mtp_strategy="with_ngram",
            verification="rejection",
            draft_sampling=True,
        )
    assert SpeculativeConfig.from_value(
        {"method": "mtp", "verification": "rejection", "draft_sampling": True}
    ).draft_sampling


def test_sampling_params_max_draft_tokens():
    assert SamplingParams().max_draft_tokens is None
    assert SamplingParams(max_draft_tokens=0).max_draft_tokens == 0
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match="SamplingParams.max_draft_tokens"):
            SamplingParams(max_draft_tokens=bad)


# -- robustness on a noisy machine (the policy's defaults, an injected clock) -------------------


class Clock:
    """A clock the test advances: the policy's ``clock`` (what the runner times steps with)."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def simulate(
    p,
    steps,
    *,
    B=8,
    accept=0.7,
    alpha=0.010,
    beta=0.0002,
    substep=0.001,
    fixed=0.0002,
    slow=(),
    seed=0,
):
    """Drive ``p`` like the speculative runner does, on a simulated engine: step i feeds each
    decoding slot 1 + its cap, runs the plan's substeps (none when every slot is off), and
    takes ``alpha + beta * tokens`` (target) plus ``fixed + substeps * substep`` (proposer)
    seconds of ``p.clock``; a step in ``slow`` takes 10x as long. Draft acceptance comes from a
    table drawn once (the same draws whatever the plans). Returns the plans."""
    clock = p.clock
    draws = np.random.default_rng(seed).random((steps, B, p.K)) < accept
    decoding = np.ones(B, bool)
    for b in range(B):
        p.start(b, None)
    plans = []
    for i in range(steps):
        plan = p.plan(decoding)
        plans.append(plan)
        caps = plan.caps
        factor = 10.0 if i in slow else 1.0
        t0 = clock()
        target = factor * (alpha + beta * float((1 + caps).sum()))
        runs = not p.off.all()
        proposer = factor * (fixed + plan.num_steps * substep) if runs else 0.0
        clock.now += target + proposer
        p.observe_costs(
            tokens=int((1 + caps).sum()),
            target_seconds=clock() - t0 - proposer,
            substeps=plan.num_steps if runs else 0,
            forward_seconds=factor * plan.num_steps * substep if runs else 0.0,
            proposer_seconds=proposer,
        )
        # accepted drafts: the leading run of True draws among the slot's cap
        run = np.cumprod(draws[i], axis=1).sum(axis=1)
        slots = np.flatnonzero(~p.off)
        p.observe_batch(slots, caps[slots], 1 + np.minimum(run[slots], caps[slots]))
    return plans


def test_window_medians_ignore_a_single_slow_step():
    m = StepCostModel(window=8)
    for i in range(12):
        m.observe_target(8, 0.010 if i != 6 else 0.100)  # one 10x-slow step
        m.observe_target(32, 0.016)
        m.observe_proposer(2, 0.002 if i != 6 else 0.020, 0.0025 if i != 6 else 0.025)
    assert m.target_time(8) == pytest.approx(0.010) and m.target_time(32) == pytest.approx(0.016)
    assert m.substep == pytest.approx(0.001) and m.fixed == pytest.approx(0.0005)
    # the target's cost grows with the fed tokens: a line through the per-count medians
    assert m.per_token == pytest.approx(0.006 / 24)
    n, t, c = m.points()
    assert n.tolist() == [8, 32] and c.tolist() == [8, 8]


def test_measurements_age_out_and_the_plain_step_is_reprobed_on_a_schedule():
    clock = Clock()
    p = AdaptiveDraftPolicy(8, 3, 3, clock=clock, max_age=64)
    assert p.clock is clock and p.costs.max_age == 64
    plans = simulate(p, 300, accept=0.8, substep=0.0002)
    probe = [i for i, pl in enumerate(plans) if i > 2 and not pl.caps.any()]
    # probes of probe_steps (3) steps each, once the plain anchor aged out (every ~64 steps)
    assert len(probe) >= 9 and len(probe) <= 3 * (300 // 50)
    starts = [i for i in probe if i - 1 not in probe]
    assert all(45 <= b - a <= 70 for a, b in zip(starts, starts[1:])), starts
    assert not p.off.any() and not p.metrics.off_reasons
    # between probes speculation runs at (nearly) the full K (cheap, well accepted drafts)
    assert np.mean([pl.caps.mean() for i, pl in enumerate(plans) if i not in probe]) > 2.7


def test_a_single_10x_slow_step_changes_nothing_beyond_the_window():
    base = simulate(AdaptiveDraftPolicy(8, 3, 3, clock=Clock()), 200)
    p = AdaptiveDraftPolicy(8, 3, 3, clock=Clock())
    noisy = simulate(p, 200, slow={120})
    changed = [i for i, (a, b) in enumerate(zip(base, noisy)) if a.caps.tolist() != b.caps.tolist()]
    assert len(changed) <= p.window, changed
    assert [pl.num_steps for pl in base] == [pl.num_steps for pl in noisy]
    assert not p.off.any() and not p.metrics.off_reasons and not any(pl.drop for pl in noisy)
    # a slow step in every window would still be outvoted by the medians
    p = AdaptiveDraftPolicy(8, 3, 3, clock=Clock())
    simulate(p, 200, slow=set(range(50, 200, 8)))
    assert not p.off.any() and not p.metrics.off_reasons


def test_a_genuinely_expensive_draft_switches_speculation_off_after_windows_of_evidence():
    p = AdaptiveDraftPolicy(8, 3, 3, clock=Clock())
    plans = simulate(p, 80, substep=0.030)  # a substep costs 3x the target step
    first = next(i for i, pl in enumerate(plans) if pl.drop)
    assert {r for _, r in plans[first].drop} == {"batch_cost"} and len(plans[first].drop) == 8
    # not before off_windows windows of losing steps (after the probe), nor much later
    assert p.off_windows * p.window <= first <= p.off_windows * p.window + 10
    assert p.off.all() and p.gate_closed and p.metrics.off_reasons == {"batch_cost": 8}
    # meanwhile at most one draft per slot was verified once plain decoding was judged faster
    assert all(pl.caps.max() <= 1 for pl in plans[p.warmup_steps + p.probe_steps :])
    assert all(not pl.caps.any() for pl in plans[first:])
