"""Chat prompt -> token ids; control-token text written by the client stays plain text.

Encoding the whole rendered prompt turns ``<|im_end|>`` typed by a client (message, tool
description, call arguments...) into the real control token: a forged turn. So special-token
text in client strings becomes a random letters-only placeholder for rendering (it survives
``tojson``, ``trim``...); template-delimited segments holding one get the client's text back
and are encoded with special tokens split. Other requests keep the one-``encode`` old path.
Either way, where the tokenizer allows it, the text between special tokens is encoded piece
by piece and the pieces are remembered (``SegmentEncoder``): an agent's next turn encodes
only what is new.
"""
from __future__ import annotations

import json
import re
import secrets
import string
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from server.chat.render import ChatRenderer, RenderError
from server.json_types import JsonMapping, JsonObject, JsonValue
from server.lru import BoundedLRU

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from vllm.tokenizers import TokenizerLike  # HF's tokenizers, vLLM's MistralTokenizer...

__all__ = ["ControlTokenGuard", "SegmentEncoder", "guard_for", "tokenize_chat_prompt", "markers_are_special"]

_GUARDS: dict[int, ControlTokenGuard] = {}  # id(tokenizer) -> guard (which holds the tokenizer)
_DIGITS_AS_LETTERS = str.maketrans("0123456789", "ABCDEFGHIJ")  # placeholders: ASCII letters only


#: An added token that is not marked special but reads like a marker (Qwen's ``<tool_call>`` and
#: ``<think>``, DeepSeek's ``<｜User｜>``): the tokenizer still matches it whole in any text, so a
#: user's copy would become the control token. Added words and whitespace runs are left alone.
_MARKER_LIKE = re.compile(r"[<>|\[\]｜]")


def _special_tokens(tokenizer: TokenizerLike) -> tuple[list[str], set[int]]:
    """Control-token texts (longest first) and ids: all_special_*, special added tokens, and added
    tokens that read like markers though not marked special."""
    texts = set(getattr(tokenizer, "all_special_tokens", None) or ())
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    for ident, token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        content = getattr(token, "content", None)
        if not isinstance(content, str) or not content.strip():
            continue
        if getattr(token, "special", False) or _MARKER_LIKE.search(content):
            texts.add(content)
            ids.add(ident)
    return sorted((t for t in texts if isinstance(t, str) and t), key=lambda t: (-len(t), t)), ids


def _private_backend(tokenizer: TokenizerLike, *, split_special: bool) -> Tokenizer | None:
    """A private copy of the fast backend (``tokenizers.Tokenizer``), or None when there is none.

    Private, because the tokenizer's own ``encode`` is not safe across threads: transformers
    flips truncation, padding and ``encode_special_tokens`` on the shared backend per call, and
    vLLM's thread-safe wrapper answers a busy pool with a deep copy of the whole tokenizer
    (tens of ms, ~a quarter of the API process's CPU under load). ``split_special``: special-token
    text is encoded as ordinary characters.
    """
    try:
        from tokenizers import Tokenizer

        backend = getattr(tokenizer, "backend_tokenizer", None)
        if not isinstance(backend, Tokenizer):
            return None
        private = Tokenizer.from_str(backend.to_str())
        private.no_truncation()
        private.no_padding()
        private.encode_special_tokens = split_special
    except Exception:  # noqa: BLE001 - the fallback encoder is slower but always correct
        return None
    return private


def _private_encoder(tokenizer: TokenizerLike, *, split_special: bool) -> Callable[[str], list[int]] | None:
    """``encode(text) -> ids`` on a private backend (no special tokens added); None without one."""
    private = _private_backend(tokenizer, split_special=split_special)
    if private is None:
        return None
    return lambda text: private.encode(text, add_special_tokens=False).ids


