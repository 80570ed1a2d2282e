"""Work that happens after a change is committed: the transactional outbox and its readers.

Every committed task change has its event row in `events`, written by the `tasks_events`
trigger (migration 0005) in the change's own transaction, so nothing is published that was
not committed and nothing committed is lost. The readers, one of each per process:

- `hub.EventHub`: one LISTEN connection; fans events out to the open streams in memory.
- `reminders.ReminderClock`: fires reminders that came due, once (one conditional UPDATE).
- `webhooks.WebhookDispatcher`: claims events to deliver (FOR UPDATE SKIP LOCKED) and
  POSTs them, signed, with retries.
- `upkeep.Upkeep`: prunes events past their retention; reads the backlog gauges.

Time comes from the database's clock in all of them.
"""
