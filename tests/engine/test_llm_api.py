"""`fd_mtp.LLM` argument handling: validation up front (naming the argument), sampling params as
dicts, a prompt the tokenizer cannot encode as a per-request error, Ctrl-C returning partial outputs."""

import json

import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.llm import GenerationInterrupted  # noqa: E402

from .util import GREEDY, CharTokenizer, make_llm, naive_greedy, prompts, tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def llm():
    return make_llm()


# --------------------------------------------------------------------------- sampling params
def test_sampling_params_as_a_dict(llm):
    p = prompts([5, 3], seed=1)
    outs = llm.generate(p, {"temperature": 0, "max_tokens": 4, "ignore_eos": True}, use_tqdm=False)
    for prompt, o in zip(p, outs):
        assert o.error is None and o.token_ids == naive_greedy(tiny_model(), prompt, 4)
    # one dict per prompt, mixed with SamplingParams
    outs = llm.generate(
        p,
        [
            {"temperature": 0, "max_tokens": 2, "ignore_eos": True},
            SamplingParams(max_tokens=3, **GREEDY),
        ],
        use_tqdm=False,
    )
    assert [len(o.token_ids) for o in outs] == [2, 3]
    assert llm.generate(p[0], {"max_tokens": 1}, use_tqdm=False)[0].finished


def test_bad_sampling_params_name_the_right_type_and_field(llm):
    with pytest.raises(ValueError, match=r"unknown SamplingParams fields \['temprature'\]"):
        llm.generate("a", {"temprature": 0}, use_tqdm=False)
    with pytest.raises(ValueError, match="SamplingParams.top_p"):
        llm.generate([5, 6], {"top_p": 0}, use_tqdm=False)
    # a string is not a list of params (it used to be taken as one, reporting "got str")
    with pytest.raises(
        ValueError, match="sampling_params must be a SamplingParams, a dict of its fields.*got str"
    ):
        llm.generate([5, 6], "greedy", use_tqdm=False)
    with pytest.raises(
        ValueError, match=r"sampling_params\[1\] must be a SamplingParams or a dict.*got int"
    ):
        llm.generate([[5, 6], [7]], [SamplingParams(), 3], use_tqdm=False)


# --------------------------------------------------------------------------- constructor arguments
@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(seed="x"), r"LLM: seed must be an int in \[0, .*got 'x'"),
        (dict(seed=-1), "LLM: seed must be an int"),
        (dict(seed=1.5), "LLM: seed must be an int"),
        (dict(block_size=65536), r"LLM: block_size must be an int in \[1, 1024\]"),
        (dict(block_size=0), r"LLM: block_size must be an int in \[1, 1024\]"),
        (dict(block_size=True), r"LLM: block_size must be an int"),
        (dict(max_num_seqs=0), "LLM: max_num_seqs must be an int >= 1"),
        (dict(device="tpu"), r"LLM: device must be one of \['cpu', 'gpu'\]"),
        (dict(device=0), "LLM: device must be one of"),
        (
            dict(dtype="int8"),
            r"LLM: dtype must be None or one of \['float32', 'bfloat16', 'float16'\]",
        ),
        (
            dict(speculative_config={"method": "mtp", "model": "/nonexistent"}),
            "MTP block of the main checkpoint",
        ),
    ],
)
def test_bad_constructor_arguments_raise_naming_them(kw, message):
    with pytest.raises(ValueError, match=message):
        make_llm(**kw)


def test_block_size_bound_is_inclusive():
    assert make_llm(max_num_seqs=1, block_size=1024).runner.block_size == 1024


def test_model_of_the_wrong_type_is_a_type_error():
    with pytest.raises(
        TypeError,
        match=r"LLM: model must be a checkpoint directory \(str or os.PathLike\).*got int",
    ):
        fd_mtp.LLM(42)
    with pytest.raises(TypeError, match="LLM: model must be"):
        fd_mtp.LLM({"path": "x"})


def test_half_precision_on_cpu_is_refused_naming_dtype(tmp_path):
    from fd_mtp.testing import write_random_checkpoint

    ckpt = write_random_checkpoint(tmp_path, seed=0)
    for dtype in ("bfloat16", "float16"):
        with pytest.raises(
            ValueError, match=f"LLM: dtype='{dtype}' is not supported on device 'cpu'.*'float32'"
        ):
            fd_mtp.LLM(ckpt, device="cpu", dtype=dtype, max_model_len=32)
    assert (
        fd_mtp.LLM(ckpt, device="cpu", dtype="float32", max_model_len=32, max_num_seqs=1).device
        == "cpu"
    )


