"""The profiler's instruments for benchmarks/bench_profile.py: the categories a step is split into,
the exclusive-time timers patched around the model, engine, proposer and ops functions
(`install_timers`), and the op / host-copy counter run under ``sys.setprofile`` (`OpCounter`)."""

from __future__ import annotations

import functools
import time
from collections import defaultdict

import numpy as np

MODEL_SCOPES = ("target", "mtp")
CATEGORIES = (
    "native_layer",
    "matmul",
    "lm_head",
    "attention",
    "attn_metadata",
    "norm",
    "rope",
    "mlp_act",
    "moe_routing",
    "mtp_project",
    "layer_other",
    "model_other",
)
HOST_CATEGORIES = (
    "sampling",
    "spec_ops",
    "transfers",
    "proposer",
    "runner",
    "engine",
    "detokenize",
)


# --------------------------------------------------------------------------------- timers
class StepTimers:
    """Exclusive-time timers around named functions (patched in place, restored by `restore`)."""

    def __init__(self):
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self._stack: list[float] = []
        self._scope = "host"
        self._patched: list[tuple[object, str, object]] = []
        self.work = defaultdict(float)  # tokens / logit rows / attention context per scope

    def _wrap(self, fn, category: str, scope: str | None = None, account=None):
        timers = self

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if account is not None:
                account(timers, *args, **kwargs)
            outer = timers._scope
            if scope is not None and outer not in MODEL_SCOPES:
                timers._scope = scope
            timers._stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                child = timers._stack.pop()
                cat = category
                if timers._scope not in MODEL_SCOPES and category in CATEGORIES:
                    cat = "spec_ops"  # a model helper called outside a forward (e.g. an op)
                if category == "attention" and timers._scope not in MODEL_SCOPES:
                    cat = "spec_ops"
                key = (timers._scope if timers._scope in MODEL_SCOPES else "host", cat)
                timers.totals[key] += dt - child
                timers.calls[key] += 1
                if timers._stack:
                    timers._stack[-1] += dt
                timers._scope = outer

        return timed

    def patch(self, owner, name: str, category: str, scope: str | None = None, account=None):
        """Time ``owner.name`` (a class or module attribute) if it exists; False otherwise."""
        fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if fn is None or not callable(fn):
            return False
        self._patched.append((owner, name, fn))
        setattr(owner, name, self._wrap(fn, category, scope, account))
        return True

    def restore(self):
        for owner, name, fn in reversed(self._patched):
            setattr(owner, name, fn)
        self._patched.clear()


def _account_forward(scope):
    """Records the tokens a forward feeds and the attention context they read (for the floor)."""

    def account(timers, *args, **kwargs):
        meta = args[-1] if args else kwargs.get("meta")
        try:
            this_time = meta.seq_lens_this_time.numpy().reshape(-1).astype(np.int64)
            dec = meta.seq_lens_decoder.numpy().reshape(-1).astype(np.int64)
        except AttributeError:
            return
        n = this_time[this_time > 0]
        d = dec[this_time > 0]
        timers.work[(scope, "tokens")] += float(n.sum())
        # token i of a request attends over dec + i + 1 positions
        timers.work[(scope, "context")] += float((n * d + n * (n + 1) / 2).sum())
        timers.work[(scope, "forwards")] += 1

    return account


def _account_logits(scope):
    def account(timers, *args, **kwargs):
        hidden = args[-1] if args else kwargs.get("hidden")
        scope_now = timers._scope if timers._scope in MODEL_SCOPES else scope
        timers.work[(scope_now, "logit_rows")] += float(hidden.shape[0])

    return account


