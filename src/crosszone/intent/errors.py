"""The one error type of intent handling."""

from __future__ import annotations


class InvalidIntentError(ValueError):
    """An intent was rejected. The message names the file, the line where known, the object and
    the field, e.g. ``intent.yaml:12: vpcs[1].vni: 1001 is already used by vpcs[0]``."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        where: str | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.where = where
        self.detail = message
        prefix = path or "<intent>"
        if line is not None:
            prefix += f":{line}"
        text = f"{prefix}: {where}: {message}" if where else f"{prefix}: {message}"
        super().__init__(text)
