"""Per-slot batch state and the types the model runners and the proposers share.

Layer: below ``fd_mtp.engine`` (runners, scheduler) and ``fd_mtp.proposer`` (drafters), above
``fd_mtp.model`` and ``fd_mtp.ops``. Nothing here imports the engine or a proposer; both import
this package (tests/test_layers.py checks the whole import graph):

* `InputBatch` (`input_batch`): the one owner of per-slot state: host numpy arrays plus the
  device tensors (``share_inputs`` and a proposer's ``model_inputs`` are its FastDeploy-shaped
  dict views), with one host-to-device and one device-to-host transfer per step.
* `Task`, `TaskKind` (`task`): the entries of ``insert_tasks_v1``.
* `pack_step` (`packing`): FastDeploy's per-step ``pre_process`` over a buffer dict.
* `Proposer`, `ProposerStats` (`interface`): what a speculative runner calls on its drafter.
"""

from .input_batch import HOST_KEYS, InputBatch, TransferStats
from .interface import Proposer, ProposerStats
from .packing import pack_step
from .task import Task, TaskKind

__all__ = [
    "HOST_KEYS",
    "InputBatch",
    "Proposer",
    "ProposerStats",
    "Task",
    "TaskKind",
    "TransferStats",
    "pack_step",
]
