"""Random facts and texts for the tests of queries matching nothing (kept blocks, kept payloads).

``tests/unit/payloads/test_matchless_block.py`` and ``test_kept_payloads.py`` build snapshots from
these: facts of a few English words and Chinese bigrams, a long fact whose two pieces hold the
bigram ``苏州`` only when joined, and a summary that alone holds ``harbour``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from convmem_graph.models import Fragment, Summary

NOW = 1_800_000_000_000
WORDS = ["mango", "tea", "running", "cats", "user", "likes"]
HANZI = ["成都", "朋友", "芒果", "喜欢", "火锅"]


def random_text(rng: random.Random) -> str:
    """One to eight of :data:`WORDS` and :data:`HANZI`, with an English or Chinese full stop."""
    return " ".join(rng.choice(WORDS + HANZI) for _ in range(rng.randint(1, 8))) + rng.choice([".", "。"])


def random_facts(rng: random.Random, counts: Sequence[int]) -> list[Fragment]:
    """As many random facts as ``rng`` picks from ``counts``, a long fact in two pieces, shuffled.

    The facts' categories, expiry times (none, at or around :data:`NOW`) and update times are drawn
    too. In the long fact "苏" ends one piece and "州" starts the next, so only the joined text
    holds the bigram "苏州".
    """
    fragments = [
        Fragment(
            id=f"f{k}",
            memory_id="m",
            content=random_text(rng),
            key=f"k{k}",
            category=rng.choice(["other", "profile", "plan"]),
            expires_at=rng.choice([None, None, NOW, NOW + 5, NOW - 1]),
            updated_at=rng.randint(0, 20),
        )
        for k in range(rng.choice(counts))
    ]
    fragments.append(Fragment(id="p0", memory_id="m", content="我们去了苏", key="trip", part_of="p0", part=0))
    fragments.append(Fragment(id="p1", memory_id="m", content="州看园林。", key="trip", part_of="p0", part=1))
    rng.shuffle(fragments)
    return fragments


def harbour_summary() -> Summary:
    """A model summary holding ``harbour`` and ``喝茶``, which no random fact holds."""
    return Summary(text="他喜欢喝茶。We walked by the harbour.", tokens=12, covers_until_ms=NOW)
