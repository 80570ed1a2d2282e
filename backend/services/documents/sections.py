"""A document's structure: its sections under their headings (from markdown-it's token
stream, never from patterns over the text), and the passages search finds, one per section
with long sections cut at about PASSAGE_WORDS words on paragraph, then sentence bounds."""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from markdown_it import MarkdownIt

PASSAGE_WORDS = 300
HEADING_JOINER = " \u203a "  # "Moving \u203a Week before"
# A paragraph this much over the mark is cut at its sentences, a sentence at its words.
_STRETCH = 1.5
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


@dataclass(frozen=True, slots=True)
class Section:
    """The text under a heading (up to the next heading), as Markdown source: `body` keeps
    its list items as written (`- [ ] call the movers`)."""

    path: tuple[str, ...]  # ("Moving", "Week before"); () before the first heading
    body: str

    @property
    def heading(self) -> str:
        return HEADING_JOINER.join(self.path)


@dataclass(frozen=True, slots=True)
class PassageText:
    heading: str
    text: str


@dataclass(frozen=True, slots=True)
class Outline:
    title: str | None  # the first heading
    sections: list[Section]


@cache
def _markdown() -> MarkdownIt:
    # The block structure is all that is read: inline markup (emphasis, links) is not
    # parsed, which saves a third of the time on a large document.
    return MarkdownIt("commonmark").disable("inline")


def outline(markdown_text: str) -> Outline:
    """A Markdown document's first heading and its sections, in order, with their heading
    paths, from one parse. Headings inside lists or quotes are not section bounds; a
    section with no text is left out (its heading stays in its subsections' paths)."""
    lines = markdown_text.splitlines()
    tokens = _markdown().parse(markdown_text)
    found: list[Section] = []
    path: list[tuple[int, str]] = []  # (level, title) of the headings above
    first: str | None = None
    start = 0  # the first line of the current section's body
    for at, token in enumerate(tokens):
        if token.type != "heading_open" or token.level != 0 or token.map is None:
            continue
        _add(found, path, lines[start : token.map[0]])
        level = int(token.tag[1:])
        while path and path[-1][0] >= level:
            path.pop()
        title = tokens[at + 1].content.strip() if at + 1 < len(tokens) else ""
        path.append((level, title))
        first = first or title or None
        start = token.map[1]
    _add(found, path, lines[start:])
    return Outline(first, found)


def sections(markdown_text: str) -> list[Section]:
    """The sections of a Markdown document (see `outline`)."""
    return outline(markdown_text).sections


def _add(found: list[Section], path: list[tuple[int, str]], lines: list[str]) -> None:
    body = "\n".join(lines).strip()
    if body:
        found.append(Section(tuple(title for _, title in path if title), body))


def passages(text: str, *, markdown: bool) -> list[PassageText]:
    """The passages of a document: per section (Markdown) or of the whole (plain text),
    long ones cut at about PASSAGE_WORDS words."""
    return passages_of(sections(text) if markdown else [Section((), text.strip())])


def passages_of(parts: list[Section]) -> list[PassageText]:
    return [
        PassageText(section.heading, chunk) for section in parts for chunk in _chunks(section.body)
    ]


def _chunks(body: str) -> Iterator[str]:
    """`body` in pieces of about PASSAGE_WORDS words, cut between paragraphs where it can."""
    pieces: list[str] = []
    words = 0
    for unit in _units(body):
        size = len(unit.split())
        if pieces and words + size > PASSAGE_WORDS:
            yield "\n\n".join(pieces)
            pieces, words = [], 0
        pieces.append(unit)
        words += size
    if pieces:
        yield "\n\n".join(pieces)


def _units(body: str) -> Iterator[str]:
    """Paragraphs; a paragraph far over the mark as its sentences, a sentence far over it
    as runs of words."""
    limit = int(PASSAGE_WORDS * _STRETCH)
    for paragraph in re.split(r"\n\s*\n", body):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph.split()) <= limit:
            yield paragraph
            continue
        for sentence in _SENTENCE_END.split(paragraph):
            words = sentence.split()
            for at in range(0, len(words), limit):
                yield " ".join(words[at : at + limit])
