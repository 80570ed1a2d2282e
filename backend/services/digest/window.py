"""Which of a session's messages go to the model one by one, and when older ones fold.

A session's messages after its fold position (`agent_sessions.digest_seq`) are its recent
messages, sent as stored; those before it are in its digest. When a turn would send more
than AGENT_HISTORY_MESSAGES recent messages, it folds the oldest of them into the digest in
one step (half the window, so that the next fold is many turns away: never on two turns
running), ending before a message of the person's so that the recent messages start with
one. A stored message is one row: a turn's tool calls and their results live in one row, so
a fold never separates a result from its call. The fold is written when the turn finishes,
with its reply (`turns.finish`), only if no other attempt wrote one first.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from backend.services.digest.account import account, merged
from backend.services.turns import HistoryRow


@dataclass(frozen=True, slots=True)
class Fold:
    """A fold a turn decided: `digest` has the messages up to `through` (a seq) in it; it is
    written only while the session's fold position is still `since`."""

    digest: str | None
    through: int
    since: int


@dataclass(frozen=True, slots=True)
class Window:
    """What a turn sends of its session: the digest, then the recent messages (with when
    each was sent, where stored), and the fold to write, if the turn made one."""

    digest: str | None
    rows: list[HistoryRow]
    sent: list[datetime | None]
    fold: Fold | None = None


def plan(
    rows: Sequence[HistoryRow],
    *,
    seqs: Sequence[int | None],
    sent: Sequence[datetime | None],
    digest: str | None,
    folded: int,
    limit: int,
) -> Window:
    """The window of a turn that would send `rows` (the messages after the fold position
    `folded`, oldest first; a seq is None for a message not stored yet): as they are, or,
    past `limit`, with the oldest folded into the digest."""
    count = len(rows)
    stored = sum(1 for seq in seqs if seq is not None)
    if count <= limit or stored == 0:
        return Window(digest, list(rows), list(sent))
    # The person's last message stays (a regenerated answer answers a stored one).
    last = max((i for i, row in enumerate(rows) if row[0] == "user"), default=count)
    cut = min(max(limit // 2, count - limit, 1), stored, last)
    if cut == 0:
        return Window(digest, list(rows), list(sent))
    # The recent messages start with one of the person's.
    cut = next((i for i in range(cut, last + 1) if rows[i][0] == "user"), cut)
    through = seqs[cut - 1]
    assert through is not None  # stored messages come first
    text = merged(digest, account(rows[:cut]))
    return Window(text, list(rows[cut:]), list(sent[cut:]), Fold(text, through, folded))
