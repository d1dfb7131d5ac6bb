"""Fact extractors and summarizers.

``HeuristicExtractor`` (the embedded default: deterministic zh/en rules, no network) and
``ExtractiveSummarizer`` (a summary from variables and fragments, no model), plus the
deterministic steps around any extractor: ``reconcile`` (candidates -> add/update/supersede/noop)
and ``infer_variables`` (fragments -> variable values, ``DEFAULT_VARIABLE_SPECS``).
"""

from __future__ import annotations

from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.extractors.extractive import ExtractiveSummarizer
from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.extractors.reconcile import reconcile
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables

__all__ = [
    "DEFAULT_VARIABLE_SPECS",
    "ExtractiveSummarizer",
    "Extractor",
    "HeuristicExtractor",
    "Summarizer",
    "infer_variables",
    "reconcile",
]
