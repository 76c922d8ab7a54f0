"""Chat template rendering: OpenAI messages + tools -> prompt text.

One ``ChatRenderer`` per process picks the template once (``--chat-template`` override,
else the model's own template when it knows about tools, else a built-in default),
compiles it in a sandbox the way transformers does, and renders requests. Messages are
normalised first so every template sees the same shapes: content as a string, tool-call
arguments as JSON objects, ``developer`` as ``system``, Mistral's 9-character call ids.
Anything the client got wrong raises ``RenderError(message, param)`` (an HTTP 400).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, TypeAlias

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chat_templates import BUILTIN_TEMPLATES, builtin_template_path
from server.errors import APIError
from server.json_types import JsonArray, JsonMapping, JsonObject, JsonValue
from tool_parsers import ModelFamily

if TYPE_CHECKING:
    from jinja2.parser import Parser

__all__ = [
    "BUILTIN_TEMPLATES",
    "ChatRenderer",
    "RenderError",
    "builtin_template_path",
    "compile_template",
    "load_model_template",
    "normalize_messages",
    "normalize_tools",
]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_RESERVED_KWARGS = frozenset({"messages", "tools", "add_generation_prompt"})
_TOOLS_RE = re.compile(r"\btools\b")


class RenderError(APIError, ValueError):
    """A request the chat template cannot render; ``param`` names the offending field
    (``messages`` when none is known). A 400 ``invalid_value`` as it stands."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, code="invalid_value", param=param or "messages")


# --------------------------------------------------------------------------- jinja
class _GenerationTag(jinja2.ext.Extension):
    """Accept ``{% generation %}...{% endgeneration %}`` (assistant masks) as a no-op."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Callable[[], str]) -> str:
        return caller()


def _tojson(
    value: object,  # whatever the template holds (a message, a dict it built, a number...)
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes and forces ASCII; models were trained on plain JSON.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _fromjson(value: object) -> object:
    """A JSON text as its value (else the value as it is): Mistral's template writes a tool result
    that is JSON as that JSON, as mistral-common does. Parsing only; bounded by the request's size."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class _Sandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox, its verdict on an attribute kept per (type, name): jinja2 reads only the
    object's type and the attribute's name for it, and a template asks for every method it calls
    (``content.strip()``, ``tools.items()``): about a sixth of an agent turn's plan, before."""

    _verdicts: ClassVar[dict[tuple[type, str], bool]] = {}  # per process; templates name few attributes

    def is_safe_attribute(self, obj: object, attr: str, value: object) -> bool:
        kind = type(obj)
        if obj.__class__ is not kind:  # a proxy that claims another class: jinja2 asks each time
            return super().is_safe_attribute(obj, attr, value)
        verdict = self._verdicts.get((kind, attr))
        if verdict is None:
            verdict = super().is_safe_attribute(obj, attr, value)
            if len(self._verdicts) < 4096:
                self._verdicts[(kind, attr)] = verdict
        return verdict


def compile_template(source: str) -> jinja2.Template:
    """Compile a chat template in the same sandbox transformers uses."""
    env = _Sandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.filters["fromjson"] = _fromjson  # gramserve's own (the built-in mistral template); not in transformers
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


