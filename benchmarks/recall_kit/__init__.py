"""Helpers of ``benchmarks/recall.py``: answer-in-context metrics, BM25, the LoCoMo and MADial runs.

Each module has one job: ``text`` (normalization and the containment checks), ``bm25`` (ranking and
packing to a token budget), ``locomo`` and ``madial`` (loading a dataset and building each method's
context), ``judge`` (the optional model path), ``report`` (tables).
"""
