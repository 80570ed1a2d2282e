"""The `caldav` library as a client program: `caldav_steps.py URL USER PASSWORD STEP...`
signs in with the app password, finds the calendars from the server's root URL as the
library does (RFC 6764: /.well-known/caldav), runs each step and prints what it saw as
JSON. Steps: discover, create, edit, complete, sync[=TOKEN], mkcalendar=NAME,
write=CALENDAR."""

import json
import sys
from datetime import UTC, datetime
from typing import Any

import caldav
from caldav.lib import error


def main(url: str, user: str, password: str, *steps: str) -> dict[str, Any]:
    client = caldav.DAVClient(  # type: ignore[operator]
        url=url, username=user, password=password, require_tls=False
    )
    principal = client.principal()
    seen: dict[str, Any] = {}

    def calendar(name: str) -> Any:
        return next(c for c in principal.calendars() if c.get_display_name() == name)

    for step in steps:
        name, _, value = step.partition("=")
        if name == "discover":
            calendars = principal.calendars()
            seen["calendars"] = [c.get_display_name() for c in calendars]
            seen["components"] = calendars[0].get_supported_components()
            seen["todos"] = [
                str(todo.icalendar_component["SUMMARY"]) for todo in calendars[0].todos()
            ]
        elif name == "create":
            calendar("Inbox").add_todo(
                summary="Buy stamps", due=datetime(2030, 5, 1, 12, tzinfo=UTC), uid="stamps-1"
            )
        elif name == "edit":
            todo = calendar("Inbox").todo_by_uid("stamps-1")
            component = todo.icalendar_component
            component["SUMMARY"] = "Buy stamps (edited)"
            component["PRIORITY"] = 9
            component.add("CATEGORIES", ["errands"])
            todo.save()
        elif name == "complete":
            calendar("Inbox").todo_by_uid("stamps-1").complete()
        elif name == "sync":
            synced = calendar("Inbox").get_objects_by_sync_token(
                sync_token=value or None, load_objects=True, disable_fallback=True
            )
            deleted = {str(url) for url in synced.deleted_urls}
            seen["titles"] = [
                str(obj.icalendar_component["SUMMARY"])
                for obj in synced.objects
                if str(obj.url) not in deleted and obj.data
            ]
            seen["deleted"] = sorted(deleted)
            seen["token"] = synced.sync_token
        elif name == "mkcalendar":
            principal.make_calendar(name=value, supported_calendar_component_set=["VTODO"])
            seen["calendars"] = [c.get_display_name() for c in principal.calendars()]
        elif name == "write":
            try:
                calendar(value).add_todo(summary="Weeds", uid="weeds-1")
            except (error.AuthorizationError, error.PutError):
                seen["refused"] = True
            else:
                seen["refused"] = False
        else:
            raise SystemExit(f"unknown step {step!r}")
    return seen


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:]), default=str))
