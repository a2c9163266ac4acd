"""`InputBatch`: the one owner of per-slot state (vLLM's ``gpu_input_batch.InputBatch`` model).

It holds the device tensors (``tensors``: the runner's ``share_inputs``, FastDeploy's dict view
the ops see; a proposer's ``model_inputs`` is registered as a second view of the same owner) and
the host side of the per-slot state:

* **mirrored arrays** (``this_time``, ``enc``, ``dec``, ``step_idx``, ``stop``, ``block_tables``):
  numpy copies of ``seq_lens_this_time``, ``seq_lens_encoder``, ``seq_lens_decoder``,
  ``step_idx``, ``stop_flags`` and ``block_tables``. Between steps they are the truth: the runner
  and the scheduler read and write them; `push` sends what changed, `pull` refreshes them after the
  ops of a step wrote the tensors.
* **staged writes** (`stage` / `writer`): every other host write into a device tensor (a prompt row,
  sampling parameters, a proposer's insertion) is recorded in a numpy array of the tensor's shape
  plus a dirty mask (the last write of an element wins) and sent by the next `push`.
* **host tensors** (`HOST_KEYS`, `register_host`): the tensors FastDeploy keeps on the CPU
  (``not_need_stop``, ``infer_seed``, ``is_chunk_step``, ``input_ids_cpu``, ...) are written at
  once: host memory, no transfer.
* **slot metadata** that only the host uses: sampling (``chunk``, ``greedy``, ``top_k``,
  ``top_p``, ``seed``, ``min_tokens``, ``stop_ids``: the extra stop token ids, ``[B, S]`` padded
  with -1, widened on demand by `set_stop_ids`), and the engine's view of the request in each
  slot (`SLOT_STATE`: ``requests``, the engine's request objects; ``running``, ``prefilled``,
  ``num_computed``, ``num_output``, ``num_blocks``, ``cached_blocks``, ``prompt_len``, ``max_output``,
  ``ignore_eos``, ``has_stop_str``, ``end``, ``arrival``; step counters ``steps``,
  ``spec_emitted`` and the histograms ``spec_drafted`` / ``spec_accepted`` ``[B, K + 1]`` of
  the drafts verified / accepted per decode step), so that a
  step's scheduling, stop checks and bookkeeping run on whole-batch arrays.

Transfers: one step = at most one `push` (host to device: every mirrored array that changed, every
staged write and the step's own arrays, e.g. the sampling rows, packed into **one** float64 buffer,
one ``paddle.to_tensor``, then scattered on the device) and one `pull` (device to host: the
tensors the host needs after the step, cast to int64 and concatenated on the device, one
``.numpy()``). `stats` counts them. The ops write the tensors in place during the step; nobody
writes a tensor from the host except through this class.

The float64 buffer carries integers exactly up to 2**53 (token ids, lengths, block ids, counts);
seeds, the only wider values, live in host tensors. `push` raises ValueError for a wider integer.
Outside a step (tests, debugging) `flush` pushes the pending writes so the tensors show them.

On the CPU there is no device to copy to: when every tensor of ``tensors`` is a CPU tensor, `push`
writes the changed mirrored arrays and the staged writes straight into the tensors' memory through
zero-copy numpy views (``np.from_dlpack``; a view is rebuilt when its tensor's memory moves), and
`pull` reads them the same way. The same writes, the same counts in `stats` (one push and one pull
a step), none of the framework ops that packing, casting and scattering a buffer would cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

#: share_inputs keys FastDeploy keeps on the CPU (spec §2): written on the host, never transferred
HOST_KEYS = ("not_need_stop", "is_chunk_step", "infer_seed", "input_ids_cpu")

#: tensor key -> host array attribute of the mirrored per-slot state
MIRRORED = {
    "seq_lens_this_time": "this_time",
    "seq_lens_encoder": "enc",
    "seq_lens_decoder": "dec",
    "step_idx": "step_idx",
    "stop_flags": "stop",
    "block_tables": "block_tables",
}
#: the mirrored tensors the ops of a speculative step write (the runner pulls them after the step)
WRITTEN_BY_OPS = (
    "seq_lens_this_time",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "step_idx",
    "stop_flags",
)

_EXACT = 2**53  # integers the float64 transfer buffer holds exactly
_NP_DTYPES = {
    "bool": np.bool_,
    "int32": np.int32,
    "int64": np.int64,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "uint8": np.uint8,
}


def _dtype_name(tensor) -> str:
    return str(tensor.dtype).replace("paddle.", "")


def _np_dtype(tensor) -> np.dtype:
    name = _dtype_name(tensor)
    if name not in _NP_DTYPES:
        raise TypeError(f"InputBatch: tensors of dtype {name} are not staged")
    return np.dtype(_NP_DTYPES[name])


@dataclass
class TransferStats:
    """Host-device transfers made by an `InputBatch`: ``h2d`` pushes, ``d2h`` pulls and their bytes."""

    h2d: int = 0
    d2h: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0


class _Staged:
    """Pending host writes into one device tensor: values + dirty mask (the last write wins)."""

    __slots__ = ("dirty", "pending", "tensor", "values")

    def __init__(self, tensor, pending: dict):
        shape = [int(d) for d in tensor.shape]
        self.tensor = tensor
        self.values = np.zeros(shape, _np_dtype(tensor))
        self.dirty = np.zeros(shape, bool)
        self.pending = pending  # the batch's staged tensors with writes to send

    def __setitem__(self, index, value):
        self.values[index] = value
        self.dirty[index] = True
        self.pending[id(self.tensor)] = self


class _HostWrite:
    """A write into a host (CPU) tensor: applied at once, no transfer (through a zero-copy view)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __setitem__(self, index, value):
        _host_view(self.tensor)[index] = value


