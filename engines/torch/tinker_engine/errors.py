"""The three error kinds of docs/engine-protocol.md ("Requests and answers")."""

from __future__ import annotations


class EngineError(Exception):
    """An error answered to the worker; `kind` tells it what to do (E6)."""

    kind = "infrastructure"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_json(self) -> dict[str, object]:
        error: dict[str, object] = {"kind": self.kind, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return error


class UserError(EngineError):
    """Bad input found at execution: the step fails, the state named in the request is unchanged."""

    kind = "user"


class InfrastructureError(EngineError):
    """Anything else that went wrong: the worker re-plans the work item."""

    kind = "infrastructure"


class ProtocolError(EngineError):
    """A malformed frame, an unknown op or a handle the engine does not hold."""

    kind = "protocol"


def user_error(field: str, problem: str) -> UserError:
    """A user error whose message starts with the field, as the reference backend words them."""
    return UserError(f"{field}: {problem}", field=field)