# --------------------------------------------------------------------------- model templates
def _token_text(value: object) -> str | None:
    """A special token's text: a string, or an added token's ``{"content": ...}`` (else None)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(content := value.get("content"), str):
        return content
    return None


def _pick_named(templates: object) -> str | None:
    """HF allows a list/dict of named templates; prefer the tool-use one."""
    if isinstance(templates, str):
        return templates
    if isinstance(templates, list):
        named = {t.get("name"): t.get("template") for t in templates if isinstance(t, dict)}
        found = [named.get(name) for name in ("tool_use", "default")]
    elif isinstance(templates, dict):
        found = [templates.get(name) for name in ("tool_use", "default")]
    else:
        return None
    return next((text for text in found if isinstance(text, str)), None)


#: A GGUF metadata value as read here: a string (as bytes), a number, an array, or None (skipped).
_GgufValue: TypeAlias = "bytes | int | float | list[_GgufValue] | None"
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read_gguf(path: Path) -> tuple[str | None, dict[str, str]]:
    """Chat template and bos/eos text from a GGUF header.

    A small sequential scan of the key/value section only: ``gguf.GGUFReader`` indexes
    every tensor and vocabulary entry and takes seconds on a 49K-token vocabulary."""
    with path.open("rb") as f:

        def unpack(fmt: str) -> int | float:  # one number (a bool for "<?")
            number: int | float = struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
            return number

        def count(fmt: str) -> int:  # a size, a type or a count: an unsigned integer format
            number: int = struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
            return number

        def string() -> bytes:
            return f.read(count("<Q"))

        def value(kind: int, keep: bool) -> _GgufValue:
            if kind == 8:
                return string()
            if kind == 9:
                item_kind, items_count = count("<I"), count("<Q")
                if item_kind in _GGUF_SCALARS and not keep:
                    f.seek(items_count * struct.calcsize(_GGUF_SCALARS[item_kind]), os.SEEK_CUR)
                    return None
                items = [value(item_kind, keep) for _ in range(items_count)]
                return items if keep else None
            if kind in _GGUF_SCALARS:
                return unpack(_GGUF_SCALARS[kind])
            raise ValueError(f"{path}: unknown GGUF value type {kind}")

        if f.read(4) != b"GGUF" or count("<I") not in (2, 3):
            raise ValueError(f"{path} is not a little-endian GGUF v2/v3 file")
        count("<Q")  # tensor count
        wanted = {"tokenizer.chat_template", "tokenizer.ggml.tokens",
                  "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}
        meta: dict[str, _GgufValue] = {}
        for _ in range(count("<Q")):
            key = string().decode("utf-8")
            kind = count("<I")
            result = value(kind, keep=key in wanted)
            if key in wanted:
                meta[key] = result
    raw = meta.get("tokenizer.chat_template")
    template = raw.decode("utf-8") if isinstance(raw, bytes) else None
    vocab = meta.get("tokenizer.ggml.tokens") or []
    tokens: dict[str, str] = {}
    for name in ("bos", "eos"):
        ident = meta.get(f"tokenizer.ggml.{name}_token_id")
        if isinstance(ident, int) and isinstance(vocab, list) and 0 <= ident < len(vocab):
            text = vocab[ident]
            if isinstance(text, bytes):  # an array of strings, as GGUF writes the vocabulary
                tokens[f"{name}_token"] = text.decode("utf-8")
    return template, tokens


def _read_model_dir(path: Path) -> tuple[str | None, dict[str, str]]:
    config: JsonObject = {}
    config_path = path / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
    tokens = {
        f"{name}_token": text
        for name in ("bos", "eos", "pad", "unk")
        if (text := _token_text(config.get(f"{name}_token"))) is not None
    }
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(encoding="utf-8"), tokens
    if (path / "chat_template.json").is_file():
        data = json.loads((path / "chat_template.json").read_text(encoding="utf-8"))
        if (found := _pick_named(data.get("chat_template"))) is not None:
            return found, tokens
    return _pick_named(config.get("chat_template")), tokens


def load_model_template(model_dir_or_tokenizer: object) -> tuple[str | None, dict[str, str]]:
    """The model's own chat template (or None) and its special tokens for the template.

    Accepts an HF model folder, a ``.gguf`` file, or a tokenizer object with a
    ``chat_template`` attribute (transformers / vLLM tokenizers)."""
    if model_dir_or_tokenizer is None:
        return None, {}
    if isinstance(model_dir_or_tokenizer, (str, os.PathLike)):
        path = Path(model_dir_or_tokenizer)
        if path.is_file() and path.suffix == ".gguf":
            return _read_gguf(path)
        if path.is_dir():
            return _read_model_dir(path)
        raise ValueError(f"model path {str(path)!r} is neither a model folder nor a .gguf file")
    tok = model_dir_or_tokenizer
    tokens = {
        f"{name}_token": text
        for name in ("bos", "eos", "pad", "unk")
        if (text := _token_text(getattr(tok, f"{name}_token", None))) is not None
    }
    return _pick_named(getattr(tok, "chat_template", None)), tokens


# --------------------------------------------------------------------------- normalisation
def _text_content(content: JsonValue, param: str) -> str:
    """OpenAI content (string, null, or text parts) -> one string, parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RenderError(f"{param} must be a string or a list of content parts", param)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or kind not in ("text", "refusal"):
            raise RenderError(
                f"{param}[{j}]: only text content parts are supported by this model, got {kind!r}",
                f"{param}[{j}]",
            )
        text = part.get("text" if kind == "text" else "refusal")
        if not isinstance(text, str):
            raise RenderError(f"{param}[{j}]: a {kind!r} content part needs a string {kind!r}", f"{param}[{j}].{kind}")
        texts.append(text)
    return "\n".join(texts)


