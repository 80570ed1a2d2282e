"""Documents in lists: what is read (Markdown, text, HTML, PDF), every refusal (its status,
its reason, and nothing stored), who may read and change them, and the events members get."""

import io
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pypdf import PdfWriter
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.errors import UnreadableDocument
from backend.services.documents import reading
from backend.services.documents.reading import HTML, MARKDOWN, MAX_DEPTH, read_isolated
from backend.settings import Settings
from tests.conftest import auth, serving

MOVING = b"""# Moving

Notes for the move.

## Week before

- [ ] call the movers
- [x] pack the books

## Moving day

Keep the keys with you.
"""


async def upload(
    client: httpx.AsyncClient,
    user: str,
    name: str,
    data: bytes,
    expect: int = 201,
    content_type: str | None = None,
    **fields: str,
) -> Any:
    file = (name, data) if content_type is None else (name, data, content_type)
    response = await client.post(
        f"/api/{user}/documents", files={"file": file}, data=fields, headers=auth(user)
    )
    assert response.status_code == expect, response.text
    return response.json()


async def _get(client: httpx.AsyncClient, user: str, path: str, expect: int = 200) -> Any:
    response = await client.get(f"/api/{user}{path}", headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json()


async def _send(
    client: httpx.AsyncClient, method: str, user: str, path: str, body: Any = None,
    expect: int = 200,
) -> Any:  # fmt: skip
    response = await client.request(method, f"/api/{user}{path}", json=body, headers=auth(user))
    assert response.status_code == expect, response.text
    return response.json() if response.content else None


async def _titles(client: httpx.AsyncClient, user: str) -> list[str]:
    return [d["title"] for d in (await _get(client, user, "/documents"))["data"]]


async def _rows(engine: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    """Rows as the tests' own role sees them (past row-level security)."""
    async with engine.connect() as connection:
        return list((await connection.execute(text(sql), params)).all())


def pdf(*pages: str, password: str | None = None) -> bytes:
    """A PDF whose pages show these lines of text (Helvetica), written with pypdf."""
    from pypdf.generic import (
        DecodedStreamObject,
        DictionaryObject,
        NameObject,
    )

    writer = PdfWriter()
    font = DictionaryObject({
        NameObject("/Type"): NameObject("/Font"),
        NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica"),
    })  # fmt: skip
    for words in pages:
        page = writer.add_blank_page(width=300, height=300)
        if words:
            stream = DecodedStreamObject()
            stream.set_data(f"BT /F1 12 Tf 20 250 Td ({words}) Tj ET".encode())
            page[NameObject("/Contents")] = writer._add_object(stream)
            page[NameObject("/Resources")] = DictionaryObject({
                NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})
            })  # fmt: skip
    if password is not None:
        writer.encrypt(password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# -- what is read -------------------------------------------------------------------------


async def test_a_markdown_file_is_kept_with_its_sections_as_passages(
    client: httpx.AsyncClient,
) -> None:
    made = await upload(client, "alice", "moving.md", MOVING)
    assert (made["title"], made["media_type"], made["bytes"], made["passages"]) == (
        "Moving", "text/markdown", len(MOVING), 3
    )  # fmt: skip
    lists = (await _get(client, "alice", "/lists"))["data"]
    inbox = next(shown for shown in lists if shown["inbox"])
    assert (made["list_id"], made["created_by"]) == (inbox["id"], "alice")
    assert [d["id"] for d in (await _get(client, "alice", "/documents"))["data"]] == [made["id"]]
    shown = await _get(client, "alice", f"/documents/{made['id']}")
    assert shown["text"] == MOVING.decode()
    found = await _get(client, "alice", "/documents/search?q=when do the movers come")
    assert found["data"][0]["heading"] == "Moving \u203a Week before"
    assert found["data"][0]["text"] == "- [ ] call the movers\n- [x] pack the books"


async def test_text_html_and_pdf_are_read_as_their_text(client: httpx.AsyncClient) -> None:
    notes = await upload(client, "alice", "wifi notes.txt", b"The wifi password is hunter2.\n")
    assert (notes["title"], notes["media_type"]) == ("wifi notes", "text/plain")
    page = (
        b"<html><head><title>Lease</title><style>p{color:red}</style>"
        b"<script>alert('x')</script></head><body><h1>The lease</h1><p>Rent is due"
        b" <b>monthly</b>.</p><h2>Pets</h2><ul><li>Cats allowed</li><li>No dogs</li></ul>"
        b"<noscript>enable js</noscript></body></html>"
    )
    lease = await upload(client, "alice", "lease.html", page)
    assert (lease["title"], lease["media_type"], lease["passages"]) == (
        "The lease", "text/html", 2
    )  # fmt: skip
    text_of = (await _get(client, "alice", f"/documents/{lease['id']}"))["text"]
    assert text_of == (
        "# The lease\n\nRent is due monthly.\n\n## Pets\n\n- Cats allowed\n- No dogs"
    )
    paper = await upload(client, "alice", "minutes.pdf", pdf("Minutes of Monday", "Budget agreed"))
    assert (paper["title"], paper["media_type"]) == ("minutes", "application/pdf")
    assert "Budget agreed" in (await _get(client, "alice", f"/documents/{paper['id']}"))["text"]
    # The type by content type, where the name says nothing.
    typed = await upload(client, "alice", "README", b"# Readme\n\nHi", content_type="text/markdown")
    assert typed["media_type"] == "text/markdown"


async def test_text_as_json_and_a_title_of_ones_own(client: httpx.AsyncClient) -> None:
    made = await _send(client, "POST", "alice", "/documents",
                       {"title": "Packing", "text": "- [ ] passport\n- [ ] charger"},
                       expect=201)  # fmt: skip
    assert (made["title"], made["media_type"], made["passages"]) == ("Packing", "text/markdown", 1)
    named = await upload(client, "alice", "moving.md", MOVING, title="The big move")
    assert named["title"] == "The big move"
    await _send(client, "POST", "alice", "/documents", {"title": " ", "text": "x"}, expect=422)
    await _send(client, "POST", "alice", "/documents", {"title": "x", "text": ""}, expect=422)


async def test_a_document_is_replaced_keeping_the_passages_that_did_not_change(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    made = await upload(client, "alice", "moving.md", MOVING)
    ids = "SELECT heading, id FROM passages WHERE document_id = :d ORDER BY ordinal"
    before = dict(await _rows(engine, ids, d=made["id"]))
    changed = MOVING.replace(b"Keep the keys with you.", b"Keep the keys and the cat.")
    response = await client.put(
        f"/api/alice/documents/{made['id']}",
        files={"file": ("moving.md", changed)},
        headers=auth("alice"),
    )
    assert response.status_code == 200, response.text
    after = dict(await _rows(engine, ids, d=made["id"]))
    assert after["Moving \u203a Week before"] == before["Moving \u203a Week before"]
    assert after["Moving \u203a Moving day"] != before["Moving \u203a Moving day"]
    shown = await _get(client, "alice", f"/documents/{made['id']}")
    assert "the cat" in shown["text"]
    assert shown["updated_at"] >= shown["created_at"]
    await _send(client, "DELETE", "alice", f"/documents/{made['id']}", expect=204)
    await _get(client, "alice", f"/documents/{made['id']}", expect=404)
    assert await _rows(engine, "SELECT id FROM passages") == []


# -- refusals -----------------------------------------------------------------------------


async def _nothing_stored(engine: AsyncEngine) -> None:
    counts = "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM passages)"
    assert [tuple(row) for row in await _rows(engine, counts)] == [(0, 0)]


@pytest.mark.parametrize(
    ("name", "data", "status", "reason"),
    [
        ("photo.png", b"\x89PNG\r\n\x1a\n....", 415, "Markdown (.md)"),
        ("notes.docx", b"PK\x03\x04", 415, "none of them"),
        ("binary.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR", 422, "binary data"),
        ("latin.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"), 422, "not UTF-8"),
        ("empty.md", b"", 422, "empty"),
        ("blank.txt", b"  \n\n ", 422, "empty"),
        ("fake.pdf", b"just some text", 422, "not a PDF"),
        ("broken.pdf", b"%PDF-1.4\n garbage", 422, "PDF"),
        ("scan.pdf", pdf(""), 422, "no text"),
        ("secret.pdf", pdf("Top secret", password="pw"), 422, "encrypted"),
        ("deep.html", b"<div>" * (MAX_DEPTH + 50) + b"deep" + b"</div>" * (MAX_DEPTH + 50), 422,
         "nested"),
    ],
)  # fmt: skip
async def test_a_file_that_cannot_be_read_is_refused_naming_why_and_nothing_is_stored(
    client: httpx.AsyncClient, engine: AsyncEngine, name: str, data: bytes, status: int, reason: str
) -> None:
    refused = await upload(client, "alice", name, data, expect=status)
    assert reason in refused["detail"]
    await _nothing_stored(engine)


async def test_a_pdf_whose_streams_unpack_to_a_flood_is_refused(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """A content stream of 40 KB that unpacks to 200 MB: refused, not read into memory."""
    flood = zlib.compress(b" " * 200_000_000, 9)
    bomb = pdf("placeholder").replace(b"/Filter", b"/Ignored")
    start = bomb.index(b"BT /F1")
    end = bomb.index(b"ET", start) + 2
    head = bomb[:start].rsplit(b"<<", 1)[0]
    body = (
        b"<< /Length " + str(len(flood)).encode() + b" /Filter /FlateDecode >>\nstream\n"
        + flood + b"\nendstream"
    )  # fmt: skip
    tail = bomb[end:].split(b"endstream", 1)[1]
    refused = await upload(client, "alice", "bomb.pdf", head + body + tail, expect=422)
    assert "PDF" in refused["detail"] or "memory" in refused["detail"]
    await _nothing_stored(engine)


async def test_a_reader_that_overruns_its_time_or_memory_is_stopped() -> None:
    """The reading process is killed at its deadline, and cannot take more memory than it
    is given: the file is refused either way."""
    page = b"<p>" + b"word " * 2_000_000 + b"</p>"
    with pytest.raises(UnreadableDocument, match=r"within 0\.01 seconds"):
        await read_isolated(page, HTML, timeout_s=0.01)
    with pytest.raises(UnreadableDocument, match="memory"):
        await read_isolated(page, HTML, memory_bytes=64 * 1024 * 1024)


async def test_each_file_is_read_by_a_reader_of_its_own_started_ahead() -> None:
    """Readers are started ahead and each reads one file; a spare that died meanwhile is
    passed over."""
    reading.prepare_reader()
    spare = reading._SPARE[0][0]
    found = await read_isolated(b"# Moving\n\nCall the movers.", MARKDOWN)
    assert found.title == "Moving"
    assert not spare.is_alive()  # it read that file and was ended
    waiting = reading._SPARE[0][0]
    assert waiting.is_alive()
    assert waiting is not spare
    waiting.kill()
    waiting.join()
    found = await read_isolated(b"# Packing\n\nBoxes.", MARKDOWN)
    assert found.title == "Packing"
    assert reading._SPARE[0][0].is_alive()


@pytest.fixture
async def small(
    make_settings: Callable[..., Settings], engine: AsyncEngine
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with documents of at most 2 KB, and 3 KB for a list owner's all together."""
    settings = make_settings(document_max_bytes=2048, document_quota_bytes=3072)
    async with serving(settings) as client:
        yield client


async def test_size_and_quota_are_413_and_store_nothing(
    small: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    refused = await upload(small, "alice", "big.md", b"x" * 2049, expect=413)
    assert "at most 2048" in refused["detail"]
    as_json = {"title": "Big", "text": "y" * 2049}
    await _send(small, "POST", "alice", "/documents", as_json, expect=413)
    # Far over the limit, the body is not even read.
    await upload(small, "alice", "huge.md", b"z" * 200_000, expect=413)
    await _nothing_stored(engine)
    # The quota counts the owner's documents in every list of theirs, whoever uploaded.
    shared = await _send(small, "POST", "alice", "/lists", {"name": "Home"}, expect=201)
    invitation = await _send(small, "POST", "alice", f"/lists/{shared['id']}/invitations",
                             {"role": "editor"}, expect=201)  # fmt: skip
    await _send(small, "POST", "bob", f"/invitations/{invitation['token']}/accept")
    await upload(small, "alice", "a.md", b"a" * 2000)
    over = await upload(small, "bob", "b.md", b"b" * 1500, expect=413, list_id=shared["id"])
    assert "quota" in over["detail"]
    await upload(small, "bob", "b.md", b"b" * 1000, list_id=shared["id"])
    assert await _titles(small, "alice") == ["b", "a"]
    # Bob's own Inbox is his own quota.
    await upload(small, "bob", "c.md", b"c" * 1500)


# -- who may read and change them ----------------------------------------------------------


async def _home(client: httpx.AsyncClient) -> str:
    """Alice's "Home", shared with Bob as an editor and Carol as a viewer."""
    made = await _send(client, "POST", "alice", "/lists", {"name": "Home"}, expect=201)
    for member, role in (("bob", "editor"), ("carol", "viewer")):
        invitation = await _send(client, "POST", "alice", f"/lists/{made['id']}/invitations",
                                 {"role": role}, expect=201)  # fmt: skip
        await _send(client, "POST", member, f"/invitations/{invitation['token']}/accept")
    list_id: str = made["id"]
    return list_id


async def test_members_read_editors_change_viewers_only_read_others_see_nothing(
    client: httpx.AsyncClient,
) -> None:
    home = await _home(client)
    made = await upload(client, "bob", "moving.md", MOVING, list_id=home)
    path = f"/documents/{made['id']}"
    for member in ("alice", "bob", "carol"):
        assert (await _get(client, member, path))["title"] == "Moving"
        assert await _titles(client, member) == ["Moving"]
        found = await _get(client, member, "/documents/search?q=movers")
        assert [hit["document_id"] for hit in found["data"]] == [made["id"]]
    refused = await upload(client, "carol", "mine.md", b"# Mine\n\nx", expect=403, list_id=home)
    assert "viewer" in refused["detail"]
    assert "cannot change its documents" in refused["detail"]
    await _send(client, "PUT", "carol", path, {"title": "X", "text": "y"}, expect=403)
    await _send(client, "DELETE", "carol", path, expect=403)
    # Another user: as if it did not exist, however they ask.
    await _get(client, "dave", path, expect=404)
    await _send(client, "PUT", "dave", path, {"title": "X", "text": "y"}, expect=404)
    await _send(client, "DELETE", "dave", path, expect=404)
    assert await _titles(client, "dave") == []
    assert (await _get(client, "dave", "/documents/search?q=movers"))["data"] == []
    await _get(client, "dave", f"/documents?list_id={home}", expect=404)
    await _get(client, "dave", f"/documents/search?q=movers&list_id={home}", expect=404)
    await upload(client, "dave", "x.md", b"# X\n\ny", expect=404, list_id=home)
    # A removed member loses them at once.
    await _send(client, "DELETE", "alice", f"/lists/{home}/members/carol", expect=204)
    await _get(client, "carol", path, expect=404)
    assert await _titles(client, "carol") == []
    # An editor replaces and deletes.
    replaced = await _send(client, "PUT", "bob", path, {"title": "Moved", "text": "done"})
    assert (replaced["title"], replaced["passages"]) == ("Moved", 1)
    await _send(client, "DELETE", "bob", path, expect=204)
    assert await _titles(client, "alice") == []


async def test_row_level_security_holds_documents_to_their_lists_members(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    from tests.conftest import acting_as

    home = await _home(client)
    await upload(client, "alice", "moving.md", MOVING, list_id=home)
    counts = text("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM passages)")
    for user, seen in (("bob", (1, 3)), ("carol", (1, 3)), ("dave", (0, 0))):
        async with acting_as(engine, user) as db:
            assert tuple((await db.exec(counts)).one()) == seen  # type: ignore[call-overload]
    async with acting_as(engine, "carol") as db:
        changed = await db.exec(text("UPDATE documents SET title = 'x' RETURNING id"))  # type: ignore[call-overload]
        assert changed.all() == []
        gone = await db.exec(text("DELETE FROM passages RETURNING id"))  # type: ignore[call-overload]
        assert gone.all() == []


# -- events -------------------------------------------------------------------------------


async def test_every_member_gets_the_document_events(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    home = await _home(client)
    made = await upload(client, "bob", "moving.md", MOVING, list_id=home)
    await _send(client, "PUT", "alice", f"/documents/{made['id']}", {"title": "Move", "text": "x"})
    await _send(client, "DELETE", "bob", f"/documents/{made['id']}", expect=204)
    await upload(client, "dave", "own.md", b"# Own\n\nx")
    rows = await _rows(
        engine, "SELECT user_id, type, data FROM events WHERE type LIKE 'document.%' ORDER BY id"
    )
    seen: dict[str, list[tuple[str, str]]] = {}
    for user, kind, data in rows:
        seen.setdefault(user, []).append((kind, data["title"]))
        if data["title"] != "Own":
            assert (data["document_id"], data["list_id"]) == (made["id"], home)
    expected = [("document.created", "Moving"), ("document.updated", "Move"),
                ("document.deleted", "Move")]  # fmt: skip
    assert seen == {
        "alice": expected, "bob": expected, "carol": expected,
        "dave": [("document.created", "Own")],
    }  # fmt: skip


async def test_a_document_moved_out_of_a_members_reach_is_deleted_for_them(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    home = await _home(client)
    own = (await _send(client, "POST", "bob", "/lists", {"name": "Bob's"}, expect=201))["id"]
    made = await upload(client, "bob", "moving.md", MOVING, list_id=home)
    path = f"/documents/{made['id']}"
    text_of = {"title": "Moving", "text": MOVING.decode()}
    # Out of Home into a list of Bob's alone; then back, Bob being in both.
    await _send(client, "PUT", "bob", path, {**text_of, "list_id": own})
    await _get(client, "alice", path, expect=404)
    await _send(client, "PUT", "bob", path, {**text_of, "list_id": home})
    rows = await _rows(
        engine,
        "SELECT user_id, type, data FROM events WHERE type LIKE 'document.%' ORDER BY id",
    )
    seen: dict[str, list[tuple[str, str]]] = {}
    for user, kind, data in rows:
        assert (data["document_id"], data["title"]) == (made["id"], "Moving")
        seen.setdefault(user, []).append((kind, "home" if data["list_id"] == home else "own"))
    others = [("document.created", "home"), ("document.deleted", "home"),
              ("document.updated", "home")]  # fmt: skip
    assert seen == {
        "alice": others,
        "bob": [("document.created", "home"), ("document.updated", "own"),
                ("document.updated", "home")],
        "carol": others,
    }  # fmt: skip


async def test_a_malformed_request_is_a_4xx(client: httpx.AsyncClient) -> None:
    url, headers = "/api/alice/documents", auth("alice")
    assert (await client.post(url, content=b"hi", headers=headers)).status_code == 415
    no_file = await client.post(url, data={"title": "x"}, files={"other": ("a", b"b")},
                                headers=headers)  # fmt: skip
    assert no_file.status_code == 422
    bad_list = await client.post(url, files={"file": ("a.md", b"x")}, data={"list_id": "nope"},
                                 headers=headers)  # fmt: skip
    assert bad_list.status_code == 422
    assert (await client.post(url, content=b"{", headers={**headers, "content-type":
            "application/json"})).status_code == 422  # fmt: skip
    await _get(client, "alice", f"/documents/{uuid.uuid4()}", expect=404)
    await _get(client, "alice", "/documents/search?q=", expect=422)
    await _get(client, "alice", "/documents/search?q=x&limit=0", expect=422)
    for method in ("PUT", "DELETE"):
        refused = await client.request(method, "/api/alice/documents/search", headers=auth("alice"))
        assert (refused.status_code, refused.headers["allow"]) == (405, "GET")
