"""Chat prompts: the checkpoint's chat template when it has one, else a documented default.

Where the template comes from, first found wins:

1. ``--chat-template FILE`` (a Jinja template file);
2. the checkpoint's ``chat_template.jinja``, or the ``chat_template`` string of its
   ``tokenizer_config.json`` (Hugging Face / paddleformers layout);
3. none: `default_chat_prompt` (each message as ``Role: content`` and a blank line, then
   ``Assistant:``).

A template is rendered with Jinja2 in a sandbox, with ``messages`` (``[{"role", "content"}]``,
plus ``tool_call_id`` / ``tool_calls`` / ``name`` where a message has them), ``add_generation_prompt``
(True for chat completions) and the tokenizer's ``bos_token`` / ``eos_token`` strings (from
``tokenizer_config.json`` when it names them), as Hugging Face's ``apply_chat_template`` does. A
``tool`` message (the result of a tool call) is the template's to render; the default writes it
as ``Tool: content``.
"""

from __future__ import annotations

import json
from pathlib import Path

ROLE_NAMES = {
    "system": "System",
    "developer": "System",
    "user": "User",
    "assistant": "Assistant",
    "tool": "Tool",
}


def _as_dict(message) -> dict:
    """A message as the template sees it: ``(role, content)`` or a dict with those keys."""
    if isinstance(message, dict):
        return message
    role, content = message
    return {"role": role, "content": content}


def default_chat_prompt(messages, add_generation_prompt: bool = True) -> str:
    """The prompt of ``[(role, content), ...]`` (or ``[{"role", "content", ...}]``) under the
    default template.

    >>> default_chat_prompt([("system", "Be brief."), ("user", "Hi")])
    'System: Be brief.\\n\\nUser: Hi\\n\\nAssistant:'
    >>> default_chat_prompt([{"role": "tool", "content": "42", "tool_call_id": "c1"}], False)
    'Tool: 42\\n\\n'
    """
    text = "".join(f"{ROLE_NAMES[m['role']]}: {m['content']}\n\n" for m in map(_as_dict, messages))
    return text + "Assistant:" if add_generation_prompt else text


class ChatTemplate:
    """A Jinja chat template (``source``), or the default when ``source`` is None.

    Args:
        source: the template text, or None.
        special_tokens: ``bos_token`` / ``eos_token`` strings passed to the template.

    >>> t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    ...                  "{% if add_generation_prompt %}<assistant>{% endif %}")
    >>> t.render([("user", "Hi")])
    '<user>Hi<assistant>'
    >>> ChatTemplate(None).render([("user", "Hi")])
    'User: Hi\\n\\nAssistant:'
    """

    def __init__(self, source: str | None, special_tokens: dict | None = None):
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self._template = None
        if source is not None:
            try:
                from jinja2 import TemplateSyntaxError
                from jinja2.sandbox import ImmutableSandboxedEnvironment
            except ImportError as exc:  # pragma: no cover - jinja2 is a pinned serving dependency
                raise ValueError("the chat template needs jinja2 (pip install jinja2)") from exc
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            try:
                self._template = env.from_string(source)
            except TemplateSyntaxError as exc:
                raise ValueError(
                    f"the chat template is not valid Jinja: {exc.message} (line {exc.lineno})"
                ) from None

    @property
    def is_default(self) -> bool:
        return self._template is None

    def render(self, messages, add_generation_prompt: bool = True) -> str:
        """The prompt text of ``[(role, content), ...]`` or of message dicts (``role``,
        ``content`` and any of ``name``, ``tool_call_id``, ``tool_calls``); ValueError when the
        template fails."""
        if self._template is None:
            return default_chat_prompt(messages, add_generation_prompt)
        try:
            return self._template.render(
                messages=[_as_dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
            )
        except Exception as exc:  # a template's own raise_exception() or a bad variable
            raise ValueError(
                f"the chat template failed on these messages: {type(exc).__name__}: {exc}"
            ) from None


def load_chat_template(checkpoint: str | Path | None, override: str | Path | None = None):
    """The `ChatTemplate` of a checkpoint directory (see the module docstring); ``override``: a
    template file that wins. ValueError for an unreadable override or an invalid template."""
    tokens = {}
    config = {}
    d = Path(checkpoint) if checkpoint is not None else None
    if d is not None and (d / "tokenizer_config.json").is_file():
        config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
        for key in ("bos_token", "eos_token"):
            value = config.get(key)
            if isinstance(value, dict):  # {"content": "<s>", ...}
                value = value.get("content")
            if isinstance(value, str):
                tokens[key] = value
    if override is not None:
        try:
            return ChatTemplate(Path(override).read_text(encoding="utf-8"), tokens)
        except OSError as exc:
            raise ValueError(f"--chat-template: cannot read {override}: {exc.strerror}") from None
    if d is not None and (d / "chat_template.jinja").is_file():
        return ChatTemplate((d / "chat_template.jinja").read_text(encoding="utf-8"), tokens)
    source = config.get("chat_template")
    if isinstance(source, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    return ChatTemplate(source if isinstance(source, str) else None, tokens)
