"""Idempotency keys: a retried request gets the run (and the answer) of its first attempt.

A request that creates a run may carry a client's key. `answer_once` runs in the caller's tenant
transaction, the one that also creates the run, so the key row and the run commit together or
not at all. Requests with the same key (tenant, user, key) are serialised by a transaction-level
advisory lock taken before the lookup: of several concurrent retries exactly one creates the run,
the others wait for its commit and then replay its answer. Only answers that created something are
stored; a request that failed may be retried under the same key.

Keys live `IDEMPOTENCY_TTL`; an expired key is treated as new. Each insert prunes a few expired
keys of its tenant (`_PRUNE_BATCH`, skipping rows another transaction holds), so the table stays
small without a background job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import delete, func, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.principal import Principal
from app.db.engine import acting_as
from app.db.models import IdempotencyKey

IDEMPOTENCY_TTL = timedelta(hours=24)
"""How long a key answers with its first answer; afterwards it is a new key."""

MAX_KEY_CHARS = 255
KEY_PATTERN = r"^[ -~]+$"
"""1–255 printable ASCII characters (the migration checks the same)."""

_PRUNE_BATCH = 100
_LOCK = text("SELECT pg_advisory_xact_lock(:lock_id)")


class IdempotencyKeyReusedError(Exception):
    """The key was already used, within its lifetime, for a different request."""

    def __init__(self, key: str) -> None:
        super().__init__(f"idempotency key {key!r} was already used for a different request")
        self.key = key


def request_hash(operation: str, body: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace) of the operation and its body.

    The operation (e.g. `runs.create`) keeps the same key on two endpoints from matching.
    """
    canonical = json.dumps(
        {"operation": operation, "body": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyedRequest:
    """A request sent with an idempotency key: the key and the hash of what was asked."""

    key: str
    request_hash: str

    @classmethod
    def of(cls, key: str, operation: str, body: Any) -> KeyedRequest:
        """The keyed request of `body` (JSON-able) sent to `operation`."""
        return cls(key=key, request_hash=request_hash(operation, body))


@dataclass(frozen=True, slots=True)
class Answer:
    """What a request that created a run answered (stored, then replayed as it was)."""

    run_id: UUID
    status_code: int
    body: dict[str, Any] | None = None
    """The JSON body; None for a streamed answer (a replay streams the run again)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The answer to send, and whether it is a replay of an earlier request's."""

    answer: Answer
    replayed: bool


def _lock_id(principal: Principal, key: str) -> int:
    """A signed 64-bit advisory lock id for (tenant, user, key); a collision only serialises two
    unrelated requests."""
    scoped = json.dumps(["idempotency", principal.tenant_id, principal.user_id, key])
    return int.from_bytes(hashlib.sha256(scoped.encode()).digest()[:8], "big", signed=True)


async def answer_once(
    s: AsyncSession,
    principal: Principal,
    request: KeyedRequest | None,
    create: Callable[[AsyncSession], Awaitable[Answer]],
) -> Outcome:
    """The first answer to `request`'s key, or `create(s)`'s (stored under the key), in `s`.

    `s` is the caller's tenant transaction; `create` writes the run in it. Without a key this is
    just `create(s)`. Raises IdempotencyKeyReusedError when the key's live answer was for another
    request.
    """
    if request is None:
        return Outcome(answer=await create(s), replayed=False)
    await s.execute(_LOCK, {"lock_id": _lock_id(principal, request.key)})
    stored = await s.scalar(
        select(IdempotencyKey).where(
            IdempotencyKey.tenant_id == principal.tenant_id,
            IdempotencyKey.user_id == principal.user_id,
            IdempotencyKey.key == request.key,
            IdempotencyKey.expires_at > func.now(),
        )
    )
    if stored is not None:
        if stored.request_hash != request.request_hash:
            raise IdempotencyKeyReusedError(request.key)
        answer = Answer(run_id=stored.run_id, status_code=stored.status_code, body=stored.response)
        return Outcome(answer=answer, replayed=True)
    answer = await create(s)
    # housekeeping of the whole tenant's keys: a member may see only their own (RLS)
    async with acting_as(s, principal.as_service(), then=principal):
        await _prune_expired(s, principal.tenant_id)
    await _store(s, principal, request, answer)
    return Outcome(answer=answer, replayed=False)


async def _store(
    s: AsyncSession, principal: Principal, request: KeyedRequest, answer: Answer
) -> None:
    values = {
        "request_hash": request.request_hash,
        "run_id": answer.run_id,
        "status_code": answer.status_code,
        "response": answer.body,
        "created_at": func.now(),
        "expires_at": func.now() + IDEMPOTENCY_TTL,
    }
    statement = insert(IdempotencyKey).values(
        tenant_id=principal.tenant_id, user_id=principal.user_id, key=request.key, **values
    )
    # An expired row of this key that pruning skipped is replaced; a live one cannot exist here
    # (the lookup found none while holding the key's lock).
    stored = await s.scalar(
        statement.on_conflict_do_update(
            index_elements=["tenant_id", "user_id", "key"],
            set_=values,
            where=IdempotencyKey.expires_at <= func.now(),
        ).returning(IdempotencyKey.run_id)
    )
    if stored is None:
        raise RuntimeError(f"idempotency key {request.key!r} is live although its lookup missed")


async def _prune_expired(s: AsyncSession, tenant_id: str) -> None:
    """Delete up to `_PRUNE_BATCH` expired keys of the tenant (rows others hold are skipped)."""
    expired = (
        select(IdempotencyKey.tenant_id, IdempotencyKey.user_id, IdempotencyKey.key)
        .where(IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.expires_at <= func.now())
        .limit(_PRUNE_BATCH)
        .with_for_update(skip_locked=True)
    )
    await s.execute(
        delete(IdempotencyKey).where(
            tuple_(IdempotencyKey.tenant_id, IdempotencyKey.user_id, IdempotencyKey.key).in_(
                expired
            )
        )
    )
