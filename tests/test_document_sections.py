"""A document's sections and passages, from markdown-it's token stream: heading paths, what
is not a section bound, and long sections cut between paragraphs, then sentences."""

import pytest

from backend.services.documents.reading import PLAIN, of_text
from backend.services.documents.sections import PASSAGE_WORDS, Section, passages, sections

J = " \u203a "


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("just text", [Section((), "just text")]),
        ("intro\n\n# A\n\nunder a", [Section((), "intro"), Section(("A",), "under a")]),
        # A heading with no text of its own stays in its subsections' paths.
        ("# Moving\n## Week before\n- [ ] movers\n- [x] books\n## Day\nkeys",
         [Section(("Moving", "Week before"), "- [ ] movers\n- [x] books"),
          Section(("Moving", "Day"), "keys")]),
        # A deeper heading, then a shallower one: the path climbs back.
        ("# A\n### C\nc\n## B\nb\n# D\nd",
         [Section(("A", "C"), "c"), Section(("A", "B"), "b"), Section(("D",), "d")]),
        # Setext headings are headings; a "#" in a code block or a list item is not a bound.
        ("Title\n=====\n\n```\n# not a heading\n```\n\n- # item heading\n",
         [Section(("Title",), "```\n# not a heading\n```\n\n- # item heading")]),
        ("# Only a heading", []),
    ],
)  # fmt: skip
def test_sections_follow_the_headings(markdown: str, expected: list[Section]) -> None:
    assert sections(markdown) == expected


def test_a_heading_path_is_joined_for_reading() -> None:
    [section] = sections("# Moving\n## Week before\ncall")
    assert section.heading == f"Moving{J}Week before"


def test_a_long_section_is_cut_between_paragraphs_then_sentences() -> None:
    paragraph = " ".join(["word"] * 120)
    text = "# Long\n\n" + "\n\n".join([paragraph] * 6)
    cut = passages(text, markdown=True)
    assert [len(p.text.split()) for p in cut] == [240, 240, 240]
    assert all(p.heading == "Long" for p in cut)
    sentence = " ".join(["word"] * 99) + "."
    huge = " ".join([sentence] * 10)  # one paragraph of 990 words
    sizes = [len(p.text.split()) for p in passages(huge, markdown=False)]
    assert sizes == [297, 297, 297, 99]  # whole sentences, about PASSAGE_WORDS each
    assert max(sizes) <= PASSAGE_WORDS


def test_plain_text_is_one_section_and_a_hash_is_just_a_hash() -> None:
    reading = of_text("# not a heading\n\nsecond", PLAIN)
    assert reading.title is None
    assert [(p.heading, p.text) for p in reading.passages] == [("", "# not a heading\n\nsecond")]