def _arguments(value: JsonValue, param: str) -> JsonObject:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RenderError(f"{param} is not valid JSON ({exc.msg} at char {exc.pos})", param) from None
    if not isinstance(value, dict):
        raise RenderError(f"{param} must be a JSON object, got {type(value).__name__}", param)
    return value


def _tool_calls(calls: JsonValue, param: str, call_id_rule: Callable[[str], str] | None,
               names: dict[str, str]) -> JsonArray:
    """The calls, validated and normalised; ``names`` learns each call's function name by its id as given."""
    if not isinstance(calls, list):
        raise RenderError(f"{param} must be a list", param)
    out: JsonArray = []
    found: dict[str, str] = {}
    for j, call in enumerate(calls):
        where = f"{param}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(call, dict) or not isinstance(function, dict) or not isinstance(name, str) or not name:
            raise RenderError(f"{where}.function.name is required", f"{where}.function.name")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise RenderError(f"{where}.id is required (the id a later tool message answers)", f"{where}.id")
        found[call_id] = name
        out.append(
            {
                **call,
                "id": call_id_rule(call_id) if call_id_rule else call_id,
                "type": call.get("type", "function"),
                "function": {
                    **function,
                    "arguments": _arguments(function.get("arguments"), f"{where}.function.arguments"),
                },
            }
        )
    names.update(found)  # once every call is valid
    return out


def normalize_messages(messages: Sequence[JsonValue], *,
                       call_id: Callable[[str], str] | None = None) -> list[JsonObject]:
    """Validate OpenAI messages and give them the one shape every template expects
    (``call_id``: the model family's rule for call ids, e.g. Mistral's 9 characters).

    New dicts are returned; the input is never modified."""
    if not isinstance(messages, list) or not messages:
        raise RenderError("messages must be a non-empty list", "messages")
    names: dict[str, str] = {}  # tool call id (as given) -> function name
    out: list[JsonObject] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RenderError(f"{where} must be an object", where)
        role = message.get("role")
        if role not in _ROLES:
            known = ", ".join(sorted(_ROLES))
            raise RenderError(f"{where}.role {role!r} is not supported; use one of: {known}", f"{where}.role")
        item = dict(message)
        item["role"] = "system" if role == "developer" else role
        item["content"] = _text_content(message.get("content"), f"{where}.content")
        if role == "assistant":
            _reasoning_aliases(item, where)
            calls = message.get("tool_calls")
            if calls:
                item["tool_calls"] = _tool_calls(calls, f"{where}.tool_calls", call_id, names)
            else:
                item.pop("tool_calls", None)
        elif role == "tool":
            answered = message.get("tool_call_id")
            if not isinstance(answered, str) or not answered:
                raise RenderError(
                    f"{where}.tool_call_id is required: the id of the assistant tool call this answers",
                    f"{where}.tool_call_id",
                )
            if "name" not in item and answered in names:
                item["name"] = names[answered]
            item["tool_call_id"] = call_id(answered) if call_id else answered
        out.append(item)
    return out


_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")  # as clients send it / as templates read it


def _reasoning_aliases(item: JsonObject, where: str) -> None:
    """An earlier turn's thinking under every name templates read it by (Qwen3 and DeepSeek's
    ``reasoning_content``, vLLM's ``reasoning``, gpt-oss's ``thinking``), from the first one given."""
    given = next((k for k in _REASONING_KEYS if item.get(k) is not None), None)
    if given is None:
        return
    text = item[given]
    if not isinstance(text, str):
        raise RenderError(f"{where}.{given} must be a string", f"{where}.{given}")
    for key in _REASONING_KEYS:
        item.setdefault(key, text)
        if item[key] is None:
            item[key] = text


