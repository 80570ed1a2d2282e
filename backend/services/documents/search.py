"""Finding passages by words (PostgreSQL full-text search, read as a person's words) and,
with an embeddings model and pgvector, by meaning too.

A query is not a boolean expression: a passage is found if it holds any of the query's
words (stop words drop out, word forms meet through the 'english' configuration), and ranks
by how many it holds and how rare they are, its title and heading counting above its body;
a quoted phrase is one term that matches as a phrase (`todo_search_passages`, migration
0011). A ranking is a list of passage ids with scores (`Ranked`). One long document does
not take every place: in a ranking, a document's later passages go after the other
documents' first ones (`diversify`), still counting towards `limit`; a ranking by meaning
is demoted the same way and the two are then fused by reciprocal rank (`combine`).

By meaning: the query's vector (`query_meaning`, asked of the embeddings server before any
transaction opens, with a short timeout; None on any failure) against the passages' vectors
of the configured model and the same size (`todo_nearest_passages`, migration 0012),
nearest first. Without a vector, or while passages have none yet, the words' ranking is the
answer on its own. Both rankings come with their passages' text in one statement
(`rankings`), and are fused and demoted here.
"""

import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import Database
from backend.models.document import PassagePublic
from backend.services import access
from backend.services.embeddings import Embeddings, vector_literal

MAX_LIMIT = 20
MAX_TERMS = 32
# How many passages each ranking brings before fusion and demotion pick `limit` of them.
DEPTH = 50
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al.)
# By meaning every passage is found at some distance: only the nearest are fused, or the
# merely somewhat near that also hold a common word of the query would outrank the one
# passage that is clearly nearest (bench/README.md: recall@5 0.93 fused at 50, 0.98 at 5,
# 10 or 20); and the fewer, the less HNSW has to look at.
MEANING_DEPTH = 5
# Both rankings and their passages in one statement: `near` tells which ranking a row is
# of (a passage in both comes twice). Each function's ROWS (migration 0016) tells the
# planner how few it returns, so the passages are probed by id rather than all joined.
_WORDS = (
    "SELECT passage_id, score, false AS near FROM todo_search_passages("
    "CAST(:words AS text[]), CAST(:phrases AS boolean[]), CAST(:list AS uuid), :depth)"
)
_NEAREST = (
    "SELECT passage_id, 1 - distance, true FROM todo_nearest_passages("
    ":model, CAST(:query AS vector), CAST(:list AS uuid), :meaning_depth)"
)
_PASSAGES = (
    " SELECT r.near, r.passage_id, r.score, p.document_id, p.list_id, d.title, d.media_type,"
    " p.heading, p.text FROM ranked r JOIN passages p ON p.id = r.passage_id"
    " JOIN documents d ON d.id = p.document_id"
)
_RANKED_BY_WORDS = text(f"WITH ranked AS ({_WORDS}){_PASSAGES}")
_RANKED_BY_BOTH = text(f"WITH ranked AS ({_WORDS} UNION ALL {_NEAREST}){_PASSAGES}")


@dataclass(frozen=True, slots=True)
class QueryMeaning:
    """A query's vector, and the model that made it: only that model's vectors compare."""

    model: str
    vector: list[float]


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
    media_type: str  # the document's, as uploaded
    heading: str  # its heading path, HEADING_JOINER between
    text: str
    score: float

    def public(self) -> PassagePublic:
        return PassagePublic(
            document_id=self.document_id,
            title=self.title,
            media_type=self.media_type,
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


async def query_meaning(semantic: Embeddings | None, query: str) -> QueryMeaning | None:
    """The query's vector when search by meaning is on (`semantic`) and the embeddings server
    answers in time; else None, and search goes by words. Call it with no transaction open:
    it waits on the network."""
    if semantic is None or not query.strip():
        return None
    vector = await semantic.embed_query(query)
    return QueryMeaning(semantic.model, vector) if vector is not None else None


@dataclass(frozen=True, slots=True)
class Rankings:
    """A query's passages ranked by words and by meaning (empty without the query's
    meaning), best first, and each passage found, to quote."""

    words: list[Ranked]
    nearest: list[Ranked]
    passages: dict[uuid.UUID, PassageHit]

    def hits(self, ranked: Sequence[Ranked]) -> list[PassageHit]:
        """The passages of a ranking made of these, in its order, with its scores."""
        return [replace(self.passages[item.passage_id], score=item.score) for item in ranked]


async def rankings(
    db: AsyncSession,
    *,
    query: str,
    list_id: uuid.UUID | None,
    meaning: QueryMeaning | None = None,
    meaning_depth: int = MEANING_DEPTH,
) -> Rankings:
    """The passages the acting user reads (in `list_id`, when given) that hold any of the
    query's words, and, given its `meaning`, the `meaning_depth` nearest to it: one
    statement."""
    words, phrases = query_terms(query)
    found = Rankings([], [], {})
    if not words and meaning is None:
        return found
    params: dict[str, object] = {
        "words": words,
        "phrases": phrases,
        "list": list_id,
        "depth": DEPTH,
    }
    statement = _RANKED_BY_WORDS
    if meaning is not None:
        statement = _RANKED_BY_BOTH
        params["model"], params["query"] = meaning.model, vector_literal(meaning.vector)
        params["meaning_depth"] = meaning_depth
    connection = await db.connection()
    for row in await connection.execute(statement, params):
        near, passage_id, score, document_id, list_, title, media_type, heading, body = row
        (found.nearest if near else found.words).append(Ranked(passage_id, document_id, score))
        found.passages[passage_id] = PassageHit(passage_id, document_id, list_, title,
                                                media_type, heading, body, score)  # fmt: skip
    # The rows come in no order: each ranking's own, ties by id as the functions break them.
    for ranking in (found.words, found.nearest):
        ranking.sort(key=lambda item: (-item.score, item.passage_id))
    return found


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


async def search_passages(
    db: AsyncSession,
    *,
    user: str,
    query: str,
    list_id: uuid.UUID | None,
    limit: int = 5,
    meaning: QueryMeaning | None = None,
) -> list[PassageHit]:
    """The `limit` best passages for `query` among those the user reads (in one list, when
    given: 404 when they are not its member), in a transaction acting as the user; ranked by
    words and, given the query's `meaning`, by meaning too (fused)."""
    if list_id is not None:
        await access.membership(db, user=user, list_id=list_id)
    found = await rankings(db, query=query, list_id=list_id, meaning=meaning)
    return found.hits(combine(found.words, found.nearest)[: max(1, min(limit, MAX_LIMIT))])


def combine(words: Sequence[Ranked], nearest: Sequence[Ranked]) -> list[Ranked]:
    """The answer's order: the words' ranking, demoted (`diversify`); with a ranking by
    meaning too, both demoted, then fused. Each is demoted before fusing because by meaning
    every passage is found at some distance: demoting after would put a document's second
    passage behind every other document's first, however far, so a question whose two
    best passages share a document could never show both."""
    if not nearest:
        return diversify(words)
    return fuse([diversify(words), diversify(nearest)])


async def search_documents(
    *,
    database: Database,
    semantic: Embeddings | None,
    user: str,
    query: str,
    list_id: uuid.UUID | None,
    limit: int = 5,
) -> list[PassageHit]:
    """`search_passages` for a caller holding no transaction: the query's vector first (no
    connection held while the embeddings server answers), then one transaction."""
    meaning = await query_meaning(semantic, query)
    async with database.transaction(as_user=user) as db:
        return await search_passages(
            db, user=user, query=query, list_id=list_id, limit=limit, meaning=meaning
        )
