"""HTTP only: parse, call a service, return."""
