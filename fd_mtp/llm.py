"""`fd_mtp.LLM`: the offline Python API (vLLM / FastDeploy style) over `fd_mtp.engine`.

>>> llm = fd_mtp.LLM("path/to/checkpoint", max_num_seqs=8)                     # doctest: +SKIP
>>> out = llm.generate(["Hello", [1, 2, 3]], fd_mtp.SamplingParams(temperature=0, max_tokens=8))  # doctest: +SKIP
>>> out[1].token_ids, out[1].metrics.tokens_per_s                             # doctest: +SKIP

Speculative decoding with the checkpoint's MTP head (FastDeploy's dict form is accepted):

>>> llm = fd_mtp.LLM("path/to/checkpoint", speculative_config={"method": "mtp", "num_speculative_tokens": 2,
...                                                             "num_model_steps": 2})  # doctest: +SKIP
>>> out = llm.generate("def f(", fd_mtp.SamplingParams(temperature=0, max_tokens=64))  # doctest: +SKIP
>>> out[0].metrics.spec.mean_accepted_length, llm.speculative_metrics.summary()        # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from .config import check_run_options
from .engine.request import RequestOutput, StreamDelta
from .engine.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "StreamDelta", "GenerationInterrupted"]


class GenerationInterrupted(KeyboardInterrupt):
    """The KeyboardInterrupt (Ctrl-C) that `LLM.generate` raises when interrupted, carrying the partial
    results: ``outputs`` has one `RequestOutput` per prompt, in prompt order, with what each request
    generated so far (``finish_reason == "abort"`` for requests cut short; requests that had
    finished or were rejected keep their own). The requests' slots and KV blocks are freed, so the
    `LLM` stays usable."""

    def __init__(self, outputs: list):
        super().__init__("generation interrupted")
        self.outputs = outputs


def _sampling_params(value, what: str) -> SamplingParams:
    """A `SamplingParams` from one, or from a dict of its fields (vLLM users pass those)."""
    if isinstance(value, SamplingParams):
        return value
    if isinstance(value, Mapping):
        known = [f.name for f in dataclasses.fields(SamplingParams) if f.init]
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise ValueError(f"{what} has unknown SamplingParams fields {unknown}; known: {known}")
        return SamplingParams(**value)
    raise ValueError(
        f"{what} must be a SamplingParams or a dict of its fields, got {type(value).__name__}"
    )


class _Progress:
    """tqdm when installed, else a one-line text bar on stderr."""

    def __init__(self, total: int, enabled: bool, desc: str = "generate"):
        self.total, self.n, self.enabled, self.desc = total, 0, enabled, desc
        self.tokens = 0
        self.t0 = time.perf_counter()
        self._bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, unit="req", dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update(self, done: int, tokens: int):
        if not self.enabled:
            return
        self.n += done
        self.tokens += tokens
        rate = self.tokens / max(time.perf_counter() - self.t0, 1e-9)
        if self._bar is not None:
            self._bar.update(done)
            self._bar.set_postfix_str(f"{rate:.1f} tok/s", refresh=False)
        else:
            sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total} requests, {rate:.1f} tok/s")
            sys.stderr.flush()

    def close(self):
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\n")


def _load_models(model, mtp_model, tokenizer, spec, dtype, forward, cpu_threads):
    """``(model, draft model or None, tokenizer)`` for one process: ``model`` a checkpoint
    directory (loaded with its MTP block and tokenizer) or an instance; an EAGLE head from
    ``spec.model`` replaces the MTP block; each set to ``forward``'s mode, in eval mode."""
    if isinstance(model, (str, Path)):
        from .model.loader import load_checkpoint

        path = Path(model)
        model, loaded_mtp, _ = load_checkpoint(path, dtype=dtype)
        mtp_model = loaded_mtp if mtp_model is None else mtp_model
        if tokenizer is None:
            tokenizer = _try_tokenizer(path)
    model.eval()
    if spec is not None and spec.method in ("eagle", "eagle3"):
        from .model.eagle_io import load_eagle_head

        # the EAGLE head replaces the MTP block as the draft model (EAGLE-3: the target now
        # keeps the head's aux hidden states in every forward)
        mtp_model = load_eagle_head(spec.model, model, spec.method)
    for m in (model, mtp_model):
        if m is not None and forward == "native":
            m.native_forward().threads = 1 if cpu_threads is None else int(cpu_threads)
        elif m is not None and forward == "static":
            m.compile_forward()
    if mtp_model is not None:
        mtp_model.eval()
    return model, mtp_model, tokenizer


