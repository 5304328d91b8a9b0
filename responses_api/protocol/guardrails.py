"""Guardrails on what a client sends: detectors (compiled once per definition version) and the
walk over a request body that finds the client's text in it.

Pure: no Django. orchestration/guardrails.py looks the scope's definitions up, records the
decisions and answers a block.

Kinds:
- `patterns`: named categories of regular expressions and word lists (words match whole words,
  case-insensitively): `{"categories": {"competitors": {"words": [...], "regex": [...]}}}`;
- `pii`: e-mail addresses (a checked regex), phone numbers (`phonenumbers`; without a
  `phone_region` only numbers written with their +country code), card numbers (13-19 digits
  passing Luhn), IBANs (`python-stdnum`'s checksum) and credentials (the well-known key formats
  below; no entropy detection, since sealed blobs and base64 are high-entropy):
  `{"categories": ["email", "phone", "card", "iban", "credential"], "phone_region": "DE"}`;
- `moderation` and `judge` ask a server about the whole text (guardrail_remote.py: their
  config, the question and how the answer is read; the calls are orchestration's).

Never scanned: `encrypted_content`, images, file bytes and URLs, tool schemas (NEVER_SCANNED),
and what the request names rather than says (ids, roles, types)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import phonenumbers
from stdnum import iban as stdnum_iban
from stdnum import luhn

from .guardrail_remote import Caller, RemoteConfigError, RemoteSettings, remote_settings

KINDS = ("patterns", "pii", "moderation", "judge")
# Kinds that ask a server about the whole text (protocol/guardrail_remote.py): their verdict
# covers it all, so they block or log, never redact.
REMOTE_KINDS = ("moderation", "judge")
ACTIONS = ("block", "redact", "log")
# Where a guardrail may apply: the request's input (here), the model's output text, the tool-call
# arguments it emits and the outputs of the tools the gateway runs (protocol/output_guard.py).
APPLIES_TO = ("input", "output", "tool_arguments", "tool_output")
SERVED_APPLIES_TO = frozenset(APPLIES_TO)
# What a guardrail that needs the whole answer (Detector.whole_text) does on a streamed output:
# hold the stream back until its end ("buffer", the default), or check it after the end and
# audit only ("log"). Its config's `on_stream` key; any kind takes it.
ON_STREAM = ("buffer", "log")
PII_CATEGORIES = ("email", "phone", "card", "iban", "credential")

# Values under these keys are the client's text (a string, or a list of strings: embeddings'
# `input`); other strings (ids, roles, types, names, URLs) are not scanned.
TEXT_KEYS = frozenset({"text", "content", "instructions", "input", "output", "arguments", "system", "prompt"})
# Never entered at all.
NEVER_SCANNED = frozenset(
    {"encrypted_content", "image_url", "file_data", "file_url", "tools", "parameters", "schema", "input_schema"}
)

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b")
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
# Well-known key and token formats, each with a fixed prefix or frame (few false positives):
# cloud keys, source-hosting and chat tokens, model-provider keys, payment keys, PEM private
# keys, JWTs.
_CREDENTIALS = re.compile(
    "|".join(
        (
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
            r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b",  # GitHub tokens
            r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
            r"\bglpat-[A-Za-z0-9_-]{20,}\b",  # GitLab
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b",  # Slack
            r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b",  # OpenAI, Anthropic
            r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b",  # Stripe
            r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API key
            r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----",
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b",  # JWT
        )
    )
)


# Cheap gates before the full patterns (each a substring test or a plain scan, several times
# faster than the pattern itself): most text has no "@", no long digit run, no key prefix.
_CREDENTIAL_PREFIXES = (
    "AKIA",
    "ASIA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xox",
    "sk-",
    "sk_",
    "rk_",
    "AIza",
    "-----BEGIN",
    "eyJ",
)
_DIGIT = re.compile(r"\d")
_DIGIT_RUN = re.compile(r"\d[\d -]{11}")
_IBAN_START = re.compile(r"[A-Z]{2}\d{2}")


def _has_credential_prefix(text: str) -> bool:
    return any(prefix in text for prefix in _CREDENTIAL_PREFIXES)


class GuardrailConfigError(ValueError):
    """A definition that cannot be compiled; `field` names the key of its config."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    category: str


Finder = Callable[[str], Iterable[Span]]


@dataclass(frozen=True, slots=True)
class Detector:
    """One definition, compiled: `find` lists the spans of a text it matches."""

    guardrail_id: int
    name: str
    action: str
    finders: tuple[Finder, ...]
    whole_text: bool = False  # needs the whole answer (a remote kind): buffered or log-only on output

    def find(self, text: str) -> list[Span]:
        return [span for finder in self.finders for span in finder(text)]

    async def find_async(self, text: str) -> list[Span]:
        return self.find(text)


