"""VEX 1.5 and 2.0 as text: blocks (``$FREQ;``), definitions (``def X; ... enddef;``), scans
(``scan X; ... endscan;``) and their statements (``name = value : value ... ;``), with each
statement's line and column. What the statements mean is :mod:`vdifrec.schedule.model`'s.

The rules kept here, as VEX writes them (the VEX 1.5 and 2.0 definitions, and the files SCHED
and drudg write):

- a statement ends at ``;``; several may share a line and one may run over several lines;
- ``*`` starts a comment to the end of the line (at a line's start or after a statement), so
  ``*   station=Ef: ...`` is no statement; inside a quoted string it is text;
- ``"..."`` is one value and may hold ``;``, ``*`` and ``:``; a ``"`` right after a word is
  part of it (the arc seconds of ``dec = 32d19'02.6";``);
- ``start_literal(tag);`` up to ``end_literal(tag);`` is skipped as it is;
- ``ref $BLOCK = name : St1 : St2 ;`` names a definition of another block, for all stations
  when none follows the name, else for those listed;
- the first statement is ``VEX_rev = 1.5;`` or ``VEX_rev = 2.0;``.

Files are read as bytes: UTF-8 where they are, else Latin-1, so a NUL byte or an odd character
in a comment (real drudg files hold both) is no error.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator

from .errors import VexError

__all__ = ["Block", "Def", "Ref", "Statement", "VexFile", "decode", "parse_vex", "read_vex"]

#: The VEX revisions read here.
VERSIONS = ("1.5", "2.0")


@dataclasses.dataclass(frozen=True)
class Statement:
    """``name = value : value ... ;``: ``values`` are the fields between the colons, each the
    words of the field joined by one space (``"600 sec"``; ``""`` for an empty field), a quoted
    string as written between its quotes."""

    name: str
    values: tuple[str, ...]
    line: int
    column: int

    def value(self, index: int, default: str = "") -> str:
        """The field at ``index`` (from 0), or ``default`` where the statement has fewer."""
        return self.values[index] if index < len(self.values) else default


@dataclasses.dataclass(frozen=True)
class Ref:
    """``ref $BLOCK = name : St1 : St2 ;``: ``block`` without its ``$`` (``"FREQ"``);
    ``stations`` empty when the ref is for every station."""

    block: str
    name: str
    stations: tuple[str, ...]
    line: int
    column: int

    def applies_to(self, station: str) -> bool:
        """Whether the ref is for ``station`` (codes compared in any case)."""
        return not self.stations or station.lower() in (s.lower() for s in self.stations)


@dataclasses.dataclass
class Def:
    """A ``def`` (or, in ``$SCHED``, a ``scan``) with its statements and refs in file order."""

    kind: str
    name: str
    line: int
    column: int
    statements: list[Statement] = dataclasses.field(default_factory=list)
    refs: list[Ref] = dataclasses.field(default_factory=list)

    def get(self, name: str) -> Statement | None:
        """The first statement called ``name``, or None."""
        for s in self.statements:
            if s.name == name:
                return s
        return None

    def all(self, name: str) -> list[Statement]:
        """Every statement called ``name``, in file order."""
        return [s for s in self.statements if s.name == name]

    def ref(self, block: str, station: str) -> Ref | None:
        """The ref to ``block`` that applies to ``station``: one that lists the station wins
        over one for every station; among equals, the first."""
        general = None
        for r in self.refs:
            if r.block == block and r.applies_to(station):
                if r.stations:
                    return r
                general = general or r
        return general


@dataclasses.dataclass
class Block:
    """A ``$BLOCK``: its definitions by name (file order), and the statements and refs outside
    any definition (``$GLOBAL``'s)."""

    name: str
    line: int
    defs: dict[str, Def] = dataclasses.field(default_factory=dict)
    statements: list[Statement] = dataclasses.field(default_factory=list)
    refs: list[Ref] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class VexFile:
    """A VEX file read: its ``version`` (``"1.5"`` or ``"2.0"``) and blocks by name (without
    the ``$``), in file order."""

    source: str
    version: str
    blocks: dict[str, Block]

    def find(self, block: str, name: str) -> Def | None:
        """The definition ``name`` of ``$block``, or None."""
        b = self.blocks.get(block)
        return None if b is None else b.defs.get(name)


def decode(data: bytes) -> str:
    """The text of a VEX file: UTF-8 where it is (a byte-order mark before it, as some editors
    write, is dropped), else line by line: each line UTF-8 where it is, else Latin-1 (which
    reads any byte). An old comment in Latin-1 then leaves a UTF-8 name elsewhere as written,
    rather than turning its `é` into `Ã©`."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    return "\n".join(_line_text(line) for line in lines)


def _line_text(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return line.decode("latin-1")


def read_vex(path: str | os.PathLike[str]) -> VexFile:
    """Reads the VEX file at ``path`` (:class:`VexError` on a syntax error, OSError if it
    cannot be read)."""
    with open(path, "rb") as fh:
        data = fh.read()
    return parse_vex(decode(data), source=os.fspath(path))


def parse_vex(text: str, source: str = "<string>") -> VexFile:
    """Parses VEX text; ``source`` names it in errors."""
    text = text.removeprefix("\ufeff")
    # Text whose first word is not VEX_rev is no VEX at all: said as such, not as the first
    # syntax error its lines happen to make.
    line, column = 1, 1
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "newline":
            line, column = line + 1, 1
            continue
        if kind in ("space", "comment"):
            column += len(m.group())
            continue
        if m.group() != "VEX_rev":
            raise VexError(source, line, column, "not a VEX file: a VEX file starts with VEX_rev = 1.5; or VEX_rev = 2.0;")
        break
    return _Parser(text, source).parse()


# -- tokens ----------------------------------------------------------------------------------

# A word runs up to white space or one of ; : = " *, and takes in a `"` right after it (the arc
# seconds of an angle). NUL counts as white space.
_TOKEN = re.compile(
    r"""(?P<space>(?:[^\S\n]|\x00)+)
      | (?P<newline>\n)
      | (?P<comment>\*[^\n]*)
      | (?P<string>"[^"\n]*")
      | (?P<punct>[;:=])
      | (?P<word>[^\s;:="*\x00]+(?:"[^\s;:="*\x00]*)*)
      | (?P<bad>")""",
    re.VERBOSE,
)
_LITERAL_START = re.compile(r"start_literal\(([^)\n]*)\)[ \t\r]*;")


@dataclasses.dataclass(frozen=True)
class _Token:
    kind: str  # "word", "string", ";", ":", "="
    text: str
    line: int
    column: int


def _tokens(text: str, source: str) -> Iterator[_Token]:
    pos, line, line_start = 0, 1, 0
    at_statement_start = True
    n = len(text)
    while pos < n:
        if at_statement_start and text.startswith("start_literal(", pos):
            start = _LITERAL_START.match(text, pos)
            if start is None:
                raise VexError(source, line, pos - line_start + 1, "start_literal(tag) needs its tag and a ';' on its line")
            end = re.compile(r"^[ \t]*end_literal\(" + re.escape(start.group(1)) + r"\)[ \t\r]*;", re.M).search(text, start.end())
            if end is None:
                raise VexError(source, line, pos - line_start + 1,
                               f"start_literal({start.group(1)}) has no end_literal({start.group(1)}); after it")
            skipped = text.count("\n", pos, end.end())
            if skipped:
                line += skipped
                line_start = text.rfind("\n", pos, end.end()) + 1
            pos = end.end()
            continue
        m = _TOKEN.match(text, pos)
        if m is None:  # the alternatives cover every character: never
            raise VexError(source, line, pos - line_start + 1, f"cannot read {text[pos]!r}")
        kind = m.lastgroup
        column = pos - line_start + 1
        if kind == "newline":
            line += 1
            line_start = m.end()
        elif kind == "string":
            yield _Token("string", m.group()[1:-1], line, column)
            at_statement_start = False
        elif kind == "punct":
            yield _Token(m.group(), m.group(), line, column)
            at_statement_start = m.group() == ";"
        elif kind == "word":
            yield _Token("word", m.group(), line, column)
            at_statement_start = False
        elif kind == "bad":
            raise VexError(source, line, column, 'a quoted string has no closing \'"\' on its line')
        pos = m.end()


# -- statements ------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.blocks: dict[str, Block] = {}
        self.block: Block | None = None
        self.open: Def | None = None
        self.version: str | None = None

    def error(self, token: _Token, what: str) -> VexError:
        return VexError(self.source, token.line, token.column, what)

    def parse(self) -> VexFile:
        statement: list[_Token] = []
        for token in _tokens(self.text, self.source):
            if token.kind == ";":
                if statement:  # a stray ';' (an empty statement) is let be
                    self.statement(statement, token)
                statement = []
            else:
                if statement and token.kind == "word" and token.line > statement[-1].line and _begins_statement(token.text):
                    last = statement[-1]
                    end = last.column + len(last.text) + (2 if last.kind == "string" else 0)
                    raise VexError(self.source, last.line, end,
                                   f"the statement {_show(statement[0])} has no ';' at its end (before {_show(token)} on line {token.line})")
                statement.append(token)
        if statement:
            raise self.error(statement[0], f"the statement {_show(statement[0])} has no ';' before the end of the file")
        if self.version is None:
            raise VexError(self.source, 1, 1, "no VEX here: a VEX file starts with VEX_rev = 1.5; or VEX_rev = 2.0;")
        if self.open is not None:
            raise VexError(self.source, self.open.line, self.open.column,
                           f"{self.open.kind} {self.open.name} has no {_end(self.open)} before the end of the file")
        return VexFile(self.source, self.version, self.blocks)

    def statement(self, tokens: list[_Token], semicolon: _Token) -> None:
        head = tokens[0]
        if head.kind != "word":
            raise self.error(head, f"a statement starts with a name, not {_show(head)}")
        name = head.text
        if self.version is None:
            self.first(tokens)
            return
        if name.startswith("$"):
            self.expect_alone(tokens, f"a block starts with {name}; alone")
            self.close_open(head, f"before {name}")
            if len(name) == 1:
                raise self.error(head, "a block needs a name after the $ ($FREQ;)")
            self.block = self.blocks.setdefault(name[1:], Block(name[1:], head.line))
            return
        if self.block is None:
            raise self.error(head, f"{_show(head)} comes before any $BLOCK; (after VEX_rev, write $GLOBAL; or another block)")
        if name in ("def", "scan"):
            if len(tokens) != 2 or tokens[1].kind not in ("word", "string"):
                where = tokens[2] if len(tokens) > 2 else (tokens[1] if len(tokens) == 2 else semicolon)
                raise self.error(where, f"write {name} NAME; (one name after {name})")
            self.close_open(head, f"before {name} {tokens[1].text}")
            self.open = Def(name, tokens[1].text, head.line, head.column)
            earlier = self.block.defs.get(self.open.name)
            if name == "scan" and earlier is not None:
                raise self.error(tokens[1], f"scan {self.open.name} is in $SCHED twice (line {earlier.line} too): each scan needs its own name")
            self.block.defs.setdefault(self.open.name, self.open)
            return
        if name in ("enddef", "endscan"):
            self.expect_alone(tokens, f"write {name}; alone")
            if self.open is None:
                raise self.error(head, f"{name} with no {name[3:]} open")
            if _end(self.open) != name:
                raise self.error(head, f"{name} closes {self.open.kind} {self.open.name} (line {self.open.line}): write {_end(self.open)}")
            self.open = None
            return
        if name == "ref":
            self.ref(tokens)
            return
        if len(tokens) < 2 or tokens[1].kind != "=":
            where = tokens[1] if len(tokens) > 1 else semicolon
            raise self.error(where, f"expected '=' after {_show(head)}, found {_show(where)}")
        values = self.fields(tokens[2:], head)
        target = self.open if self.open is not None else self.block
        target.statements.append(Statement(name, values, head.line, head.column))

    def first(self, tokens: list[_Token]) -> None:
        head = tokens[0]
        if head.text != "VEX_rev" or len(tokens) < 3 or tokens[1].kind != "=":
            raise self.error(head, "a VEX file starts with VEX_rev = 1.5; or VEX_rev = 2.0;")
        values = self.fields(tokens[2:], head)
        version = {"1.5": "1.5", "2.0": "2.0", "2": "2.0", "2.00": "2.0", "1.50": "1.5"}.get(values[0])
        if len(values) != 1 or version is None:
            raise self.error(tokens[2], f"VEX_rev = {':'.join(values)}: vdifrec reads VEX 1.5 and 2.0")
        self.version = version

    def fields(self, tokens: list[_Token], head: _Token) -> tuple[str, ...]:
        fields: list[str] = []
        words: list[str] = []
        for t in tokens:
            if t.kind == ":":
                fields.append(" ".join(words))
                words = []
            elif t.kind == "=":
                raise self.error(t, f"a second '=' in the statement {_show(head)} (line {head.line}): a ';' missing before it?")
            else:
                words.append(t.text)
        fields.append(" ".join(words))
        return tuple(fields)

    def expect_alone(self, tokens: list[_Token], what: str) -> None:
        if len(tokens) > 1:
            raise self.error(tokens[1], f"{what}, found {_show(tokens[1])} after it")

    def close_open(self, at: _Token, where: str) -> None:
        if self.open is not None:
            raise VexError(self.source, self.open.line, self.open.column,
                           f"{self.open.kind} {self.open.name} has no {_end(self.open)} {where} (line {at.line})")

    def ref(self, tokens: list[_Token]) -> None:
        head = tokens[0]
        if len(tokens) < 4 or tokens[1].kind != "word" or not tokens[1].text.startswith("$") or tokens[2].kind != "=":
            where = tokens[1] if len(tokens) > 1 else head
            raise self.error(where, "write ref $BLOCK = name; or ref $BLOCK = name : St1 : St2;")
        values = self.fields(tokens[3:], head)
        if not values[0]:
            raise self.error(tokens[3], f"ref {tokens[1].text} names no definition")
        ref = Ref(tokens[1].text[1:], values[0], tuple(s for s in values[1:] if s), head.line, head.column)
        if self.open is not None:
            self.open.refs.append(ref)
        elif self.block is not None:
            self.block.refs.append(ref)
        else:
            raise self.error(head, "ref comes before any $BLOCK;")


#: Words that begin a statement, never a value: one of them first on a line inside a statement
#: means the statement before it lacks its ';'.
_KEYWORDS = frozenset({"def", "enddef", "scan", "endscan", "ref"})


def _begins_statement(word: str) -> bool:
    return word in _KEYWORDS or (word.startswith("$") and len(word) > 1)


def _end(d: Def) -> str:
    return "end" + d.kind


def _show(t: _Token) -> str:
    return f'"{t.text}"' if t.kind == "string" else f"'{t.text}'"
