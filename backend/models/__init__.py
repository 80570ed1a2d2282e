"""SQLModel tables and the API's request/response schemas, one module per entity."""

from backend.models.approval import Approval
from backend.models.change import TaskChange
from backend.models.dav import AppPassword, DavCollection, DavItem, DavSignIn
from backend.models.document import Document, Passage
from backend.models.event import Event
from backend.models.idempotency import IdempotencyKey
from backend.models.identity import IdentityWebhookMessage
from backend.models.list import ListInvitation, ListMember, TaskNumber, TodoList
from backend.models.mcp import McpRequestState
from backend.models.memory import Memory
from backend.models.notify import (
    NotificationSettings,
    NotifyDelivery,
    NotifyDigest,
    PushSubscription,
)
from backend.models.session import AgentMessage, AgentSession
from backend.models.task import Task
from backend.models.user import User

__all__ = [
    "AgentMessage",
    "AgentSession",
    "AppPassword",
    "Approval",
    "DavCollection",
    "DavItem",
    "DavSignIn",
    "Document",
    "Event",
    "IdempotencyKey",
    "IdentityWebhookMessage",
    "ListInvitation",
    "ListMember",
    "McpRequestState",
    "Memory",
    "NotificationSettings",
    "NotifyDelivery",
    "NotifyDigest",
    "Passage",
    "PushSubscription",
    "Task",
    "TaskChange",
    "TaskNumber",
    "TodoList",
    "User",
]
