"""Settings checked in a child process and handed to a parent that never loads what checked them.

A worker (or a receiver) runs for months on every host, and the libraries that check its settings (pydantic,
pydantic-settings, jsonschema) would hold about 13 MB of its resident memory for the sake of its first second. So it
forks before loading them: the child reads and checks the settings exactly as `config check` does (every problem
named, exit 2 for bad config), then hands their values back over a pipe; the parent runs with a frozen copy under the
same attribute names. The declaration stays the one on the pydantic-settings model; only its result crosses the pipe.

This module imports the standard library alone, so importing it costs the parent nothing.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeVar

from pi_dispatch.core.errors import ConfigError, PiDispatchError

MASK: Final = "**********"
T = TypeVar("T")


class Revealable(Protocol):
    """A secret as pydantic's SecretStr and `Secret` hold it: masked when shown, read on purpose."""

    def get_secret_value(self) -> str: ...


class Secret:
    """A checked secret once handed over: masked in repr and str, as pydantic's SecretStr is."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{MASK}')"

    def __str__(self) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return Secret, (self._value,)


def secret_text(secret: Revealable | None) -> str | None:
    """A secret's value, or None when none was set."""
    return secret.get_secret_value() if secret is not None else None


class Settled:
    """A checked settings object's values as read-only attributes (the model's fields and the properties named)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, object]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"the handed-over settings have no {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("settings are frozen")

    def __repr__(self) -> str:
        return f"Settled({', '.join(f'{name}={value!r}' for name, value in self._values.items())})"

    def __reduce__(self) -> tuple[type[Settled], tuple[dict[str, object]]]:
        return Settled, (self._values,)


class HandoverFailed(PiDispatchError):
    """The child that checks the settings failed, or ended without an answer (killed, out of memory)."""

    def __init__(self, message: str, exit_code: int = PiDispatchError.exit_code) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def settled(settings: Any, properties: Sequence[str] = ()) -> Settled:
    """A pydantic-settings object as a `Settled`: its field values and the named properties, secrets as `Secret`."""
    names = [*type(settings).model_fields, *properties]
    return Settled({name: _handed(getattr(settings, name)) for name in names})


def _handed(value: object) -> object:
    reveal = getattr(value, "get_secret_value", None)
    return Secret(str(reveal())) if callable(reveal) else value


def checked_in_child(load: Callable[[], T]) -> T:
    """Run `load` (which imports the checking libraries, raises ConfigError, and answers with what can be unpickled
    without them: settings as `settled`) in a forked child, and return its answer here, where those libraries are
    never imported. A ConfigError raised in the child is raised here, with every problem it named. Call it before
    any thread starts."""
    for stream in (sys.stdout, sys.stderr):  # nothing buffered before the fork is written twice
        stream.flush()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child; coverage does not follow a fork that ends with os._exit
        _answer_and_leave(load, read_end, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    exit_code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    if not answer or exit_code != 0:
        raise HandoverFailed(
            f"the settings check ended without an answer (exit {exit_code}); it is tried again when the unit restarts"
        )
    kind, payload = pickle.loads(answer)  # noqa: S301 - written by this process's own child, a moment ago
    if kind == "refused":
        raise ConfigError(payload)
    if kind == "failed":
        message, status = payload
        raise HandoverFailed(message, status)
    return payload  # type: ignore[no-any-return]


def _answer_and_leave(load: Callable[[], object], read_end: int, write_end: int) -> None:
    """The child's whole life: check, write the answer, and leave without the parent's exit handlers."""
    status = 0
    try:
        os.close(read_end)
        try:
            answer: tuple[str, object] = ("loaded", load())
        except ConfigError as error:
            answer = ("refused", error.problems)
        except PiDispatchError as error:
            answer = ("failed", (str(error), int(error.exit_code)))
        with os.fdopen(write_end, "wb") as pipe:
            pickle.dump(answer, pipe)
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        sys.stderr.flush()
        os._exit(status)
