"""VSI-S as the Field System speaks it to a recorder (jive5ab's dialect; the replies vdifrec gives
are in docs/reference/formats/vsi.md).

A command is ``keyword=param:param:...;`` (set) or ``keyword?param:...;`` (query); several may
share a line, whitespace around fields is ignored and keywords are case-insensitive. Each gets one
reply line, ``!keyword= code [: field]* ;`` or ``!keyword? code [: field]* ;``. This module only
splits, parses and formats: what a command does is ``vsi.commands``, dispatched by
``vsi.station``.
"""

from __future__ import annotations

import dataclasses
import enum
import re

#: Longest command line taken (the Field System's lines are far shorter); longer is refused.
MAX_LINE = 64 * 1024


class Code(enum.IntEnum):
    """VSI-S return codes."""

    DONE = 0
    STARTED = 1
    NOT_NOW = 2
    SYNTAX = 3
    ERROR = 4
    BUSY = 5
    CONFLICT = 6
    NO_SUCH_KEYWORD = 7
    BAD_PARAMETER = 8


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of a line: ``keyword`` (lower case), ``query`` (``?``) or set (``=``), and
    its parameters as given (stripped; empty strings where a field was left empty)."""

    keyword: str
    query: bool
    params: tuple[str, ...]
    text: str

    def param(self, k: int, default: str = "") -> str:
        """Parameter ``k`` (from 0), or ``default`` when absent or empty."""
        return self.params[k] if k < len(self.params) and self.params[k] != "" else default


@dataclasses.dataclass(frozen=True)
class Reply:
    """One reply line: the keyword, ``query`` (``?``) or set (``=``), the return code and the
    fields after it."""

    keyword: str
    query: bool
    code: int
    fields: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Done (0) or started (1)."""
        return self.code in (Code.DONE, Code.STARTED)

    def __str__(self) -> str:
        mark = "?" if self.query else "="
        fields = "".join(f" : {f}" for f in self.fields)
        return f"!{self.keyword}{mark} {self.code}{fields} ;"


_KEYWORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SyntaxProblem(ValueError):
    """A command that cannot be parsed (answered as jive5ab does, under the keyword `syntax`)."""

    def __init__(self, query: bool, why: str) -> None:
        super().__init__(why)
        self.keyword = "syntax"
        self.query = query
        self.why = why


def split_line(line: str) -> list[str]:
    """The commands of one line, each without its ``;`` (a last one without ``;`` counts too)."""
    return [c.strip() for c in line.split(";") if c.strip()]


def parse(text: str) -> Command:
    """One command (no ``;``). Raises SyntaxProblem when there is no keyword or it holds
    characters a keyword cannot."""
    q, e = text.find("?"), text.find("=")
    cut = min(i for i in (q, e, len(text)) if i >= 0)
    keyword = text[:cut].strip().lower()
    query = cut == q
    if not keyword or not _KEYWORD.match(keyword):
        raise SyntaxProblem(query, f"no keyword in '{text[:40]}' - a command is keyword=params or keyword?params")
    if cut == len(text):
        raise SyntaxProblem(False, f"'{text[:40]}' is not a command or query - write {keyword}=... or {keyword}?")
    rest = text[cut + 1 :]
    params = tuple(p.strip() for p in rest.split(":")) if rest.strip() else ()
    return Command(keyword, query, params, text)


_REPLY = re.compile(r"^!\s*([A-Za-z_][A-Za-z0-9_]*)\s*([?=])\s*(-?\d+)\s*(.*?)\s*;\s*$")


def parse_reply(line: str) -> Reply:
    """A reply line as the grammar defines it; ValueError naming the line otherwise."""
    m = _REPLY.match(line.strip())
    if not m:
        raise ValueError(f"not a VSI-S reply: {line.strip()[:120]!r}")
    keyword, mark, code, rest = m.groups()
    fields: tuple[str, ...] = ()
    if rest:
        if not rest.startswith(":"):
            raise ValueError(f"not a VSI-S reply (fields must follow ':'): {line.strip()[:120]!r}")
        fields = tuple(f.strip() for f in rest[1:].split(":"))
    return Reply(keyword.lower(), mark == "?", int(code), fields)
