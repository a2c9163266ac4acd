"""Chat prompts: the checkpoint's template (chat_template.jinja or tokenizer_config.json), a
``--chat-template`` file that overrides it, the default template, and clear errors."""

import doctest
import json

import pytest

pytest.importorskip("jinja2")

from fd_mtp.entrypoints.openai import chat_template as ct  # noqa: E402

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)
MESSAGES = [("system", "Be brief."), ("user", "Hi")]


def test_docstring_examples():
    result = doctest.testmod(ct)
    assert result.attempted > 0 and result.failed == 0


def test_tokenizer_config_template_with_special_tokens(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": TEMPLATE}
        )
    )
    t = ct.load_chat_template(tmp_path)
    assert not t.is_default
    assert t.render(MESSAGES) == "<s>[system] Be brief.\n[user] Hi\n[assistant]"


def test_jinja_file_wins_over_the_config_and_override_wins_over_both(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "config"}))
    (tmp_path / "chat_template.jinja").write_text("file")
    assert ct.load_chat_template(tmp_path).render(MESSAGES) == "file"
    override = tmp_path / "mine.jinja"
    override.write_text("{{ messages | length }}")
    assert ct.load_chat_template(tmp_path, override).render(MESSAGES) == "2"


def test_named_templates_use_the_default_one(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [
                    {"name": "tool_use", "template": "T"},
                    {"name": "default", "template": "D"},
                ]
            }
        )
    )
    assert ct.load_chat_template(tmp_path).render(MESSAGES) == "D"


def test_no_template_is_the_default(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    t = ct.load_chat_template(tmp_path)
    assert t.is_default
    assert t.render(MESSAGES) == "System: Be brief.\n\nUser: Hi\n\nAssistant:"
    from fd_mtp.assets import DEMO_MODEL

    assert ct.load_chat_template(DEMO_MODEL).is_default  # the demo checkpoint has none


def test_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="not valid Jinja"):
        ct.ChatTemplate("{% for %}")
    with pytest.raises(ValueError, match="--chat-template: cannot read"):
        ct.load_chat_template(None, tmp_path / "missing.jinja")
    t = ct.ChatTemplate("{{ raise_error() }}")
    with pytest.raises(ValueError, match="the chat template failed"):
        t.render(MESSAGES)


def test_tool_messages_reach_the_template():
    t = ct.ChatTemplate(
        "{% for m in messages %}[{{ m.role }}{% if m.tool_call_id %} {{ m.tool_call_id }}"
        "{% endif %}{% for c in m.tool_calls or [] %} call {{ c.function.name }}{% endfor %}]"
        " {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    messages = [
        {"role": "user", "content": "6 * 7?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "mul"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]
    assert t.render(messages) == "[user] 6 * 7?\n[assistant call mul] \n[tool c1] 42\n[assistant]"
    assert t.render(messages, add_generation_prompt=False).endswith("[tool c1] 42\n")
    default = ct.ChatTemplate(None)
    assert default.render(messages) == "User: 6 * 7?\n\nAssistant: \n\nTool: 42\n\nAssistant:"
