"""Past the window: a long session's older messages, folded into its digest.

`window.plan` decides which stored messages a turn sends one by one and folds the older
ones; `account` writes the digest from the stored records; `prompt` lays out what the model
gets so that, between two folds, every request of a session only grows at its end, byte
for byte (a provider's prompt cache keeps hitting).
"""

from backend.services.digest.account import account, merged
from backend.services.digest.prompt import (
    clock_note,
    digest_message,
    stable_json,
    tool_call_messages,
)
from backend.services.digest.window import Fold, Window, plan

__all__ = [
    "Fold",
    "Window",
    "account",
    "clock_note",
    "digest_message",
    "merged",
    "plan",
    "stable_json",
    "tool_call_messages",
]
