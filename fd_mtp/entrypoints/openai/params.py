"""Request bodies -> `fd_mtp.SamplingParams`, and the error a refused request gets.

`RequestError` is what every handler raises for a request the server refuses (the field, an
OpenAI error type and code, the HTTP status and headers); `sampling_params` maps a body's sampling
fields to `SamplingParams` and turns its range errors into a `RequestError` naming the body's own
field; `sample_params` derives the seeds of ``n`` samples; `spec_dict` is the JSON of a request's
speculative-decoding metrics.
"""

from __future__ import annotations

import dataclasses
import re

from starlette.responses import JSONResponse

from ...engine.request import SpeculativeMetrics
from ...engine.sampling_params import SEED_MODULUS, SamplingParams
from .protocol import error_body

__all__ = ["RequestError", "refuse_unsupported", "sample_params", "sampling_params", "spec_dict"]


class RequestError(Exception):
    """A request the server refuses: HTTP ``status``, OpenAI error ``type``, the field (``param``),
    a ``code`` and extra response ``headers`` (``Retry-After`` of a 503)."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.status, self.type, self.code = (
            message,
            param,
            status,
            type,
            code,
        )
        self.headers = headers

    def response(self) -> JSONResponse:
        return JSONResponse(
            error_body(self.message, type=self.type, param=self.param, code=self.code),
            status_code=self.status,
            headers=self.headers,
        )


def spec_dict(m: SpeculativeMetrics | None) -> dict | None:
    """The JSON form of a request's (or a sum of) `SpeculativeMetrics`; None without one."""
    if m is None:
        return None
    return {
        "num_drafts": m.num_steps,
        "num_draft_tokens": m.num_drafted,
        "num_accepted_tokens": m.num_accepted,
        "accepted_tokens_per_position": list(m.accepted_per_position),
        "draft_tokens_per_position": list(m.drafted_per_position),
        "acceptance_per_position": m.acceptance_per_position,
        "acceptance_rate": m.acceptance_rate,
        "mean_accepted_length": m.mean_accepted_length,
    }


def sampling_params(
    body,
    max_tokens: int,
    max_tokens_name: str = "max_tokens",
    logprobs: int | None = None,
    logprobs_name: str = "logprobs",
) -> SamplingParams:
    """`SamplingParams` of a request body; RequestError naming the field when a value is out of
    range (SamplingParams' own checks)."""
    try:
        return SamplingParams(
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=0 if body.top_k == -1 else body.top_k,
            max_tokens=max_tokens,
            min_tokens=body.min_tokens,
            stop=body.stop,
            stop_token_ids=body.stop_token_ids,
            ignore_eos=body.ignore_eos,
            repetition_penalty=body.repetition_penalty,
            frequency_penalty=body.frequency_penalty,
            presence_penalty=body.presence_penalty,
            seed=body.seed,
            include_stop_str_in_output=body.include_stop_str_in_output,
            skip_special_tokens=body.skip_special_tokens,
            logprobs=logprobs,
        )
    except ValueError as exc:
        msg = str(exc)
        m = re.match(r"SamplingParams\.(\w+) (.*)", msg, re.S)
        if m is None:
            raise RequestError(msg) from None
        param = {"max_tokens": max_tokens_name, "logprobs": logprobs_name}.get(
            m.group(1), m.group(1)
        )
        raise RequestError(f"{param} {m.group(2)}", param=param, code="invalid_value") from None


def sample_params(params: SamplingParams, n: int) -> list[SamplingParams]:
    """The `SamplingParams` of the ``n`` samples of one prompt: with a seed ``s``, sample j draws
    with seed ``(s + j) mod 2**63 - 2`` (vLLM's derivation), so a seeded ``n > 1`` request is
    reproducible and its sample j equals a request with ``n = 1`` and seed ``s + j``; without a
    seed each sample gets the engine's own (a different one per request)."""
    if params.seed is None:
        return [params] * n
    return [dataclasses.replace(params, seed=(params.seed + j) % SEED_MODULUS) for j in range(n)]


def refuse_unsupported(body, fields: dict) -> None:
    """400 for fields the engine does not support yet: ``fields`` maps a name to whether the body
    uses it."""
    for name, used in fields.items():
        if used:
            raise RequestError(
                f"{name} is not supported by this server yet (the engine has no {name} support)",
                param=name,
                code="unsupported_parameter",
            )
