"""The items of a document's lists, read from markdown-it's token stream (never from
patterns over the text): what is still to do in a checklist, to become a task's steps.

A checklist item is a list item that opens with a box, `- [ ] call the movers` (GitHub's
task lists; `[x]` is ticked). A document with boxes is a checklist, and only its unticked
items are still to do; a document without any has plain bullet and numbered items, all of
them still to do.
"""

from dataclasses import dataclass
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

_BOXES = {"[ ]": False, "[x]": True, "[X]": True}


@dataclass(frozen=True, slots=True)
class Item:
    text: str  # as plain text, without its box or Markdown
    checked: bool | None  # None: a plain item, with no box


def items(markdown_text: str) -> list[Item]:
    """Every list item of the text, nested ones too, in order: its first paragraph."""
    tokens = _markdown().parse(markdown_text)
    found: list[Item] = []
    for at, token in enumerate(tokens):
        if token.type != "list_item_open":
            continue
        inline = next((t for t in tokens[at + 1 : at + 3] if t.type == "inline"), None)
        if inline is not None and (item := _item(_plain(inline))) is not None:
            found.append(item)
    return found


@cache
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark")


def to_do(markdown_text: str) -> list[str]:
    """The items still to do: the unticked ones of a checklist, or every item of a text
    whose lists have no boxes."""
    found = items(markdown_text)
    if any(item.checked is not None for item in found):
        return [item.text for item in found if item.checked is False]
    return [item.text for item in found]


def _plain(inline: Token) -> str:
    """An inline token's text without its Markdown (emphasis, links, code marks)."""
    parts = [
        " " if child.type in ("softbreak", "hardbreak") else child.content
        for child in inline.children or ()
        if child.type in ("text", "code_inline", "softbreak", "hardbreak")
    ]
    return " ".join("".join(parts).split())


def _item(text: str) -> Item | None:
    box, rest = text[:3], text[3:]
    if box in _BOXES and (not rest or rest.startswith(" ")):
        return Item(rest.strip(), _BOXES[box]) if rest.strip() else None
    return Item(text, None) if text else None
