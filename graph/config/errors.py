"""The run configuration's errors: each is one line naming the value and the fix."""

from __future__ import annotations

from checkpoints.vocabulary import Role


class ConfigError(ValueError):
    """Settings that do not make a valid run; the message is one line naming the value and the fix."""


class ModelBuildError(ValueError):
    """A role's model that cannot be built here; each command words it with its own flag."""

    def __init__(self, role: Role, spec: str, reason: str) -> None:
        super().__init__(f"{role} model {spec}: {reason}")
        self.role, self.spec, self.reason = role, spec, reason
