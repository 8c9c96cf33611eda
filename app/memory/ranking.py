"""Ranking of hybrid-search candidates: RRF, importance and recency weights, then MMR.

For a candidate with 1-based rank `r_v` in the vector list and `r_t` in the full-text list:

    rrf        = 1/(k + r_v) + 1/(k + r_t)            (a missing list contributes 0; k = 60)
    importance = 1 - w_i + w_i * importance            (importance in 0..1; w_i = 0.5)
    recency    = 1 - w_r + w_r * 0.5 ** (age / h)      (age since last update, h = 30 days; w_r = 0.3)
    score      = rrf * importance * recency

Maximal marginal relevance then picks results one at a time, maximising
`lambda * relevance - (1 - lambda) * max cosine(candidate, already picked)`, where relevance is
the score min-max scaled to 0..1 over the candidates (lambda = 0.8), so a near-duplicate of a
picked result sinks below the next distinct one of similar relevance. Candidates without a vector
of the active embedder have no similarity to anything (no penalty).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from app.config import Settings

MMR_POOL_FACTOR = 4


@dataclass(frozen=True, slots=True)
class Weights:
    """The ranking knobs (see the module docstring)."""

    rrf_k: int = 60
    importance_weight: float = 0.5
    recency_weight: float = 0.3
    half_life_days: float = 30.0
    mmr_lambda: float = 0.8

    @classmethod
    def from_settings(cls, settings: Settings) -> Weights:
        """The weights configured by the MEMORY_* settings."""
        return cls(
            rrf_k=settings.memory_rrf_k,
            importance_weight=settings.memory_importance_weight,
            recency_weight=settings.memory_recency_weight,
            half_life_days=settings.memory_recency_half_life_days,
            mmr_lambda=settings.memory_mmr_lambda,
        )


@dataclass(frozen=True, slots=True)
class Candidate:
    """An entry found by the vector side, the text side, or both."""

    id: UUID
    vector_rank: int | None
    vector_similarity: float | None
    text_rank: int | None
    text_score: float | None
    importance: float
    age_days: float
    embedding: list[float] | None


@dataclass(frozen=True, slots=True)
class Ranked:
    """A picked result with every component of its rank."""

    candidate: Candidate
    rrf: float
    importance_factor: float
    recency_factor: float
    score: float
    mmr_position: int
    """1-based position in the MMR order (= the result's position)."""
    mmr_max_similarity: float | None
    """Highest cosine similarity to a result picked before it (None: first, or no vector)."""


def rrf(ranks: Sequence[int | None], k: int) -> float:
    """Reciprocal-rank fusion of 1-based ranks (None: not in that list)."""
    return sum(1.0 / (k + r) for r in ranks if r is not None)


def importance_factor(importance: float, weight: float) -> float:
    """`1 - w + w * importance`: 1 at importance 1, `1 - w` at importance 0."""
    return 1.0 - weight + weight * min(1.0, max(0.0, importance))


def recency_factor(age_days: float, half_life_days: float, weight: float) -> float:
    """`1 - w + w * 0.5 ** (age / half_life)`: 1 when new, halfway down after one half-life."""
    decay: float = 0.5 ** (max(0.0, age_days) / half_life_days)
    return 1.0 - weight + weight * decay


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two L2-normalised vectors (their dot product)."""
    return float(sum(map(operator.mul, a, b)))


@dataclass(slots=True)
class _Scored:
    candidate: Candidate
    rrf: float
    importance_factor: float
    recency_factor: float
    score: float


def _score(candidate: Candidate, weights: Weights) -> _Scored:
    fused = rrf((candidate.vector_rank, candidate.text_rank), weights.rrf_k)
    imp = importance_factor(candidate.importance, weights.importance_weight)
    rec = recency_factor(candidate.age_days, weights.half_life_days, weights.recency_weight)
    return _Scored(candidate, fused, imp, rec, fused * imp * rec)


def rank(candidates: Sequence[Candidate], weights: Weights, limit: int) -> list[Ranked]:
    """Score every candidate and pick up to `limit` of them by MMR.

    MMR considers the best `MMR_POOL_FACTOR * limit` candidates by score (those further down
    would not be picked anyway), keeping the pure-Python similarity work small.
    """
    scored = sorted(
        (_score(c, weights) for c in candidates), key=lambda s: (-s.score, str(s.candidate.id))
    )
    pool = scored[: max(limit * MMR_POOL_FACTOR, limit)]
    if not pool or limit <= 0:
        return []
    top, bottom = scored[0].score, scored[-1].score  # scale over all candidates, not the pool
    spread = top - bottom
    relevance = [(s.score - bottom) / spread if spread > 0 else 1.0 for s in pool]
    lam = weights.mmr_lambda
    max_sim: list[float | None] = [None] * len(pool)  # to the results picked so far
    picked: list[Ranked] = []
    while pool and len(picked) < limit:
        values = [
            lam * rel - (1.0 - lam) * max(0.0, sim or 0.0)
            for rel, sim in zip(relevance, max_sim, strict=True)
        ]
        best = max(range(len(pool)), key=values.__getitem__)  # first of equals: higher score
        chosen, chosen_sim = pool.pop(best), max_sim.pop(best)
        relevance.pop(best)
        picked.append(
            Ranked(
                candidate=chosen.candidate,
                rrf=chosen.rrf,
                importance_factor=chosen.importance_factor,
                recency_factor=chosen.recency_factor,
                score=chosen.score,
                mmr_position=len(picked) + 1,
                mmr_max_similarity=chosen_sim,
            )
        )
        vector = chosen.candidate.embedding
        if vector is None:
            continue
        for i, s in enumerate(pool):
            if s.candidate.embedding is not None:
                sim = cosine(vector, s.candidate.embedding)
                current = max_sim[i]
                max_sim[i] = sim if current is None else max(current, sim)
    return picked
