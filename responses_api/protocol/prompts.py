"""Reusable prompts: `prompt: {id, version?, variables?}` on a create, applied as OpenAI applies
its stored prompts, from the gateway's own registry (models.Prompt, PromptVersion).

A version holds instructions and/or input messages, and optionally a model, tools, `text.format`
and reasoning. Applying it rewrites the create's body, before it is parsed for the run (so tool
planning, admission and a worker's job see the applied request):

- `{{name}}` in the template's text is replaced by the variable `name`: a string, or an
  `input_text`'s text; an `input_image` or `input_file` variable becomes a content part of its
  own where the template's message places it (its text split around it), and is a 400 where only
  text can go (the instructions, an assistant's text).
- The request's own fields take precedence: `model`, `instructions`, `tools`, `text.format`
  and `reasoning` come from the template only where the request sends none; the template's
  input messages come before the request's input (as OpenAI puts a prompt's messages first).
- Every variable the template uses must be given (a 400 naming `prompt.variables.<name>`), and a
  variable the template does not use is a 400 naming it too, as OpenAI answers an unknown one:
  a misspelt name would otherwise leave a placeholder unfilled in silence.
- The applied body's `prompt` names the version used (`version` as a string, as OpenAI echoes
  it): the Response echoes it. Only the create flow applies a prompt (orchestration/prompts.py),
  and the body it parses again and hands a worker has no `prompt`: it is never applied twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequest, NotFound
from .items import normalize_input
from .request import _reasoning, _text  # the request parser's own checks, not a copy
from .tools import normalize_tools

# OpenAI's ids are `pmpt_` and hex; the gateway's own (from GATEWAY_CONFIG) may be readable.
PROMPT_ID_PATTERN = r"^pmpt_[A-Za-z0-9_-]{1,59}$"
_PROMPT_ID = re.compile(PROMPT_ID_PATTERN)
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
VARIABLE_TYPES = frozenset({"input_text", "input_image", "input_file"})
# Message content parts whose text may hold a variable of any kind (other parts: text only).
_INPUT_ROLES = frozenset({"user", "system", "developer"})


class PromptError(ValueError):
    """A template the registry refuses (admin, GATEWAY_CONFIG): the field and why."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    prompt_id: str
    version: int
    instructions: str | None = None
    input: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    tools: list[dict[str, Any]] | None = None
    text_format: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PromptRef:
    """The `prompt` of a create, checked: `version` as sent (None: the prompt's default)."""

    id: str
    version: int | None
    variables: dict[str, Any]


def prompt_ref(body: dict[str, Any]) -> PromptRef | None:
    """The create's `prompt`, its shape checked (the parser checked it is an object with an id)."""
    prompt = body.get("prompt")
    if prompt is None:
        return None
    prompt_id = prompt["id"]
    if not _PROMPT_ID.match(prompt_id):
        raise NotFound(f"Prompt with id '{prompt_id}' not found.", param="prompt.id")
    version = prompt.get("version")
    number: int | None = None
    if version is not None:
        if not version.isdigit() or int(version) < 1:
            raise InvalidRequest(
                f"Invalid 'prompt.version': {version!r}; expected a version number such as '1'.",
                param="prompt.version",
            )
        number = int(version)
    variables = prompt.get("variables") or {}
    for name, value in variables.items():
        _check_variable(name, value)
    return PromptRef(prompt_id, number, dict(variables))


def _check_variable(name: str, value: Any) -> None:
    param = f"prompt.variables.{name}"
    if isinstance(value, str):
        return
    if not isinstance(value, dict) or value.get("type") not in VARIABLE_TYPES:
        raise InvalidRequest(
            f"Invalid type for '{param}': expected a string or an input_text, input_image or input_file object.",
            param=param,
        )
    if value["type"] == "input_text" and not isinstance(value.get("text"), str):
        raise InvalidRequest(f"Missing required parameter: '{param}.text'.", param=f"{param}.text")


def template_variables(template: PromptTemplate) -> set[str]:
    """The variable names the template's text uses."""
    return set(_names(template))


def _names(template: PromptTemplate) -> Iterator[str]:
    if template.instructions:
        yield from _VARIABLE.findall(template.instructions)
    for message in template.input:
        for text in _texts(message):
            yield from _VARIABLE.findall(text)


def _texts(message: dict[str, Any]) -> Iterator[str]:
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


