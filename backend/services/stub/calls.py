"""Running tools for the stub: an error result ends the turn with a plain explanation."""

from collections.abc import Mapping
from typing import Any

from backend.services import approvals
from backend.services.stub import replies
from backend.services.tools import ToolCaller, ToolResult

MAX_SHOWN = 50


class Stop(Exception):
    """Ends the turn early with this reply (not found, ambiguous, ...)."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


class Calls:
    """The stub's only way to act: the tool caller it was given."""

    def __init__(self, call_tool: ToolCaller) -> None:
        self._call_tool = call_tool

    async def __call__(self, tool: str, arguments: Mapping[str, Any], failed: str) -> ToolResult:
        result = await self._call_tool(tool, arguments)
        if result.get("status") == approvals.PENDING:  # held for the person's yes: ask
            raise Stop(approvals.question([str(result.get("summary"))]))
        if result.get("status") == "error":
            error = str(result.get("error") or "unknown error")
            todo_id = arguments.get("todo_id") or arguments.get("parent")
            if todo_id is not None and "not found" in error.lower():
                raise Stop(f"I couldn't find task {todo_id}. {replies.SHOW_HINT}")
            raise Stop(f"I couldn't {failed}: {replies.clean(error, limit=300)}")
        return result

    async def each(
        self, tool: str, arguments: list[Mapping[str, Any]], failed: str
    ) -> list[ToolResult]:
        """`tool` once for each of `arguments`, in order; the calls held for the person's
        yes are asked about together, once all were tried."""
        done: list[ToolResult] = []
        held: list[str] = []
        for one in arguments:
            result = await self._call_tool(tool, one)
            if result.get("status") == approvals.PENDING:
                held.append(str(result.get("summary")))
            elif result.get("status") == "error":
                error = replies.clean(str(result.get("error") or "unknown error"), limit=300)
                raise Stop(f"I couldn't {failed}: {error}")
            else:
                done.append(result)
        if held:
            raise Stop(approvals.question(held))
        return done

    async def todos(self, failed: str = "load your tasks", **arguments: Any) -> list[ToolResult]:
        result = await self("list_todos", {"limit": MAX_SHOWN, **arguments}, failed)
        return todos(result)


def todos(result: ToolResult) -> list[ToolResult]:
    found = result.get("todos")
    return [t for t in found if isinstance(t, dict)] if isinstance(found, list) else []


def todo(result: ToolResult) -> ToolResult:
    found = result.get("todo")
    return found if isinstance(found, dict) else {}