class SegmentEncoder:
    """Per process (per tokenizer): a prompt's ids, remembered piece by piece.

    A fast tokenizer first cuts its input at added tokens and encodes the pieces between them
    independently, so the ids of a prompt are its pieces' ids in order. An agent's next turn
    repeats the system prompt, the tool block and the whole history: only the new pieces are
    encoded (a 1,000-token prompt: ~2 ms of CPU per request, then ~0.1 ms). Bounded
    (``server.lru``). :meth:`build` returns None for tokenizers where pieces are not independent
    (added tokens that strip whitespace, Metaspace's "first word" rule, or a probe that differs):
    those keep the one whole encode.
    """

    def __init__(self, private: Tokenizer, token_ids: dict[str, int]) -> None:
        self._private = private
        self._ids = token_ids
        self._split = re.compile("|".join(map(re.escape, sorted(token_ids, key=lambda t: (-len(t), t)))))
        # Many agents' transcripts at once (each turn adds a few pieces); ids as 4-byte arrays:
        # 16 MiB of text holds ~4M tokens, ~16 MiB of ids (~40 MiB in all with the entries).
        self._pieces: BoundedLRU[str, array] = BoundedLRU(max_entries=32768, max_chars=16 << 20)

    @classmethod
    def build(cls, private: Tokenizer) -> SegmentEncoder | None:
        """On ``private``, a fast backend (``tokenizers.Tokenizer``) that this encoder may use
        from any thread: None where its pieces are not independent."""
        try:
            added = private.get_added_tokens_decoder()
            pre = private.pre_tokenizer.__getstate__() if private.pre_tokenizer is not None else b""
        except Exception:  # noqa: BLE001 - an older tokenizers: the whole encode stays
            return None
        raw = {tok.content: ident for ident, tok in added.items() if not tok.normalized and tok.content}
        if not raw or any(tok.lstrip or tok.rstrip or tok.single_word
                          for tok in added.values() if tok.content in raw):
            return None
        if b"Metaspace" in pre:  # its "first word" rule reads the piece's offset
            return None
        encoder = cls(private, raw)
        texts = sorted(raw)[:8]
        probes = [f"{t} hi\n{u}x  y{t}\n\n" for t in texts for u in texts[:2]] + [" a b", "\n", ""]
        if any(encoder.encode(text) != private.encode(text, add_special_tokens=False).ids for text in probes):
            return None
        encoder._pieces.clear()
        return encoder

    def encode(self, text: str) -> list[int]:
        """``text``'s ids, exactly as one ``encode(text, add_special_tokens=False)``."""
        ids: list[int] = []
        pos = 0
        for match in self._split.finditer(text):
            if match.start() > pos:
                ids += self._piece(text[pos:match.start()])
            ids.append(self._ids[match.group()])
            pos = match.end()
        if pos < len(text):
            ids += self._piece(text[pos:])
        return ids

    def _piece(self, text: str) -> array:
        found = self._pieces.get(text)
        if found is None:
            found = array("I", self._private.encode(text, add_special_tokens=False).ids)
            self._pieces.put(text, found)
        return found


def _new_prefix() -> str:  # unguessable, so client text cannot fake a placeholder
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(12))


def _placeholder_re(prefix: str) -> re.Pattern[str]:  # prefix + index as letters A-J + "z"
    return re.compile(re.escape(prefix) + r"([A-J]+)z")


def _any_string(value: object, test: Callable[[str], object]) -> bool:
    """Whether ``test`` is truthy for some string (or dict key) inside ``value``: any value, its dicts,
    lists and tuples visited."""
    if isinstance(value, str):
        return bool(test(value))
    if isinstance(value, dict):
        return any(_any_string(k, test) or _any_string(v, test) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_any_string(v, test) for v in value)
    return False


