"""Reminders that reach people: Web Push, email and ntfy, a daily plan, quiet hours, and
acting on a task from the notification itself (docs/notifications.md).

- `preferences`: a person's settings and push subscriptions; email verification.
- `addresses`: no request to where it must not go (checked at save and at each send).
- `keys`: the VAPID key pair, and the key that signs action tokens.
- `actions`: the signed, single-purpose tokens of Done, Snooze and one-click unsubscribe.
- `messages`: how each kind (reminder, daily plan, test, code) reads on each channel.
- `senders`: Web Push, mail and ntfy, each answering an outcome; `outbound`: the HTTP
  client of push and ntfy sends (aiohttp, through the address guard).
- `schedule`: local times as instants (the plan's time, quiet hours' end).
- `store` + `dispatcher`: the deliveries, one row per (notification, target), claimed with
  a lease and sent once after a success; the loop sleeps until the database wakes it.
  `settling`: their outcomes, written in batches.
- `service.Notifier`: what the app holds.
"""
