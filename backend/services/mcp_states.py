"""MCP questions answered once.

A call that asks the user first (backend.services.mcp) seals a random nonce into its
`requestState`. The retry that brings the answer spends the nonce here, in the transaction
that carries out the call: its primary key lets one insert through, so a replay, or two
retries at once on any replicas, find it spent and run nothing. A spent nonce is kept until
its state has expired (after that the state is refused anyway), then the upkeep loop prunes
it.
"""

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

# Replicas' clocks differ: a state one of them sealed may be accepted a little longer.
CLOCK_SKEW_S = 60.0

_SPEND = text(
    """
    INSERT INTO mcp_request_states (nonce, user_id, expires_at)
    VALUES (:nonce, :owner, now() + make_interval(secs => :keep_s))
    ON CONFLICT (nonce) DO NOTHING
    RETURNING nonce
    """
)
_PRUNE = text(
    "DELETE FROM mcp_request_states WHERE nonce IN (SELECT nonce FROM mcp_request_states"
    " WHERE expires_at < now() LIMIT 5000)"
)


async def spend(db: AsyncConnection, *, owner: str, nonce: str, ttl_s: float) -> bool:
    """Take the nonce of a state that lives `ttl_s` at most; false when it was taken before
    (a concurrent taker's transaction is waited for)."""
    taken = await db.execute(
        _SPEND, {"nonce": nonce, "owner": owner, "keep_s": ttl_s + CLOCK_SKEW_S}
    )
    return taken.first() is not None


async def prune(connection: AsyncConnection) -> int:
    """Forget (a batch of) nonces whose states have expired."""
    return int((await connection.execute(_PRUNE)).rowcount)
