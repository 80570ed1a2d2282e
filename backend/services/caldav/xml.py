"""The protocol's XML: requests read as hostile input, answers written.

A request body is parsed by lxml with entities left unresolved, no DTD loaded, no network
and lxml's own depth and size limits; a body that declares a DTD at all is refused, so
neither an entity expansion nor an external reference is ever attempted.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from lxml import etree  # type: ignore[import-untyped]

from backend.errors import DomainError

DAV = "DAV:"
CALDAV = "urn:ietf:params:xml:ns:caldav"
CS = "http://calendarserver.org/ns/"
ICAL = "http://apple.com/ns/ical/"
NSMAP = {"d": DAV, "c": CALDAV, "cs": CS}

_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    dtd_validation=False,
    huge_tree=False,
    remove_comments=True,
    remove_pis=True,
)


def tag(namespace: str, name: str) -> str:
    return f"{{{namespace}}}{name}"


class BadXml(DomainError):
    status_code = 400
    detail = "The request body is not XML this server reads."


class DavError(DomainError):
    """A refusal with a DAV:error body naming the precondition that failed."""

    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        precondition: str | None = None,
        namespace: str = DAV,
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.precondition = precondition
        self.namespace = namespace


def parse(body: bytes) -> etree._Element | None:
    """The body's root element; None for an empty body."""
    if not body.strip():
        return None
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as error:
        raise BadXml(f"Malformed XML: {error}"[:300]) from None
    tree = root.getroottree()
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise BadXml("XML with a DOCTYPE (entities, external references) is not accepted.")
    return root


def error_body(error: DomainError) -> bytes:
    """A DAV:error with the failed precondition (if any) and the reason in words."""
    root = etree.Element(tag(DAV, "error"), nsmap={"d": DAV, "c": CALDAV})
    precondition = getattr(error, "precondition", None)
    if precondition:
        namespace = getattr(error, "namespace", None) or (
            DAV if precondition in _DAV_PRECONDITIONS else CALDAV
        )
        etree.SubElement(root, tag(namespace, precondition))
    etree.SubElement(root, tag(DAV, "responsedescription")).text = error.detail
    return _serialize(root)


_DAV_PRECONDITIONS = {
    "valid-sync-token",
    "supported-report",
    "propfind-finite-depth",
    "need-privileges",
    "resource-must-be-null",
}


@dataclass(frozen=True, slots=True)
class PropFind:
    """What a PROPFIND (or a REPORT's DAV:prop) asks: all properties, their names, or
    these."""

    names: tuple[str, ...] = ()
    all: bool = False
    names_only: bool = False


def read_propfind(root: etree._Element | None) -> PropFind:
    if root is None:
        return PropFind(all=True)
    if root.tag != tag(DAV, "propfind"):
        raise BadXml("A PROPFIND body is a DAV:propfind.")
    return requested(root)


def requested(parent: etree._Element) -> PropFind:
    """The DAV:prop / DAV:allprop / DAV:propname inside `parent`."""
    for child in parent:
        if child.tag == tag(DAV, "allprop"):
            return PropFind(all=True)
        if child.tag == tag(DAV, "propname"):
            return PropFind(names_only=True)
        if child.tag == tag(DAV, "prop"):
            names = tuple(str(prop.tag) for prop in child if isinstance(prop.tag, str))
            return PropFind(names=names)
    return PropFind(all=True)


class Multistatus:
    """A 207 body, built response by response."""

    def __init__(self) -> None:
        self.root = etree.Element(tag(DAV, "multistatus"), nsmap=NSMAP)

    def response(
        self,
        href: str,
        found: Iterable[etree._Element] = (),
        missing: Iterable[str] = (),
        *,
        status: int | None = None,
        failed: dict[int, list[str]] | None = None,
    ) -> None:
        """One resource: the properties `found` (200) and the names `missing` (404); or,
        with `status` and nothing else, a status alone (a deleted item of a sync)."""
        response = etree.SubElement(self.root, tag(DAV, "response"))
        etree.SubElement(response, tag(DAV, "href")).text = href
        if status is not None:
            etree.SubElement(response, tag(DAV, "status")).text = _status_line(status)
            return
        groups: dict[int, list[etree._Element]] = {200: list(found)}
        groups[404] = [etree.Element(name) for name in missing]
        for code, names in (failed or {}).items():
            groups[code] = [etree.Element(name) for name in names]
        for code, elements in groups.items():
            if not elements:
                continue
            propstat = etree.SubElement(response, tag(DAV, "propstat"))
            prop = etree.SubElement(propstat, tag(DAV, "prop"))
            prop.extend(elements)
            etree.SubElement(propstat, tag(DAV, "status")).text = _status_line(code)

    def sync_token(self, token: str) -> None:
        etree.SubElement(self.root, tag(DAV, "sync-token")).text = token

    def body(self) -> bytes:
        return _serialize(self.root)


_REASONS = {200: "OK", 403: "Forbidden", 404: "Not Found", 424: "Failed Dependency"}


def _status_line(code: int) -> str:
    return f"HTTP/1.1 {code} {_REASONS.get(code, '')}".rstrip()


def _serialize(root: etree._Element) -> bytes:
    document: bytes = etree.tostring(root, xml_declaration=True, encoding="utf-8")
    return document


def element(name: str, text: str | None = None, *children: etree._Element) -> etree._Element:
    made = etree.Element(name)
    if text is not None:
        made.text = text
    made.extend(children)
    return made


def href_element(href: str) -> etree._Element:
    return element(tag(DAV, "href"), href)
