"""The CalDAV server: one answer per method, every change through the task and list
services the REST routes use (validation, events, reminders, trash, row-level security).

The URL space, under the DAV root (`/dav/`):

    principals/{user}/               the person (current-user-principal)
    calendars/{user}/                their calendar home (calendar-home-set)
    calendars/{user}/{list id}/      a list they can read, as a VTODO calendar
    calendars/{user}/{list id}/{name} a task (or a step), as one VTODO

A request acts for the person its app password belongs to, inside one transaction: a
refusal rolls everything back, so a bad body stores nothing.
"""

import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo

from lxml import etree  # type: ignore[import-untyped]
from pydantic import ValidationError
from sqlalchemy import ColumnElement, and_, exc, false, func, or_, true
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from backend.db import Database
from backend.errors import DomainError, ListConflict, ListNotFound, NotAllowed, TaskNotFound
from backend.models.dav import DavItem
from backend.models.list import ListCreate, ListUpdate
from backend.models.task import Task, TaskCreate, TaskUpdate
from backend.services import lists, tasks
from backend.services.caldav import ics, store
from backend.services.caldav.passwords import Grant
from backend.services.caldav.store import Collection, Item
from backend.services.caldav.xml import (
    CALDAV,
    CS,
    DAV,
    BadXml,
    DavError,
    Multistatus,
    PropFind,
    element,
    error_body,
    href_element,
    read_propfind,
    requested,
    tag,
)
from backend.services.caldav.xml import parse as parse_xml
from backend.services.tasks import TaskRef

ROOT = "/dav/"
ICS_TYPE = "text/calendar; charset=utf-8"
XML_TYPE = "application/xml; charset=utf-8"
WRITES = frozenset({"PUT", "DELETE", "MKCALENDAR", "MKCOL", "PROPPATCH"})
ALLOW = "OPTIONS, GET, HEAD, PUT, DELETE, PROPFIND, PROPPATCH, REPORT, MKCALENDAR, MKCOL"
_SYNC_PREFIX = "urn:todo-agent:sync:"
_CALENDAR_DATA = tag(CALDAV, "calendar-data")
_GETETAG = tag(DAV, "getetag")


@dataclass(slots=True)
class DavResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """What a path names: its kind, the user it is under, the list and item names."""

    kind: str  # root, principal, home, collection, item
    user: str | None = None
    list_id: uuid.UUID | None = None
    segment: str | None = None  # a collection's name as the client gave it
    name: str | None = None


def resolve(path: str) -> Target:
    """The resource a path under the DAV root names (404 for anything else)."""
    parts = [unquote(part) for part in path.strip("/").split("/") if part]
    if not parts:
        return Target("root")
    if parts[0] == "principals" and len(parts) == 2:
        return Target("principal", user=parts[1])
    if parts[0] == "calendars" and 2 <= len(parts) <= 4:
        if len(parts) == 2:
            return Target("home", user=parts[1])
        list_id = collection_id(parts[1], parts[2])
        if len(parts) == 3:
            return Target("collection", user=parts[1], list_id=list_id, segment=parts[2])
        return Target("item", user=parts[1], list_id=list_id, name=parts[3])
    raise DavError(404, "No such resource.")


_NAMED = uuid.UUID("5b0e8a8e-4f0c-4a51-9a3e-2f0d7c1c6d21")


def collection_id(user: str, segment: str) -> uuid.UUID:
    """The list a collection's path segment names: its id, or, for a name a client chose
    at MKCALENDAR that is not a UUID, the id made from it (the same every time)."""
    try:
        return uuid.UUID(segment)
    except ValueError:
        return uuid.uuid5(_NAMED, f"{user}/{segment}")


def principal_href(user: str) -> str:
    return f"{ROOT}principals/{quote(user, safe='')}/"


def home_href(user: str) -> str:
    return f"{ROOT}calendars/{quote(user, safe='')}/"


def collection_href(user: str, list_id: uuid.UUID) -> str:
    return f"{home_href(user)}{list_id}/"


