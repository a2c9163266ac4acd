"""One declaration per op: the schema every layer of an op follows.

An op is declared once, in ``fd_mtp/schema/<family>.py``, as an `Op` of `Tensor` and `Attr`
arguments (FastDeploy's positional order, then the keyword-only extras) and `Status` codes. From
it:

* the build generates the Paddle binding of the op (``cmake/gen_ops.py``): the entry point with
  every dtype / rank / shape / place / contiguity check, the kernel's Params struct filled from the
  checked tensors, ``PD_BUILD_OP`` with ``SetInplaceMap``, the pybind11 entry and the status
  table. What stays hand-written is ``<op>_apply(Args&, Params&)`` in ``custom_ops/paddle/<op>.cc``:
  checks no schema can express, then the CPU / CUDA dispatch;
* ``fd_mtp.ops`` orders, converts and range-checks the arguments for the compiled op (`invoke`),
  resolving keyword-only defaults from the environment (``fd_mtp.envs``);
* ``fd_mtp.cuda`` checks CuPy arrays with the same rules (`check_arrays`) and formats kernel
  statuses with the same table;
* tests prove that ``fd_mtp.ops``, ``fd_mtp.reference`` and ``fd_mtp.cuda`` have the schema's
  Python signature (tests/ops/test_schema.py).

Tensor specs are strings ``"<dtype>[<dims>]"``:

* dtype: ``int64``, ``int32``, ``bool``, ``float32``, ``uint8``; ``float32|float16|bfloat16``
  for any of several; ``any`` for no dtype check;
* dims: ``[]`` any shape (only the dtype is checked); ``[1]`` exactly one element; ``[>=1]`` at
  least one element, any shape; ``[B]`` the batch-defining vector (``Op.batch``; ``[n]`` or
  ``[n, 1]``); ``[>=B]`` a per-request vector of at least ``B`` entries (``[n]`` or ``[n, 1]``);
  ``[N]`` (another name) a vector whose length is bound to ``N``; ``[>=B, W]`` a per-request
  matrix whose column count is bound to ``W``; ``[T, C]`` a matrix whose dims are bound to (or
  must equal earlier bindings of) ``T`` and ``C``. A name first bound on axis 1 or later must be
  at least 1 (``W>=k``: at least k); axis 0 may be empty.

A name bound by one tensor and used by a later one must agree ("must have C columns, got ...").
Named dims are available to the Params fill and to the hand-written apply as ``a.dims.<name>``.
A ``count`` tensor (``Tensor(..., count="T")``) binds the dim ``T`` to its value, read on the
host (a token count that sizes an output).

Returned tensors are declared as `Out` (``Op.outputs``): a dtype and dims that are named dims,
``<dim> + <int>`` or ints (``"int32[B + 1]"``); the binding allocates them on the op's place
(zero-filled with ``fill=0``), hands their data pointers to the Params and returns them, and
the shape inference of the registered op is derived from the same dims (a dim read on the host
is unknown there: -1). `Rows` declares outputs whose rows are data (a shape op: counted on the
CPU, counted on the device and read back on a GPU; fd_mtp.cuda's ``padded=True`` keeps them at a
capacity). The batch tensor may be ``[B+1]`` (``cu_seqlens_q``: ``[bsz + 1]``); an `Attr` with
``given`` defaults to whether an optional tensor is given. `Together` declares optional tensors
given all together or none, a rule the generated binding, fd_mtp.cuda and the numpy reference
check with one message (`check_together`).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from functools import cached_property

from ._flags import (
    FLAG_COMPARES,
    DeviceFlag,
    device_flag,
    flag_value,
    host_reads,
    required,
)
from ._rules import Check, Together, check_rules, check_together, expr_value

__all__ = [
    "FLAG_COMPARES",
    "CallCounter",
    "choice_code",
    "has_python_side",
    "prepare_call",
    "Attr",
    "Check",
    "Dim",
    "Op",
    "Out",
    "Together",
    "Workspace",
    "Require",
    "Rows",
    "Status",
    "Tensor",
    "all_ops",
    "check_rules",
    "check_together",
    "expr_value",
    "DeviceFlag",
    "define_wrapper",
    "device_flag",
    "family_ops",
    "flag_value",
    "host_reads",
    "required",
    "get",
    "python_signature",
    "resolve_kw",
]

DTYPES = {
    "int64": "INT64",
    "int32": "INT32",
    "bool": "BOOL",
    "float32": "FLOAT32",
    "float16": "FLOAT16",
    "bfloat16": "BFLOAT16",
    "uint8": "UINT8",
    "any": None,  # any dtype (e.g. an argument accepted only for FastDeploy's signature)
}
ATTR_TYPES = {"int", "int64", "bool", "float", "str", "int64[]"}
ROLES = {"read", "written", "unused"}


@dataclass(frozen=True)
class Dim:
    """One axis of a tensor spec: ``name`` (bound or compared), ``at_least`` (a lower bound),
    ``lower_name`` (``>=B``: at least the value bound to that name)."""

    name: str | None = None
    at_least: int | None = None
    lower_name: str | None = None
    add: int = 0  # the batch tensor's ``[B+1]``: B is its length less ``add``


@dataclass(frozen=True)
class Tensor:
    """A tensor argument. ``role``: read / written (in place: ``SetInplaceMap``) / unused (still
    checked: FastDeploy passes it). ``optional``: may be None (``paddle::Optional``). ``cpu``: must
    live on the CPU (e.g. ``not_need_stop``); ``any_place``: on any device (e.g. a count the binding
    reads on the host); otherwise on the op's place (its first tensor's, or ``Op.place``).
    ``param``: the kernel Params field taking its data pointer (None: filled by
    hand; a tensor of several dtypes hands ``void*``). ``kw``: keyword-only in Python.
    ``count``: a token count read on the host into that dim; ``same_dtype``: must have the dtype
    of that tensor (checked after every tensor's own checks)."""

    name: str
    spec: str
    role: str = "read"
    optional: bool = False
    cpu: bool = False
    any_place: bool = False
    param: str | None = ""
    kw: bool = False
    doc: str = ""
    count: str | None = None
    same_dtype: str | None = None
    only_if: str | None = None  # see _calls.prepare_call: the wrappers pass None otherwise
    contiguous_copy: bool = False  # fd_mtp.ops copies a strided view (see _calls.prepare_call)

    def __post_init__(self):
        if self.count is not None and (self.spec.replace(" ", "") != "int64|int32[1]"):
            raise ValueError(f"{self.name}: a count tensor must be 'int64|int32[1]'")
        if self.cpu and self.any_place:
            raise ValueError(f"{self.name}: cpu and any_place exclude each other")
        if self.role not in ROLES:
            raise ValueError(f"{self.name}: role must be one of {sorted(ROLES)}, got {self.role!r}")
        m = re.fullmatch(r"([a-z0-9|]+)\[(.*)\]", self.spec.replace(" ", ""))
        if m is None:
            raise ValueError(f"{self.name}: tensor spec {self.spec!r} is not '<dtype>[<dims>]'")
        for dt in m.group(1).split("|"):
            if dt not in DTYPES:
                raise ValueError(f"{self.name}: unknown dtype {dt!r}")
        if self.param == "":
            object.__setattr__(self, "param", self.name)

    # The parsed spec is cached on the (frozen) instance: fd_mtp.cuda checks every call with it.
    @cached_property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(self.spec.replace(" ", "").split("[", 1)[0].split("|"))

    @cached_property
    def dims(self) -> tuple[Dim, ...] | None:
        """None: any shape; () : exactly one element (``[1]``) is ``(Dim(at_least=None, name='1'),)``."""
        body = self.spec.replace(" ", "").split("[", 1)[1][:-1]
        if body == "":
            return None
        out = []
        for part in body.split(","):
            if part.startswith(">="):
                rest = part[2:]
                if rest.isdigit():
                    out.append(Dim(at_least=int(rest)))
                else:
                    out.append(Dim(lower_name=rest))
            elif ">=" in part:
                name, low = part.split(">=")
                out.append(Dim(name=name, at_least=int(low)))
            elif "+" in part:  # the batch tensor's [B+<int>] (cu_seqlens_q: [bsz + 1])
                name, add = part.split("+")
                out.append(Dim(name=name, add=int(add)))
            else:
                out.append(Dim(name=part))
        return tuple(out)


@dataclass(frozen=True)
class Attr:
    """A scalar attribute. ``min`` / ``max``: an inclusive range checked in Python and C++.
    ``kw``: keyword-only in Python; ``env``: the ``fd_mtp.envs`` variable a None resolves from;
    ``resolve``: ``"<module>:<function>"`` mapping the given value (None included) to the op's,
    for a default no variable alone gives (a checked environment id, a path); ``py``: its Python
    name when it differs (the wrapper converts); ``param``: the Params field (None: filled by
    hand); ``given``: a bool left at None becomes whether that optional tensor is given
    (`prepare_call`, in Python: paddle hands a zero-size tensor to the op as none)."""

    name: str
    type: str
    min: int | float | None = None
    max: int | float | None = None
    kw: bool = False
    env: str | None = None
    resolve: str | None = None
    py: str | None = None
    param: str | None = ""
    doc: str = ""
    given: str | None = None
    choices: tuple = ()  # see _calls.prepare_call (names for the codes 0, 1, ...)
    env_choices: tuple = ()
    counter: bool = False
    default: str | None = None  # None resolves to this expression (see _calls.prepare_call)

    def __post_init__(self):
        if self.type not in ATTR_TYPES:
            raise ValueError(f"{self.name}: attribute type must be one of {sorted(ATTR_TYPES)}")
        if self.param == "":
            object.__setattr__(self, "param", self.name)

    @property
    def python_name(self) -> str:
        return self.py or self.name


@dataclass(frozen=True)
class Status:
    """A kernel status code (the constant's name in custom_ops/kernels) and the message raised for
    it: ``"<op>: (request b) <argument> <what>"`` with ``{value}`` and ``{limit}`` filled in."""

    code: str
    number: int
    argument: str
    what: str


@dataclass(frozen=True)
class Out:
    """A tensor the op returns: ``spec`` ``"<dtype>[<dims>]"`` with one dtype and dims that are
    named dims of the inputs (``B``, a count's ``T``), ``<dim> + <int>`` or ints; ``fill``: 0
    for a zero-filled output (entries the kernel may leave alone), None for uninitialised;
    ``param``: the kernel Params field taking its data pointer; ``like``: the input tensor whose
    dtype it has (spec dtype ``any``; a ``void*`` Params field). Dims may also name attributes."""

    name: str
    spec: str
    fill: int | None = None
    param: str | None = ""
    like: str | None = None
    doc: str = ""

    def __post_init__(self):
        m = re.fullmatch(r"([a-z0-9]+)\[(.*)\]", self.spec.replace(" ", ""))
        if (
            m is None
            or m.group(1) not in DTYPES
            or (m.group(1) == "any") != (self.like is not None)
        ):
            raise ValueError(f"{self.name}: output spec {self.spec!r} is not '<dtype>[<dims>]'")
        for term in self.dims:
            if term[0] is None and term[1] < 0:
                raise ValueError(f"{self.name}: a literal dim must be >= 0")
        if self.param == "":
            object.__setattr__(self, "param", self.name)

    @property
    def dtype(self) -> str:
        return self.spec.replace(" ", "").split("[", 1)[0]

    @cached_property
    def dims(self) -> tuple[tuple[str | None, int], ...]:
        """One ``(name, add)`` per axis: the named dim plus ``add`` (name None: the int ``add``)."""
        body = self.spec.replace(" ", "").split("[", 1)[1][:-1]
        out = []
        for part in body.split(","):
            m = re.fullmatch(r"([A-Za-z_]\w*)(?:\+(\d+))?|(\d+)", part)
            if m is None:
                raise ValueError(f"{self.name}: output dim {part!r} is not <dim>[+<int>] or <int>")
            if m.group(3) is not None:
                out.append((None, int(m.group(3))))
            else:
                out.append((m.group(1), int(m.group(2) or 0)))
        return tuple(out)

    def shape(self, dims: dict) -> tuple[int, ...]:
        """The output's shape for the named dims (and attributes) of a call."""
        return tuple(add if name is None else dims[name] + add for name, add in self.dims)


@dataclass(frozen=True)
class Workspace:
    """A kernel workspace, never an argument: the Params field ``param`` points at ``spec``'s
    entries (``"<dtype>[<dim>]"``, one axis: a named dim, at least one entry allocated). On the
    GPU it is persistent per stream (the buffer ``key``, reallocated only when it grows;
    ``zero``: zeroed then, for a kernel that leaves it zero); on the CPU a per-call vector.
    ``size``: its entries as an expression instead of a dim (spec ``"<dtype>[]"``); ``cpu``:
    the CPU driver uses it too (False: the field stays null on the CPU)."""

    param: str
    spec: str
    key: str
    zero: bool = False
    size: str | None = None
    cpu: bool = True

    def __post_init__(self):
        m = re.fullmatch(r"([a-z0-9]+)\[([A-Za-z_]\w*)?\]", self.spec.replace(" ", ""))
        if m is None or m.group(1) not in DTYPES or m.group(1) == "any":
            raise ValueError(f"workspace {self.param}: spec {self.spec!r} is not '<dtype>[<dim>]'")
        if (m.group(2) is None) == (self.size is None):
            raise ValueError(f"workspace {self.param}: give a dim ('<dtype>[<dim>]') or size=")

    @property
    def dtype(self) -> str:
        return self.spec.replace(" ", "").split("[", 1)[0]

    @property
    def count(self) -> str:
        """Its number of entries, an expression (`Check`'s language): ``dims.<dim>`` or ``size``."""
        dim = self.spec.replace(" ", "").split("[", 1)[1][:-1]
        return f"dims.{dim}" if dim else self.size


@dataclass(frozen=True)
class Rows:
    """The leading dim ``dim`` of the returned tensors (`Out` specs name it) when it is data, as
    in FastDeploy's shape ops: the kernel header's ``<op>_rows_cpu(const Params&, int64_t*
    rows)`` counts (and checks) on the CPU; on a GPU the launcher ``<op>_rows_cuda(const Params&,
    KernelStatus*, int64_t* rows, cudaStream_t)`` counts on the device and the binding reads the
    count back (one synchronisation), then allocates the outputs and runs the op's own launcher
    ``(const Params&, const KernelStatus* preset, cudaStream_t)``. The count goes to the Params
    field ``param`` before the outputs are written. ``when``: an expression of the attributes
    (`Check`'s language) under which the rows are data; otherwise they are the dim ``otherwise``
    (host-known: no count). ``capacity``: the dim of fd_mtp.cuda's fixed-capacity variant
    (``padded=True``: outputs of ``capacity`` rows, nothing read on the host; the count stays on
    the device, its address in the Params field ``live``, rows past it zero)."""

    dim: str
    param: str
    capacity: str | None = None
    live: str | None = None
    when: str | None = None
    otherwise: str | None = None

    def __post_init__(self):
        if (self.capacity is None) != (self.live is None):
            raise ValueError(f"rows {self.dim}: capacity and live go together")
        if (self.when is None) != (self.otherwise is None):
            raise ValueError(f"rows {self.dim}: when and otherwise go together")


@dataclass(frozen=True)
class Require:
    """A rule between a named dim and the attributes: ``dims.<dim> >= <at_least>`` (an
    expression of integer attributes, e.g. ``"substep + 2"``), refused naming ``tensor``."""

    tensor: str
    dim: str
    at_least: str


@dataclass(frozen=True)
class Op:
    """One op. ``args``: tensors and attributes in FastDeploy's positional order (keyword-only
    extras last); the compiled op takes every tensor, then every attribute, in this order.
    ``batch``: the tensor whose length is ``B``. ``kernel``: the kernel header
    (custom_ops/kernels/<kernel>.h) and ``params``: its Params struct (None: no generated fill).
    ``extra_params``: Params fields filled from dims or expressions (``{"bsz": "B",
    "num_end_tokens": "numel(end_tokens)"}``). ``returns``: names of returned tensors.

    The standard dispatch (``cpu`` set) is generated for every layer: the CPU driver ``cpu`` of
    the kernel header returns a ``KernelStatus`` (``void`` for ops without statuses) and takes
    ``(const Params&[, int64_t* count])``; the launcher ``launcher_name`` in
    ``custom_ops/cuda/<kernel>.cu`` takes ``(const Params&[, KernelStatus*][, int64_t* count],
    cudaStream_t)``. ``flag``: ``(tensor, expression)``, a one-element bool tensor the binding
    sets on the host from the driver's ``count`` (names in the expression: ``count``,
    ``dims.<dim>``, ``p.<Params field>``, ``host.<tensor>``: a one-element int64 tensor read on
    the host). ``check``: the op also has a hand-written ``<op>_check(Args&, Params&)`` (checks
    no schema expresses), run before the dispatch. ``requires``: `Require` rules (a named dim at
    least an expression of attributes). ``cuda``: the kernel has a CUDA launcher file.
    ``doc``: the Python wrapper's docstring (generated wrappers; hand-written wrappers keep
    their own). ``outputs``: `Out` declarations of the returned tensors (``returns`` is then
    derived from them); ``together``: `Together` rules; ``checks``: `Check` rules;
    ``workspaces``: `Workspace` declarations. ``skip``: an expression (`Check`'s language) under
    which the op does nothing (no kernel runs, e.g. ``dims.T == 0``); ``result``: the argument the
    Python wrappers return (an in-place op whose FastDeploy wrapper returns its tensor)."""

    name: str
    entry: str
    spec: str
    args: tuple
    batch: str | None = None
    kernel: str | None = None
    params: str | None = None
    extra_params: dict = field(default_factory=dict)
    status: tuple = ()
    returns: tuple = ()
    place: str | None = None
    cpu: str | None = None
    launcher: str | None = None
    flag: tuple | None = None
    check: bool = False
    requires: tuple = ()
    cuda: bool = True
    doc: str = ""
    outputs: tuple = ()
    together: tuple = ()
    checks: tuple = ()
    workspaces: tuple = ()
    skip: str | None = None
    result: str | None = None
    rows: Rows | None = None
    python_checks: tuple = ()  # see _calls.prepare_call
    # named dims computed from the others (schema expressions, e.g. {"HqD": "dims.Hq * dims.D"}),
    # after the Check rules: usable in Out specs and Params fields like any named dim
    computed_dims: dict = field(default_factory=dict)
    # a host op's (cuda=False) Params fields the binding fills from C++ host helpers (C++
    # expressions of a.<argument>, e.g. {"pool": "cpu_pool(a.num_threads)"}) and their headers
    host_params: dict = field(default_factory=dict)
    host_includes: tuple = ()

    def __post_init__(self):
        if self.outputs:
            names = tuple(o.name for o in self.outputs)
            if self.returns and self.returns != names:
                raise ValueError(f"{self.name}: returns and outputs name different tensors")
            object.__setattr__(self, "returns", names)
            if self.cpu is None:
                raise ValueError(f"{self.name}: outputs need the standard dispatch (cpu=)")
        for group in self.together:
            for name in group.tensors:
                t = next((a for a in self.args if a.name == name), None)
                if not isinstance(t, Tensor) or not t.optional:
                    raise ValueError(f"{self.name}: together names {name!r}, no optional tensor")
        if self.flag is not None and (self.cpu is None or not self.status):
            raise ValueError(f"{self.name}: flag needs the standard dispatch (cpu=) and statuses")
        if self.launcher is not None and self.cpu is None:
            raise ValueError(f"{self.name}: launcher is only for the standard dispatch (cpu=)")
        if self.rows is not None and (not self.outputs or not self.status or self.flag):
            raise ValueError(f"{self.name}: rows need outputs and statuses, and no flag")

    @property
    def generated_dispatch(self) -> bool:
        """True when the build generates the op's CPU / CUDA dispatch (``cpu`` is set)."""
        return self.cpu is not None

    @property
    def launcher_name(self) -> str:
        """The CUDA launcher of a standard-dispatch op (``<name>_cuda`` unless ``launcher``)."""
        return self.launcher or f"{self.name}_cuda"

    @property
    def rows_cpu(self) -> str:
        """The kernel header's host count of an op with `Rows` (``<op>_rows_cpu``)."""
        return f"{self.name}_rows_cpu"

    @property
    def rows_launcher(self) -> str:
        """The CUDA launcher counting the rows of an op with `Rows` (``<op>_rows_cuda``)."""
        return f"{self.name}_rows_cuda"

    @property
    def hand_binding(self) -> str | None:
        """The hand-written ``custom_ops/paddle/<file>.cc`` of the op (None: fully generated):
        its ``<op>_apply`` when the dispatch is not generated, or its ``<op>_check`` hook."""
        if self.generated_dispatch and not self.check:
            return None
        return f"custom_ops/paddle/{self.kernel or self.name}.cc"

    @cached_property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(a for a in self.args if isinstance(a, Tensor))

    @cached_property
    def attrs(self) -> tuple[Attr, ...]:
        return tuple(a for a in self.args if isinstance(a, Attr))

    @cached_property
    def check_order(self) -> tuple[Tensor, ...]:
        """The tensors in the order the bindings check them: the batch tensor (which binds
        ``B``) first, then the rest in argument order."""
        if self.batch is None:
            return self.tensors
        first = self.arg(self.batch)
        return (first, *(t for t in self.tensors if t is not first))

    def arg(self, name: str):
        for a in self.args:
            if a.name == name or (isinstance(a, Attr) and a.python_name == name):
                return a
        raise KeyError(f"{self.name} has no argument {name!r}")

    @property
    def place_ref(self) -> str:
        """The tensor whose place every non-CPU tensor must share."""
        if self.place is not None:
            return self.place
        if self.batch is not None:
            return self.batch
        return next(t.name for t in self.tensors if not t.cpu)

    def status_table(self) -> dict[int, tuple[str, str]]:
        """``{code number: (argument, what)}`` for formatting a kernel status."""
        return {s.number: (s.argument, s.what) for s in self.status}

    def format_status(self, code: int, request: int, value: int, limit: int) -> str:
        """The message of a kernel status (as the C++ binding raises it)."""
        where = f"(request {request}) " if request >= 0 else ""
        for s in self.status:
            if s.number == code:
                return f"{self.name}: {s.argument} {where}{s.what.format(value=value, limit=limit)}"
        return f"{self.name}: input is invalid (kernel status {code})"


FAMILIES = (
    "draft",
    "update",
    "blocks",
    "packing",
    "sampling",
    "verify",
    "ngram",
    "ipc",
    "msgqueue",
    "attention",
    "logprobs",
)

_OPS: dict[str, Op] | None = None


def all_ops() -> dict[str, Op]:
    """Every declared op by name (imports the family modules once)."""
    global _OPS
    if _OPS is None:
        ops: dict[str, Op] = {}
        for family in FAMILIES:
            try:
                module = importlib.import_module(f"{__name__}.{family}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{family}":
                    raise
                continue
            for op in module.OPS:
                if op.name in ops:
                    raise ValueError(f"op {op.name} is declared twice")
                ops[op.name] = op
                _FAMILY_OF[op.name] = family
        _OPS = ops
    return _OPS


_FAMILY_OF: dict[str, str] = {}


def family_ops(family: str) -> list[Op]:
    """The ops declared in ``fd_mtp/schema/<family>.py``, in declaration order."""
    ops = all_ops()
    return [op for name, op in ops.items() if _FAMILY_OF[name] == family]


def get(name: str) -> Op:
    return all_ops()[name]


def written_args(name: str) -> tuple[str, ...]:
    """Names of the op's tensors written in place (role "written"), in argument order."""
    return tuple(a.name for a in get(name).args if not isinstance(a, Attr) and a.role == "written")


from ._calls import (  # noqa: E402
    CallCounter,
    choice_code,
    define_wrapper,
    has_python_side,
    prepare_call,
    python_signature,
    resolve_kw,
)