def install_timers() -> StepTimers:
    """Patches the model, engine, proposer and ops functions the profile splits the step into."""
    import fd_mtp.ops as ops
    from fd_mtp.engine import engine as engine_mod
    from fd_mtp.engine import runner as runner_mod
    from fd_mtp.engine import sampler as sampler_mod
    from fd_mtp.engine import spec_runner as spec_mod
    from fd_mtp.model import attention, ernie, ernie_layers, native

    t = StepTimers()
    t.patch(native, "decoder_layer", "native_layer")
    t.patch(native, "rope_tables", "rope")
    t.patch(ernie, "_mm", "matmul")  # the MTP block's eh_proj
    t.patch(ernie_layers, "_mm", "matmul")  # the layers' projections
    t.patch(ernie_layers, "_row_parallel", "matmul")
    t.patch(ernie.RMSNorm, "forward", "norm")
    t.patch(ernie.RMSNorm, "fused_add", "norm")
    t.patch(attention.Rope, "__init__", "rope")
    t.patch(attention.Rope, "apply", "rope")
    for cls in (attention.AttentionBackend, attention.PagedAttentionCPU):
        t.patch(cls, "rope", "rope")
        t.patch(cls, "forward", "attention")
        t.patch(cls, "init_attention_metadata", "attn_metadata")
    t.patch(ernie.Ernie4_5MoE, "route", "moe_routing")
    t.patch(ernie.Ernie4_5MLP, "forward", "mlp_act")
    t.patch(ernie.Ernie4_5DecoderLayer, "forward", "layer_other")
    t.patch(ernie.LMHead, "forward", "lm_head")
    t.patch(
        ernie.Ernie4_5ForCausalLM, "forward", "model_other", "target", _account_forward("target")
    )
    t.patch(
        ernie.Ernie4_5ForCausalLM,
        "compute_logits",
        "lm_head",
        "target",
        _account_logits("target"),
    )
    t.patch(ernie.Ernie4_5MTP, "forward", "model_other", "mtp", _account_forward("mtp"))
    t.patch(ernie.Ernie4_5MTP, "compute_logits", "lm_head", "mtp", _account_logits("mtp"))
    t.patch(ernie.Ernie4_5MTP, "_project", "mtp_project")
    for name in dir(sampler_mod.Sampler):
        if not name.startswith("__") or name == "__call__":
            if callable(getattr(sampler_mod.Sampler, name, None)):
                t.patch(sampler_mod.Sampler, name, "sampling")
    for name in ("uniforms", "token_logprobs", "logprob_entries"):
        for mod in (sampler_mod, runner_mod, spec_mod):
            t.patch(mod, name, "sampling")
    for name in getattr(ops, "__all__", []):
        fn = getattr(ops, name, None)
        if callable(fn) and not isinstance(fn, type):
            t.patch(ops, name, "attention" if name == "paged_attention" else "spec_ops")
    from fd_mtp.batch import input_batch

    t.patch(input_batch.InputBatch, "push", "transfers")
    t.patch(input_batch.InputBatch, "pull", "transfers")
    try:
        from fd_mtp.proposer import mtp as mtp_mod

        for name, fn in list(vars(mtp_mod.MTPProposer).items()):
            if callable(fn) and not name.startswith("__"):
                t.patch(mtp_mod.MTPProposer, name, "proposer")
    except ImportError:
        pass
    for cls in (runner_mod.ModelRunner, spec_mod.SpeculativeModelRunner):
        for name, fn in list(vars(cls).items()):
            if callable(fn) and not name.startswith("__"):
                t.patch(cls, name, "runner")
    for name, fn in list(vars(engine_mod.LLMEngine).items()):
        if callable(fn) and not name.startswith("__"):
            t.patch(engine_mod.LLMEngine, name, "engine")
    try:
        from fd_mtp.engine import detokenizer

        for name in ("update", "finish"):
            t.patch(detokenizer.IncrementalDetokenizer, name, "detokenize")
    except ImportError:
        pass
    return t


# --------------------------------------------------------------------------------- counting
# Tensor operators: each dispatches a framework op, but as a C slot that sys.setprofile does not
# see, so the counting pass wraps them (`OpCounter.patch_operators`)
_TENSOR_OPS = frozenset(
    f"__{n}__"
    for n in (
        "add radd sub rsub mul rmul truediv rtruediv floordiv mod pow rpow neg abs matmul "
        "lt le gt ge eq ne and or xor invert getitem setitem"
    ).split()
)


class OpCounter:
    """Counts framework op dispatches and host copies under ``sys.setprofile``."""

    def __init__(self):
        self.ops = 0
        self.to_tensor = 0
        self.to_host = 0
        self.by_name: dict[str, int] = defaultdict(int)

    def patch_operators(self):
        """Wraps paddle.Tensor's operators to count them; returns the restore function."""
        import paddle

        saved = {}
        for name in _TENSOR_OPS:
            fn = getattr(paddle.Tensor, name, None)
            if fn is None:
                continue
            saved[name] = fn

            def counted(*args, _fn=fn, _name=name, **kwargs):
                self.ops += 1
                self.by_name[_name] += 1
                return _fn(*args, **kwargs)

            setattr(paddle.Tensor, name, counted)

        def restore():
            for name, fn in saved.items():
                setattr(paddle.Tensor, name, fn)

        return restore

    def __call__(self, frame, event, arg):
        if event == "c_call":
            mod = getattr(arg, "__module__", None) or ""
            name = getattr(arg, "__name__", "")
            owner = type(getattr(arg, "__self__", None)).__name__
            if (
                mod.startswith("paddle.base.libpaddle") or "fd_mtp_ops_pybind" in mod
            ) and not name.startswith(("_", "is_")):  # place / grad-flag queries are no ops
                self.ops += 1
                self.by_name[name] += 1
            elif owner == "Tensor" and name in ("numpy", "tolist", "item", "__array__"):
                self.to_host += 1
        elif event == "call" and frame.f_code.co_name == "to_tensor":
            self.to_tensor += 1
