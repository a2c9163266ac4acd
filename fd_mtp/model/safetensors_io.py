"""The safetensors side of checkpoint directories: which files a directory holds, a lazy
``{name: array}`` view of them (`SafetensorsCheckpoint`) and writing tensors as one file or as
shards with an index (`save_safetensors`). fd_mtp.model.loader builds on it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"

_SHARD_RE = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")
_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


def checkpoint_files(path) -> list[Path]:
    """The safetensors files of checkpoint directory ``path`` (one file, or the shards named by
    ``model.safetensors.index.json``, or a lone ``model-*-of-*.safetensors`` set)."""
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {d}")
    index = d / SAFETENSORS_INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(
                f"{index}: not a safetensors index (needs a 'weight_map' dict): {e}"
            ) from None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index}: 'weight_map' must be a non-empty dict")
        files = [d / f for f in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise FileNotFoundError(f"{index} names shard {f.name}, which is missing")
        return files
    single = d / SAFETENSORS_FILE
    if single.is_file():
        return [single]
    shards = sorted(p for p in d.iterdir() if _SHARD_RE.match(p.name))
    if shards:
        total = {int(_SHARD_RE.match(p.name).group(2)) for p in shards}
        if len(total) != 1 or len(shards) != total.pop():
            raise ValueError(
                f"{d}: incomplete shard set {[p.name for p in shards]} and no {SAFETENSORS_INDEX_FILE}"
            )
        return shards
    raise FileNotFoundError(
        f"{d}: no {SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} or model-*-of-*.safetensors"
    )


class SafetensorsCheckpoint(Mapping):
    """Read-only ``{name: np.ndarray}`` view of one or more safetensors files. Shapes and dtypes come
    from the headers (:meth:`shape`, :meth:`dtype`, :meth:`nbytes`) without reading data; a tensor is
    read when indexed. BF16 tensors come back as (exactly upcast) float32 arrays. Use as a context
    manager or call :meth:`close`."""

    def __init__(self, files):
        from safetensors import safe_open

        self._files = [Path(f) for f in files]
        self._handles = []
        self._where: dict[str, int] = {}
        self._info: dict[str, tuple[tuple[int, ...], str]] = {}
        for i, f in enumerate(self._files):
            h = safe_open(str(f), framework="np")
            self._handles.append(h)
            for name in h.keys():
                if name in self._where:
                    raise ValueError(
                        f"tensor {name!r} is stored twice: in {self._files[self._where[name]].name} "
                        f"and {f.name}"
                    )
                s = h.get_slice(name)
                self._where[name] = i
                self._info[name] = (tuple(int(x) for x in s.get_shape()), s.get_dtype())

    @classmethod
    def from_dir(cls, path) -> SafetensorsCheckpoint:
        return cls(checkpoint_files(path))

    def __getitem__(self, name: str) -> np.ndarray:
        i = self._where[name]
        if self._info[name][1] == "BF16":
            from safetensors import safe_open

            with safe_open(str(self._files[i]), framework="paddle") as f:
                return f.get_tensor(name).astype("float32").numpy()
        return self._handles[i].get_tensor(name)

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._info[name][0]

    def dtype(self, name: str) -> str:
        """safetensors dtype string (``F32``, ``BF16``, ...)."""
        return self._info[name][1]

    def nbytes(self, name: str | None = None) -> int:
        if name is None:
            return sum(self.nbytes(n) for n in self._where)
        shape, dt = self._info[name]
        return int(np.prod(shape, dtype=np.int64)) * _BYTES.get(dt, 4)

    def close(self) -> None:
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _shape_of(tensors: Mapping, name: str) -> tuple[int, ...]:
    if isinstance(tensors, SafetensorsCheckpoint):
        return tensors.shape(name)
    v = tensors[name]
    shape = v.shape if hasattr(v, "shape") else np.shape(v)
    return tuple(int(x) for x in shape)


def _as_numpy(v) -> np.ndarray:
    """numpy array of ``v`` (a numpy array, a Paddle tensor (bfloat16 upcast exactly to float32), or
    anything ``np.asarray`` takes)."""
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "numpy") and hasattr(v, "astype"):
        if "bfloat16" in str(getattr(v, "dtype", "")):
            v = v.astype("float32")
        return v.numpy()
    return np.asarray(v)


def _nbytes_of(tensors: Mapping, name: str) -> int:
    if isinstance(tensors, SafetensorsCheckpoint):
        return tensors.nbytes(name)
    return int(getattr(tensors[name], "nbytes", 0))


def _to_storable(value, dtype: str | None):
    """numpy array (or paddle tensor) -> something safetensors can write, in ``dtype``."""
    if dtype in ("bfloat16",):
        import paddle

        t = (
            value
            if isinstance(value, paddle.Tensor)
            else paddle.to_tensor(np.asarray(value, dtype=np.float32))
        )
        return t.astype("bfloat16")
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.ascontiguousarray(value)
    return arr.astype(dtype) if dtype is not None else arr


def save_safetensors(
    tensors: Mapping,
    directory,
    *,
    shard_size: int | None = None,
    dtype: str | None = None,
    keep_float32: tuple[str, ...] = (),
) -> list[Path]:
    """Write ``tensors`` into ``directory`` as ``model.safetensors``, or, when ``shard_size`` (bytes)
    is given and exceeded, as ``model-0000x-of-0000y.safetensors`` + ``model.safetensors.index.json``.
    ``dtype`` converts floating tensors (``"float16"``, ``"bfloat16"``, ``"float32"``) except those
    whose name contains one of ``keep_float32``. Returns the files written."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    items = []
    for name in tensors:
        v = tensors[name]
        dt = dtype
        if dt is not None and (
            any(k in name for k in keep_float32)
            or not np.issubdtype(np.asarray(v).dtype, np.floating)
        ):
            dt = None
        items.append((name, _to_storable(v, dt)))

    def nbytes(v):
        return int(np.prod(v.shape, dtype=np.int64)) * (
            2 if str(getattr(v, "dtype", "")).endswith("bfloat16") else np.dtype(v.dtype).itemsize
        )

    groups: list[list] = [[]]
    size = 0
    for name, v in items:
        if shard_size is not None and groups[-1] and size + nbytes(v) > shard_size:
            groups.append([])
            size = 0
        groups[-1].append((name, v))
        size += nbytes(v)

    def write(group, path):
        if any(not isinstance(v, np.ndarray) for _, v in group):
            import paddle
            from safetensors.paddle import save_file

            save_file(
                {
                    n: (v if not isinstance(v, np.ndarray) else paddle.to_tensor(v))
                    for n, v in group
                },
                str(path),
                metadata={"format": "pd"},
            )
        else:
            from safetensors.numpy import save_file

            save_file(dict(group), str(path), metadata={"format": "np"})

    if len(groups) == 1:
        path = d / SAFETENSORS_FILE
        write(groups[0], path)
        return [path]
    files, weight_map = [], {}
    for i, group in enumerate(groups):
        path = d / f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write(group, path)
        files.append(path)
        for name, _ in group:
            weight_map[name] = path.name
    total = sum(nbytes(v) for _, v in items)
    (d / SAFETENSORS_INDEX_FILE).write_text(
        json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True
        )
        + "\n"
    )
    return files
