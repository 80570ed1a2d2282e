"""What a file says: its type (by name and content type), its text as Markdown or plain
text, its title and its passages, read by the library made for each format (markdown-it-py,
lxml's HTML parser, pypdf).

A file is input from outside, and a parser may be made to work very hard (a PDF whose
streams unpack to gigabytes, HTML nested thousands deep), so reading runs in a process of
its own (`read_isolated`), with an address-space and CPU limit and a deadline, killed if it
overruns: the worst a file can do is be refused (422), never hold up the service.
"""

import asyncio
import io
import logging
import multiprocessing
import resource
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import PurePath
from typing import Any

from backend.errors import UnreadableDocument, UnsupportedDocumentType
from backend.services.documents.sections import PassageText, outline, passages, passages_of

MARKDOWN, PLAIN, HTML, PDF = "text/markdown", "text/plain", "text/html", "application/pdf"
_BY_EXTENSION = {
    ".md": MARKDOWN, ".markdown": MARKDOWN, ".txt": PLAIN, ".text": PLAIN,
    ".html": HTML, ".htm": HTML, ".pdf": PDF,
}  # fmt: skip
_BY_CONTENT_TYPE = {
    "text/markdown": MARKDOWN, "text/x-markdown": MARKDOWN, "text/plain": PLAIN,
    "text/html": HTML, "application/xhtml+xml": HTML, "application/pdf": PDF,
}  # fmt: skip
# Sent for a file whose type the client does not know: its name decides.
_UNKNOWN_CONTENT_TYPES = frozenset({"", "application/octet-stream"})

READ_TIMEOUT_S = 10.0
READ_MEMORY_BYTES = 1024 * 1024 * 1024  # the reading process's whole address space
MAX_DEPTH = 200  # HTML elements nested deeper are refused
MAX_PDF_PAGES = 2000
_TITLE_LENGTH = 200
# Readers at once in this process: each is a process of its own.
logger = logging.getLogger("todo_agent.documents")
_READERS = asyncio.Semaphore(2)

# Elements whose content is not the document's text (or runs, or is out of the page).
_SKIPPED = frozenset({
    "script", "style", "noscript", "template", "head", "iframe", "object", "embed", "svg",
    "math", "canvas", "select", "button", "textarea",
})  # fmt: skip
_BLOCKS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "form",
    "table", "tr", "blockquote", "pre", "ul", "ol", "dl", "dt", "dd", "figure", "figcaption",
    "address", "details", "summary", "hr", "body", "html",
})  # fmt: skip
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})


@dataclass(frozen=True, slots=True)
class Reading:
    """A document read: its text (Markdown, or plain text), the title it gives itself (its
    first heading, an HTML page's <title>), and its passages."""

    media_type: str
    text: str
    title: str | None
    passages: list[PassageText]


def media_type_of(filename: str | None, content_type: str | None) -> str:
    """The document type of an upload: by its name's extension, else by the content type the
    client sent; anything else is 415."""
    extension = PurePath(filename or "").suffix.lower()
    if extension in _BY_EXTENSION:
        return _BY_EXTENSION[extension]
    given = (content_type or "").split(";")[0].strip().lower()
    if given in _BY_CONTENT_TYPE:
        return _BY_CONTENT_TYPE[given]
    if given in _UNKNOWN_CONTENT_TYPES and not extension:
        raise UnsupportedDocumentType(
            "The file has no type: name it .md, .txt, .html or .pdf, or send its content type."
        )
    raise UnsupportedDocumentType()


def name_title(filename: str | None) -> str | None:
    """A title from a file name: "moving-checklist.md" is "moving-checklist"."""
    stem = PurePath(filename or "").stem.strip()
    return stem[:_TITLE_LENGTH] or None


def read(data: bytes, media_type: str) -> Reading:
    """The document in `data`; UnreadableDocument names why it cannot be read."""
    if not data.strip():
        raise UnreadableDocument("The file is empty.")
    if media_type == PDF:
        text, title = _pdf(data), None
    elif media_type == HTML:
        text, title = _html(_utf8(data, "HTML"))
    else:
        text, title = _utf8(data, "text"), None
    if not text.strip():
        raise UnreadableDocument("The document has no text.")
    found = of_text(text, media_type)
    title = (found.title or title or "").strip()[:_TITLE_LENGTH] or None
    return Reading(media_type, text, title, found.passages)


