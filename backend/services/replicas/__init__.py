"""A turn's life across replicas: what lets any replica stop, die or start at any moment
without a person losing a turn (docs/architecture.md, "Any replica, any moment").

- `leases`: the session lease a running turn holds, renewed while it runs (a heartbeat
  that starts only once a turn runs long) and released when it fails;
- `replica`: the turns running in this process, each its own task with its feed
  (turn_streams.py); a drain that refuses new turns, lets those in flight finish within
  SHUTDOWN_GRACE_S and hands the rest over (their lease ended at once); the take-over
  of a turn whose lease lapsed (the sweeper's), as a new attempt;
- `resumed`: what a lapsed attempt left to answer, read from the session as stored.

The agent (agent.py) is the turn loop: it begins, runs and finishes one turn, and knows
of this room only the leases it keeps while it runs. The rest of the service starts,
drains and takes over turns through the `Replica`.
"""
