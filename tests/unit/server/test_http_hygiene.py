"""Browser and token hygiene of ``convmem serve`` (issue 21 item 7).

Security headers on every response, the Host allow-list, the API docs behind the admin token, only
documented ``CONVMEM_*`` names, the token from a file, and the two token scopes (chat vs admin).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from convmem_graph.cli import main
from convmem_graph.memory import ConvMemory
from convmem_graph.server.app import create_app
from convmem_graph.server.bailian import API_PREFIX
from convmem_graph.server.settings import ServeSettings
from tests.unit.server.conftest import make_settings

ADMIN = "admin-t0ken-123"
CHAT = "chat-t0ken-456"
UPSTREAM = "http://upstream.test/v1/chat/completions"
SCOPE_ENV = (
    "TOKEN",
    "CONVMEM_SERVE_TOKEN",
    "CONVMEM_SERVE_TOKEN_FILE",
    "CONVMEM_PROXY_TOKEN",
    "CONVMEM_ALLOWED_HOSTS",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in SCOPE_ENV:
        monkeypatch.delenv(var, raising=False)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _upstream(request: httpx.Request) -> httpx.Response:
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "好的。"}}],
    }
    return httpx.Response(200, json=answer)


def _client(tmp_path: Path, **overrides: Any) -> TestClient:
    settings = make_settings(tmp_path, upstream_url=UPSTREAM, **overrides)
    seed = ConvMemory.open(settings.db)
    seed.ingest("u_1", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    seed.close()
    return TestClient(create_app(settings, upstream_transport=httpx.MockTransport(_upstream)))


@pytest.fixture
def scoped(tmp_path: Path) -> Iterator[TestClient]:
    with _client(tmp_path, token=ADMIN, proxy_token=CHAT) as client:
        yield client


CHAT_BODY = {"model": "qwen-plus", "user": "u_1", "messages": [{"role": "user", "content": "你好"}]}


# --- headers --------------------------------------------------------------------------------------


def _assert_security_headers(response: httpx.Response) -> None:
    csp = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "base-uri 'none'" in csp
    assert "unsafe-inline" not in csp and "form-action 'self'" in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


def test_every_response_carries_the_security_headers(scoped: TestClient) -> None:
    responses = [
        scoped.get("/healthz"),
        scoped.get("/", headers=_bearer(ADMIN)),
        scoped.get("/memories/u_1", headers=_bearer(ADMIN)),
        scoped.get("/viewer/static/viewer.js", headers=_bearer(ADMIN)),
        scoped.get("/"),  # 401
        scoped.get("/nowhere", headers=_bearer(ADMIN)),  # 404
        scoped.post("/webhooks/trtc", content=b"{}"),  # 401, unsigned
        scoped.get("/healthz", headers={"Host": "evil.example"}),  # 400 from the Host check
        scoped.post("/v1/chat/completions", json=CHAT_BODY, headers=_bearer(CHAT)),
    ]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 401, 404, 401, 400, 200]
    for response in responses:
        _assert_security_headers(response)


def test_viewer_pages_have_no_inline_script_or_handler(scoped: TestClient) -> None:
    # The CSP forbids inline script: a page relying on one would break silently in the browser.
    for path in ("/", "/memories/u_1", "/memories/u_1/inject", "/memories/u_1/delete"):
        html = scoped.get(path, headers=_bearer(ADMIN)).text
        scripts = re.findall(r"<script\b([^>]*)>", html, flags=re.IGNORECASE)
        assert scripts and all("src=" in attrs for attrs in scripts), path
        assert not re.search(r"<[^>]+\son[a-z]+\s*=", html, flags=re.IGNORECASE), path
        assert not re.search(r"<style\b|\sstyle\s*=|javascript:", html, flags=re.IGNORECASE), path


# --- Host allow-list ------------------------------------------------------------------------------


def test_default_hosts_are_the_bind_host_and_loopback_names(tmp_path: Path) -> None:
    settings = ServeSettings(_env_file=None, db=str(tmp_path / "h.db"), host="10.1.2.3")
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8080") as client:
        for host in (
            "127.0.0.1",
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:9",
            "[::1]",
            "[::1]:8080",
            "10.1.2.3",
        ):
            assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", "10.1.2.4"):
            refused = client.get("/healthz", headers={"Host": host})
            assert refused.status_code == 400 and "host" in refused.text.lower(), host


def test_allowed_hosts_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMEM_ALLOWED_HOSTS", "Memory.Example.com:443, *.corp.example")
    settings = ServeSettings(_env_file=None, db=str(tmp_path / "h.db"), host="0.0.0.0")
    assert settings.allowed_hosts == ["memory.example.com", "*.corp.example"]
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz", headers={"Host": "memory.example.com"}).status_code == 200
        assert client.get("/healthz", headers={"Host": "a.corp.example:8443"}).status_code == 200
        assert client.get("/healthz", headers={"Host": "localhost"}).status_code == 400  # explicit list only
    with pytest.raises(ValueError, match="allowed_hosts"):
        ServeSettings(_env_file=None, allowed_hosts="ex*ample.com")


def test_wildcard_bind_defaults_to_loopback_names_only(tmp_path: Path) -> None:
    settings = ServeSettings(_env_file=None, db=str(tmp_path / "h.db"), host="0.0.0.0")
    assert settings.allowed_hosts == ["localhost", "127.0.0.1", "[::1]"]


# --- API docs -------------------------------------------------------------------------------------


def test_api_docs_need_the_admin_token(scoped: TestClient) -> None:
    for path in ("/openapi.json", "/docs"):
        assert scoped.get(path).status_code == 401, path
        assert scoped.get(path, headers=_bearer(CHAT)).status_code == 403, path
        assert scoped.get(path, headers=_bearer(ADMIN)).status_code == 200, path
    assert scoped.get("/redoc", headers=_bearer(ADMIN)).status_code == 404
    doc = scoped.get("/openapi.json", headers=_bearer(ADMIN)).json()
    assert "/v1/chat/completions" in doc["paths"] and "/openapi.json" not in doc["paths"]
    page = scoped.get("/docs", headers=_bearer(ADMIN))
    csp = page.headers["content-security-policy"]
    # Swagger UI's one inline script is allowed by its hash, not by 'unsafe-inline'.
    script_src = next(part for part in csp.split(";") if part.strip().startswith("script-src"))
    assert "'sha256-" in script_src and "unsafe-inline" not in script_src
    assert "frame-ancestors 'none'" in csp and page.headers["x-frame-options"] == "DENY"


def test_api_docs_open_without_a_token(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/docs").status_code == 200


# --- token sources --------------------------------------------------------------------------------


def test_a_stray_token_variable_is_not_the_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKEN", "x")
    monkeypatch.setenv("token", "x")
    assert ServeSettings(_env_file=None).token is None
    monkeypatch.setenv("CONVMEM_SERVE_TOKEN", "documented")
    assert ServeSettings(_env_file=None).secret("token") == "documented"
    assert ServeSettings(_env_file=None, token="kw").secret("token") == "kw"  # keyword (CLI) still works


def test_token_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret-from-file\n", encoding="utf-8")
    assert ServeSettings(_env_file=None, token_file=path).secret("token") == "s3cret-from-file"
    monkeypatch.setenv("CONVMEM_SERVE_TOKEN_FILE", str(path))
    assert ServeSettings(_env_file=None).secret("token") == "s3cret-from-file"
    monkeypatch.setenv("CONVMEM_SERVE_TOKEN", "also-set")
    with pytest.raises(ValueError, match="not both"):
        ServeSettings(_env_file=None)


@pytest.mark.parametrize("content", [None, "", "\n", "  \r\n"])
def test_an_unreadable_or_empty_token_file_is_a_clear_error(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="CONVMEM_SERVE_TOKEN_FILE") as err:
        ServeSettings(_env_file=None, token_file=path)
    assert ("empty" if content is not None else "cannot be read") in str(err.value)


def test_cli_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "x.db")
    missing = tmp_path / "nope"
    assert main(["serve", "--host", "0.0.0.0", "--db", db, "--token-file", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "CONVMEM_SERVE_TOKEN_FILE" in err and "nope" in err and "cannot be read" in err
    # The flag replaces the environment's token instead of clashing with it ("not both").
    monkeypatch.setenv("CONVMEM_SERVE_TOKEN", "from-env")
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    assert main(["serve", "--db", db, "--token-file", str(empty)]) == 2
    assert "is empty" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--db", db, "--token", "a", "--token-file", str(empty)])


def test_cli_open_bind_needs_the_admin_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVMEM_PROXY_TOKEN", CHAT)
    assert main(["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err
    assert "without a token" in err and "CONVMEM_PROXY_TOKEN alone" in err


# --- scopes ---------------------------------------------------------------------------------------


def test_chat_token_only_chats(scoped: TestClient) -> None:
    chat = _bearer(CHAT)
    answer = scoped.post("/v1/chat/completions", json=CHAT_BODY, headers=chat)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "好的。"
    refused = [
        scoped.get("/", headers=chat),
        scoped.get("/memories/u_1", headers=chat),
        scoped.post("/memories/u_1/delete", data={"confirm": "u_1"}, headers=chat),
        scoped.post("/memories/u_1/variables", data={"name": "city", "action": "clear"}, headers=chat),
        scoped.post(
            f"{API_PREFIX}/memory_nodes/search", json={"user_id": "u_1", "query": "芒果"}, headers=chat
        ),
        scoped.delete(f"{API_PREFIX}/memory_nodes/n_1", headers=chat),
        scoped.delete("/ws_1/memories/u_1", headers=chat),
        scoped.post("/tasks/trtc", json={"task_id": "t", "memory_id": "u_1"}, headers=chat),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert "CONVMEM_PROXY_TOKEN" in refused[0].text
    assert "芒果" in scoped.get("/memories/u_1", headers=_bearer(ADMIN)).text  # nothing was deleted


def test_admin_token_opens_everything(scoped: TestClient) -> None:
    admin = _bearer(ADMIN)
    assert scoped.post("/v1/chat/completions", json=CHAT_BODY, headers=admin).status_code == 200
    assert scoped.get("/memories/u_1", headers=admin).status_code == 200
    search = {"user_id": "u_1", "query": "芒果"}
    assert scoped.post(f"{API_PREFIX}/memory_nodes/search", json=search, headers=admin).status_code == 200
    assert scoped.post("/v1/chat/completions", json=CHAT_BODY).status_code == 401
    assert scoped.post("/v1/chat/completions", json=CHAT_BODY, headers=_bearer("guess")).status_code == 401
    assert scoped.get("/", headers=_bearer("guess")).status_code == 401


def test_without_a_chat_token_the_proxy_takes_the_admin_token(tmp_path: Path) -> None:
    with _client(tmp_path, token=ADMIN) as client:
        assert client.post("/v1/chat/completions", json=CHAT_BODY, headers=_bearer(ADMIN)).status_code == 200
        assert client.post("/v1/chat/completions", json=CHAT_BODY, headers=_bearer(CHAT)).status_code == 401


def test_chat_token_must_differ_from_the_admin_token() -> None:
    with pytest.raises(ValueError, match="must differ"):
        ServeSettings(_env_file=None, token=ADMIN, proxy_token=ADMIN)
