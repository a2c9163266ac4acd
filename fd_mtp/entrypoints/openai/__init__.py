"""The OpenAI-compatible HTTP server (``fd-mtp serve``): `api_server` (FastAPI app, uvicorn),
`protocol` (request models), `serving` (completions, chat), `metrics` (Prometheus), `cli_args`."""
