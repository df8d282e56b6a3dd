"""The name charsets the fleet agrees on: worker names, profile names, image references and job-id filenames.

One source of truth for each pattern. Every pattern is used with `fullmatch`, because Python's `$`
also matches before a trailing newline and JavaScript's does not.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from pi_dispatch.core.jscompat import js_string, nullish

WORKER_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PROFILE_NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]+")
# A worker name may not end so: the log reaper deletes such files in PI_LOGS_DIR, where names become files.
RESERVED_TAIL_RE: Final = re.compile(r"\.(?:[Jj][Ss][Oo][Nn]|[Ll][Oo][Gg])\Z")
# A container image reference as Docker takes it (name, tag, digest), 255 characters at most.
IMAGE_REFERENCE_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
FALLBACK_WORKER_NAME: Final = "worker"
PLAIN_STEM_MAX: Final = 100
UNKNOWN_JOB: Final = "unknown-job"
# Every inventory host variable a worker reads starts so: the role's name, as Ansible's convention wants.
HOST_VAR_PREFIX: Final = "pi_dispatch_worker_"

_JOB_ID_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def is_profile_name(value: object) -> bool:
    """A secret or wait profile name: letters, digits, dot, dash and underscore, nothing else."""
    return isinstance(value, str) and PROFILE_NAME_RE.fullmatch(value) is not None


def is_worker_name(value: object) -> bool:
    """Whether value passes the worker-name pattern (the reserved tail is checked separately)."""
    return isinstance(value, str) and WORKER_NAME_RE.fullmatch(value) is not None


def worker_name_problem(value: str) -> str | None:
    """Why a DECLARED worker name is refused, or None when it is legal as written."""
    if WORKER_NAME_RE.fullmatch(value) is None:
        return (
            "must start with a letter or digit and use only letters, digits, dot, dash and underscore, "
            "64 characters at most"
        )
    if RESERVED_TAIL_RE.search(value):
        return "may not end in .json or .log (the log reaper deletes such files in PI_LOGS_DIR)"
    return None


def sanitize_worker_name(raw: object) -> str:
    """The defaulted worker name for a host that declared none, derived from its hostname."""
    text = js_string("" if nullish(raw) else raw).lower()
    text = re.sub(r"[^a-z0-9._-]", "-", text)
    text = re.sub(r"-{2,}", "-", text)
    text = re.sub(r"^[-.]+|[-.]+\Z", "", text)
    text = re.sub(r"[-.]+\Z", "", text[:64])
    if text == "" or WORKER_NAME_RE.fullmatch(text) is None:
        return FALLBACK_WORKER_NAME
    tail = RESERVED_TAIL_RE.search(text)
    if tail is not None:
        text = text[: tail.start()] + "-" + text[tail.start() + 1 :]
    return text


def record_stem(job_id: object) -> str:
    """The file stem (and mirror member) of a job's run record: unique per job id, at most 117 characters.

    A plain id (one the sanitizer leaves as it is, 100 characters at most) is its own stem, as the reference names
    it, so a Node reader finds it. Any other id is its sanitized form cut to 100 characters, `~`, and 16 hex of the
    SHA-256 of the exact id: ids that sanitize alike (`gh-a/b`, `gh-a_b`) or share a long prefix never collide,
    and a plain stem never contains `~`.
    """
    sanitized = sanitize_job_id(job_id)
    exact = UNKNOWN_JOB if nullish(job_id) else js_string(job_id)
    if sanitized == exact and len(exact) <= PLAIN_STEM_MAX:
        return sanitized
    digest = hashlib.sha256(exact.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{sanitized[:PLAIN_STEM_MAX]}~{digest}"


def worker_name_of(declared: str | None, hostname: str) -> str:
    """The name a worker publishes under: the declared one, else one derived from its hostname."""
    return declared or sanitize_worker_name(hostname)


def sanitize_job_id(job_id: object) -> str:
    """A job id as one legal filename segment; like the reference, one `_` per UTF-16 code unit."""
    if nullish(job_id):
        return UNKNOWN_JOB
    text = js_string(job_id)
    if text == "":
        return UNKNOWN_JOB
    out: list[str] = []
    for char in text:
        if char in _JOB_ID_SAFE:
            out.append(char)
        else:
            out.append("__" if ord(char) > 0xFFFF else "_")
    return "".join(out)