class ControlTokenGuard:
    """Per-tokenizer data, built once: special-token texts, their regex, placeholder codes."""

    def __init__(self, tokenizer: TokenizerLike) -> None:
        self.tokenizer = tokenizer  # held, so id(tokenizer) stays unique while cached
        texts, self.special_ids = _special_tokens(tokenizer)
        self.special_texts = tuple(texts)
        self.special_re = re.compile("|".join(map(re.escape, texts))) if texts else None
        self._codes = {text: str(i).translate(_DIGITS_AS_LETTERS) for i, text in enumerate(texts)}
        self._originals = {code: text for text, code in self._codes.items()}
        self._prefix = _new_prefix()
        # No special text has a character JSON escapes: then one search of the request's JSON
        # finds every string holding one (escapes may add false alarms, which take the slow,
        # exact path; never misses), ~10x faster than visiting each string.
        self._json_safe = all(json.dumps(t, ensure_ascii=False)[1:-1] == t and '"' not in t for t in texts)

    def contains_control_text(self, value: object) -> bool:
        """Whether any string (or dict key) inside ``value`` holds special-token text (``value``: the
        client's JSON, in tuples too; any other object in it holds no text)."""
        if self.special_re is None:
            return False
        if self._json_safe:
            try:
                dumped = json.dumps(value, ensure_ascii=False, check_circular=False)
            except (TypeError, ValueError, RecursionError):  # not plain JSON: visit each string
                pass
            else:
                if not self.special_re.search(dumped):
                    return False
        return _any_string(value, self.special_re.search)

    def prefix_for(self, value: object) -> str:
        """The process placeholder prefix, or a fresh one if a client string contains it."""
        prefix = self._prefix
        while _any_string(value, lambda s: prefix in s):  # noqa: B023 - called before prefix changes
            prefix = _new_prefix()
        return prefix

    def mask(self, value: JsonValue, prefix: str) -> JsonValue:
        """A copy of ``value`` with special-token text in every string replaced by placeholders."""
        if isinstance(value, str):
            return self._mask_text(value, prefix)
        if isinstance(value, dict):
            return {self._mask_text(k, prefix): self.mask(v, prefix) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.mask(v, prefix) for v in value]
        return value

    def _mask_text(self, text: str, prefix: str) -> str:
        if self.special_re is None:
            return text
        return self.special_re.sub(lambda m: f"{prefix}{self._codes[m.group()]}z", text)

    def restore(self, text: str, prefix: str) -> str:
        """``text`` with placeholders (made with ``prefix``) turned back into the client's text."""
        return _placeholder_re(prefix).sub(lambda m: self._originals.get(m.group(1), m.group()), text)

    def encode_rendered(self, rendered: str, prefix: str) -> tuple[str, list[int]]:
        """Rendered text with placeholders -> (prompt text, ids). Segments between template
        special tokens that hold a placeholder are encoded as plain text (tokenizers split at
        special tokens anyway: no other boundary moves); other runs as a whole prompt is."""
        placeholder = _placeholder_re(prefix)
        parts: list[str] = []
        ids: list[int] = []

        def normal(text: str) -> None:
            parts.append(text)
            ids.extend(self.encode(text) if text else ())

        run_start = pos = 0
        for match in [*self.special_re.finditer(rendered), None] if self.special_re else [None]:
            end = match.start() if match else len(rendered)
            if placeholder.search(rendered, pos, end):
                normal(rendered[run_start:pos])
                parts.append(self.restore(rendered[pos:end], prefix))
                ids.extend(self.encode_plain(parts[-1]))
                run_start = end
            pos = match.end() if match else pos
        normal(rendered[run_start:])
        return "".join(parts), ids

    def encode_plain(self, text: str) -> list[int]:
        """``text`` with any special-token text encoded as ordinary characters."""
        ids = list(self._splitter(text)) if self._splitter is not None else []
        if self._splitter is None or self.special_ids.intersection(ids):
            ids = self._encode_plain_fallback(text)
        if self.special_ids.intersection(ids):
            raise RenderError("the request holds control-token text that this model's tokenizer "
                              "cannot encode as plain text", "messages")
        return ids

    @cached_property
    def _splitter(self) -> Callable[[str], list[int]] | None:
        return _private_encoder(self.tokenizer, split_special=True)  # on first use: only control-text requests pay

    @cached_property
    def encode(self) -> Callable[[str], list[int]]:
        """The prompt encoder: as ``tokenizer.encode(text, add_special_tokens=False)``, thread-safe;
        the template's control-token text always becomes its token (see :meth:`_with_control_ids`)."""
        private = _private_backend(self.tokenizer, split_special=False)
        if private is None:
            return self._with_control_ids(lambda text: list(self.tokenizer.encode(text, add_special_tokens=False)))
        pieces = SegmentEncoder.build(private)
        return pieces.encode if pieces is not None else lambda text: private.encode(text, add_special_tokens=False).ids

    def _with_control_ids(self, plain: Callable[[str], list[int]]) -> Callable[[str], list[int]]:
        """``plain`` where it reads control-token text as the token (Hugging Face tokenizers); else
        (vLLM's MistralTokenizer: mistral-common never reads control text) ``plain`` between the
        control-token texts and each one's id, so a template's ``[INST]`` is the control token."""
        if self.special_re is None or not hasattr(self.tokenizer, "convert_tokens_to_ids"):
            return plain
        control = dict(zip(self.special_texts, self.tokenizer.convert_tokens_to_ids(list(self.special_texts)),
                           strict=True))
        probe = next((t for t in self.special_texts if control[t] in self.special_ids), None)
        if probe is None or plain(probe) == [control[probe]]:
            return plain
        # SentencePiece adds a word-start marker of its own to each piece it encodes: the space a
        # template writes after a control token ("[INST] Hi") is that marker, not one more.
        own_space = plain(" x")[1:] == plain("x") != plain(" x")

        def piece(text: str) -> list[int]:
            return plain(text[1:] if own_space and text.startswith(" ") else text)

        def encode(text: str) -> list[int]:
            out: list[int] = []
            pos = 0
            for match in self.special_re.finditer(text):  # type: ignore[union-attr]
                if match.start() > pos:
                    out += piece(text[pos:match.start()])
                out.append(control[match.group()])
                pos = match.end()
            return out + (piece(text[pos:]) if pos < len(text) else [])

        return encode

    def _encode_plain_fallback(self, text: str) -> list[int]:
        """No fast backend: encode each special text in two halves, so it cannot match."""
        def encode(part: str) -> list[int]:
            return list(self.tokenizer.encode(part, add_special_tokens=False))
        ids = encode(text)
        if self.special_re is None or not self.special_ids.intersection(ids):
            return ids  # e.g. mistral_common, which never parses control text
        out: list[int] = []
        pos = 0
        for match in self.special_re.finditer(text):
            token = match.group()
            out += encode(text[pos:match.start()]) + encode(token[:1]) + encode(token[1:])
            pos = match.end()
        return out + encode(text[pos:])


