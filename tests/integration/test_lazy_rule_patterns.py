"""The extractor's rule patterns compiled on first use: none at import, same facts as compiled up front.

Each probe runs in a fresh process, so neither inherits the other's compiles: importing the
heuristic extractor compiles none of its ``lazy_compile`` patterns, English messages leave the
Chinese families (``_families._ZH_*``, ``_rules_zh``) uncompiled, and the facts found are the same
whether every pattern was compiled before the first message or each on its first use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, sys
from convmem_graph.text._lazy_re import LazyPattern

def found(key, value, depth=0):
    if isinstance(value, LazyPattern):
        yield key, value
    elif depth < 3 and isinstance(value, (tuple, list, frozenset, set)):
        for i, item in enumerate(value):
            yield from found(f"{key}[{i}]", item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for k, item in value.items():
            yield from found(f"{key}[{k!r}]", item, depth + 1)

def lazies():
    seen = set()
    for name, mod in sorted(sys.modules.items()):
        if name.startswith("convmem_graph"):
            for key, value in sorted(vars(mod).items()):
                for k, v in found(f"{name}.{key}", value):
                    if id(v) not in seen:
                        seen.add(id(v))
                        yield k, v

from convmem_graph.extractors.heuristic import HeuristicExtractor
from convmem_graph.models import Message

texts = json.loads(sys.argv[2])
if sys.argv[1] == "eager":
    import convmem_graph.extractors._rules_zh  # the Chinese sentence rules, imported on first use
# Held before any use: a compile rebinds the module's names to the compiled pattern.
held = list(lazies())
report = {"at_import": sorted(k for k, v in held if v.compiled), "patterns": len(held)}
if sys.argv[1] == "eager":
    for _, value in held:
        value.compile()
    report["rebound"] = all(
        not isinstance(vars(sys.modules[k.rsplit(".", 1)[0]])[k.rsplit(".", 1)[1]], LazyPattern)
        for k, _ in held
        if "[" not in k
    )
facts = []
for i, text in enumerate(texts):
    msg = Message(id=f"m{i}", role="user", content=text, channel="im", source="message",
                  timestamp_ms=1_767_268_822_030 + i * 60_000)
    out = HeuristicExtractor().extract([msg], [], [], now_ms=0).candidates
    facts.append([c.model_dump(mode="json") for c in out])
    if i == int(sys.argv[3]) - 1:
        report["after_english"] = sorted(k for k, v in held if v.compiled)
        report["zh_rules_imported"] = "convmem_graph.extractors._rules_zh" in sys.modules
report["facts"] = facts
report["after_all"] = sorted(k for k, v in held if v.compiled)
print(json.dumps(report, ensure_ascii=False))
"""

_ENGLISH = [
    "I'm allergic to peanuts and I play the cello.",
    "My cousin Lena lives in Oslo.",
    "I've been gluten-free since 2020.",
    "We adopted two kittens, Miso and Tofu, last month.",
    "I quit smoking last year, and now I go running every morning.",
    "I'm planning to visit Kyoto next month.",
    "My name is Sam and I work as a nurse at St. Mary's.",
    "I'm not allergic to cats, but my brother is.",
    "I used to drink coffee every day.",
]
_CHINESE = [
    "我戒烟了",
    "我对青霉素过敏",
    "我表妹住在厦门。",
    "我会拉二胡，平时也打乒乓球",
    "已经两年没喝奶茶了",
    "我下个月要去成都出差，顺便看看我妈妈",
    "我叫小雨，今年二十五岁，在杭州做程序员",
    "I love hiking, 但是我不吃辣",
]


def _probe(mode: str, texts: list[str], english: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, json.dumps(texts), str(english)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    report: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return report


def test_import_compiles_no_rule_pattern_and_english_leaves_the_chinese_families_uncompiled() -> None:
    report = _probe("lazy", _ENGLISH + _CHINESE, len(_ENGLISH))
    assert isinstance(report["patterns"], int) and report["patterns"] > 150
    assert report["at_import"] == []
    after_english = report["after_english"]
    assert isinstance(after_english, list) and after_english  # the English rules ran
    chinese_families = [k for k in after_english if k.startswith("convmem_graph.extractors._families._ZH_")]
    assert chinese_families == []
    assert report["zh_rules_imported"] is False
    after_all = report["after_all"]
    assert isinstance(after_all, list)
    assert any(k.startswith("convmem_graph.extractors._families._ZH_") for k in after_all)


def test_facts_are_the_same_with_every_pattern_compiled_up_front() -> None:
    texts = _ENGLISH + _CHINESE
    lazy = _probe("lazy", texts, len(_ENGLISH))
    eager = _probe("eager", texts, len(_ENGLISH))
    assert eager["at_import"] == []
    assert isinstance(eager["after_all"], list) and len(eager["after_all"]) == eager["patterns"]
    assert eager["rebound"] is True
    assert lazy["facts"] == eager["facts"]
    facts = lazy["facts"]
    assert isinstance(facts, list) and sum(len(f) for f in facts) >= len(texts)
