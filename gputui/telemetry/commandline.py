"""A process's command line as gputui shows and serves it: the common shapes of a secret
redacted, unless asked for as it is (``gputui serve --processes=raw``).

A command line is visible to every local user, but gputui also puts it on screens that are
shared and serves it to whoever can reach an exporter. What is redacted: the value of an
option or variable whose name ends in a secret's name (``--password=***``,
``--db-password ***``, ``HF_TOKEN=***``, ``?token=***&``), a URL's credentials
(``postgres://ada:***@db``, ``https://***@github.com``) and an ``Authorization`` header's
value. It is a net for the usual shapes, not a guarantee: a secret passed as a bare word
cannot be told from any other word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "***"
"""What a secret's value reads as."""

_SECRET = (
    r"(?:password|passwd|passphrase|pwd|secret|token|credentials?|auth"
    r"|(?:api|access|secret|private|auth|client)[-_]?key)"
)
"""The names whose values are secrets, as the end of an option's or variable's name."""

_OPTION = re.compile(rf"-{{1,2}}[\w.-]*{_SECRET}", re.IGNORECASE)
"""An option that takes a secret as the next argument: ``--password``, ``--hf-token``."""
_WHOLE_ASSIGNMENT = re.compile(rf"(-{{0,2}}[\w.-]*{_SECRET}=).*", re.IGNORECASE | re.DOTALL)
"""An argument that is all ``NAME=VALUE`` (the value may hold spaces)."""
_ASSIGNMENT = re.compile(rf"([\w.-]*{_SECRET}=)[^\s&;,'\"]+", re.IGNORECASE)
"""``NAME=VALUE`` inside an argument: a query string, a shell command, ``--env=NAME=VALUE``."""
_URL_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.-]*://)(?:([^\s/:@]*):)?[^\s/]*@", re.IGNORECASE)
"""A URL's ``user:password@`` (or a token alone, ``token@``)."""
_AUTHORIZATION = re.compile(r"(authorization:\s*(?:(?:bearer|basic|token)\s+)?)\S+", re.IGNORECASE)
"""An HTTP ``Authorization`` header, as ``curl -H`` passes it."""


def redact_secrets(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of each secret it holds replaced by ``***`` (see the module)."""
    redacted: list[str] = []
    follows_option = False
    for arg in argv:
        if follows_option and not arg.startswith("-"):
            redacted.append(REDACTED)
        else:
            redacted.append(_redact_argument(arg))
        follows_option = _OPTION.fullmatch(arg) is not None
    return redacted


def _redact_argument(arg: str) -> str:
    whole = _WHOLE_ASSIGNMENT.fullmatch(arg)
    if whole is not None:
        return whole.group(1) + REDACTED
    arg = _ASSIGNMENT.sub(rf"\g<1>{REDACTED}", arg)
    arg = _URL_CREDENTIALS.sub(_url_without_secret, arg)
    return _AUTHORIZATION.sub(rf"\g<1>{REDACTED}", arg)


def _url_without_secret(match: re.Match[str]) -> str:
    scheme, user = match.group(1), match.group(2)
    return f"{scheme}{user}:{REDACTED}@" if user is not None else f"{scheme}{REDACTED}@"


def command_line(argv: Sequence[str], *, raw: bool = False) -> str:
    """The command line ``argv`` names, its arguments joined by spaces, secrets redacted
    unless ``raw`` (``gputui serve --processes=raw``)."""
    return " ".join(argv if raw else redact_secrets(argv))
