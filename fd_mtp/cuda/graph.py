"""A step of fd_mtp.cuda ops captured as CUDA graphs and replayed (issue 35 §2).

The spec ops of one engine step (target side, one MTP substep) cost a few microseconds each on
the device and tens on the host when Python launches them one by one. Captured once with CuPy's
stream capture and replayed, the step costs one graph launch per segment. What makes a step
capturable (docs/gpu_errors.md): the fixed-capacity shape ops (``token_capacity``, ``padded``),
``not_need_stop`` as a CuPy bool[1] (set on the device), deferred or record error mode (errors
stay in the stream's record until `check_pending`), and persistent buffers: every array the step
reads or writes lives as long as the graph, the ops' outputs included (``out=`` of
``pre_process`` / ``rebuild_padding`` / the eagle gathers / ``top_p_candidates``), their
workspaces and status slots are per-stream and persistent. A graph replays the addresses and the
launch arguments of the capture: host (numpy) arguments and Python scalars are read when the
step is captured, so they must not change between replays (capture again when they do).

The model's forwards stay outside: the step is a list of **segments** (callables launching
fd_mtp.cuda ops on the current stream), one graph each, and the caller's **gaps** (the target
forward, the LM head, the draft forward...) run between them on the same stream, writing the
fixed buffers the next segment reads.

    step = CapturedStep([seg0, seg1, seg2])      # a non-blocking stream of its own
    step.capture(gaps)                           # one eager warm-up run, then the capture
    for _ in range(steps):
        write_inputs(...)                        # the engine's slot writes, on step.stream
        step.replay(gaps)                        # graph 0, gap 0, graph 1, gap 1, graph 2
        step.check_pending()                     # the step's errors: the one wait per step

Nothing here synchronises but `capture` (after its warm-up) and `check_pending`. Needs CuPy.
"""

from __future__ import annotations

from ._common import _cupy, check_pending, errors, load

__all__ = ["CapturedStep"]


class CapturedStep:
    """The segments of a step, run op by op (`run_eager`) or captured (`capture`) and replayed
    (`replay`) as one CUDA graph per segment, on ``stream`` (default: a new non-blocking CuPy
    stream; capture needs a stream other than the legacy default one).

    ``segments``: callables without arguments that launch fd_mtp.cuda ops on CuPy's current
    stream on persistent arrays only (see the module docstring): no allocation, no host read,
    no synchronisation. A segment that breaks a rule fails its capture with the CUDA error (CuPy's
    ``CUDARuntimeError``, e.g. cudaErrorStreamCaptureUnsupported for a host read) and the stream
    is left usable. ``gaps``: a list of callables (or None) run after the segment of the same
    index, on the same stream, outside the graphs (the forwards)."""

    def __init__(self, segments, stream=None):
        cp = _cupy()
        self.segments = list(segments)
        if not self.segments:
            raise ValueError("CapturedStep: segments must hold at least one callable")
        self.stream = stream if stream is not None else cp.cuda.Stream(non_blocking=True)
        if self.stream.ptr in (0, 1):
            raise ValueError("CapturedStep: stream must not be the legacy default stream")
        self.graphs = None

    def _gaps(self, gaps):
        gaps = list(gaps or [])
        if len(gaps) > len(self.segments):
            raise ValueError(
                f"CapturedStep: {len(gaps)} gaps for {len(self.segments)} segments "
                "(at most one gap after each segment)"
            )
        return gaps + [None] * (len(self.segments) - len(gaps))

    def run_eager(self, gaps=None):
        """The step op by op from Python (no graph), the gaps between the segments."""
        gaps = self._gaps(gaps)
        with self.stream:
            for segment, gap in zip(self.segments, gaps):
                segment()
                if gap is not None:
                    gap()

    def capture(self, gaps=None, warmup=1):
        """Runs the step ``warmup`` times op by op (the stream's status record, the workspaces and
        status rings come into being, sized: nothing allocates in the capture), raises what the
        warm-up recorded (`check_pending`; ``warmup=0``: the caller warmed the stream up and
        checked it), then captures each segment in record mode (no op
        raises during the capture). The warm-up writes the step's buffers like any step: write
        the next step's inputs after it."""
        for _ in range(warmup):
            self.run_eager(gaps)
        if warmup:
            check_pending(self.stream.ptr)
        graphs = []
        with self.stream, errors("record"):
            for segment in self.segments:
                graphs.append(self._capture_one(segment))
        self.graphs = graphs
        return self

    def _capture_one(self, segment):
        s = self.stream
        s.begin_capture()
        try:
            segment()
        except BaseException:
            try:
                s.end_capture()  # invalidated (or not): end it so that the stream is usable
            except Exception:  # noqa: BLE001 (the segment's own error is the one to report)
                pass
            raise
        return s.end_capture()

    def replay(self, gaps=None):
        """Launches graph 0, runs gap 0, launches graph 1, ... on the step's stream. No sync."""
        if self.graphs is None:
            raise RuntimeError("CapturedStep.replay: capture() first")
        gaps = self._gaps(gaps)
        for graph, gap in zip(self.graphs, gaps):
            graph.launch(self.stream)
            if gap is not None:
                with self.stream:
                    gap()

    def check_pending(self):
        """Raises the first error the step's ops recorded (by the op's name) and clears it: one
        wait for the stream (fd_mtp.cuda.check_pending)."""
        check_pending(self.stream.ptr)

    def node_counts(self):
        """The nodes each segment's graph holds, by type: [{kernel, memcpy, memset, other}], from
        a capture of its own (cudaGraphGetNodes on the captured graph, which CuPy's Graph does not
        keep). Run after `capture` (or a warm-up): it runs nothing, but its ops must not
        allocate."""
        cp = _cupy()
        rt = cp.cuda.runtime
        counts = []
        with self.stream, errors("record"):
            for segment in self.segments:
                rt.streamBeginCapture(self.stream.ptr, rt.streamCaptureModeRelaxed)
                try:
                    segment()
                except BaseException:
                    try:
                        rt.graphDestroy(rt.streamEndCapture(self.stream.ptr))
                    except Exception:  # noqa: BLE001
                        pass
                    raise
                graph = rt.streamEndCapture(self.stream.ptr)
                try:
                    counts.append(dict(load().graph_node_counts(graph)))
                finally:
                    rt.graphDestroy(graph)
        return counts