@pytest.mark.skipif(paddle.is_compiled_with_cuda(), reason="needs a CPU-only paddle")
def test_gpu_on_a_cpu_build_is_a_clear_error():
    for device in ("gpu", "cuda", "gpu:0", "CUDA"):
        with pytest.raises(
            ValueError,
            match=f"LLM: device={device!r} needs a CUDA build of PaddlePaddle; "
            r"this paddle \(.*\) is a CPU build",
        ):
            make_llm(device=device)


def test_unknown_model_type_is_refused(tmp_path):
    from fd_mtp.testing import write_random_checkpoint

    ckpt = write_random_checkpoint(tmp_path, seed=0)
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(dict(cfg, model_type="llama")))
    with pytest.raises(
        ValueError, match=r"model_type 'llama' is not supported.*'ernie4_5', 'ernie4_5_moe'"
    ):
        fd_mtp.LLM(ckpt, max_model_len=32)


# --------------------------------------------------------------------------- prompts the tokenizer rejects
class PickyTokenizer(CharTokenizer):
    """Raises (like a real tokenizer's C++ binding) on a prompt containing "!"."""

    def encode(self, text):
        if "!" in text:
            raise RuntimeError("Unable to cast Python instance of type <class 'str'>")
        return super().encode(text)


def test_untokenizable_prompt_is_a_per_request_error():
    llm = make_llm(tokenizer=PickyTokenizer())
    batch = ["abc", "\ud800", "ab\udfffc", "no!", [5, 6, 7]]
    outs = llm.generate(batch, SamplingParams(max_tokens=3, **GREEDY), use_tqdm=False)
    assert len(outs) == len(batch)
    for i in (0, 4):
        assert (
            outs[i].error is None
            and outs[i].finish_reason == "length"
            and len(outs[i].token_ids) == 3
        )
    assert outs[0].token_ids == naive_greedy(tiny_model(), [3, 4, 5], 3)
    for i, msg in (
        (1, "not valid Unicode text: surrogates not allowed '\\ud800' at character 0"),
        (2, "at character 2"),
        (3, "the tokenizer could not encode the prompt: RuntimeError"),
    ):
        assert outs[i].finish_reason == "error" and msg in outs[i].error and outs[i].token_ids == []


def test_lone_surrogate_with_the_demo_tokenizer():
    llm = fd_mtp.LLM(max_num_seqs=2, max_model_len=64)
    outs = llm.generate(
        ["def f(", "\ud800"], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=False
    )
    assert outs[0].error is None and len(outs[0].token_ids) == 2
    assert outs[1].finish_reason == "error" and "surrogate" in outs[1].error


# --------------------------------------------------------------------------- Ctrl-C
def test_keyboard_interrupt_returns_partial_outputs(llm):
    p = prompts([4, 6, 3], seed=2)
    seen = []

    def callback(d):
        seen.append(d)
        if len([x for x in seen if x.index == 0]) == 3:  # after request 0's third token
            raise KeyboardInterrupt

    params = [SamplingParams(max_tokens=n, **GREEDY) for n in (20, 2, 20)]
    with pytest.raises(KeyboardInterrupt) as info:
        llm.generate(p, params, use_tqdm=False, stream_callback=callback)
    assert isinstance(info.value, GenerationInterrupted)
    outs = info.value.outputs
    assert len(outs) == 3
    assert outs[0].finish_reason == "abort" and outs[0].token_ids == naive_greedy(
        tiny_model(), p[0], 3
    )
    assert outs[1].finish_reason == "length" and outs[1].token_ids == naive_greedy(
        tiny_model(), p[1], 2
    )
    assert outs[2].finish_reason == "abort" and outs[2].token_ids == naive_greedy(
        tiny_model(), p[2], 3
    )
    # every slot and block is free again, and the LLM still works
    assert not llm.engine.has_unfinished() and not llm.engine.requests
    assert llm.engine.block_manager.num_free == llm.engine.block_manager.num_blocks
    assert (
        llm.generate(p[1], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=False)[0].token_ids
        == outs[1].token_ids
    )