class LLM:
    """A model, its paged KV cache and a continuous-batching engine (plain or speculative decoding).

    Args:
        model: a checkpoint directory (``config.json`` + ``model.safetensors``, loaded with
            ``fd_mtp.model.loader.load_checkpoint``, with its tokenizer when it has tokenizer files)
            or an ``Ernie4_5ForCausalLM`` instance. None: the demo model shipped with fd_mtp
            (``fd_mtp.assets.default_model_path()``, a tiny ERNIE-4.5 + MTP trained on Python code).
            Anything else raises TypeError.
        tokenizer: overrides the checkpoint's tokenizer (``encode`` / ``decode``).
        device: "cpu" or "gpu" (``paddle.set_device``; "cuda" is an alias of "gpu", "gpu:N" picks
            a card). "gpu" on a paddle built without CUDA raises ValueError.
        max_num_seqs: request slots (the batch size of a step).
        max_model_len: longest prompt + output; default ``min(max_position_embeddings, 4096)``.
        block_size: KV-cache block size, an int in [1, 1024] (FastDeploy's default 64; the cache
            holds at least one block per slot, so huge blocks only waste memory).
        num_gpu_blocks: KV blocks per layer; default enough for every slot at ``max_model_len``.
            Fewer blocks make the engine preempt (and later re-prefill) the newest requests.
        enable_prefix_caching: reuse the KV blocks of prompt prefixes that earlier requests
            computed (default True; vLLM's automatic prefix caching): full blocks are shared
            read-only and evicted least recently used first. Output is the same with and
            without it; `prefix_cache_stats` counts queried and hit tokens.
        max_num_batched_tokens: tokens per step; longer prompts are prefilled in chunks.
        speculative_config: None (plain decoding), a `fd_mtp.SpeculativeConfig` or a dict of its
            fields (FastDeploy style), e.g. ``{"method": "mtp", "num_speculative_tokens": 3,
            "num_model_steps": 3}``. Method "mtp" drafts with the checkpoint's MTP block (it must
            have one: ``num_nextn_predict_layers = 1``), "eagle" / "eagle3" with a separate
            EAGLE / EAGLE-3 head whose directory is ``"model"`` (`fd_mtp.model.eagle` documents
            its checkpoint; one process only), "ngram" by prompt lookup. Per-request
            draft statistics land in ``output.metrics.spec``, totals in `speculative_metrics`.
            ``"stop_handling": "ops"`` lets the ops end requests as in FastDeploy (EOS ids and
            max_tokens in speculate_verify, stop token ids as stop sequences; see
            `SpeculativeConfig`); the default "engine" stops them on the host as plain decoding.
        mtp_model: the ``Ernie4_5MTP`` to draft with when ``model`` is a model instance (a
            checkpoint directory brings its own).
        dtype: model dtype when loading a checkpoint: None (the checkpoint's config; float32 on CPU),
            "float32", "bfloat16" or "float16". Half precision needs device "gpu" (Paddle's CPU build
            has no half-precision matmul): on CPU it raises ValueError.
        seed: engine seed for requests without ``SamplingParams.seed``, an int in ``[0, 2**63 - 2)``.
        tensor_parallel_size: N > 1 shards the model over N worker processes started with
            ``paddle.distributed`` (`fd_mtp.distributed.tp`; gloo on CPU), driven by this object:
            ``model`` must then be a checkpoint directory (or None), and N must divide the heads,
            kv heads, MLP widths and experts (ValueError). `close` stops the workers.
        forward: "native" (default) runs every dense decoder layer of the main model and the MTP
            block as one C++ kernel call (`fd_mtp.model.native`: float32 CPU steps; GPU and
            tensor-parallel models run eagerly; outputs equal the eager ones to float32
            rounding); "eager" runs the forward
            op by op (the debugging switch); "static" runs both forwards as compiled Paddle
            programs (``paddle.jit.to_static``; `fd_mtp.model.compiled`: the eager kernels, equal
            bit for bit, slower than eager dispatch on the 2-core CPU). README, *CPU step
            profile*, has the figures.
        cpu_threads: paddle's CPU math threads (MKL / OpenMP; process-wide), and the native
            forward's kernel threads; None keeps paddle's setting (1 unless changed) and runs the
            kernel on one thread.

    Bad arguments raise ValueError naming the argument (TypeError for a ``model`` of the wrong type),
    before anything is loaded.
    """

    def __init__(
        self,
        model=None,
        *,
        tokenizer=None,
        device: str = "cpu",
        max_num_seqs: int = 8,
        max_model_len: int | None = None,
        block_size: int = 64,
        num_gpu_blocks: int | None = None,
        enable_prefix_caching: bool = True,
        max_num_batched_tokens: int = 2048,
        speculative_config=None,
        mtp_model=None,
        dtype: str | None = None,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        forward: str = "native",
        cpu_threads: int | None = None,
    ):
        import paddle

        from .config import CacheConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig

        if model is not None and not isinstance(model, (str, os.PathLike, paddle.nn.Layer)):
            raise TypeError(
                f"LLM: model must be a checkpoint directory (str or os.PathLike), an "
                f"Ernie4_5ForCausalLM instance or None (the demo model), got {type(model).__name__}"
            )
        # the keyword arguments, parsed once into the typed configs that go down to the engine,
        # the runner and the proposer
        spec = SpeculativeConfig.from_value(speculative_config)
        scheduler = _config(
            SchedulerConfig,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
        )
        cache = _config(
            CacheConfig,
            block_size=block_size,
            num_gpu_blocks=num_gpu_blocks,
            enable_prefix_caching=enable_prefix_caching,
        )
        device, dtype = check_run_options(
            "LLM", device=device, dtype=dtype, seed=seed, forward=forward, cpu_threads=cpu_threads
        )
        if cpu_threads is not None:
            # paddle's CPU math threads (MKL / OpenMP), process-wide, as paddle.inference's
            # Config.set_cpu_math_library_num_threads
            paddle.base.core.set_num_threads(int(cpu_threads))
        self.forward_mode = forward
        parallel = _call(ParallelConfig, tensor_parallel_size=tensor_parallel_size)
        self.parallel_config = parallel
        self._tp = None
        paddle.set_device(device)
        self.device = device
        if model is None:
            from .assets import default_model_path

            model = default_model_path()
        if parallel.tensor_parallel_size > 1:
            self._init_tensor_parallel(
                model,
                tokenizer,
                parallel.tensor_parallel_size,
                spec,
                scheduler,
                cache,
                dtype,
                seed,
            )
            return
        model, mtp_model, tokenizer = _load_models(
            model, mtp_model, tokenizer, spec, dtype, forward, cpu_threads
        )
        self._init_engine(model, mtp_model, tokenizer, spec, scheduler, cache, seed)

    def _init_engine(self, model, mtp_model, tokenizer, spec, scheduler, cache, seed):
        """The configs resolved against the loaded model, then the runner and the engine of one
        process."""
        from .engine.engine import LLMEngine
        from .engine.runner import ModelRunner

        self.model = model
        self.tokenizer = tokenizer
        scheduler = _call(scheduler.resolve, model.config.max_position_embeddings)
        if spec is not None and spec.method == "mtp" and mtp_model is None:
            raise ValueError(
                "LLM: speculative_config method 'mtp' needs an MTP block, and the checkpoint has "
                "none (num_nextn_predict_layers = 0); use method 'ngram' or pass mtp_model"
            )
        cache = _call(cache.resolve, scheduler, 0 if spec is None else spec.extra_positions)
        self.scheduler_config = scheduler
        self.cache_config = cache
        self.max_model_len = scheduler.max_model_len
        self.speculative_config = spec
        if spec is None:
            self.runner = ModelRunner(model, scheduler_config=scheduler, cache_config=cache)
        else:
            from .engine.spec_runner import SpeculativeModelRunner

            self.runner = SpeculativeModelRunner(
                model,
                spec,
                scheduler_config=scheduler,
                cache_config=cache,
                mtp_model=mtp_model,
                seed=seed,
            )
        self.engine = LLMEngine(self.runner, tokenizer=tokenizer, seed=seed)

    def _init_tensor_parallel(self, model, tokenizer, n, spec, scheduler, cache, dtype, seed):
        """The front of N tensor-parallel workers (`fd_mtp.distributed.tp.TPEngineClient`)."""
        from .distributed.tp import TPEngineClient
        from .model.config import ErnieConfig
        from .model.loader import CONFIG_FILE
        from .model.parallel import check_tp_config

        if not isinstance(model, (str, os.PathLike)):
            raise ValueError(
                f"LLM: tensor_parallel_size={n} needs a checkpoint directory (each worker loads "
                f"its shard), got a {type(model).__name__} instance"
            )
        path = Path(model)
        if not (path / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{path}: no {CONFIG_FILE}")
        config = ErnieConfig.from_file(path / CONFIG_FILE)
        check_tp_config(config, n, what="LLM: tensor_parallel_size")
        if spec is not None and spec.method == "mtp" and config.num_nextn_predict_layers < 1:
            raise ValueError(
                "LLM: speculative_config method 'mtp' needs an MTP block, and the checkpoint has "
                "none (num_nextn_predict_layers = 0); use method 'ngram'"
            )
        if spec is not None and spec.method in ("eagle", "eagle3"):
            raise ValueError(
                f"LLM: speculative_config method {spec.method!r} is not offered with "
                f"tensor_parallel_size={n} (the EAGLE head runs in one process); use "
                "tensor_parallel_size=1"
            )
        self.model = None
        self.tokenizer = tokenizer if tokenizer is not None else _try_tokenizer(path)
        scheduler = _call(scheduler.resolve, config.max_position_embeddings)
        cache = _call(cache.resolve, scheduler, 0 if spec is None else spec.extra_positions)
        self.scheduler_config = scheduler
        self.cache_config = cache
        self.max_model_len = scheduler.max_model_len
        self.speculative_config = spec
        self.runner = None
        setup = dict(
            spec=spec, scheduler=scheduler, cache=cache, dtype=dtype, seed=seed, tokenizer=tokenizer
        )
        self._tp = TPEngineClient(path, n, setup, device=self.device)
        self.engine = self._tp

    def close(self) -> None:
        """Stop the tensor-parallel workers (a no-op in one process)."""
        if self._tp is not None:
            self._tp.close()

    @property
    def speculative_metrics(self):
        """`SpeculativeMetrics` summed over every request this LLM has run (None: plain decoding)."""
        return self.engine.spec_metrics

    @property
    def prefix_cache_stats(self):
        """The prefix cache's counters (`fd_mtp.engine.block_manager.PrefixCacheStats`: tokens
        queried and hit, ``hit_rate``, blocks cached and evicted)."""
        return self.engine.prefix_cache_stats

    @property
    def draft_policy_metrics(self):
        """`DraftPolicyMetrics` of the draft-length policy (histogram of the chosen K, substeps,
        switch-off reasons); None: plain decoding."""
        if self._tp is not None:
            if self.speculative_config is None:
                return None
            return self._tp.get("runner.draft_policy.metrics")
        policy = getattr(self.runner, "draft_policy", None)
        return None if policy is None else policy.metrics

    @property
    def proposer_stats(self):
        """The proposer's `ProposerStats` (time in `run` and in MTP forwards); None: plain decoding."""
        if self._tp is not None:
            return (
                None if self.speculative_config is None else self._tp.get("runner.proposer.stats")
            )
        proposer = self.runner.proposer
        return None if proposer is None else proposer.stats

    @staticmethod
    def _normalize(prompts, sampling_params):
        if isinstance(prompts, str) or (
            isinstance(prompts, (list, tuple))
            and prompts
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts)
        ):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise ValueError(
                f"prompts must be a string, a list of token ids or a list of those, got "
                f"{type(prompts).__name__}"
            )
        prompts = list(prompts)
        if sampling_params is None:
            params = [SamplingParams()] * len(prompts)
        elif isinstance(sampling_params, (SamplingParams, Mapping)):
            params = [_sampling_params(sampling_params, "sampling_params")] * len(prompts)
        elif isinstance(sampling_params, (list, tuple)):
            params = [
                _sampling_params(p, f"sampling_params[{i}]") for i, p in enumerate(sampling_params)
            ]
            if len(params) != len(prompts):
                raise ValueError(f"got {len(params)} sampling params for {len(prompts)} prompts")
        else:
            raise ValueError(
                "sampling_params must be a SamplingParams, a dict of its fields, a list of those "
                f"(one per prompt) or None, got {type(sampling_params).__name__}"
            )
        return prompts, params

    def generate_stream(
        self, prompts, sampling_params=None, *, use_tqdm: bool = False
    ) -> Iterator[StreamDelta]:
        """Yield `StreamDelta`s (``.index`` = the prompt's position) step by step, in step order.

        A rejected prompt (empty, too long, ids outside the vocabulary, text without tokenizer)
        yields one delta with ``finished=True``, ``finish_reason="error"`` and ``error`` set,
        before any step runs; the other prompts run normally. Bad sampling params are refused
        when the `SamplingParams` is built (ValueError); a list of params whose length differs
        from the prompts' raises ValueError here. Closing the generator early aborts the
        requests still running (their slots and KV blocks are freed).
        """
        yield from self._run(prompts, sampling_params, use_tqdm, {}, {})

    def _run(
        self, prompts, sampling_params, use_tqdm, rejected: dict, ids: dict
    ) -> Iterator[StreamDelta]:
        """`generate_stream`; fills ``rejected`` (index -> RequestOutput) and ``ids`` (index -> request id)."""
        prompts, params = self._normalize(prompts, sampling_params)
        engine = self.engine
        index: dict[str, int] = {}
        bar = _Progress(len(prompts), use_tqdm)
        try:
            for i, (prompt, sp) in enumerate(zip(prompts, params)):
                try:
                    rid = engine.add_request(prompt, sp)
                except ValueError as exc:
                    out = RequestOutput.rejected(
                        f"rejected-{i}",
                        prompt,
                        prompt if isinstance(prompt, list) else [],
                        str(exc),
                    )
                    rejected[i] = out
                    bar.update(1, 0)
                    yield StreamDelta(out.request_id, i, [], "", True, "error", str(exc))
                    continue
                index[rid] = i
                ids[i] = rid
            while engine.has_unfinished():
                for d in engine.step():
                    d.index = index.get(d.request_id, -1)
                    bar.update(1 if d.finished else 0, len(d.new_token_ids))
                    yield d
        finally:
            bar.close()
            # a caller that stops iterating early: abort what is left of this call's requests
            for rid in index:
                req = engine.requests.get(rid)
                if req is not None and not req.finished:
                    engine.abort_request(rid)

    def generate(
        self,
        prompts,
        sampling_params=None,
        *,
        use_tqdm: bool = True,
        stream_callback: Callable[[StreamDelta], None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt; returns one `RequestOutput` per prompt, in prompt order.

        Args:
            prompts: a string, a list of token ids, or a list of strings / token-id lists.
            sampling_params: one `SamplingParams` (or a dict of its fields, e.g.
                ``{"temperature": 0, "max_tokens": 8}``) for all, a list of those (one per prompt),
                or None (defaults).
            use_tqdm: show a progress bar (requests done, tokens/s) on stderr.
            stream_callback: called with every `StreamDelta` as soon as its step ends.

        Bad prompts do not raise: their output has ``finish_reason == "error"`` and ``error`` set
        (see `generate_stream`). A KeyboardInterrupt (Ctrl-C, or raised by ``stream_callback``)
        aborts the running requests and is re-raised as `GenerationInterrupted`, whose ``outputs``
        hold what every request generated so far.
        """
        prompts, params = self._normalize(prompts, sampling_params)
        rejected: dict[int, RequestOutput] = {}
        ids: dict[int, str] = {}
        run = self._run(prompts, params, use_tqdm, rejected, ids)
        # without a stream_callback nobody reads the deltas' text: each request's text is
        # decoded once, when it finishes (stop strings are still searched token by token)
        from .engine.engine import LLMEngine

        local = isinstance(self.engine, LLMEngine)  # a tensor-parallel front keeps its default
        streaming = self.engine.stream_text if local else None
        if local:
            self.engine.stream_text = stream_callback is not None
        try:
            for d in run:
                if stream_callback is not None:
                    stream_callback(d)
        except KeyboardInterrupt:
            run.close()  # aborts this call's unfinished requests (a no-op when the generator raised)
            raise GenerationInterrupted(self._partial(prompts, rejected, ids)) from None
        finally:
            if local:
                self.engine.stream_text = streaming
        return [
            rejected[i] if i in rejected else self.engine.pop_output(ids[i])
            for i in range(len(ids) + len(rejected))
        ]

    def _partial(self, prompts, rejected: dict, ids: dict) -> list[RequestOutput]:
        """The outputs of an interrupted `generate`: what each request has so far ("abort")."""
        outs = []
        for i, prompt in enumerate(prompts):
            if i in rejected:
                outs.append(rejected[i])
                continue
            req = self.engine.requests.get(ids.get(i))
            if req is not None and not req.finished:
                self.engine.abort_request(req.request_id)
            if req is None:  # interrupted before this prompt was queued
                out = RequestOutput.rejected(
                    f"unqueued-{i}",
                    prompt,
                    prompt if isinstance(prompt, list) else [],
                    "interrupted before the request was queued",
                )
                out.finish_reason, out.error = "abort", None
            else:
                out = self.engine.pop_output(req.request_id)
            outs.append(out)
        return outs


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _config(cls, **fields):
    """``cls(**fields)``, its ValueError worded for the LLM's keyword argument it names."""
    return _call(cls, **fields)


def _call(fn, *args, **kwargs):
    """``fn(...)``; a config's ValueError ``"<Config>.<field> ..."`` re-raised as ``"LLM: <field> ..."``
    (the LLM's keyword arguments have the fields' names)."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        msg = str(exc).removeprefix("SchedulerConfig.").removeprefix("CacheConfig.")
        raise ValueError(f"LLM: {msg}") from None


def _try_tokenizer(path: Path):
    """The checkpoint's tokenizer, or None when paddleformers or the tokenizer files are missing."""
    names = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "vocab.json")
    if not any((path / n).exists() for n in names):
        return None
    try:
        from .model.loader import load_tokenizer

        return load_tokenizer(path)
    except ImportError:
        return None
