"""Entrypoints above `fd_mtp.LLM`: the async engine front (`fd_mtp.entrypoints.async_llm`) and the
OpenAI-compatible HTTP server (`fd_mtp.entrypoints.openai`, ``fd-mtp serve``).

Layer: entrypoints (design §7): imports go down to ``fd_mtp.llm`` and ``fd_mtp.engine`` only.
Nothing here is imported by ``import fd_mtp``; FastAPI, uvicorn and prometheus_client are imported
by the server modules that need them, not by this package.
"""
