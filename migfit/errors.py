"""Domain errors that carry what the user must change, independent of any transport."""

from __future__ import annotations

import os


class MigfitError(Exception):
    """Base of every error migfit reports to a user.

    ``message`` says what is wrong and what to change; ``status`` is a hint of the HTTP
    status an adapter should use (the adapter decides, the domain never speaks HTTP).
    """

    status: int = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(MigfitError):
    """A bad argument or input value: the CLI exits 2, a server answers 400."""


class UnknownModelError(UsageError):
    """A GPU model id or product label that the catalog does not know."""


class QuantityError(UsageError):
    """A string that is not a Kubernetes resource.Quantity."""


class ConfigError(UsageError):
    """A configuration file (catalog override, mig-parted config, cluster spec) is invalid."""


def not_a_file(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a file (for "--flag PATH: <why>"), or None when it can.

    A Secret's mount folder, or /dev/null, is a plausible mistake: "no such file" for a path
    that exists sends the operator looking for the wrong thing.
    """
    if os.path.isfile(path):
        return None
    if os.path.isdir(path):
        return "a directory, not a file; name the file in it (e.g. tls.crt, tls.key)"
    if os.path.lexists(path):
        return ("not a regular file (a device, pipe or socket, or a link to nothing); "
                "name a PEM file")
    return "no such file"
