"""Ranking: RRF, importance and recency factors, and MMR diversification."""

from __future__ import annotations

import math
import uuid

import pytest

from app.memory.embedders import l2_normalize
from app.memory.ranking import (
    Candidate,
    Weights,
    importance_factor,
    rank,
    recency_factor,
    rrf,
)


def cand(
    name: str,
    *,
    v: int | None = None,
    t: int | None = None,
    importance: float = 0.5,
    age: float = 0.0,
    vec: list[float] | None = None,
) -> Candidate:
    return Candidate(
        id=uuid.uuid5(uuid.NAMESPACE_DNS, name),
        vector_rank=v,
        vector_similarity=None,
        text_rank=t,
        text_score=None,
        importance=importance,
        age_days=age,
        embedding=l2_normalize(vec) if vec else None,
    )


def order(results: list, names: list[str]) -> list[str]:  # type: ignore[type-arg]
    by_id = {uuid.uuid5(uuid.NAMESPACE_DNS, n): n for n in names}
    return [by_id[r.candidate.id] for r in results]


def test_rrf_sums_reciprocal_ranks() -> None:
    assert rrf([1, 1], 60) == pytest.approx(2 / 61)
    assert rrf([None, 3], 60) == pytest.approx(1 / 63)
    assert rrf([None, None], 60) == 0


def test_importance_and_recency_factors() -> None:
    assert importance_factor(1.0, 0.5) == 1.0
    assert importance_factor(0.0, 0.5) == 0.5
    assert importance_factor(0.5, 0.0) == 1.0
    assert recency_factor(0, 30, 0.3) == 1.0
    assert recency_factor(30, 30, 0.3) == pytest.approx(0.85)  # one half-life: halfway down
    assert recency_factor(math.inf, 30, 0.3) == pytest.approx(0.7)


def test_both_lists_beat_one() -> None:
    names = ["both", "vector-only", "text-only"]
    results = rank(
        [cand("vector-only", v=1), cand("text-only", t=1), cand("both", v=2, t=2)],
        Weights(mmr_lambda=1.0),
        3,
    )
    assert order(results, names)[0] == "both"
    assert results[0].rrf == pytest.approx(2 / 62)


def test_importance_and_recency_reorder_equals() -> None:
    names = ["a", "b"]
    w = Weights(mmr_lambda=1.0)
    a, b = cand("a", v=1, t=2, importance=0.2), cand("b", v=2, t=1, importance=0.9)
    assert order(rank([a, b], w, 2), names) == ["b", "a"]
    old_b = cand("b", v=2, t=1, importance=0.5, age=365)
    assert order(rank([cand("a", v=1, t=2), old_b], w, 2), names) == ["a", "b"]


def test_mmr_demotes_near_duplicates() -> None:
    names = ["a", "a-copy", "b"]
    filler = [cand(f"filler-{i}", v=i, vec=[0.0, 0.0, 1.0]) for i in range(4, 30)]
    candidates = [
        cand("a", v=1, t=1, vec=[1.0, 0.0, 0.0]),
        cand("a-copy", v=2, t=2, vec=[0.99, 0.05, 0.0]),
        cand("b", v=3, t=3, vec=[0.3, 0.95, 0.0]),
        *filler,
    ]
    assert order(rank(candidates, Weights(mmr_lambda=1.0), 2), names) == ["a", "a-copy"]
    diverse = rank(candidates, Weights(mmr_lambda=0.8), 3)
    assert order(diverse, names) == ["a", "b", "a-copy"]
    assert [r.mmr_position for r in diverse] == [1, 2, 3]
    assert diverse[0].mmr_max_similarity is None
    assert diverse[2].mmr_max_similarity == pytest.approx(0.9987, abs=1e-3)


def test_candidates_without_vectors_are_never_penalised() -> None:
    names = ["a", "text-only"]
    candidates = [cand("a", v=1, t=1, vec=[1.0, 0.0]), cand("text-only", t=2)]
    results = rank(candidates, Weights(), 2)
    assert order(results, names) == ["a", "text-only"]
    assert results[1].mmr_max_similarity is None


def test_limit_and_empty() -> None:
    assert rank([], Weights(), 5) == []
    many = [cand(str(i), v=i) for i in range(1, 30)]
    assert len(rank(many, Weights(), 5)) == 5