CATEGORY_MAX_LENGTH = 200


RemoteCheck = Callable[["RemoteDetector", str], Awaitable[list[Span]]]


@dataclass(frozen=True, slots=True)
class RemoteDetector(Detector):
    """A remote kind (guardrail_remote.py), compiled: `find` finds nothing (it cannot call out),
    `find_async` asks the server once `check` is bound (orchestration binds it, and the caller
    per scope: a judge's tokens are counted to them)."""

    settings: RemoteSettings | None = None
    check: RemoteCheck | None = None
    caller: Caller | None = None

    async def find_async(self, text: str) -> list[Span]:
        if self.check is None:
            raise RuntimeError(f"guardrail {self.name!r}: no remote check is bound")
        return await self.check(self, text)


def _regex_finder(pattern: re.Pattern[str], category: str, gate: Callable[[str], object] | None = None) -> Finder:
    def find(text: str) -> Iterable[Span]:
        if gate is not None and not gate(text):
            return []
        return [Span(m.start(), m.end(), category) for m in pattern.finditer(text)]

    return find


def _checked_finder(
    pattern: re.Pattern[str], category: str, valid: Callable[[str], bool], gate: Callable[[str], object]
) -> Finder:
    def find(text: str) -> Iterable[Span]:
        if not gate(text):
            return []
        return [Span(m.start(), m.end(), category) for m in pattern.finditer(text) if valid(m.group())]

    return find


def _luhn_ok(candidate: str) -> bool:
    digits = re.sub(r"\D", "", candidate)
    return 13 <= len(digits) <= 19 and luhn.is_valid(digits)


def _iban_ok(candidate: str) -> bool:
    return bool(stdnum_iban.is_valid(candidate))


def _phone_finder(region: str | None) -> Finder:
    def find(text: str) -> Iterable[Span]:
        if not _DIGIT.search(text):
            return []
        matcher = phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID)
        return [Span(m.start, m.end, "phone") for m in matcher]

    return find


def compile_detector(guardrail_id: int, name: str, kind: str, action: str, config: Mapping[str, Any]) -> Detector:
    """Raises GuardrailConfigError for a config the kind cannot use (the admin and the config
    sync show it before anything is saved)."""
    if action not in ACTIONS:
        raise GuardrailConfigError("action", f"must be one of {', '.join(ACTIONS)}")
    if not isinstance(config, Mapping):
        raise GuardrailConfigError("config", "must be a mapping")
    config = without_stream_option(config)
    if kind == "patterns":
        return Detector(guardrail_id, name, action, _pattern_finders(config))
    if kind == "pii":
        return Detector(guardrail_id, name, action, _pii_finders(config))
    if kind in REMOTE_KINDS:
        try:
            settings = remote_settings(kind, action, config)
        except RemoteConfigError as exc:
            raise GuardrailConfigError(exc.field, str(exc)) from None
        return RemoteDetector(guardrail_id, name, action, (), True, settings)
    raise GuardrailConfigError("kind", f"must be one of {', '.join(KINDS)}")


def on_stream(config: Mapping[str, Any]) -> str:
    """The config's `on_stream` (ON_STREAM; default "buffer")."""
    value = config.get("on_stream", "buffer") if isinstance(config, Mapping) else "buffer"
    if value not in ON_STREAM:
        raise GuardrailConfigError("on_stream", f"must be one of {', '.join(ON_STREAM)}")
    return str(value)


