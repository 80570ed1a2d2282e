"""The `caldav` library as a client program: `caldav_steps.py URL USER PASSWORD STEP...`
signs in with the app password, finds the calendars from the server's root URL as the
library does (a PROPFIND of the URL it is given, redirected to /dav/), runs each step
and prints what it saw as JSON. Steps: discover, priorities, create, edit, complete,
sync[=TOKEN], mkcalendar=NAME, write=CALENDAR."""

import json
import sys
from typing import Any

import caldav
from caldav.lib import error


def vtodo(uid: str, summary: str, *lines: str) -> str:
    """A VTODO as an app writes it (caldav 1.x's own builder predates icalendar 7)."""
    body = "".join(f"{line}\r\n" for line in lines)
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//caldav steps//EN\r\nBEGIN:VTODO\r\n"
        f"UID:{uid}\r\nDTSTAMP:20260101T000000Z\r\nSUMMARY:{summary}\r\n{body}"
        "END:VTODO\r\nEND:VCALENDAR\r\n"
    )


def main(url: str, user: str, password: str, *steps: str) -> dict[str, Any]:
    client = caldav.DAVClient(url=url, username=user, password=password)
    principal = client.principal()  # type: ignore[no-untyped-call]
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
        elif name == "priorities":  # each todo's PRIORITY as sent, null without one
            seen["priorities"] = {
                str(todo.icalendar_component["SUMMARY"]): todo.icalendar_component.get("PRIORITY")
                for todo in calendar("Inbox").todos()
            }
        elif name == "create":
            calendar("Inbox").add_todo(ical=vtodo("stamps-1", "Buy stamps", "DUE:20300501T120000Z"))
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
            synced = calendar("Inbox").objects_by_sync_token(
                sync_token=value or None, load_objects=True
            )
            # An item reported gone cannot be loaded: it keeps no data.
            seen["titles"] = [
                str(obj.icalendar_component["SUMMARY"]) for obj in synced.objects if obj.data
            ]
            seen["deleted"] = sorted(str(obj.url) for obj in synced.objects if not obj.data)
            seen["token"] = synced.sync_token
        elif name == "mkcalendar":
            principal.make_calendar(name=value, supported_calendar_component_set=["VTODO"])
            seen["calendars"] = [c.get_display_name() for c in principal.calendars()]
        elif name == "write":
            try:
                calendar(value).add_todo(ical=vtodo("weeds-1", "Weeds"))
            except (error.AuthorizationError, error.PutError):
                seen["refused"] = True
            else:
                seen["refused"] = False
        else:
            raise SystemExit(f"unknown step {step!r}")
    return seen


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:]), default=str))
