"""Search by words, read as a person's words: any of them finds a passage, more and rarer
ones rank it higher (title and heading above body), word forms meet, a quoted phrase is a
phrase, one long document does not take every place, and a list filter holds."""

from typing import Any

import httpx

from tests.conftest import auth

LEASE = """# Lease

## Rent

The rent is due on the first day of every month, paid by bank transfer.

## Pets

Cats and small dogs are allowed with a deposit of two hundred euros.

## Renewal

The renewal of the agreement must be asked for two months before it ends.

## Keys

Two keys are handed over; a lost key is replaced at the tenant's cost.
"""

HOUSE = """# House notes

## Garage

The garage opener is in the kitchen drawer.

## Front

The front door sticks in winter; lift the handle. The door at the back is fine.

## Spare keys

Spare keys hang by the back door. Keys for the shed are on the red ring.
"""


async def add(
    client: httpx.AsyncClient, title: str, text: str, user: str = "alice", **extra: Any
) -> str:
    response = await client.post(
        f"/api/{user}/documents", json={"title": title, "text": text, **extra},
        headers=auth(user),
    )  # fmt: skip
    assert response.status_code == 201, response.text
    document_id: str = response.json()["id"]
    return document_id


async def search(client: httpx.AsyncClient, q: str, user: str = "alice", **params: Any) -> Any:
    response = await client.get(
        f"/api/{user}/documents/search", params={"q": q, **params}, headers=auth(user)
    )
    assert response.status_code == 200, response.text
    return response.json()["data"]


def headings(hits: list[dict[str, Any]]) -> list[str]:
    return [hit["heading"] for hit in hits]


async def test_a_question_finds_the_passage_though_not_every_word_is_in_it(
    client: httpx.AsyncClient,
) -> None:
    await add(client, "Lease", LEASE)
    await add(client, "House notes", HOUSE)
    hits = await search(client, "what does the lease say about pets")
    assert hits[0]["heading"] == "Lease \u203a Pets"
    assert hits[0]["title"] == "Lease"
    assert "small dogs" in hits[0]["text"]
    assert hits[0]["score"] > hits[1]["score"]
    # Only stop words: nothing to look for.
    assert await search(client, "what is it about") == []


async def test_word_forms_meet(client: httpx.AsyncClient) -> None:
    await add(client, "Lease", LEASE)
    assert headings(await search(client, "renewing"))[0] == "Lease \u203a Renewal"
    assert headings(await search(client, "paying rents"))[0] == "Lease \u203a Rent"


async def test_more_and_rarer_words_rank_higher(client: httpx.AsyncClient) -> None:
    await add(client, "Lease", LEASE)
    await add(client, "House notes", HOUSE)
    # "keys" is in three passages, "shed" in one: the one with both comes first, and the
    # rare word alone outranks the common word alone.
    hits = await search(client, "keys shed")
    assert hits[0]["heading"] == "House notes \u203a Spare keys"
    hits = await search(client, "garage keys")
    assert hits[0]["heading"] == "House notes \u203a Garage"
    # A word in a heading counts above the same word in a body.
    hits = await search(client, "front")
    assert headings(hits) == ["House notes \u203a Front"]


async def test_a_quoted_phrase_matches_as_a_phrase(client: httpx.AsyncClient) -> None:
    await add(client, "House notes", HOUSE)
    assert headings(await search(client, '"back door"')) == ["House notes \u203a Spare keys"]
    both = await search(client, "back door")
    assert set(headings(both)) == {"House notes \u203a Spare keys", "House notes \u203a Front"}


async def test_one_long_document_does_not_take_every_place(client: httpx.AsyncClient) -> None:
    long = "# Garden\n\n" + "\n\n".join(
        f"## Bed {n}\n\nWater the garden bed {n}; the garden needs it." for n in range(1, 9)
    )
    await add(client, "Garden diary", long)
    await add(client, "Shopping", "# Shopping\n\nSeeds for the garden.")
    await add(client, "Tools", "# Tools\n\nThe garden hose is in the shed.")
    hits = await search(client, "garden", limit=4)
    titles = [hit["title"] for hit in hits]
    assert titles[:3].count("Garden diary") == 1
    assert set(titles[:3]) == {"Garden diary", "Shopping", "Tools"}
    assert titles[3] == "Garden diary"  # demoted, not dropped
    assert len(await search(client, "garden", limit=10)) == 10


async def test_a_list_filter_keeps_to_that_list(client: httpx.AsyncClient) -> None:
    made = await client.post("/api/alice/lists", json={"name": "Home"}, headers=auth("alice"))
    home = made.json()["id"]
    await add(client, "Lease", LEASE)
    await add(client, "House notes", HOUSE, list_id=home)
    everywhere = {hit["title"] for hit in await search(client, "keys")}
    assert everywhere == {"Lease", "House notes"}
    only_home = {hit["title"] for hit in await search(client, "keys", list_id=home)}
    assert only_home == {"House notes"}
    # Another user's documents are never found.
    await add(client, "Bob's keys", "Keys keys keys.", user="bob")
    assert "Bob's keys" not in {hit["title"] for hit in await search(client, "keys")}