def _host_view(tensor) -> np.ndarray:
    """A writable numpy view of a CPU tensor's memory (no copy)."""
    return np.from_dlpack(tensor)


class _Writer:
    """``writer[key][index] = value``: a staged (or host) write into ``tensors[key]``."""

    __slots__ = ("_batch", "_tensors")

    def __init__(self, batch: InputBatch, tensors: Mapping):
        self._batch = batch
        self._tensors = tensors

    def __getitem__(self, key: str):
        return self._batch.stage(self._tensors[key])


class InputBatch:
    """Per-slot state of ``max_num_seqs`` request slots (see the module docstring).

    Args:
        tensors: the runner's ``share_inputs`` (spec §2 keys; ``stop_flags`` ``[B, 1]`` gives B).
        host_keys: keys of ``tensors`` that live on the CPU (default `HOST_KEYS` present in it).
    """

    def __init__(self, tensors: dict, *, host_keys: Iterable[str] | None = None):
        self.tensors = tensors
        self.max_num_seqs = B = int(tensors["stop_flags"].shape[0])
        self.stats = TransferStats()
        self._host: dict[int, object] = {}
        for key in HOST_KEYS if host_keys is None else host_keys:
            if key in tensors:
                self.register_host(tensors[key])
        self._staged: dict[int, _Staged] = {}
        # CPU tensors: zero-copy views instead of a transfer buffer (see the module docstring)
        self._views: dict[int, tuple] = {}
        self._cpu: bool | None = None
        self._pending: dict[int, _Staged] = {}  # staged tensors written since the last push
        # mirrored per-slot state: the tensors' initial values (read once, at construction)
        self._shadow: dict[str, np.ndarray] = {}
        for key, attr in MIRRORED.items():
            t = tensors[key]
            host = np.array(t.numpy()).reshape([B, -1] if key == "block_tables" else [B])
            setattr(self, attr, host)
            self._shadow[key] = host.copy()
        # slot metadata the host alone uses
        self.chunk = np.zeros(B, bool)  # between two prefill chunks
        self.greedy = np.ones(B, bool)
        self.top_k = np.zeros(B, np.int64)
        self.top_p = np.ones(B, np.float64)
        self.seed = np.zeros(B, np.int64)
        self.min_tokens = np.zeros(B, np.int64)
        self.stop_ids = np.full((B, 0), -1, np.int64)
        # the engine's per-slot view of its request (written at admission and by the step)
        self.requests = np.full(B, None, object)
        self.running = np.zeros(B, bool)
        self.prefilled = np.zeros(B, bool)
        self.num_computed = np.zeros(B, np.int64)
        self.num_output = np.zeros(B, np.int64)
        self.num_blocks = np.zeros(B, np.int64)
        self.cached_blocks = np.zeros(B, np.int64)  # leading blocks in the prefix cache
        self.prompt_len = np.zeros(B, np.int64)
        self.max_output = np.zeros(B, np.int64)  # min(max_tokens, max_model_len - prompt length)
        self.ignore_eos = np.zeros(B, bool)
        self.has_stop_str = np.zeros(B, bool)
        self.end = np.zeros(B, np.int64)  # a prefill chunk's end this step
        self.arrival = np.zeros(B, np.int64)
        # step counters, folded into the request's metrics when it leaves the slot
        self.steps = np.zeros(B, np.int64)
        self.spec_emitted = np.zeros(B, np.int64)
        self.spec_drafted = np.zeros((B, 1), np.int64)
        self.spec_accepted = np.zeros((B, 1), np.int64)

    def set_stop_ids(self, slot: int, ids) -> None:
        """The extra stop token ids of ``slot`` (``stop_ids[slot]``, -1 padded; the array widens
        when a request has more than any before)."""
        ids = np.asarray(list(ids), np.int64)
        if ids.size > self.stop_ids.shape[1]:
            wider = np.full((self.max_num_seqs, ids.size), -1, np.int64)
            wider[:, : self.stop_ids.shape[1]] = self.stop_ids
            self.stop_ids = wider
        self.stop_ids[slot] = -1
        self.stop_ids[slot, : ids.size] = ids

    def set_draft_positions(self, K: int) -> None:
        """Size the draft histograms (``spec_drafted`` / ``spec_accepted``, 0..K) for K drafts."""
        self.spec_drafted = np.zeros((self.max_num_seqs, K + 1), np.int64)
        self.spec_accepted = np.zeros((self.max_num_seqs, K + 1), np.int64)

    # -- writes -------------------------------------------------------------------------------------
    def register_host(self, tensor) -> None:
        """Declare ``tensor`` a host (CPU) tensor: its writes apply at once, without transfer."""
        self._host[id(tensor)] = tensor

    def is_host(self, tensor) -> bool:
        return id(tensor) in self._host

    def stage(self, tensor):
        """The write handle of ``tensor``: ``batch.stage(t)[index] = value``. A device tensor's
        writes wait for the next `push`; a host tensor's apply at once. Not for the mirrored tensors
        of ``tensors`` (write the host arrays, e.g. ``batch.this_time[b] = 3``)."""
        if id(tensor) in self._host:
            return _HostWrite(tensor)
        st = self._staged.get(id(tensor))
        if st is None:
            for key in MIRRORED:
                if self.tensors.get(key) is tensor:
                    raise ValueError(f"InputBatch: {key} is mirrored; write its host array instead")
            st = self._staged[id(tensor)] = _Staged(tensor, self._pending)
        return st

    def _on_cpu(self) -> bool:
        """Whether every tensor of ``tensors`` is a CPU tensor (decided once)."""
        if self._cpu is None:
            self._cpu = all(
                t.place.is_cpu_place() for t in self.tensors.values() if hasattr(t, "place")
            )
        return self._cpu

    def _view(self, tensor) -> np.ndarray:
        """The cached zero-copy view of a persistent CPU tensor, rebuilt when its memory moved."""
        entry = self._views.get(id(tensor))
        ptr = tensor.data_ptr()
        if entry is None or entry[0] is not tensor or entry[2] != ptr:
            entry = (tensor, _host_view(tensor), ptr)
            self._views[id(tensor)] = entry
        return entry[1]

    def writer(self, tensors: Mapping) -> _Writer:
        """``writer(d)[key][index] = value`` stages a write into ``d[key]`` (a proposer's
        ``model_inputs`` or the runner's ``share_inputs``)."""
        return _Writer(self, tensors)

    @property
    def has_pending(self) -> bool:
        """Whether a `push` has something to send."""
        return any(st.dirty.any() for st in self._pending.values()) or any(
            not np.array_equal(getattr(self, attr), self._shadow[key])
            for key, attr in MIRRORED.items()
        )

    # -- transfers ----------------------------------------------------------------------------------
    def push(self, step: Mapping[str, np.ndarray] | None = None) -> dict:
        """The step's one host-to-device transfer.

        Sends every mirrored array that changed since the device last saw it, every staged write,
        and the arrays of ``step`` (e.g. the sampling rows), packed into one float64 buffer; on the
        device the buffer is sliced, cast and copied (``paddle.assign``) or scattered
        (``paddle.index_put_``) into the tensors, in place. Also sets the host flag
        ``not_need_stop`` (some slot still runs). Returns ``step``'s arrays as device tensors (same
        dtype and shape). Nothing to send: no transfer, ``{}``.
        """
        import paddle

        if "not_need_stop" in self.tensors:
            self.stage(self.tensors["not_need_stop"])[0] = bool((~self.stop).any())
        if self._on_cpu():
            return self._push_cpu(step)
        parts: list[np.ndarray] = []
        plan: list[tuple] = []  # (kind, target, sizes, dtype name, shape)
        for key, attr in MIRRORED.items():
            host, shadow = getattr(self, attr), self._shadow[key]
            if not np.array_equal(host, shadow):
                t = self.tensors[key]
                parts.append(self._exact(host, key).reshape(-1))
                plan.append(("full", t, host.size, _dtype_name(t), [int(d) for d in t.shape]))
                shadow[...] = host
        pending = list(self._pending.values())
        self._pending.clear()
        for st in pending:
            if not st.dirty.any():
                continue
            index = np.nonzero(st.dirty)
            values = st.values[index]
            st.dirty[...] = False
            shape = st.values.shape
            dims = [d for d in range(len(shape)) if shape[d] != 1]  # size-1 dims: index 0, not sent
            parts += [index[d] for d in dims] + [self._exact(values, "a staged write")]
            plan.append(
                ("scatter", st.tensor, (values.size, dims), _dtype_name(st.tensor), list(shape))
            )
        out_plan = []
        for name, arr in (step or {}).items():
            arr = np.asarray(arr)
            parts.append(self._exact(arr, name).reshape(-1))
            out_plan.append((name, arr.size, str(arr.dtype), list(arr.shape)))
        if not parts:
            return {}
        buf = np.concatenate([p.astype(np.float64) for p in parts])
        dev = paddle.to_tensor(buf)  # the one host-to-device transfer
        self.stats.h2d += 1
        self.stats.h2d_bytes += buf.nbytes
        off = 0

        def take(n):
            nonlocal off
            off += n
            return dev[off - n : off]

        for kind, t, size, dtype, shape in plan:
            if kind == "full":
                paddle.assign(take(size).astype(dtype).reshape(shape), t)
                continue
            n, dims = size
            index = []
            sent = {d: take(n).astype("int64") for d in dims}
            for d in range(len(shape)):
                index.append(sent[d] if d in sent else paddle.zeros([n], "int64"))
            paddle.index_put_(t, tuple(index), take(n).astype(dtype))
        return {
            name: take(n).astype("bool" if dtype == "bool" else dtype).reshape(shape)
            for name, n, dtype, shape in out_plan
        }

    def _push_cpu(self, step) -> dict:
        """`push` on CPU tensors: the writes go straight into their memory (views, no buffer)."""
        import paddle

        nbytes = 0
        for key, attr in MIRRORED.items():
            host, shadow = getattr(self, attr), self._shadow[key]
            if not np.array_equal(host, shadow):
                view = self._view(self.tensors[key])
                view[...] = host.reshape(view.shape)
                shadow[...] = host
                nbytes += view.nbytes
        pending = list(self._pending.values())
        self._pending.clear()
        for st in pending:
            if not st.dirty.any():
                continue
            index = np.nonzero(st.dirty)
            values = st.values[index]
            st.dirty[...] = False
            self._view(st.tensor)[index] = values
            nbytes += values.nbytes
        out = {
            name: paddle.to_tensor(np.ascontiguousarray(arr)) for name, arr in (step or {}).items()
        }
        nbytes += sum(int(np.asarray(a).nbytes) for a in (step or {}).values())
        if nbytes or out:
            self.stats.h2d += 1
            self.stats.h2d_bytes += nbytes
        return out

    def _refresh_mirrored(self, out: dict) -> None:
        """Moves the pulled mirrored tensors out of ``out`` into the host arrays (and shadows)."""
        for key in WRITTEN_BY_OPS:
            host = getattr(self, MIRRORED[key])
            host[...] = out.pop(key).reshape(host.shape)
            self._shadow[key][...] = host

    def _pull_cpu(self, items, mirrored: bool) -> dict[str, np.ndarray]:
        """`pull` on CPU tensors: copies read through views (no framework op)."""
        persistent = {id(t) for t in self.tensors.values()}
        out = {}
        for name, t in items:
            view = self._view(t) if id(t) in persistent else _host_view(t)
            out[name] = np.array(view).reshape([int(d) for d in t.shape])
        self.stats.d2h += 1
        self.stats.d2h_bytes += sum(a.nbytes for a in out.values())
        if mirrored:
            self._refresh_mirrored(out)
        return out

    def pull(
        self, tensors: Mapping | None = None, *, mirrored: bool = False
    ) -> dict[str, np.ndarray]:
        """The step's one device-to-host transfer: ``tensors`` (name -> integer or bool device
        tensor) and, with ``mirrored``, the mirrored tensors the ops write (`WRITTEN_BY_OPS`), cast
        to int64 and concatenated on the device, read with one ``.numpy()``. The mirrored host
        arrays are refreshed; returns ``{name: array}`` (each with its tensor's shape and dtype)."""
        import paddle

        items = [(key, self.tensors[key]) for key in WRITTEN_BY_OPS] if mirrored else []
        items += list((tensors or {}).items())
        if not items:
            return {}
        if self._on_cpu():
            return self._pull_cpu(items, mirrored)
        flat = paddle.concat(
            [t.reshape([-1]).astype("int64") for _, t in items]
        ).numpy()  # the one D2H
        self.stats.d2h += 1
        self.stats.d2h_bytes += flat.nbytes
        out, off = {}, 0
        for name, t in items:
            shape = [int(d) for d in t.shape]
            n = int(np.prod(shape))
            out[name] = flat[off : off + n].reshape(shape).astype(_np_dtype(t))
            off += n
        if mirrored:
            self._refresh_mirrored(out)
        return out

    def flush(self) -> None:
        """`push` the pending writes now, outside a step (tests, debugging: the tensors then show
        every host write). Counted in `stats` like a step's push."""
        self.push()

    @staticmethod
    def _exact(values: np.ndarray, what: str) -> np.ndarray:
        if values.dtype.kind in "iu" and values.size and int(np.abs(values).max()) > _EXACT:
            raise ValueError(
                f"InputBatch: {what} holds an integer beyond 2**53 "
                f"({int(np.abs(values).max())}), which the transfer buffer cannot carry exactly"
            )
        return values
