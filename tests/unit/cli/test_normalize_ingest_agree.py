"""Issue 10, finding 7: ``convmem normalize`` and ``convmem ingest`` accept the same shapes and find the
same messages (a JSON list of TRTC bodies gave 0 messages in normalize and 7 in ingest).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convmem_graph.cli import main

VENDORS = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "vendors"


def _shapes(tmp: Path) -> dict[str, Path]:
    call = json.loads((VENDORS / "trtc_callbacks_one_call.json").read_text(encoding="utf-8"))
    bodies = [json.loads(d["raw_body"]) for d in call["deliveries"]]
    out = {
        "trtc wrapper": VENDORS / "trtc_callbacks_one_call.json",
        "tencent_im": VENDORS / "tencent_im_roammsg_exchange.json",
        "agora 103": VENDORS / "agora_webhook_103_agent_history.json",
        "agora history": VENDORS / "agora_history_response.json",
    }
    shaped = {
        "trtc list of bodies": bodies,
        "trtc list of raw deliveries": call["deliveries"],
        "openai list": [
            {"role": "user", "content": "I live in Lyon."},
            {"role": "assistant", "content": "Nice!"},
        ],
    }
    for name, doc in shaped.items():
        path = tmp / (name.replace(" ", "_") + ".json")
        path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        out[name] = path
    lines = tmp / "bodies.jsonl"  # one body per line: read as one batch by both
    lines.write_text("\n".join(json.dumps(b, ensure_ascii=False) for b in bodies) + "\n", encoding="utf-8")
    out["trtc bodies as json lines"] = lines
    return out


@pytest.mark.parametrize(
    "shape",
    [
        "trtc wrapper",
        "trtc list of bodies",
        "trtc list of raw deliveries",
        "trtc bodies as json lines",
        "tencent_im",
        "agora 103",
        "agora history",
        "openai list",
    ],
)
def test_normalize_and_ingest_find_the_same_messages(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not VENDORS.is_dir():
        pytest.skip(f"vendor fixtures not found at {VENDORS}")
    path = _shapes(tmp_path)[shape]
    bots = ["--bot-id", "ai_xiaoyu_bot"]
    assert main(["normalize", str(path), *bots, "--json"]) == 0
    normalized = json.loads(capsys.readouterr().out)["messages"]
    assert main(["ingest", str(path), "--memory", "m", *bots, "--json", "--db", str(tmp_path / "n.db")]) == 0
    ingested = json.loads(capsys.readouterr().out)["new_messages"]
    assert normalized and len(normalized) == ingested


def test_a_wholly_rejected_file_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json", encoding="utf-8")
    db = tmp_path / "w.db"
    assert main(["ingest", str(bad), "--memory", "m", "--db", str(db)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert not db.exists()  # no memory row, snapshot or checkpoints: not even the file
