"""Membership in an ascending array of ids: one binary search a needle (``np.isin`` sorts both
sides, which costs more for the hundred candidates of a recall). Shared by recall's steps and the
full-text postings."""

from __future__ import annotations

import numpy as np


def in_sorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Which of ``needles`` the ascending ``haystack`` holds."""
    if not len(haystack):
        return np.zeros(len(needles), dtype=bool)
    found: np.ndarray = haystack[np.minimum(np.searchsorted(haystack, needles), len(haystack) - 1)] == needles
    return found
