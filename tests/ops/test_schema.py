"""Every layer of an op has the signature its schema (fd_mtp/schema) declares: the Paddle wrapper
(fd_mtp.ops), the numpy reference (fd_mtp.reference) and the CuPy wrapper (fd_mtp.cuda). The C++
entry points are generated from the same schema (cmake/gen_ops.py), so a drift cannot compile."""

import importlib
import inspect

import pytest

from fd_mtp import schema

LAYERS = ("fd_mtp.ops", "fd_mtp.reference", "fd_mtp.cuda")
OPS = sorted(schema.all_ops())


def _signature(fn):
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = {p.name: p.default for p in params if p.kind == p.KEYWORD_ONLY}
    return positional, keyword


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("name", OPS)
def test_layer_signature_equals_schema(layer, name):
    module = importlib.import_module(layer)
    fn = getattr(module, name, None)
    if fn is None:
        allowed = (layer == "fd_mtp.cuda" and name in CPU_ONLY) or (
            layer == "fd_mtp.reference" and name in NO_REFERENCE
        )
        assert allowed, f"{layer} has no {name}"
        return
    positional, keyword = _signature(fn)
    want_positional, want_keyword = schema.python_signature(schema.get(name))
    assert positional == want_positional, (
        f"{layer}.{name} positional parameters differ from the schema"
    )
    assert set(keyword) == want_keyword, (
        f"{layer}.{name} keyword-only parameters differ from the schema"
    )
    defaults = {k: v for k, v in keyword.items() if v is not None}
    assert not defaults, (
        f"{layer}.{name}: keyword-only defaults must be None (resolved by the schema): {defaults}"
    )


# Ops with no CUDA wrapper (host-only by nature).
CPU_ONLY = {
    "speculate_save_output",
    "speculate_get_output",
    "mtp_save_first_token",
    "paged_attention",
    "shared_empty",
}
# Ops with no numpy reference: they move no data (shared-memory and CUDA IPC plumbing).
NO_REFERENCE = {"shared_empty", "set_data_ipc", "share_external_data", "unset_data_ipc"}


def test_every_schema_is_well_formed():
    for op in schema.all_ops().values():
        names = [a.name for a in op.args]
        assert len(names) == len(set(names)), op.name
        if op.batch is not None:
            assert op.arg(op.batch).dims is not None, op.name
        positional_after_kw = [
            a.name for i, a in enumerate(op.args) if not a.kw and any(b.kw for b in op.args[:i])
        ]
        assert not positional_after_kw, f"{op.name}: positional arguments after keyword-only ones"
        for s in op.status:
            assert s.argument in names or s.argument in {"input", "seq_lens"}, (op.name, s.argument)


@pytest.mark.parametrize("name", OPS)
def test_env_defaults_agree(name, monkeypatch):
    """A keyword attribute left at None resolves from its variable, the same in every layer."""
    op = schema.get(name)
    for attr in op.attrs:
        if attr.env is None:
            continue
        monkeypatch.setenv(attr.env, "1")
        on = schema.resolve_kw(name, attr.name, None)
        monkeypatch.setenv(attr.env, "0")
        off = schema.resolve_kw(name, attr.name, None)
        assert on != off, f"{name}.{attr.name} ignores {attr.env}"