def normalize_tools(tools: Sequence[JsonValue] | None) -> list[JsonObject] | None:
    """Validate OpenAI tools; an empty list means no tools (None)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RenderError("tools must be a list", "tools")
    out: list[JsonObject] = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(tool, dict) or not isinstance(function, dict) or not isinstance(name, str) or not name:
            raise RenderError(f"tools[{i}].function.name is required", f"tools[{i}].function.name")
        if tool.get("type", "function") != "function":
            raise RenderError(f"tools[{i}].type must be 'function'", f"tools[{i}].type")
        out.append(dict(tool))
    return out or None


# --------------------------------------------------------------------------- renderer
def _resolve_override(chat_template: str) -> tuple[str, str]:
    """``--chat-template`` value -> (name, source): a built-in name, a file, or inline Jinja."""
    if chat_template in BUILTIN_TEMPLATES:
        return chat_template, builtin_template_path(chat_template).read_text(encoding="utf-8")
    path = Path(chat_template).expanduser()
    if path.is_file():
        return f"file:{path}", path.read_text(encoding="utf-8")
    if "{{" in chat_template or "{%" in chat_template:
        return "inline", chat_template
    known = ", ".join(sorted(BUILTIN_TEMPLATES))
    raise ValueError(
        f"--chat-template {chat_template!r} is not a built-in ({known}), an existing file, or Jinja text"
    )


@dataclass(frozen=True)
class ChatRenderer:
    """A compiled chat template plus the special tokens it may reference. Immutable."""

    template_name: str  # a BUILTIN_TEMPLATES key, "model", "inline" or "file:<path>"
    template_source: str
    special_tokens: Mapping[str, str] = field(default_factory=dict)
    # The served family's call-id rule (Mistral: 9 characters); set by :meth:`for_family` from the
    # family the process resolved once (tool_parsers.resolve_parsers), never detected here.
    call_id_rule: Callable[[str], str] | None = None
    _template: jinja2.Template = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            compiled = compile_template(self.template_source)
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"chat template {self.template_name} does not compile: {exc}") from exc
        object.__setattr__(self, "_template", compiled)
        object.__setattr__(self, "special_tokens", MappingProxyType(dict(self.special_tokens)))

    def for_family(self, family: ModelFamily | None) -> ChatRenderer:
        """This renderer writing history call ids as ``family``'s templates need them."""
        rule = family.call_id if family else None
        return self if rule is self.call_id_rule else dataclasses.replace(self, call_id_rule=rule)

    @classmethod
    def from_model(
        cls,
        *,
        model_dir_or_tokenizer: object,
        chat_template: str | None = None,
        default: str | None = None,
    ) -> ChatRenderer:
        """Choose: explicit ``chat_template`` > the model's own template if it renders
        tools > built-in ``default`` > the model's own template > error."""
        own, tokens = load_model_template(model_dir_or_tokenizer)
        if chat_template:
            name, source = _resolve_override(chat_template)
        elif own is not None and _TOOLS_RE.search(own):
            name, source = "model", own
        elif default:
            name, source = _resolve_override(default)
        elif own is not None:
            name, source = "model", own
        else:
            raise ValueError(
                "the model has no chat template; pass --chat-template "
                f"({', '.join(sorted(BUILTIN_TEMPLATES))}, a file, or Jinja text)"
            )
        return cls(template_name=name, template_source=source, special_tokens=tokens)

    @property
    def supports_tools(self) -> bool:
        """Whether the template reads ``tools`` at all."""
        return bool(_TOOLS_RE.search(self.template_source))

    def render(
        self,
        messages: Sequence[JsonValue],
        *,
        tools: Sequence[JsonValue] | None = None,
        add_generation_prompt: bool = True,
        chat_template_kwargs: JsonMapping | None = None,
    ) -> str:
        """Render one request's prompt text (special tokens included, as text)."""
        extra = dict(chat_template_kwargs or {})
        if not all(isinstance(key, str) for key in extra):
            raise RenderError("chat_template_kwargs keys must be strings", "chat_template_kwargs")
        if clash := sorted(_RESERVED_KWARGS & extra.keys()):
            raise RenderError(
                f"chat_template_kwargs may not set {', '.join(clash)}; use the request fields",
                "chat_template_kwargs",
            )
        tool_list = normalize_tools(tools)
        if tool_list and not self.supports_tools:
            raise RenderError(
                f"the chat template ({self.template_name}) cannot render tools; start the server with "
                f"--chat-template naming one that can (built-in: {', '.join(sorted(BUILTIN_TEMPLATES))}, or a file)",
                "tools",
            )
        variables: dict[str, object] = {  # what the template reads: tokens, the client's kwargs, the request
            **self.special_tokens,
            **extra,
            "messages": normalize_messages(messages, call_id=self.call_id_rule),
            "tools": tool_list,
            "add_generation_prompt": add_generation_prompt,
        }
        try:
            return self._template.render(**variables)
        except jinja2.TemplateError as exc:
            raise RenderError(f"chat template error: {exc}", "messages") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise RenderError(
                f"the chat template ({self.template_name}) could not render these messages: {exc}",
                "messages",
            ) from None