def without_stream_option(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config a kind reads: `on_stream` checked and taken out (it is the output path's)."""
    if "on_stream" not in config:
        return config
    on_stream(config)
    return {k: v for k, v in config.items() if k != "on_stream"}


def _pattern_finders(config: Mapping[str, Any]) -> tuple[Finder, ...]:
    categories = config.get("categories")
    if not isinstance(categories, Mapping) or not categories:
        raise GuardrailConfigError("categories", "a mapping of category names to {regex: [...], words: [...]}")
    finders: list[Finder] = []
    for category, spec in categories.items():
        if not isinstance(category, str) or not 1 <= len(category) <= CATEGORY_MAX_LENGTH:
            # The audit keeps it (GuardrailEvent.category) and a blocked request's error names it.
            raise GuardrailConfigError("categories", f"a category name is 1 to {CATEGORY_MAX_LENGTH} characters")
        if not isinstance(spec, Mapping) or set(spec) - {"regex", "words"} or not spec:
            raise GuardrailConfigError(f"categories.{category}", "expected a mapping of regex and/or words (lists)")
        regexes = spec.get("regex") or []
        words = spec.get("words") or []
        if not isinstance(regexes, list) or not isinstance(words, list):
            raise GuardrailConfigError(f"categories.{category}", "regex and words are lists of strings")
        for i, source in enumerate(regexes):
            try:
                finders.append(_regex_finder(re.compile(str(source)), str(category)))
            except re.error as exc:
                raise GuardrailConfigError(
                    f"categories.{category}.regex[{i}]", f"not a regular expression: {exc}"
                ) from None
        if words:
            alternatives = "|".join(re.escape(str(w)) for w in sorted(words, key=len, reverse=True) if str(w))
            finders.append(_regex_finder(re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE), str(category)))
    return tuple(finders)


def _pii_finders(config: Mapping[str, Any]) -> tuple[Finder, ...]:
    unknown = set(config) - {"categories", "phone_region"}
    if unknown:
        raise GuardrailConfigError(sorted(unknown)[0], "unknown key; a pii guardrail takes categories and phone_region")
    wanted = config.get("categories") or list(PII_CATEGORIES)
    if not isinstance(wanted, list) or set(wanted) - set(PII_CATEGORIES):
        raise GuardrailConfigError("categories", f"a list of {', '.join(PII_CATEGORIES)}")
    region = config.get("phone_region") or None
    if region is not None and (not isinstance(region, str) or region.upper() not in phonenumbers.SUPPORTED_REGIONS):
        raise GuardrailConfigError("phone_region", "a two-letter region code, e.g. US or DE")
    finders: dict[str, Finder] = {
        "email": _regex_finder(_EMAIL, "email", lambda text: "@" in text),
        "phone": _phone_finder(region.upper() if region else None),
        "card": _checked_finder(_CARD, "card", _luhn_ok, _DIGIT_RUN.search),
        "iban": _checked_finder(_IBAN, "iban", _iban_ok, _IBAN_START.search),
        "credential": _regex_finder(_CREDENTIALS, "credential", _has_credential_prefix),
    }
    return tuple(finders[c] for c in PII_CATEGORIES if c in wanted)


@dataclass(frozen=True, slots=True)
class Decision:
    """A guardrail that fired: never the matched text."""

    guardrail_id: int
    guardrail: str
    category: str
    action: str


@dataclass(slots=True)
class _Scan:
    detectors: tuple[Detector, ...]
    decisions: dict[tuple[int, str], Decision] = field(default_factory=dict)

    def text(self, value: str) -> str:
        redact: list[Span] = []
        for detector in self.detectors:
            for span in detector.find(value):
                key = (detector.guardrail_id, span.category)
                if key not in self.decisions:
                    self.decisions[key] = Decision(detector.guardrail_id, detector.name, span.category, detector.action)
                if detector.action == "redact":
                    redact.append(span)
        return redacted(value, redact) if redact else value

    def walk(self, node: Any, key: str | None) -> Any:
        if isinstance(node, str):
            return self.text(node) if key in TEXT_KEYS else node
        if isinstance(node, list):
            return [self.walk(item, key) for item in node]
        if isinstance(node, dict):
            return {k: v if k in NEVER_SCANNED else self.walk(v, k) for k, v in node.items()}
        return node


def redacted(text: str, spans: list[Span]) -> str:
    """`text` with each span (overlapping ones merged) replaced by `[REDACTED:category]`."""
    spans = sorted(spans, key=lambda s: (s.start, -s.end))
    merged: list[Span] = []
    for span in spans:
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Span(last.start, max(last.end, span.end), last.category)
        else:
            merged.append(span)
    out: list[str] = []
    at = 0
    for span in merged:
        out.append(text[at : span.start])
        out.append(f"[REDACTED:{span.category}]")
        at = span.end
    out.append(text[at:])
    return "".join(out)


def scan(
    payload: Mapping[str, Any], fields: Iterable[str], detectors: tuple[Detector, ...]
) -> tuple[dict[str, Any], list[Decision]]:
    """The payload with `fields` scanned (the client's text in them redacted where a `redact`
    guardrail matched), and every decision (one per guardrail and category). The caller refuses
    the request when a decision's action is `block`."""
    run = _Scan(detectors)
    out = dict(payload)
    for name in fields:
        if name in out and out[name] is not None:
            out[name] = run.walk(out[name], name if name in TEXT_KEYS else None)
    return out, list(run.decisions.values())


def texts(payload: Mapping[str, Any], fields: Iterable[str]) -> list[str]:
    """The client's text in `fields`, as `scan` walks it (the same keys scanned, the same never
    entered): what a remote guardrail is asked about, as one text."""
    found: list[str] = []

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, str):
            if key in TEXT_KEYS and node:
                found.append(node)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, dict):
            for k, v in node.items():
                if k not in NEVER_SCANNED:
                    walk(v, k)

    for name in fields:
        if payload.get(name) is not None:
            walk(payload[name], name if name in TEXT_KEYS else None)
    return found
