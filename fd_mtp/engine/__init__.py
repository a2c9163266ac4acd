"""The plain-decoding engine: model runner (``share_inputs``, ``insert_tasks_v1``), KV block manager,
sampler, scheduler with chunked prefill and preemption, requests and outputs.

Submodules are imported on demand; ``fd_mtp.engine.sampling_params`` and ``request`` need no paddle.
"""
