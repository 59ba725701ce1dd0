"""The review policy: which auto-labelled frames are accepted without a person.

A frame is **accepted** when every box of every thresholded head is at least as sure as its threshold
(`autolabel.accept` per head, `autolabel.accept_class` per class name, which wins over its head's) and every dense
head's mean per-pixel agreement reaches `autolabel.dense_accept`; otherwise it is **queued** for a person,
pre-filled with the auto-labels, and the reason names the least sure box. The policy judges boxes that exist;
what every model missed no threshold can see (docs/autolabel.md, limits), so a frame where a judged head (one the
label supervises and `accept` thresholds) found no box at all is queued too, unless `autolabel.accept_empty`: an
empty label says "no object here", which on real footage is more often "the models saw none" (found on a genuine
highway clip, where the frames the sim-trained models saw no car in were accepted as empty roads).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def threshold(cfg, head: str, cls: str) -> float | None:
    """The confidence a box of `head` and class `cls` needs (None: the head is not judged)."""
    if cls in cfg.accept_class:
        return float(cfg.accept_class[cls])
    return None if head not in cfg.accept else float(cfg.accept[head])


def decide(payload: Mapping[str, Any], cfg) -> tuple[bool, str]:
    """(accept, why) for one frame's auto-label payload under AutolabelConfig `cfg`."""
    worst: tuple[float, str] | None = None  # (margin below threshold, description) of the least sure box
    boxes = [("det2d", cam, b) for cam, c in payload.get("cameras", {}).items() for b in c.get("boxes2d") or []]
    boxes += [("det3d", "BEV", b) for b in payload.get("boxes3d") or []]
    for head, where, b in boxes:
        need = threshold(cfg, head, b["class"])
        if need is None:
            continue
        margin = float(b["confidence"]) - need
        if margin < 0 and (worst is None or margin < worst[0]):
            worst = (margin, f"{head} {b['class']} on {where} at confidence {b['confidence']:.3f} < {need:.3f}")
    for head, d in (payload.get("dense") or {}).get("heads", {}).items():
        margin = float(d["agreement"]) - cfg.dense_accept
        if margin < 0 and (worst is None or margin < worst[0]):
            worst = (margin, f"{head} agreement {d['agreement']:.3f} < {cfg.dense_accept:.3f}")
    if worst is not None:
        return False, f"below the accept threshold: {worst[1]}"
    judged = [h for h in payload.get("supervises", ("det2d",)) if h in cfg.accept]
    empty = [h for h in judged if not any(head == h for head, _, _ in boxes)]
    if empty and not cfg.accept_empty:
        return False, f"no {' or '.join(empty)} box found: a person checks what the models missed (autolabel.accept_empty)"
    return True, f"every box at or above its threshold ({len(boxes)} boxes)"
