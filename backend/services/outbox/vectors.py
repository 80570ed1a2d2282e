"""Passages' vectors, computed after the upload has answered (EMBEDDINGS_MODEL set and the
database has pgvector: migration 0012).

Each round claims a batch, as the worker, in one short transaction: claims due again (a
failed batch's, after its backoff, or one whose worker died: its lease ran out), then
passages with no vector of the configured model for their content (or of another size
than the model now answers). A claim is a row of `passage_vectors` keyed by passage and
model, so two replicas never embed the same passage version for the same model: the
second finds the row taken (ON CONFLICT, SKIP LOCKED). The batch is embedded with no
transaction open, then stored in another; a failure postpones the batch (doubling from
EMBEDDINGS_RETRY_S, up to 10 minutes) and nothing else notices: search answers by words
meanwhile. Storing a passage's vector drops its vectors of other models, so a change of
model re-embeds everything once in the background and leaves one vector per passage.

Rounds run when an event is committed anywhere (a document uploaded through any replica
writes one), and when the next claim is due again (a retry's backoff over, or a lease run
out: read in each round), or once a minute at most.
"""

import logging
import uuid
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.db import Database
from backend.services.embeddings import Embeddings, EmbeddingsUnavailable, vector_literal
from backend.services.outbox.worker import Alarm, Next, WakingWorker
from backend.settings import Settings

logger = logging.getLogger("todo_agent.vectors")

_LEASE_SLACK_S = 10.0
# Between two rounds woken by events: a burst of events makes one round, not a round each.
_MIN_GAP_S = 0.2

_RETAKE = text(
    "UPDATE passage_vectors SET leased_until = now() + make_interval(secs => :lease_s)"
    " WHERE (passage_id, model) IN ("
    "  SELECT passage_id, model FROM passage_vectors"
    "  WHERE model = :model AND embedding IS NULL AND next_attempt_at <= now()"
    "  AND (leased_until IS NULL OR leased_until < now())"
    "  ORDER BY next_attempt_at LIMIT :batch FOR UPDATE SKIP LOCKED)"
    " RETURNING passage_id"
)
# A passage needs a vector when it has none of the model for its content, or one of
# another size than the model answers now (`dims`, once known). A row there already is
# taken again only when it is such a stale one (the WHERE of DO UPDATE), never while it is
# pending: that is the retry's.
_TAKE_NEW = text(
    "INSERT INTO passage_vectors AS v (passage_id, list_id, model, content_hash, leased_until)"
    " SELECT p.id, p.list_id, :model, p.content_hash, now() + make_interval(secs => :lease_s)"
    " FROM passages p WHERE NOT EXISTS ("
    "  SELECT 1 FROM passage_vectors w WHERE w.passage_id = p.id AND w.model = :model"
    "  AND w.content_hash = p.content_hash"
    "  AND (w.dims IS NULL OR w.dims = coalesce(CAST(:dims AS integer), w.dims)))"
    " LIMIT :batch"
    " ON CONFLICT (passage_id, model) DO UPDATE SET content_hash = excluded.content_hash,"
    " dims = NULL, embedding = NULL, embedded_at = NULL, attempts = 0, next_attempt_at = now(),"
    " leased_until = excluded.leased_until"
    " WHERE v.content_hash <> excluded.content_hash OR v.dims <> CAST(:dims AS integer)"
    " RETURNING passage_id"
)
_TEXTS = text(
    "SELECT p.id, p.content_hash, d.title, p.heading, p.text"
    " FROM passages p JOIN documents d ON d.id = p.document_id"
    " WHERE p.id = ANY(CAST(:ids AS uuid[]))"
)
_STORE = text(
    "UPDATE passage_vectors v SET embedding = CAST(x.embedding AS vector), dims = :dims,"
    " embedded_at = now(), leased_until = NULL"
    " FROM unnest(CAST(:ids AS uuid[]), CAST(:hashes AS text[]), CAST(:vectors AS text[]))"
    "  AS x(passage_id, content_hash, embedding)"
    " WHERE v.passage_id = x.passage_id AND v.model = :model"
    " AND v.content_hash = x.content_hash AND v.embedding IS NULL"
)
_DROP_OTHER_MODELS = text(
    "DELETE FROM passage_vectors WHERE passage_id = ANY(CAST(:ids AS uuid[])) AND model <> :model"
)
_POSTPONE = text(
    "UPDATE passage_vectors SET attempts = attempts + 1, leased_until = NULL, next_attempt_at ="
    " now() + make_interval(secs => least(600, :retry_s * 2 ^ least(attempts, 20)))"
    " WHERE passage_id = ANY(CAST(:ids AS uuid[])) AND model = :model AND embedding IS NULL"
)
# When a claim is next due again: a pending row's backoff over and its lease (if any) run out.
_NEXT_DUE = text(
    "SELECT EXTRACT(EPOCH FROM min(CASE WHEN leased_until > next_attempt_at THEN leased_until"
    " ELSE next_attempt_at END))::float8, EXTRACT(EPOCH FROM clock_timestamp())::float8"
    " FROM passage_vectors WHERE model = :model AND embedding IS NULL"
)
_PRESENT = text("SELECT to_regclass('passage_vectors') IS NOT NULL")


