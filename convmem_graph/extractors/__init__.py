"""Fact extractors and summarizers.

``HeuristicExtractor`` (the embedded default: deterministic zh/en rules, no network) and
``ExtractiveSummarizer`` (a summary from variables and fragments, no model), plus the
deterministic steps around any extractor: ``reconcile`` (candidates -> add/update/supersede/noop)
and ``infer_variables`` (fragments -> variable values, ``DEFAULT_VARIABLE_SPECS``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem_graph._lazy import lazy_exports

if TYPE_CHECKING:
    from convmem_graph.extractors.base import Extractor, Summarizer
    from convmem_graph.extractors.extractive import ExtractiveSummarizer
    from convmem_graph.extractors.heuristic import HeuristicExtractor
    from convmem_graph.extractors.reconcile import reconcile
    from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables

# Exported lazily: the store imports the light key and text helpers of this package, and must not
# compile the heuristic rules on the way (a call start never needs them).
_LAZY = {
    "DEFAULT_VARIABLE_SPECS": "convmem_graph.extractors.variables",
    "ExtractiveSummarizer": "convmem_graph.extractors.extractive",
    "Extractor": "convmem_graph.extractors.base",
    "HeuristicExtractor": "convmem_graph.extractors.heuristic",
    "Summarizer": "convmem_graph.extractors.base",
    "infer_variables": "convmem_graph.extractors.variables",
    "reconcile": "convmem_graph.extractors.reconcile",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_VARIABLE_SPECS",
    "ExtractiveSummarizer",
    "Extractor",
    "HeuristicExtractor",
    "Summarizer",
    "infer_variables",
    "reconcile",
]
