"""Language and text helpers below every layer that reads words: sources, store, payloads, extractors.

One low package owns what "a word", "a CJK character", "a sentence" and "a key" mean, so the store
and the payloads never import the extractors for them:

- :mod:`convmem_graph.text.scripts`: scripts (CJK or not), cleaning, clause splitting, key norms;
- :mod:`convmem_graph.text.sentences`: folding, joining and splitting sentences (sources, store);
- :mod:`convmem_graph.text.terms`: search terms and stems (episodic index, block ranker);
- :mod:`convmem_graph.text.keys`: the fragment key scheme (extractors, reconciliation, store);
- :mod:`convmem_graph.text.timeexpr`: relative and absolute time expressions (extractors, payloads).

Import the submodule you need; this package imports none of them, so it stays light.
"""

from __future__ import annotations

__all__: list[str] = []