@dataclass(frozen=True, slots=True)
class _Claimed:
    passage_id: uuid.UUID
    content_hash: str
    text: str


async def vectors_present(connection: AsyncConnection) -> bool:
    """Whether the database holds passages' vectors (it has pgvector: migration 0012)."""
    return bool((await connection.execute(_PRESENT)).scalar())


def passage_text(title: str, heading: str, body: str) -> str:
    """What is embedded of a passage: its document's title and heading path, then its text,
    so that a section's subject counts even where its body does not name it."""
    return "\n".join(part for part in (title, heading) if part) + "\n\n" + body


class PassageVectors(WakingWorker):
    name = "passage-vectors"

    def __init__(self, settings: Settings, database: Database, embeddings: Embeddings) -> None:
        self._database = database
        self._embeddings = embeddings
        self._model = embeddings.model
        self._batch = settings.embeddings_batch
        self._lease_s = settings.embeddings_timeout_s + _LEASE_SLACK_S
        self._retry_s = settings.embeddings_retry_s
        self._dims: int | None = None  # what the model answered last
        self.alarm = Alarm(shortest_s=_MIN_GAP_S)

    def wake(self, _user_id: str = "") -> None:
        self.alarm.wake()

    async def embed_due(self) -> int:
        """Claim a batch, embed it and store it; how many passages were claimed. Raises
        EmbeddingsUnavailable (the batch postponed) when the server fails."""
        claimed = await self._claim()
        if not claimed:
            return 0
        ids = [item.passage_id for item in claimed]
        try:
            vectors = await self._embeddings.embed([item.text for item in claimed])
        except EmbeddingsUnavailable:
            async with self._database.system() as connection:
                await connection.execute(
                    _POSTPONE, {"ids": ids, "model": self._model, "retry_s": self._retry_s}
                )
            raise
        self._dims = len(vectors[0])
        async with self._database.system() as connection:
            await connection.execute(
                _STORE,
                {
                    "ids": ids,
                    "hashes": [item.content_hash for item in claimed],
                    "vectors": [vector_literal(vector) for vector in vectors],
                    "dims": self._dims,
                    "model": self._model,
                },
            )
            await connection.execute(_DROP_OTHER_MODELS, {"ids": ids, "model": self._model})
        logger.info("passages embedded", extra={"count": len(claimed), "model": self._model})
        return len(claimed)

    async def _claim(self) -> list[_Claimed]:
        params = {"model": self._model, "lease_s": self._lease_s, "dims": self._dims}
        async with self._database.system() as connection:
            ids = [
                row[0]
                for row in await connection.execute(_RETAKE, {**params, "batch": self._batch})
            ]
            if len(ids) < self._batch:
                left = self._batch - len(ids)
                result = await connection.execute(_TAKE_NEW, {**params, "batch": left})
                ids += [row[0] for row in result]
            if not ids:
                return []
            rows = (await connection.execute(_TEXTS, {"ids": ids})).all()
        return [
            _Claimed(passage_id=row[0], content_hash=row[1], text=passage_text(*row[2:]))
            for row in rows
        ]

    async def _round(self) -> Next:
        """Embed a batch, and read when the next claim is due (at once when the batch was
        full: more are waiting)."""
        try:
            claimed = await self.embed_due()
        except EmbeddingsUnavailable as error:
            claimed = 0
            logger.warning(
                "embeddings server failed; passages postponed",
                extra={"model": self._model, "error": str(error)},
            )
        async with self._database.system() as connection:
            row = (await connection.execute(_NEXT_DUE, {"model": self._model})).one()
        found = Next.read((row[0], row[1]), worked=claimed > 0)
        if claimed == self._batch:
            return Next(found.now, found.now)
        return found
