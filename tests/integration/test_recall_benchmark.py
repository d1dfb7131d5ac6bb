"""The model path of ``benchmarks/recall.py`` (answer + LLM judge, LoCoMo "J"), replayed from a cassette.

A small synthetic conversation in the LoCoMo schema (``tests/fixtures/recall_locomo_mini.json``,
written for this test) goes through the whole benchmark command line with ``--model``. The cassette
``cassettes/test_recall_benchmark/locomo_mini_judge.yaml`` was recorded against the rule-based local
server of ``tests/fakes/openai_qa_server.py``. By default (``--record-mode=none``) every request is
answered from it; the server still runs and must receive nothing, which proves vcrpy intercepted the
client, and a request missing from the cassette fails instead of reaching the network. Re-record after
changing the prompts or the fixture::

    python -m pytest tests/integration/test_recall_benchmark.py --record-mode=rewrite

Requests match on method, path and JSON body, except the text inside ``<user_memory>...</user_memory>``:
that is convmem's memory block, which changes whenever the library's ranking does, while what this
test checks (prompts, call order, parsing, scoring) does not. The other methods' contexts are matched
exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import vcr as vcrpy
from vcr.errors import CannotOverwriteExistingCassetteException
from vcr.request import Request as VcrRequest

from benchmarks import recall
from benchmarks.recall_kit.judge import ANSWER_SYSTEM, JUDGE_SYSTEM, Judge
from convmem_graph.extractors.chat_models import make_chat_model
from tests.fakes.openai_qa_server import FakeQAServer

pytestmark = pytest.mark.enable_socket  # the fake server listens on loopback

HERE = Path(__file__).parent
CASSETTES = HERE / "cassettes" / "test_recall_benchmark"
CASSETTE = CASSETTES / "locomo_mini_judge.yaml"
FIXTURE = HERE.parent / "fixtures" / "recall_locomo_mini.json"
LABELS = ["convmem@40", "convmem@400", "recent@40", "recent@400", "bm25@40", "bm25@400", "full"]
_BLOCK = re.compile(r"<user_memory>.*?</user_memory>", re.DOTALL)


def _masked(request: VcrRequest) -> Any:
    body = request.body.decode("utf-8") if isinstance(request.body, bytes) else (request.body or "")
    data = json.loads(body)
    for message in data.get("messages", []):
        if isinstance(message.get("content"), str):
            message["content"] = _BLOCK.sub("<user_memory/>", message["content"])
    return data


def _body_without_memory_block(r1: VcrRequest, r2: VcrRequest) -> None:
    assert _masked(r1) == _masked(r2)


def _scrub_request(request: VcrRequest) -> VcrRequest:
    # One fixed address (the server's port changes per recording) and no header but the content type.
    request.uri = re.sub(r"^http://127\.0\.0\.1:\d+/", "http://127.0.0.1:8000/", request.uri)
    request.headers = {k: v for k, v in request.headers.items() if k.lower() == "content-type"}
    return request


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    for name in ("Date", "date", "Server", "server"):
        response["headers"].pop(name, None)
    return response


def _vcr(record_mode: str) -> vcrpy.VCR:
    v = vcrpy.VCR(
        record_mode=record_mode,
        match_on=["method", "path", "body_without_memory_block"],
        before_record_request=_scrub_request,
        before_record_response=_scrub_response,
        decode_compressed_response=True,
    )
    v.register_matcher("body_without_memory_block", _body_without_memory_block)
    return v


@pytest.fixture
def record_mode(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--record-mode") or "none")


@pytest.fixture
def qa_server(record_mode: str) -> Iterator[FakeQAServer]:
    with FakeQAServer() as server:
        yield server
        if record_mode == "none":
            assert server.requests == [], "a request escaped the cassette"


def _run(args: list[str], record_mode: str, cassette: Path) -> Any:
    if record_mode == "rewrite":  # pytest-recording's mode: record the cassette anew
        cassette.unlink(missing_ok=True)
        record_mode = "all"
    with _vcr(record_mode).use_cassette(str(cassette)) as recorded:
        code = recall.main(args)
    return code, recorded


def test_model_path_answers_and_judges_every_context(
    record_mode: str,
    qa_server: FakeQAServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", qa_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = tmp_path / "report.json"
    args = ["--locomo", str(FIXTURE), "--budgets", "40,400", "--model", "fake-model", "--quiet"]
    args += ["--workdir", str(tmp_path / "db"), "--json", str(out)]
    code, cassette = _run(args, record_mode, CASSETTE)
    assert code == 0
    printed = capsys.readouterr().out
    assert "LoCoMo LLM-judged accuracy J" in printed

    # 8 questions of categories 1-4 (the category-5 one is skipped) x 7 contexts x (answer + judge).
    bodies = [json.loads(r.body) for r in cassette.requests]
    assert len(bodies) == 8 * 7 * 2
    assert cassette.all_played or record_mode != "none"
    assert {b["model"] for b in bodies} == {"fake-model"}
    assert {b["temperature"] for b in bodies} == {0.0}
    answers, judges = bodies[0::2], bodies[1::2]
    assert {b["messages"][0]["content"] for b in answers} == {ANSWER_SYSTEM}
    assert {b["messages"][0]["content"] for b in judges} == {JUDGE_SYSTEM}
    full_prompt = answers[6]["messages"][1]["content"]  # question 1, method "full"
    assert "[3 March 2024] Maya: Hi Theo! I finally moved to Lisbon" in full_prompt
    assert "[shares a photo: a photo of a grey cat sleeping on a sofa]" in full_prompt
    assert full_prompt.endswith("Question: Where did Maya move to?\nAnswer:")
    assert "<user_memory>" in answers[0]["messages"][1]["content"]  # convmem's block is the context

    outcomes = json.loads(out.read_text(encoding="utf-8"))["locomo"]["outcomes"]
    assert len(outcomes) == 8 * 7
    assert [o["label"] for o in outcomes[:7]] == LABELS
    assert all(o["answer"] and o["correct"] is not None for o in outcomes)
    by = {(o["question"], o["label"]): o for o in outcomes}
    # The rule-based fake answers with the best-matching line; its judge wants every gold word.
    assert by[(0, "full")]["answer"].startswith("Hi Theo! I finally moved to Lisbon")
    assert by[(0, "full")]["correct"] is True and by[(0, "full")]["found"] is True
    assert by[(5, "full")]["correct"] is True  # Toronto
    assert by[(3, "full")]["correct"] is False  # "yesterday" is not "8 March 2024"
    assert by[(3, "full")]["found"] is False
    # Category 1 needs both parts: the whole conversation holds "cat" and "parrot".
    assert by[(4, "full")]["found"] is True and by[(4, "bm25@40")]["found"] is False
    assert 8 not in {o["question"] for o in outcomes}  # the adversarial question
    # The judge's verdicts drive J: the J row of "full" is the share of CORRECT labels.
    full_j = sum(o["correct"] for o in outcomes if o["label"] == "full") / 8
    j_table = json.loads(out.read_text(encoding="utf-8"))["locomo"]["tables"][1]
    full_row = next(r for r in j_table["rows"] if r[0] == "full")
    assert full_row[5] == f"{100 * full_j:.1f}"


def test_a_request_missing_from_the_cassette_fails(qa_server: FakeQAServer, tmp_path: Path) -> None:
    chat = make_chat_model("fake-model", base_url=qa_server.base_url, api_key="sk-test", max_retries=0)
    judge = Judge(chat)
    with _vcr("none").use_cassette(str(tmp_path / "absent.yaml")):
        with pytest.raises((CannotOverwriteExistingCassetteException, openai.APIConnectionError)):
            judge.grade("Where did Maya move to?", "Lisbon", "[3 March 2024] Maya: I moved to Lisbon.")
    assert qa_server.requests == []


def test_the_fake_rejects_what_the_api_rejects(qa_server: FakeQAServer) -> None:
    import httpx

    url = qa_server.base_url + "/chat/completions"
    bad = [
        {"messages": [{"role": "user", "content": "Question: x"}]},
        {"model": "m", "messages": []},
        {"model": "m", "messages": [{"role": "robot", "content": "Question: x"}]},
        {"model": "m", "messages": [{"role": "user", "content": "Question: x"}], "temperature": 3},
    ]
    for body in bad:
        response = httpx.post(url, json=body, timeout=5)
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
    qa_server.requests.clear()  # the fixture checks that nothing reached it in replay mode


def test_cassette_holds_no_credentials() -> None:
    text = CASSETTE.read_text(encoding="utf-8")
    assert "sk-test" not in text and "Bearer" not in text
    assert re.search(r"127\.0\.0\.1:(?!8000/)\d+", text) is None
    assert "authorization" not in text.lower() and "x-stainless" not in text
