"""The notification room's domain errors (rendered by backend/errors.py's one handler)."""

from backend.errors import Conflict, DomainError, NotFound


class SubscriptionNotFound(NotFound):
    detail = "No such push subscription."


class ChannelNotConfigured(Conflict):
    detail = "That channel is not configured on this service."


class NoEmailCode(Conflict):
    detail = "No verification code is waiting: set the address again to get a new one."


class WrongEmailCode(DomainError):
    status_code = 422
    detail = "That code is not the one mailed."


class ActionTokenInvalid(DomainError):
    status_code = 401
    detail = "That action link is not valid."


class ActionTokenGone(DomainError):
    status_code = 410
    detail = "That action link has expired or is no longer valid."
