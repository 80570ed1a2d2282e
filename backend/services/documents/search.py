"""Finding passages by words: PostgreSQL full-text search, read as a person's words.

A query is not a boolean expression: a passage is found if it holds any of the query's
words (stop words drop out, word forms meet through the 'english' configuration), and ranks
by how many it holds and how rare they are, its title and heading counting above its body;
a quoted phrase is one term that matches as a phrase (`todo_search_passages`, migration
0011). A ranking is a list of passage ids with scores (`Ranked`), so that another ranking
(by meaning) can be fused with it by reciprocal rank fusion (`fuse`) before the best are
read. Then one long document does not take every place: a document's later passages go
after the other documents' first ones (`diversify`), still counting towards `limit`.
"""

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.models.document import Document, Passage, PassagePublic
from backend.services import access

MAX_LIMIT = 20
MAX_TERMS = 32
# How many passages each ranking brings before fusion and demotion pick `limit` of them.
DEPTH = 50
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al.)
_WORD_RANKING = text(
    "SELECT passage_id, document_id, score"
    " FROM todo_search_passages(CAST(:words AS text[]), CAST(:phrases AS boolean[]),"
    " CAST(:list AS uuid), :want)"
)


@dataclass(frozen=True, slots=True)
class Ranked:
    """A passage's place in a ranking: higher scores first."""

    passage_id: uuid.UUID
    document_id: uuid.UUID
    score: float


@dataclass(frozen=True, slots=True)
class PassageHit:
    """A passage found, with what a reader needs to quote it."""

    passage_id: uuid.UUID
    document_id: uuid.UUID
    list_id: uuid.UUID
    title: str  # the document's
    heading: str  # its heading path, HEADING_JOINER between
    text: str
    score: float

    def public(self) -> PassagePublic:
        return PassagePublic(
            document_id=self.document_id,
            title=self.title,
            heading=self.heading,
            text=self.text,
            score=round(self.score, 6),
        )


def query_terms(query: str) -> tuple[list[str], list[bool]]:
    """The query's terms, and which are phrases: a "quoted phrase" is one term, every other
    word one term of its own."""
    terms: list[str] = []
    phrases: list[bool] = []
    for at, part in enumerate(query.split('"')):
        quoted = at % 2 == 1
        for term in [part] if quoted else part.split():
            if term.strip() and len(terms) < MAX_TERMS:
                terms.append(term.strip())
                phrases.append(quoted)
    return terms, phrases


async def word_ranking(
    db: AsyncSession, *, query: str, list_id: uuid.UUID | None, depth: int = DEPTH
) -> list[Ranked]:
    """The passages the acting user reads that hold any of the query's words, best first."""
    words, phrases = query_terms(query)
    if not words:
        return []
    connection = await db.connection()
    rows = await connection.execute(
        _WORD_RANKING, {"words": words, "phrases": phrases, "list": list_id, "want": depth}
    )
    return [Ranked(row.passage_id, row.document_id, row.score) for row in rows]


def fuse(rankings: Sequence[Sequence[Ranked]], *, k: int = RRF_K) -> list[Ranked]:
    """Rankings fused by reciprocal rank: a passage scores the sum of 1 / (k + its rank) in
    each ranking it is in."""
    scores: dict[uuid.UUID, float] = defaultdict(float)
    documents: dict[uuid.UUID, uuid.UUID] = {}
    for ranking in rankings:
        for rank, ranked in enumerate(ranking, start=1):
            scores[ranked.passage_id] += 1 / (k + rank)
            documents[ranked.passage_id] = ranked.document_id
    order = sorted(scores, key=lambda passage_id: (-scores[passage_id], passage_id))
    return [Ranked(passage_id, documents[passage_id], scores[passage_id]) for passage_id in order]


def diversify(ranked: Sequence[Ranked]) -> list[Ranked]:
    """The ranking with each document's n-th passage after every document's (n-1)-th: a
    document's best passage keeps its place among the others' best, its second comes after
    them all, and so on. Nothing is dropped."""
    seen: dict[uuid.UUID, int] = defaultdict(int)
    placed: list[tuple[int, int, Ranked]] = []
    for at, passage in enumerate(ranked):
        placed.append((seen[passage.document_id], at, passage))
        seen[passage.document_id] += 1
    return [passage for _, _, passage in sorted(placed, key=lambda item: item[:2])]


async def read_hits(db: AsyncSession, ranked: Sequence[Ranked]) -> list[PassageHit]:
    """The passages of a ranking, in its order, with their documents' titles."""
    if not ranked:
        return []
    statement = (
        select(  # type: ignore[call-overload]
            col(Passage.id),
            col(Passage.document_id),
            col(Passage.list_id),
            col(Document.title),
            col(Passage.heading),
            col(Passage.text),
        )
        .join(Document, col(Document.id) == col(Passage.document_id))
        .where(col(Passage.id).in_([passage.passage_id for passage in ranked]))
    )
    rows = {row[0]: row for row in (await db.exec(statement)).all()}
    hits = []
    for passage in ranked:
        if (row := rows.get(passage.passage_id)) is not None:
            passage_id, document_id, list_id, title, heading, body = row
            hits.append(PassageHit(passage_id, document_id, list_id, title, heading, body,
                                   passage.score))  # fmt: skip
    return hits


async def search_passages(
    db: AsyncSession, *, user: str, query: str, list_id: uuid.UUID | None, limit: int = 5
) -> list[PassageHit]:
    """The `limit` best passages for `query` among those the user reads (in one list, when
    given: 404 when they are not its member), in a transaction acting as the user."""
    if list_id is not None:
        await access.membership(db, user=user, list_id=list_id)
    ranked = await word_ranking(db, query=query, list_id=list_id)
    return await read_hits(db, diversify(ranked)[: max(1, min(limit, MAX_LIMIT))])