def item_href(user: str, list_id: uuid.UUID, name: str) -> str:
    return f"{collection_href(user, list_id)}{quote(name, safe='')}"


def sync_token(collection: Collection) -> str:
    return f"{_SYNC_PREFIX}{collection.list_id}:{collection.revision}"


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes


class Server:
    """Answers DAV requests for whoever a grant names."""

    def __init__(self, database: Database, *, max_bytes: int) -> None:
        self.database = database
        self.max_bytes = max_bytes

    async def handle(self, request: Request, grant: Grant) -> DavResponse:
        try:
            if request.method in WRITES and grant.read_only:
                raise DavError(
                    403, "This app password may only read.", precondition="need-privileges"
                )
            target = resolve(request.path)
            if target.user is not None and target.user != grant.user_id:
                raise DavError(404, "No such resource.")
            handler = getattr(self, "_" + request.method.lower(), None)
            if handler is None:
                return DavResponse(405, headers={"Allow": ALLOW})
            async with self.database.transaction(as_user=grant.user_id) as db:
                answer: DavResponse = await handler(db, grant.user_id, target, request)
            return answer
        except DomainError as error:
            return refusal(error)
        except ValidationError as error:
            detail = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
                for problem in error.errors()
            )
            return refusal(DavError(422, detail or "Invalid task."))
        except exc.DBAPIError as error:
            sqlstate = str(getattr(error.orig, "sqlstate", "") or "")
            if not sqlstate.startswith(("22", "23")):
                raise
            return refusal(DavError(422, "The request contains data that cannot be stored."))

    # -- reading ---------------------------------------------------------------------------

    async def _options(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        return DavResponse(200, headers=options_headers())

    async def _propfind(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        asked = read_propfind(parse_xml(request.body))
        depth = request.headers.get("depth", "1").strip().lower()
        deep = depth != "0"
        status = Multistatus()
        if target.kind == "root":
            self._answer(status, ROOT, self._root_props(user), asked)
            if deep:
                self._answer(status, principal_href(user), self._principal_props(user), asked)
                self._answer(status, home_href(user), self._home_props(user), asked)
        elif target.kind == "principal":
            self._answer(status, principal_href(user), self._principal_props(user), asked)
        elif target.kind == "home":
            self._answer(status, home_href(user), self._home_props(user), asked)
            if deep:
                for found in await store.home(db=db, user=user):
                    href = collection_href(user, found.list_id)
                    self._answer(status, href, self._collection_props(user, found), asked)
        elif target.kind == "collection":
            found = await self._collection(db, user, target)
            href = collection_href(user, found.list_id)
            self._answer(status, href, self._collection_props(user, found), asked)
            if deep:
                await self._members(db, user, found, asked, status)
        else:
            found = await self._collection(db, user, target)
            item = await self._item(db, found, target)
            tz = await store.zone(db=db, user=user)
            self._answer(status, self._href(user, found, item.name), _item_props(item, tz), asked)
        return _multistatus(status)

    async def _members(
        self,
        db: AsyncSession,
        user: str,
        found: Collection,
        asked: PropFind,
        status: Multistatus,
    ) -> None:
        """A collection's items; when only their ETags and types are asked (as a sync
        client's listing asks), without reading the tasks."""
        cheap = {_GETETAG, tag(DAV, "getcontenttype"), tag(DAV, "resourcetype")}
        if not asked.all and set(asked.names) <= cheap:
            for name, revision in await store.listing(db=db, list_id=found.list_id):
                props = _cheap_props(revision)
                self._answer(status, self._href(user, found, name), props, asked)
            return
        tz = await store.zone(db=db, user=user)
        for item in await store.items(db=db, list_id=found.list_id):
            self._answer(status, self._href(user, found, item.name), _item_props(item, tz), asked)

    async def _get(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        if target.kind != "item":
            raise DavError(405, "Only a task can be read with GET here; use PROPFIND.")
        found = await self._collection(db, user, target)
        item = await self._item(db, found, target)
        body = RENDERED.get(item, await store.zone(db=db, user=user))
        headers = {"ETag": item.etag, "Content-Type": ICS_TYPE}
        return DavResponse(200, body, headers)

    async def _head(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        answer = await self._get(db, user, target, request)
        answer.headers["Content-Length"] = str(len(answer.body))
        answer.body = b""
        return answer

    async def _report(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        root = parse_xml(request.body)
        if root is None:
            raise BadXml("A REPORT needs a body.")
        if target.kind != "collection":
            raise DavError(
                403,
                "Reports are answered on a calendar collection.",
                precondition="supported-report",
            )
        found = await self._collection(db, user, target)
        asked = requested(root)
        if root.tag == tag(DAV, "sync-collection"):
            return await self._sync(db, user, found, root, asked)
        status = Multistatus()
        if root.tag == tag(CALDAV, "calendar-multiget"):
            hrefs = [str(href.text or "") for href in root.iter(tag(DAV, "href"))]
            names = {self._name_in(found, user, href): href for href in hrefs}
            wanted = [name for name in names if name is not None]
            got = {
                item.name: item
                for item in await store.items(db=db, list_id=found.list_id, names=wanted)
            }
            tz = await store.zone(db=db, user=user)
            for name, href in names.items():
                item = got.get(name) if name is not None else None
                if item is None:
                    status.response(href, status=404)
                else:
                    self._answer(
                        status, self._href(user, found, item.name), _item_props(item, tz), asked
                    )
            return _multistatus(status)
        if root.tag == tag(CALDAV, "calendar-query"):
            where = _query(root)
            tz = await store.zone(db=db, user=user)
            matching = (
                []
                if where is None
                else await store.items(db=db, list_id=found.list_id, where=where)
            )
            for item in matching:
                self._answer(
                    status, self._href(user, found, item.name), _item_props(item, tz), asked
                )
            return _multistatus(status)
        raise DavError(403, "This report is not supported here.", precondition="supported-report")

    async def _sync(
        self,
        db: AsyncSession,
        user: str,
        found: Collection,
        root: etree._Element,
        asked: PropFind,
    ) -> DavResponse:
        """RFC 6578: what changed since the token (all items for none). With nothing
        changed, the collection's counter alone answers: no item or task is read."""
        given = (root.findtext(tag(DAV, "sync-token")) or "").strip()
        status = Multistatus()
        status.sync_token(sync_token(found))
        if not given:
            await self._members(db, user, found, asked, status)
            return _multistatus(status)
        since = _token_revision(given, found)
        if since == found.revision:
            return _multistatus(status)
        changes = await store.changed_since(db=db, list_id=found.list_id, revision=since)
        live = [name for name, gone in changes if not gone]
        got = (
            {
                item.name: item
                for item in await store.items(db=db, list_id=found.list_id, names=live)
            }
            if live
            else {}
        )
        tz = await store.zone(db=db, user=user) if got else ZoneInfo("UTC")
        for name, gone in changes:
            item = got.get(name)
            if gone or item is None:
                status.response(self._href(user, found, name), status=404)
            else:
                self._answer(status, self._href(user, found, name), _item_props(item, tz), asked)
        return _multistatus(status)

    # -- writing ---------------------------------------------------------------------------

    async def _put(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        if target.kind != "item" or target.name is None:
            raise DavError(405, "PUT a task into a calendar collection.")
        incoming = ics.parse(request.body)
        found = await self._collection(db, user, target)
        if not found.writable:
            raise NotAllowed(
                f"You are a {found.role} of list “{found.name}”: you cannot change its tasks."
            )
        tz = await store.zone(db=db, user=user)
        if_match = request.headers.get("if-match")
        if_none_match = request.headers.get("if-none-match")
        existing = await store.item(db=db, list_id=found.list_id, name=target.name)
        if existing is None:
            if if_match is not None:
                raise DavError(412, "The task is not there (If-Match).")
            task_id = await self._create(db, user, found, incoming, tz)
            name: str | None = target.name
            code = 201
        else:
            if if_none_match is not None and if_none_match.strip() in ("*", existing.etag):
                raise DavError(412, "The task exists already (If-None-Match).")
            if if_match is not None and not _matches(if_match, existing.etag):
                raise DavError(412, "The task changed since it was read (If-Match).")
            incoming.settle(current=existing.task.remind_at)
            changes = ics.differences(incoming, existing.task, tz)
            if ics.ticked_by_advancing(incoming, existing.task, tz):
                changes = {"completed": True}
            data = TaskUpdate(**changes)
            await tasks.update_task(
                db=db, user=user, ref=TaskRef(id=existing.task.id), data=data, tz=tz
            )
            task_id, name, code = existing.task.id, None, 204
        revision = await store.claim(
            db=db,
            list_id=found.list_id,
            task_id=task_id,
            name=name,
            uid=incoming.uid if name is not None else None,
            extra=incoming.extra,
        )
        return DavResponse(code, headers={"ETag": store.etag(revision)})

    async def _create(
        self,
        db: AsyncSession,
        user: str,
        found: Collection,
        incoming: ics.Incoming,
        tz: ZoneInfo,
    ) -> uuid.UUID:
        if await store.task_of_uid(db=db, list_id=found.list_id, uid=incoming.uid):
            raise DavError(
                403,
                "Another task of this calendar has this UID.",
                precondition="no-uid-conflict",
                namespace=CALDAV,
            )
        parent_id = None
        if incoming.parent_uid is not None:
            parent_id = await store.task_of_uid(
                db=db, list_id=found.list_id, uid=incoming.parent_uid
            )
            if parent_id is None:  # not (yet) here: kept as the client sent it
                incoming.keep_relation()
        data = TaskCreate(
            title=incoming.title,
            description=incoming.description,
            due_at=incoming.due,
            recurrence=incoming.recurrence,
            remind_at=incoming.remind_at,
            priority=incoming.priority,
            tags=incoming.tags,
            list_id=None if parent_id is not None else found.list_id,
            parent_id=parent_id,
        )
        created = await tasks.create_task(db=db, user=user, data=data, tz=tz)
        if incoming.completed:
            await tasks.set_completed(db=db, user=user, ref=TaskRef(id=created.id), completed=True)
        return created.id

    async def _delete(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        found = await self._collection(db, user, target)
        if target.kind == "collection":
            if found.role == "owner":
                if found.inbox:
                    raise DavError(403, "The Inbox cannot be deleted.")
                await lists.delete_list(db=db, user=user, list_id=found.list_id)
            else:
                await lists.remove_member(db=db, user=user, list_id=found.list_id, member=user)
            return DavResponse(204)
        if target.kind != "item":
            raise DavError(405, "Only a task or a calendar can be deleted.")
        item = await self._item(db, found, target)
        if_match = request.headers.get("if-match")
        if if_match is not None and not _matches(if_match, item.etag):
            raise DavError(412, "The task changed since it was read (If-Match).")
        await tasks.delete_task(db=db, user=user, ref=TaskRef(id=item.task.id))
        return DavResponse(204)

    async def _mkcalendar(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        root = parse_xml(request.body)
        if root is not None and root.tag != tag(CALDAV, "mkcalendar"):
            raise BadXml("A MKCALENDAR body is a CALDAV:mkcalendar.")
        return await self._make(db, user, target, root)

    async def _mkcol(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        root = parse_xml(request.body)
        if root is None or root.tag != tag(DAV, "mkcol"):
            raise DavError(403, "Only calendars are made here: extended MKCOL (RFC 5689).")
        kinds = root.find(f".//{tag(DAV, 'resourcetype')}")
        if kinds is None or kinds.find(tag(CALDAV, "calendar")) is None:
            raise DavError(
                403, "Only calendar collections are made here.", precondition="valid-resourcetype"
            )
        return await self._make(db, user, target, root)

    async def _make(
        self, db: AsyncSession, user: str, target: Target, root: etree._Element | None
    ) -> DavResponse:
        if target.kind != "collection":
            raise DavError(403, "Calendars are made in your calendar home.")
        assert target.list_id is not None
        try:
            await store.collection(db=db, user=user, list_id=target.list_id)
        except ListNotFound:
            pass
        else:
            raise DavError(
                405, "That calendar exists already.", precondition="resource-must-be-null"
            )
        props = root.find(f".//{tag(DAV, 'prop')}") if root is not None else None
        name = "New list"
        if props is not None:
            name = (props.findtext(tag(DAV, "displayname")) or "").strip() or name
            components = props.find(tag(CALDAV, "supported-calendar-component-set"))
            if components is not None and not any(
                comp.get("name", "").upper() == "VTODO" for comp in components
            ):
                raise DavError(
                    403,
                    "Calendars here hold VTODO only.",
                    precondition="supported-calendar-component",
                    namespace=CALDAV,
                )
        await lists.create_list(
            db=db, user=user, data=ListCreate(name=name), list_id=target.list_id
        )
        return DavResponse(201)

    async def _proppatch(
        self, db: AsyncSession, user: str, target: Target, request: Request
    ) -> DavResponse:
        root = parse_xml(request.body)
        if root is None or root.tag != tag(DAV, "propertyupdate"):
            raise BadXml("A PROPPATCH body is a DAV:propertyupdate.")
        if target.kind != "collection":
            raise DavError(403, "Only a calendar's properties can be changed here.")
        found = await self._collection(db, user, target)
        names: list[str] = []
        rename: str | None = None
        for action in root:
            for prop in action.iter(tag(DAV, "prop")):
                for child in prop:
                    if not isinstance(child.tag, str):
                        continue
                    names.append(child.tag)
                    if child.tag == tag(DAV, "displayname") and action.tag == tag(DAV, "set"):
                        rename = (child.text or "").strip()
        status = Multistatus()
        href = collection_href(user, found.list_id)
        failed: dict[int, list[str]] = {}
        if rename is not None and rename != found.name:
            try:
                async with db.begin_nested():
                    await lists.rename_list(
                        db=db, user=user, list_id=found.list_id, data=ListUpdate(name=rename)
                    )
            except (NotAllowed, ListConflict, ValidationError):
                failed = {
                    403: [tag(DAV, "displayname")],
                    424: [name for name in names if name != tag(DAV, "displayname")],
                }
        if failed:
            status.response(href, failed=failed)
        else:  # colours, order and the like: accepted and not kept
            status.response(href, [element(name) for name in names])
        return _multistatus(status)

    # -- properties ------------------------------------------------------------------------

    def _answer(
        self,
        status: Multistatus,
        href: str,
        props: dict[str, Callable[[], etree._Element]],
        asked: PropFind,
    ) -> None:
        if asked.names_only:
            status.response(href, [etree.Element(name) for name in props])
            return
        if asked.all:
            names = [name for name in props if name != _CALENDAR_DATA]
        else:
            names = list(asked.names)
        found = []
        missing = []
        for name in names:
            make = props.get(name)
            if make is None:
                missing.append(name)
            else:
                made = make()
                made.tag = name
                found.append(made)
        status.response(href, found, missing)

    def _common(self, user: str, kinds: list[str]) -> dict[str, Callable[[], etree._Element]]:
        return {
            tag(DAV, "resourcetype"): lambda: element(
                tag(DAV, "resourcetype"), None, *(etree.Element(kind) for kind in kinds)
            ),
            tag(DAV, "current-user-principal"): lambda: element(
                tag(DAV, "current-user-principal"), None, href_element(principal_href(user))
            ),
        }

    def _root_props(self, user: str) -> dict[str, Callable[[], etree._Element]]:
        return {
            **self._common(user, [tag(DAV, "collection")]),
            tag(DAV, "displayname"): lambda: element(tag(DAV, "displayname"), "todo-agent"),
        }

    def _principal_props(self, user: str) -> dict[str, Callable[[], etree._Element]]:
        return {
            **self._common(user, [tag(DAV, "collection"), tag(DAV, "principal")]),
            tag(DAV, "displayname"): lambda: element(tag(DAV, "displayname"), user),
            tag(DAV, "principal-URL"): lambda: element(
                tag(DAV, "principal-URL"), None, href_element(principal_href(user))
            ),
            tag(CALDAV, "calendar-home-set"): lambda: element(
                tag(CALDAV, "calendar-home-set"), None, href_element(home_href(user))
            ),
            tag(CALDAV, "calendar-user-address-set"): lambda: element(
                tag(CALDAV, "calendar-user-address-set"), None, href_element(principal_href(user))
            ),
        }

    def _home_props(self, user: str) -> dict[str, Callable[[], etree._Element]]:
        return {
            **self._common(user, [tag(DAV, "collection")]),
            tag(DAV, "displayname"): lambda: element(tag(DAV, "displayname"), "Tasks"),
            tag(DAV, "owner"): lambda: element(
                tag(DAV, "owner"), None, href_element(principal_href(user))
            ),
            tag(DAV, "current-user-privilege-set"): lambda: _privileges(writable=True),
        }

    def _collection_props(
        self, user: str, found: Collection
    ) -> dict[str, Callable[[], etree._Element]]:
        token = sync_token(found)
        reports = [
            tag(CALDAV, "calendar-query"),
            tag(CALDAV, "calendar-multiget"),
            tag(DAV, "sync-collection"),
        ]
        return {
            **self._common(user, [tag(DAV, "collection"), tag(CALDAV, "calendar")]),
            tag(DAV, "displayname"): lambda: element(tag(DAV, "displayname"), found.name),
            tag(DAV, "owner"): lambda: element(
                tag(DAV, "owner"), None, href_element(principal_href(found.owner_id))
            ),
            tag(CALDAV, "supported-calendar-component-set"): lambda: element(
                tag(CALDAV, "supported-calendar-component-set"),
                None,
                etree.Element(tag(CALDAV, "comp"), name="VTODO"),
            ),
            tag(CALDAV, "supported-calendar-data"): lambda: element(
                tag(CALDAV, "supported-calendar-data"),
                None,
                etree.Element(
                    tag(CALDAV, "calendar-data"),
                    {"content-type": "text/calendar", "version": "2.0"},
                ),
            ),
            tag(CALDAV, "max-resource-size"): lambda: element(
                tag(CALDAV, "max-resource-size"), str(self.max_bytes)
            ),
            tag(CS, "getctag"): lambda: element(tag(CS, "getctag"), str(found.revision)),
            tag(DAV, "sync-token"): lambda: element(tag(DAV, "sync-token"), token),
            tag(DAV, "current-user-privilege-set"): lambda: _privileges(found.writable),
            tag(DAV, "supported-report-set"): lambda: element(
                tag(DAV, "supported-report-set"),
                None,
                *(
                    element(
                        tag(DAV, "supported-report"),
                        None,
                        element(tag(DAV, "report"), None, etree.Element(report)),
                    )
                    for report in reports
                ),
            ),
        }

    # -- lookups ---------------------------------------------------------------------------

    async def _collection(self, db: AsyncSession, user: str, target: Target) -> Collection:
        if target.list_id is None:
            raise DavError(404, "No such calendar.")
        return await store.collection(db=db, user=user, list_id=target.list_id)

    async def _item(self, db: AsyncSession, found: Collection, target: Target) -> Item:
        if target.name is None:
            raise DavError(404, "No such task.")
        item = await store.item(db=db, list_id=found.list_id, name=target.name)
        if item is None:
            raise TaskNotFound()
        return item

    def _href(self, user: str, found: Collection, name: str) -> str:
        return item_href(user, found.list_id, name)

    def _name_in(self, found: Collection, user: str, href: str) -> str | None:
        """The item name an href (path or URL) names in this collection, if it does."""
        path = href.split("://", 1)[-1]
        path = path[path.find("/") :] if "://" in href else path
        prefix = collection_href(user, found.list_id)
        decoded_prefix = unquote(prefix)
        for candidate in (path, unquote(path)):
            for start in (prefix, decoded_prefix):
                if candidate.startswith(start) and "/" not in candidate[len(start) :]:
                    return unquote(candidate[len(start) :]) or None
        return None


class Rendered:
    """Items as iCalendar, kept by (list, task, revision, zone): every change of what an
    item shows bumps its revision, so a kept rendering is never stale. icalendar takes
    1-3 ms an item, most of an initial sync; another device or member syncing the same list
    gets it for nothing. Per process, the `size` most recent."""

    def __init__(self, size: int = 20_000) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[uuid.UUID, uuid.UUID, int, str], bytes] = OrderedDict()

    def get(self, item: Item, tz: ZoneInfo) -> bytes:
        key = (item.task.list_id, item.task.id, item.revision, tz.key)
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = ics.render(item.task, item.meta, tz)
            if len(self._kept) > self.size:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(key)
        return found


RENDERED = Rendered()


def options_headers() -> dict[str, str]:
    return {
        "DAV": "1, 3, calendar-access, extended-mkcol",
        "Allow": ALLOW,
    }


def refusal(error: DomainError) -> DavResponse:
    status = error.status_code
    headers = {"Content-Type": XML_TYPE, **error.headers}
    return DavResponse(status, error_body(error), headers)


def _multistatus(status: Multistatus) -> DavResponse:
    return DavResponse(207, status.body(), {"Content-Type": XML_TYPE})


def _privileges(writable: bool) -> etree._Element:
    names = ["read", "read-current-user-privilege-set"]
    if writable:
        names += ["write", "write-content", "write-properties", "bind", "unbind"]
    return element(
        tag(DAV, "current-user-privilege-set"),
        None,
        *(element(tag(DAV, "privilege"), None, etree.Element(tag(DAV, name))) for name in names),
    )


def _cheap_props(revision: int) -> dict[str, Callable[[], etree._Element]]:
    return {
        _GETETAG: lambda: element(_GETETAG, store.etag(revision)),
        tag(DAV, "getcontenttype"): lambda: element(tag(DAV, "getcontenttype"), _ITEM_TYPE),
        tag(DAV, "resourcetype"): lambda: element(tag(DAV, "resourcetype")),
    }


_ITEM_TYPE = "text/calendar; charset=utf-8; component=VTODO"


def _item_props(item: Item, tz: ZoneInfo) -> dict[str, Callable[[], etree._Element]]:
    return {
        **_cheap_props(item.revision),
        _CALENDAR_DATA: lambda: element(_CALENDAR_DATA, RENDERED.get(item, tz).decode()),
        tag(DAV, "getlastmodified"): lambda: element(
            tag(DAV, "getlastmodified"),
            item.task.updated_at.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT"),
        ),
    }


def _matches(header: str, current: str) -> bool:
    given = [value.strip() for value in header.split(",")]
    return "*" in given or current in given or current.strip('"') in given


def _token_revision(token: str, found: Collection) -> int:
    refused = DavError(
        403,
        "This sync token is not known here; sync again from the start.",
        precondition="valid-sync-token",
    )
    if not token.startswith(_SYNC_PREFIX):
        raise refused
    list_part, _, number = token[len(_SYNC_PREFIX) :].rpartition(":")
    if list_part != str(found.list_id) or not number.isdigit():
        raise refused
    revision = int(number)
    if revision > found.revision:
        raise refused
    return revision


# -- calendar-query: its filter as SQL conditions -----------------------------------------


def _query(root: etree._Element) -> list[ColumnElement[bool]] | None:
    """The conditions of a calendar-query's filter on the tasks; None when it can match no
    VTODO (it asks for another component)."""
    filters = root.find(tag(CALDAV, "filter"))
    if filters is None:
        return [true()]
    calendar = filters.find(tag(CALDAV, "comp-filter"))
    if calendar is None:
        return [true()]
    if calendar.get("name", "").upper() != "VCALENDAR":
        return None
    conditions: list[ColumnElement[bool]] = [true()]
    for comp in calendar.findall(tag(CALDAV, "comp-filter")):
        if comp.get("name", "").upper() != "VTODO":
            return None
        if comp.find(tag(CALDAV, "is-not-defined")) is not None:
            return None
        span = comp.find(tag(CALDAV, "time-range"))
        if span is not None:
            start, end = _span(span)
            dated = and_(col(Task.due_at) >= start, col(Task.due_at) < end)
            undated = and_(col(Task.due_at).is_(None), col(Task.created_at) < end)
            conditions.append(or_(dated, undated))
        for prop in comp.findall(tag(CALDAV, "prop-filter")):
            conditions.append(_prop_filter(prop))
    return conditions


_FAR_PAST = datetime(1, 1, 2, tzinfo=UTC)
_FAR_FUTURE = datetime(9999, 12, 30, tzinfo=UTC)


def _span(element_: etree._Element) -> tuple[datetime, datetime]:
    def moment(value: str | None, default: datetime) -> datetime:
        if not value:
            return default
        try:
            return datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise DavError(
                400,
                f"A time-range takes UTC times like 20260101T000000Z, not {value!r}.",
                precondition="valid-filter",
                namespace=CALDAV,
            ) from None

    return moment(element_.get("start"), _FAR_PAST), moment(element_.get("end"), _FAR_FUTURE)


def _unsupported(name: str) -> DavError:
    return DavError(
        403,
        f"Filtering on {name} is not supported here.",
        precondition="supported-filter",
        namespace=CALDAV,
    )


_TEXT_COLUMNS: dict[str, Any] = {
    "SUMMARY": col(Task.title),
    "DESCRIPTION": col(Task.description),
    "UID": col(DavItem.uid),
}


def _prop_filter(prop: etree._Element) -> ColumnElement[bool]:
    name = prop.get("name", "").upper()
    if prop.find(tag(CALDAV, "param-filter")) is not None:
        raise _unsupported(f"a parameter of {name}")
    defined = _defined(name)
    if prop.find(tag(CALDAV, "is-not-defined")) is not None:
        return ~defined
    span = prop.find(tag(CALDAV, "time-range"))
    match = prop.find(tag(CALDAV, "text-match"))
    condition: ColumnElement[bool] = defined
    if span is not None:
        start, end = _span(span)
        column = {"DUE": col(Task.due_at), "COMPLETED": col(Task.completed_at)}.get(name)
        if column is None:
            raise _unsupported(f"a time range of {name}")
        condition = and_(condition, column >= start, column < end)
    if match is not None:
        condition = and_(condition, _text_match(name, match))
    return condition


def _defined(name: str) -> ColumnElement[bool]:
    conditions: dict[str, ColumnElement[bool]] = {
        "COMPLETED": col(Task.completed).is_(True),
        "DUE": col(Task.due_at).is_not(None),
        "DTSTART": col(Task.recurrence).is_not(None),
        "RRULE": col(Task.recurrence).is_not(None),
        "DESCRIPTION": func.coalesce(col(Task.description), "") != "",
        "CATEGORIES": func.cardinality(col(Task.tags)) > 0,
        "SUMMARY": true(),
        "UID": true(),
        "STATUS": true(),
        "PRIORITY": true(),
        "PERCENT-COMPLETE": col(Task.completed).is_(True),
        "VALARM": col(Task.remind_at).is_not(None),
        "RELATED-TO": col(Task.parent_id).is_not(None),
    }
    if name not in conditions:
        raise _unsupported(name)
    return conditions[name]


def _text_match(name: str, match: etree._Element) -> ColumnElement[bool]:
    value = match.text or ""
    negate = match.get("negate-condition", "no").lower() == "yes"
    if name == "STATUS":
        wanted = value.strip().upper()
        condition: ColumnElement[bool] = {
            "COMPLETED": col(Task.completed).is_(True),
            "NEEDS-ACTION": col(Task.completed).is_(False),
            "IN-PROCESS": false(),
            "CANCELLED": false(),
        }.get(wanted, false())
    elif name == "CATEGORIES":
        pattern = _like(value)
        condition = func.array_to_string(col(Task.tags), "\x1f").ilike(pattern, escape="\\")
    elif name in _TEXT_COLUMNS:
        condition = func.coalesce(_TEXT_COLUMNS[name], "").ilike(_like(value), escape="\\")
    else:
        raise _unsupported(f"the text of {name}")
    return ~condition if negate else condition


def _like(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
