"""Novelty detection of error-looking events: has this message's template been seen before?

``NoveltyDetector`` wraps drain3's ``TemplateMiner`` (in memory; persistence is our own
JSON state file, never drain3's jsonpickle snapshots, which can run code on load).
Messages are pre-masked with :func:`service.parse.masking.mask`, so drain3 clusters
templates rather than raw strings; the mined template is returned with each observation.

A message is *novel* when drain3 created a new cluster for it. Memory is bounded: at most
``max_clusters`` templates are kept (least-recently-used ones are evicted, so a template
evicted long ago can be reported as novel once more). The service saves the templates with
the streams' state (:attr:`NoveltyDetector.changed` says a new one appeared since the last
save) and gives them back at start (:meth:`NoveltyDetector.restore`).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from drain3 import TemplateMiner
from drain3.template_miner_config import TemplateMinerConfig

from service.incidents.snapshots import NoveltySnapshot
from service.parse.masking import mask

__all__ = ["NoveltyDetector"]

_STATE_VERSION = 1


class NoveltyDetector:
    """Streaming template miner: ``observe(text) -> (template, novel)``.

    ``max_clusters`` bounds memory; ``similarity`` is drain3's ``sim_th`` (share of tokens a
    message must have in common with a template to join it); ``max_chars`` truncates very
    long events before mining; ``state_path``, when given, is loaded if it exists and
    written by :meth:`save`.
    """

    def __init__(
        self,
        max_clusters: int = 2000,
        similarity: float = 0.5,
        depth: int = 4,
        max_chars: int = 2000,
        state_path: Path | str | None = None,
    ) -> None:
        if max_clusters < 1:
            raise ValueError("max_clusters must be >= 1")
        self.max_clusters = max_clusters
        self.similarity = similarity
        self.depth = depth
        self.max_chars = max_chars
        self.state_path = Path(state_path) if state_path is not None else None
        self._lock = threading.Lock()
        self._miner = self._new_miner()
        self.changed = False  # a template appeared since the state was last saved
        if self.state_path is not None and self.state_path.exists():
            self.load(self.state_path)

    def _new_miner(self) -> TemplateMiner:
        cfg = TemplateMinerConfig()  # explicit config: never read a drain3.ini from the cwd
        cfg.drain_max_clusters = self.max_clusters
        cfg.drain_sim_th = self.similarity
        cfg.drain_depth = self.depth
        cfg.masking_instructions = []
        cfg.parametrize_numeric_tokens = True
        cfg.profiling_enabled = False
        return TemplateMiner(persistence_handler=None, config=cfg)

    @property
    def cluster_count(self) -> int:
        return len(self._miner.drain.id_to_cluster)

    def template_of(self, text: str) -> str:
        """The masked, whitespace-normalised form of ``text`` (no mining, no state change)."""
        return " ".join(mask(text)[: self.max_chars].split())

    def observe(self, text: str) -> tuple[str, bool]:
        """Mine ``text``; return its cluster template and whether the cluster is new."""
        masked = self.template_of(text)
        if not masked:
            return "", False
        with self._lock:
            result = self._miner.add_log_message(masked)
        novel = result["change_type"] == "cluster_created"
        if novel:
            self.changed = True
        return result["template_mined"], novel

    def templates(self) -> list[tuple[str, int]]:
        """Known templates with their sizes, most frequent first."""
        clusters = list(self._miner.drain.id_to_cluster.values())
        clusters.sort(key=lambda c: (-c.size, c.cluster_id))
        return [(c.get_template(), c.size) for c in clusters]

    # --- persistence (plain JSON) ---------------------------------------------------------

    def to_dict(self) -> NoveltySnapshot:
        clusters = sorted(self._miner.drain.id_to_cluster.values(), key=lambda c: c.cluster_id)
        return {
            "version": _STATE_VERSION,
            "max_clusters": self.max_clusters,
            "similarity": self.similarity,
            "depth": self.depth,
            "clusters": [{"template": c.get_template(), "size": c.size} for c in clusters],
        }

    def save(self, path: Path | str | None = None) -> Path:
        """Write the state as JSON (atomically: temp file + rename)."""
        target = Path(path) if path is not None else self.state_path
        if target is None:
            raise ValueError("no state path given")
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            data = self.to_dict()
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, target)
        return target

    def load(self, path: Path | str) -> None:
        """Replace the state with the one in ``path`` (JSON written by :meth:`save`)."""
        try:
            self.restore(json.loads(Path(path).read_text(encoding="utf-8")))
        except ValueError as exc:
            raise ValueError(f"{exc} in {path}") from None

    def restore(self, data: Any) -> None:
        """Replace the state with ``data`` (a :meth:`to_dict`)."""
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            raise ValueError("unsupported novelty state")
        clusters = data.get("clusters", [])
        if not isinstance(clusters, list):
            raise ValueError("bad novelty state")
        miner = self._new_miner()
        for entry in clusters[-self.max_clusters :]:
            template = str(entry["template"])
            size = int(entry.get("size", 1))
            result = miner.add_log_message(template)
            cluster = miner.drain.id_to_cluster.get(result["cluster_id"])
            if cluster is not None and result["change_type"] == "cluster_created":
                cluster.size = max(1, size)
        with self._lock:
            self._miner = miner