def guard_for(tokenizer: TokenizerLike) -> ControlTokenGuard:
    """The guard of this tokenizer object, built once per process (and tokenizer)."""
    guard = _GUARDS.get(id(tokenizer))
    if guard is None or guard.tokenizer is not tokenizer:  # a race only builds one twice
        if len(_GUARDS) >= 8:  # tests build a few tokenizers; a server has one
            _GUARDS.clear()
        guard = _GUARDS[id(tokenizer)] = ControlTokenGuard(tokenizer)
    return guard


def tokenize_chat_prompt(
    renderer: ChatRenderer,
    tokenizer: TokenizerLike,
    messages: Sequence[JsonObject],
    *,
    tools: Sequence[JsonObject] | None = None,
    add_generation_prompt: bool = True,
    chat_template_kwargs: JsonMapping | None = None,
) -> tuple[str, list[int]]:
    """(prompt text, token ids) of a chat prompt, with control-token text from the client
    encoded as plain text. Raises ``RenderError`` as ``ChatRenderer.render`` does."""
    guard = guard_for(tokenizer)
    client = (messages, tools, list((chat_template_kwargs or {}).values()))
    if not guard.contains_control_text(client):  # the common case: exactly the old tokenization
        prompt = renderer.render(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                 chat_template_kwargs=chat_template_kwargs)
        return prompt, guard.encode(prompt)
    prefix = guard.prefix_for(client)
    kwargs = chat_template_kwargs
    if isinstance(kwargs, dict):  # values only: the keys name template variables
        kwargs = {key: guard.mask(value, prefix) for key, value in kwargs.items()}
    # each message and tool masked, in a new list (as masking the list itself would)
    masked = [guard.mask(message, prefix) for message in messages]
    masked_tools = None if tools is None else [guard.mask(tool, prefix) for tool in tools]
    try:
        rendered = renderer.render(masked, tools=masked_tools,
                                   add_generation_prompt=add_generation_prompt, chat_template_kwargs=kwargs)
    except RenderError as exc:  # show the client its own text, not placeholders
        param = exc.param and guard.restore(exc.param, prefix)
        raise RenderError(guard.restore(exc.message, prefix), param) from None
    return guard.encode_rendered(rendered, prefix)


def markers_are_special(tokenizer: TokenizerLike, markers: Iterable[str | None]) -> bool:
    """Whether any of a tool-call family's markers is a special token of ``tokenizer``: the
    output must then keep special tokens as text, or the parser never sees the marker."""
    texts = set(guard_for(tokenizer).special_texts)
    return any(m and m in texts for m in markers)
