"""``fd-mtp serve --speculative-config '{"method": "eagle3", "model": DIR, ...}'``: the server
drafts with an EAGLE / EAGLE-3 head passed through the JSON option, and its greedy output equals
offline plain decoding (real server on 127.0.0.1, the official ``openai`` client, the demo
model with random heads written by `fd_mtp.testing.eagle`)."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

import fd_mtp  # noqa: E402
from fd_mtp.assets import default_model_path  # noqa: E402
from fd_mtp.testing.eagle import write_random_eagle_head  # noqa: E402

from .server_util import ServerProcess, greedy_pair, metrics, openai_client  # noqa: E402

MODEL = "ernie45_tiny_mtp"
PROMPTS = ["def read_config(path):\n", "import os\nimport sys\n\n\nclass Parser:\n"]


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_serve_drafts_with_an_eagle_head_and_equals_plain(tmp_path, method):
    head = write_random_eagle_head(tmp_path / method, default_model_path(), method=method, seed=3)
    spec = {"method": method, "model": str(head), "num_speculative_tokens": 2, "num_model_steps": 2}
    proc = ServerProcess(
        "--max-num-seqs",
        "2",
        "--max-model-len",
        "256",
        "--block-size",
        "8",
        "--speculative-config",
        json.dumps(spec),
    )
    offline = fd_mtp.LLM(max_model_len=256, block_size=8)
    try:
        proc.launch().wait_ready()
        c = openai_client(proc.url)
        for prompt in PROMPTS:
            out, want = greedy_pair(c, offline, prompt, 16, MODEL)
            assert out.choices[0].token_ids == want.token_ids
        drafted = [v for k, v in metrics(proc.url).items() if "draft" in k and "total" in k]
        assert drafted and max(drafted) > 0, metrics(proc.url)
    finally:
        proc.terminate(timeout=30)