def check_template(template: PromptTemplate) -> None:
    """What the registry stores is a template a create can use: its input messages, tools, text
    format and reasoning parse as a request's would. Raises PromptError naming the field."""
    if not template.instructions and not template.input:
        raise PromptError("instructions", "A prompt version needs instructions or input messages (or both).")
    checks: list[tuple[str, Any]] = [
        ("input", lambda: _check_input(template.input)),
        ("tools", lambda: normalize_tools(template.tools)),
    ]
    for name, check in checks:
        try:
            check()
        except InvalidRequest as exc:
            raise PromptError(name, exc.message) from None
    try:
        if template.text_format is not None:
            _text({"format": template.text_format})
    except InvalidRequest as exc:
        raise PromptError("text_format", exc.message) from None
    try:
        _reasoning(template.reasoning)
    except InvalidRequest as exc:
        raise PromptError("reasoning", exc.message) from None
    for name in template_variables(template):
        if not _VARIABLE_NAME.match(name):
            raise PromptError("input", f"Invalid variable name {name!r}.")


def _check_input(messages: Any) -> None:
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and m.get("role") in _INPUT_ROLES | {"assistant"} for m in messages
    ):
        raise InvalidRequest("Expected a list of messages, each with a role (user, system, developer or assistant).")
    normalize_input(messages)


def apply_prompt(body: dict[str, Any], template: PromptTemplate, ref: PromptRef) -> dict[str, Any]:
    """The create's body with the template applied (see the module's docstring)."""
    used = template_variables(template)
    for name in sorted(ref.variables.keys() - used):
        raise InvalidRequest(
            f"Unknown prompt variable '{name}': prompt '{template.prompt_id}' version {template.version} does not use it.",
            param=f"prompt.variables.{name}",
        )
    for name in sorted(used - ref.variables.keys()):
        raise InvalidRequest(
            f"Missing prompt variable '{name}': prompt '{template.prompt_id}' version {template.version} uses it.",
            param=f"prompt.variables.{name}",
        )
    out = dict(body)
    if not body.get("model") and template.model:
        out["model"] = template.model
    if body.get("instructions") is None and template.instructions:
        out["instructions"] = _text_only(template.instructions, ref.variables, "instructions")
    if template.input:
        own = body.get("input")
        if isinstance(own, str):
            own = [{"role": "user", "content": own}]
        out["input"] = [_message(m, ref.variables) for m in template.input] + list(own or [])
    if body.get("tools") is None and template.tools:
        out["tools"] = template.tools
    text = body.get("text")
    if template.text_format is not None and (not isinstance(text, dict) or text.get("format") is None):
        out["text"] = {**(text if isinstance(text, dict) else {}), "format": template.text_format}
    if body.get("reasoning") is None and template.reasoning is not None:
        out["reasoning"] = template.reasoning
    out["prompt"] = {
        "id": template.prompt_id,
        "version": str(template.version),
        "variables": ref.variables or None,
    }
    return out


def _text_of(name: str, value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if value["type"] == "input_text":
        return str(value["text"])
    raise InvalidRequest(
        f"Prompt variable '{name}' is an {value['type']}, which the template places in {where}, where only text can go.",
        param=f"prompt.variables.{name}",
    )


def _text_only(text: str, variables: dict[str, Any], where: str) -> str:
    return _VARIABLE.sub(lambda m: _text_of(m.group(1), variables[m.group(1)], where), text)


def _message(message: dict[str, Any], variables: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    content = message.get("content")
    parts_allowed = role in _INPUT_ROLES
    where = f"a {role} message"
    if isinstance(content, str):
        if not parts_allowed or not _has_part_variable(content, variables):
            return {**message, "content": _text_only(content, variables, where)}
        return {**message, "content": _split({"type": "input_text", "text": content}, variables)}
    if not isinstance(content, list):
        return dict(message)
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            parts.append(part)
        elif parts_allowed and part.get("type") == "input_text":
            parts += _split(part, variables)
        else:
            parts.append({**part, "text": _text_only(part["text"], variables, where)})
    return {**message, "content": parts}


def _has_part_variable(text: str, variables: dict[str, Any]) -> bool:
    return any(
        not isinstance(variables[n], str) and variables[n]["type"] != "input_text" for n in _VARIABLE.findall(text)
    )


def _split(part: dict[str, Any], variables: dict[str, Any]) -> list[dict[str, Any]]:
    """An input_text part with its variables put in: text inline; an image or a file becomes a
    part of its own between the text before and after it (empty text parts left out)."""
    out: list[dict[str, Any]] = []
    text: list[str] = []
    position = 0
    source = part["text"]
    for match in _VARIABLE.finditer(source):
        text.append(source[position : match.start()])
        position = match.end()
        value = variables[match.group(1)]
        if isinstance(value, str) or value["type"] == "input_text":
            text.append(_text_of(match.group(1), value, "text"))
            continue
        if "".join(text):
            out.append({**part, "text": "".join(text)})
        text = []
        out.append(dict(value))
    text.append(source[position:])
    if "".join(text) or not out:
        out.append({**part, "text": "".join(text)})
    return out
