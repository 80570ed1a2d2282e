"""The embeddings model: texts to vectors through the `openai` SDK, at EMBEDDINGS_BASE_URL
(any OpenAI-compatible `/v1/embeddings`).

Two callers with two patiences. The background worker (`outbox.vectors`) embeds passages
in batches with EMBEDDINGS_TIMEOUT_S and retries later itself. A search embeds its query
with EMBEDDINGS_QUERY_TIMEOUT_S and, on any failure, answers by words alone; after a
failure the next searches of this process do not ask again for a little while (`_QUIET_S`,
or until the worker's next batch succeeds), so an embeddings server that is down costs one
search its timeout, not every search.
"""

import logging
import time
from collections.abc import Sequence

import orjson

from backend.services.model_http import ModelClient
from backend.settings import Settings

logger = logging.getLogger("todo_agent.embeddings")

# After a query's embedding failed, searches go by words alone this long.
_QUIET_S = 30.0


class EmbeddingsUnavailable(Exception):
    """The embeddings server did not answer with vectors."""


class Embeddings:
    """The configured model (`settings.embeddings_model`, which must be set)."""

    def __init__(self, settings: Settings) -> None:
        assert settings.embeddings_model is not None
        self.model = settings.embeddings_model
        key = settings.embeddings_key
        # Some servers (Ollama, llama.cpp) need no key; the SDK insists on one. The agent's
        # SDK client (model_http.py), one per patience.
        clients = [
            ModelClient(
                base_url=settings.embeddings_url,
                api_key=key.get_secret_value() if key else "unused",
                max_retries=0,  # the worker retries with backoff; a search does not wait
                timeout=timeout_s,
            )
            for timeout_s in (settings.embeddings_timeout_s, settings.embeddings_query_timeout_s)
        ]
        self._client, self._query_client = clients
        self._quiet_until = 0.0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order (the SDK's embeddings API); EmbeddingsUnavailable
        when the server fails."""
        try:
            response = await self._client.embeddings.create(model=self.model, input=list(texts))
        except Exception as error:
            raise EmbeddingsUnavailable(f"{type(error).__name__}: {error}") from error
        items = sorted(response.data, key=lambda item: item.index)
        return self._answered(texts, [item.embedding for item in items])

    async def _embed_query(self, query: str) -> list[float]:
        """The same for one query, within the query's timeout: the request the SDK's
        `embeddings.create` sends, through its client's own `request`, and the answer read
        with orjson instead of into the SDK's models (a third of the CPU)."""
        body = {"model": self.model, "input": [query], "encoding_format": "float"}
        try:
            answer = orjson.loads(
                await self._query_client.post_bytes("/embeddings", orjson.dumps(body))
            )
            vectors = [[float(x) for x in item["embedding"]] for item in answer["data"]]
        except Exception as error:
            raise EmbeddingsUnavailable(f"{type(error).__name__}: {error}") from error
        return self._answered([query], vectors)[0]

    def _answered(self, texts: Sequence[str], vectors: list[list[float]]) -> list[list[float]]:
        if len(vectors) != len(texts) or len({len(vector) for vector in vectors}) > 1:
            raise EmbeddingsUnavailable("the answer does not hold one vector per text")
        self._quiet_until = 0.0  # it answers again
        return vectors

    async def embed_query(self, query: str) -> list[float] | None:
        """The query's vector, or None (search by words) when the server fails or failed a
        moment ago."""
        if time.monotonic() < self._quiet_until:
            return None
        try:
            return await self._embed_query(query)
        except EmbeddingsUnavailable as error:
            self._quiet_until = time.monotonic() + _QUIET_S
            logger.warning(
                "query embedding failed; searching by words", extra={"error": str(error)}
            )
            return None

    async def close(self) -> None:
        await self._client.close()
        await self._query_client.close()


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form, `[0.1,0.2,...]`: sent as text and cast, so the service needs no
    pgvector codec (and none where the database lacks the extension)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"
