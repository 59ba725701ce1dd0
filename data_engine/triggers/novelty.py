"""Novelty: frames whose embedding is far from every other frame of the pool (nothing like them seen)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data_engine.triggers import Trigger


@dataclass(frozen=True)
class Novelty(Trigger):
    def values(self, table) -> np.ndarray:
        """1 - cosine similarity to the nearest other frame of another clip (NaN without embeddings)."""
        emb = table.get("embedding")
        if emb is None or len(emb) < 2:
            return np.full(len(table["frame_id"]), np.nan)
        sim = emb @ emb.T
        clip = np.asarray(table["clip"])
        sim[clip[:, None] == clip[None, :]] = -np.inf  # a clip's own frames are not "seen before"
        best = sim.max(1)
        return np.where(np.isfinite(best), 1.0 - best, np.nan)


TRIGGER = Novelty(name="novelty", version=1, signal="embedding", threshold=0.05, quota=50,
                  description="novel scenes: embedding distance (1 - cosine) to the nearest frame of any other clip above threshold")
