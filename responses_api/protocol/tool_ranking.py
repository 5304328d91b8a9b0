"""Which deferred tools a tool search finds: BM25 over each tool's words (protocol/tool_search.py
answers the search with them). Pure: no Django, no I/O."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .tools import Tool

RESULT_LIMIT = 5  # tools one search loads: enough for a task's few tools, few enough to stay cheap
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Words that say nothing of what a tool does: stop words, and "tool" itself.
# fmt: off
_STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "get", "has", "in", "into",
    "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "with", "you", "your",
    "tool", "tools", "use", "using", "can", "which", "will",
})
# fmt: on


_SUFFIXES = (("ies", "y"), ("sses", "ss"), ("ing", ""), ("ed", ""), ("s", ""))


def _stem(word: str) -> str:
    """A light suffix strip, then a final "e" (issues/issue, files/file, listing/list,
    created/create meet): enough for tool names, mostly verbs and nouns, without a stemmer's
    dependency."""
    for suffix, keep in _SUFFIXES:
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + keep
            break
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word


def tokens(text: str) -> list[str]:
    """Lower-cased, stemmed words of `text`; camelCase, snake_case and kebab-case split."""
    return [_stem(w.lower()) for w in _WORD.findall(text) if w.lower() not in _STOPWORDS]


def _parameter_names(schema: Any, depth: int = 0) -> list[str]:
    if not isinstance(schema, dict) or depth > 3:
        return []
    properties = schema.get("properties")
    names: list[str] = []
    if isinstance(properties, dict):
        for key, sub in properties.items():
            names.append(key)
            names += _parameter_names(sub, depth + 1)
    if isinstance(schema.get("items"), dict):
        names += _parameter_names(schema["items"], depth + 1)
    return names


@dataclass(slots=True)
class ToolIndex:
    """BM25 (k1 1.2, b 0.75) over the deferred tools. A tool's document is its name and its
    namespace or MCP server label (both weighted 3: a name says most of what a tool does), its
    description and its parameter names (weight 1). Ties keep the tools' order."""

    tools: list[Tool]
    groups: dict[str, str] = field(default_factory=dict)  # upstream name -> namespace or MCP server label
    _docs: list[Counter[str]] = field(default_factory=list)
    _lengths: list[int] = field(default_factory=list)
    _df: Counter[str] = field(default_factory=Counter)

    K1 = 1.2
    B = 0.75
    NAME_WEIGHT = 3

    def __post_init__(self) -> None:
        for tool in self.tools:
            doc: Counter[str] = Counter()
            named = tokens(tool.item_name) + tokens(self.groups.get(tool.name, tool.namespace or ""))
            for word in named:
                doc[word] += self.NAME_WEIGHT
            doc.update(tokens(tool.description or ""))
            doc.update(tokens(" ".join(_parameter_names(tool.parameters))))
            self._docs.append(doc)
            self._lengths.append(sum(doc.values()))
            self._df.update(doc.keys())

    def search(self, query: str, limit: int = RESULT_LIMIT) -> list[Tool]:
        """The best `limit` tools for `query` (an exact tool name first); none when nothing matches."""
        wanted = query.strip()
        exact = [t for t in self.tools if wanted in (t.item_name, t.name)]
        terms = set(tokens(query))
        if not self.tools or not terms:
            return exact[:limit]
        count = len(self.tools)
        average = sum(self._lengths) / count or 1.0
        scored: list[tuple[float, int]] = []
        for index, (doc, length) in enumerate(zip(self._docs, self._lengths)):
            score = 0.0
            for term in terms:
                frequency = doc.get(term)
                if not frequency:
                    continue
                idf = math.log(1 + (count - self._df[term] + 0.5) / (self._df[term] + 0.5))
                score += (
                    idf * frequency * (self.K1 + 1) / (frequency + self.K1 * (1 - self.B + self.B * length / average))
                )
            if score > 0:
                scored.append((-score, index))
        scored.sort()
        ranked = exact + [self.tools[i] for _, i in scored if self.tools[i] not in exact]
        return ranked[:limit]