def of_text(text: str, media_type: str) -> Reading:
    """A document whose text is Markdown or plain text already (one read before, as an
    import brings it): cut into passages, not read again."""
    if media_type == PLAIN:
        return Reading(media_type, text, None, passages(text, markdown=False))
    found = outline(text)
    return Reading(media_type, text, found.title, passages_of(found.sections))


def _utf8(data: bytes, kind: str) -> str:
    if b"\x00" in data:
        raise UnreadableDocument(f"The file is not {kind}: it holds binary data.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UnreadableDocument(f"The file is not UTF-8 {kind}.") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


# -- HTML ---------------------------------------------------------------------------------


def _html(source: str) -> tuple[str, str | None]:
    """An HTML page's text as Markdown (its headings kept as headings, list items as
    items), and its <title>; scripts, styles and the like are left out."""
    from lxml import etree, html  # type: ignore[import-untyped]

    try:
        root = html.document_fromstring(source)
    except (etree.ParserError, ValueError) as error:
        raise UnreadableDocument(f"The file is not HTML that can be read: {error}.") from None
    titles = root.findall(".//title")
    title = titles[0].text_content().strip() if titles else None
    blocks: list[str] = []
    line: list[str] = []

    def flush(prefix: str = "") -> None:
        joined = " ".join("".join(line).split())
        line.clear()
        if not joined:
            return
        if prefix == "- " and blocks and blocks[-1].startswith("- "):
            blocks[-1] += "\n- " + joined  # one list, not a paragraph per item
        else:
            blocks.append(prefix + joined)

    # Walked with a stack, not recursion, so that depth costs no Python frames; each
    # element is visited on the way in (None, element) and out (element, None).
    stack: deque[tuple[Any, Any, int]] = deque([(None, root, 0)])
    while stack:
        leaving, element, depth = stack.pop()
        if leaving is not None:
            tag = _tag(leaving)
            if tag in _HEADINGS:
                flush("#" * int(tag[1]) + " ")
            elif tag == "li":
                flush("- ")
            elif tag in _BLOCKS:
                flush()
            elif tag in ("td", "th"):
                line.append(" ")  # cells of a row, apart
            if leaving.tail:
                line.append(leaving.tail)
            continue
        if depth > MAX_DEPTH:
            raise UnreadableDocument(
                f"The HTML is nested more than {MAX_DEPTH} elements deep; it is not read."
            )
        tag = _tag(element)
        if tag in _SKIPPED or not isinstance(element.tag, str):
            if element.tail:  # a comment's or a skipped element's tail is still text
                line.append(element.tail)
            continue
        if tag in _BLOCKS or tag in _HEADINGS or tag in ("li", "br"):
            flush()
        if element.text:
            line.append(element.text)
        stack.append((element, None, depth))
        stack.extend((None, child, depth + 1) for child in reversed(element))
    flush()
    return "\n\n".join(blocks), title


def _tag(element: Any) -> str:
    return element.tag.lower() if isinstance(element.tag, str) else ""


# -- PDF ----------------------------------------------------------------------------------


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError, PyPdfError

    if not data.lstrip()[:5] == b"%PDF-":
        raise UnreadableDocument("The file is not a PDF.")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise UnreadableDocument("The PDF is encrypted; send one that is not.")
        if len(reader.pages) > MAX_PDF_PAGES:
            raise UnreadableDocument(f"The PDF has more than {MAX_PDF_PAGES} pages.")
        pages = [page.extract_text() or "" for page in reader.pages]
    except UnreadableDocument:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UnreadableDocument(f"The PDF cannot be read: {error}.") from None
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text:
        raise UnreadableDocument("The PDF has no text (a scan?); send one with text.")
    return text


# -- in a process of its own --------------------------------------------------------------


def _context() -> Any:
    """Readers are forked from a server process that has loaded this module (and so the
    parsers): fast to start, and no copy of the service's threads or connections."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["backend.services.documents.reading"])
    return context


_CONTEXT = _context()
# A reader started ahead of the upload it will read: a process started from the forkserver
# imports the server's main module again (multiprocessing's preparation), half a second
# and more of a loaded machine's time, which the next upload then does not wait for. Each
# reader still reads one file and is then ended.
_SPARE: deque[tuple[Any, Connection]] = deque()


_OUT_OF_MEMORY = "The document needs more memory to read than it is given."
# A parser that cannot allocate does not always raise MemoryError: lxml (libxml2) says
# "unknown error", an import that cannot map its library raises ImportError. Either, with
# the reader's peak address space this close to its limit, is the limit's doing.
_NEAR_LIMIT_BYTES = 16 * 1024 * 1024


def _at_memory_limit(limit: int) -> bool:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024 >= limit - _NEAR_LIMIT_BYTES
    except (OSError, ValueError):
        pass
    return False


def _child(connection: Connection) -> None:
    try:
        data, media_type, memory, cpu_s = connection.recv()
    except EOFError:  # a spare the server no longer needs (it is ending)
        return
    # The CPU limit counts from now, not from the process's start (its imports).
    usage = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(usage.ru_utime + usage.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_s, spent + cpu_s + 1))
    try:
        connection.send(("read", read(data, media_type)))
    except UnreadableDocument as refused:
        connection.send(("refused", refused.detail))
    except MemoryError:
        connection.send(("refused", _OUT_OF_MEMORY))
    except RecursionError:
        connection.send(("refused", "The document is nested too deeply to read."))
    except Exception as error:  # any other failure of a parser on this input: still its own
        if _at_memory_limit(memory):
            connection.send(("refused", _OUT_OF_MEMORY))
        else:
            connection.send(("refused", f"The document cannot be read ({type(error).__name__})."))


def _start_reader() -> tuple[Any, Connection]:
    global _CONTEXT
    ours, theirs = _CONTEXT.Pipe()
    process = _CONTEXT.Process(target=_child, args=(theirs,), daemon=True)
    try:
        process.start()
    except OSError:
        # The forkserver listens on a Unix socket under TMPDIR, and a long TMPDIR makes its
        # path longer than a socket's path may be ("AF_UNIX path too long"). Then readers
        # are spawned instead: slower to start (the spare hides it), just as isolated.
        if _CONTEXT.get_start_method() != "forkserver":
            raise
        logger.warning("readers are spawned: the forkserver could not start under TMPDIR")
        _CONTEXT = multiprocessing.get_context("spawn")
        theirs.close()
        ours.close()
        return _start_reader()
    theirs.close()
    return process, ours


def prepare_reader() -> None:
    """A spare reader started now (at the server's start), so that the first upload does not
    wait for one either. One that cannot start is no reason not to serve: the upload that
    needs it tries again, and says why if it still cannot."""
    if not _SPARE:
        try:
            _SPARE.append(_start_reader())
        except OSError:
            logger.exception("no document reader could be started ahead")


def _reader() -> tuple[Any, Connection]:
    """A reader waiting for its file (the spare, when it is still alive), and a spare
    started for the next."""
    reader = None
    while _SPARE and reader is None:
        process, connection = _SPARE.popleft()
        if process.is_alive():
            reader = process, connection
        else:
            connection.close()
    _SPARE.append(_start_reader())
    return reader or _start_reader()


async def read_isolated(
    data: bytes,
    media_type: str,
    *,
    timeout_s: float = READ_TIMEOUT_S,
    memory_bytes: int = READ_MEMORY_BYTES,
) -> Reading:
    """`read`, in a process of its own, killed at the deadline."""
    async with _READERS:
        process, connection = _reader()
        job = (data, media_type, memory_bytes, int(timeout_s) + 1)
        try:
            outcome = await asyncio.to_thread(_exchange, connection, job, timeout_s)
        finally:
            if process.is_alive():
                process.kill()
            await asyncio.to_thread(process.join)
            connection.close()
    match outcome:
        case ("read", Reading() as reading):
            return reading
        case ("refused", str(reason)):
            raise UnreadableDocument(reason)
        case "timeout":
            raise UnreadableDocument(
                f"The document could not be read within {timeout_s:g} seconds; it is not read."
            )
    raise UnreadableDocument("The document could not be read within the memory it is given.")


def _exchange(connection: Connection, job: tuple[Any, ...], timeout_s: float) -> Any:
    """The reader's answer to `job`; "timeout" when it has none in time, None when it died.
    (A spare still starting takes the file once it has started: sent from a thread.)"""
    try:
        connection.send(job)
        if not connection.poll(timeout_s):
            return "timeout"
        return connection.recv()
    except (EOFError, OSError):
        return None
