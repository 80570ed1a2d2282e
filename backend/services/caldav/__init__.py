"""The CalDAV server (RFC 4791, VTODO; RFC 6578 sync): every list a person reads is a
calendar of their home, every task an item of it. `passwords` signs clients in, `ics`
maps a task to a VTODO and back, `xml` reads and writes the protocol's bodies, `store`
reads collections and items, and `server` answers each method through the same task and
list services the REST routes use."""
