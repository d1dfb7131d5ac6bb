"""Local fakes of the vendor REST APIs our clients call, checking what the vendors check.

One ``ThreadingHTTPServer`` on ``127.0.0.1`` (free port) serves:

- Tencent IM ``POST /v4/openim/admin_getroammsg``: the query string must carry ``sdkappid``,
  ``identifier`` (the admin), a ``usersig`` valid for both (HMAC recomputed with the app key, expiry
  checked; else ``ErrorCode`` 70009/70013/70001 with HTTP 200 like the real one), ``random`` and
  ``contenttype=json``; paging walks backwards in time per the docs (newest slice first,
  ``LastMsgKey``/``LastMsgTime``/``Complete``); :attr:`im_rate_limit_next` answers 60007 once.
- TRTC cloud API 3.0 ``POST /``: the TC3-HMAC-SHA256 ``Authorization`` is recomputed from the
  secret (canonical request, credential scope, signing-key chain) and ``X-TC-Action``/``X-TC-Version``
  are checked; errors come back as ``{"Response": {"Error": {"Code", "Message"}, "RequestId"}}``;
  ``StartAIConversation`` demands ``LLMConfig``/``TTSConfig`` as JSON strings.
- Agora ConvoAI ``/api/conversational-ai-agent/v2/projects/{appid}/...``: Basic auth checked
  (401 ``{"detail", "reason"}``), ``join`` (409 on a reused name), ``update``, ``leave``,
  ``history``; :attr:`agora_fail_next` answers one 503.

It stops by itself after ``lifetime_s``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlparse

from convmem_graph.clients.usersig import decode_usersig, verify_usersig

__all__ = ["FakeVendors", "make_im_history"]

IM_APP_ID = 1400000000
IM_KEY = "im-test-secret-key"
IM_ADMIN = "administrator"
TC_SECRET_ID = "AKIDfakeSecretId"
TC_SECRET_KEY = "fake-secret-key"
AGORA_APP_ID = "fakeappid"
AGORA_CUSTOMER = ("customer-id", "customer-secret")


def make_im_history(user: str, bot: str, start_s: int, n: int) -> list[dict[str, Any]]:
    """Return ``n`` one-to-one text messages alternating between ``user`` and ``bot``, oldest first."""
    out = []
    for i in range(n):
        ts = start_s + i * 30
        sender, receiver = (user, bot) if i % 2 == 0 else (bot, user)
        text = f"第{i}条：我在杭州跑了{i}公里。" if sender == user else f"第{i}条：好的，记住了。"
        seq, rnd = 1000 + i, 7000 + i
        out.append(
            {
                "From_Account": sender,
                "To_Account": receiver,
                "MsgSeq": seq,
                "MsgRandom": rnd,
                "MsgTimeStamp": ts,
                "MsgFlagBits": 0,
                "IsPeerRead": 0,
                "MsgKey": f"{seq}_{rnd}_{ts}",
                "MsgBody": [{"MsgType": "TIMTextElem", "MsgContent": {"Text": text}}],
            }
        )
    return out


def _tc3_signature(secret_key: str, date: str, service: str, string_to_sign: str) -> str:
    def sign(key: bytes, msg: str) -> bytes:
        return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()

    k_date = sign(("TC3" + secret_key).encode("utf-8"), date)
    k_service = sign(k_date, service)
    k_signing = sign(k_service, "tc3_request")
    return hmac.new(k_signing, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


class FakeVendors:
    """The fake vendor APIs; use as a context manager."""

    def __init__(
        self,
        *,
        im_history: list[dict[str, Any]] | None = None,
        im_page_size: int = 4,
        lifetime_s: float = 120.0,
    ) -> None:
        self.im_history = im_history or []
        self.im_page_size = im_page_size
        self.im_rate_limit_next = False
        self.agora_fail_next = False
        self.lifetime_s = lifetime_s
        self.calls: list[dict[str, Any]] = []
        self.agents: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    @property
    def host(self) -> str:
        assert self._server is not None, "not started"
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}"

    # -- Tencent IM ----------------------------------------------------------------------------
    def _im(self, query: dict[str, list[str]], body: dict[str, Any]) -> dict[str, Any]:
        def fail(code: int, info: str) -> dict[str, Any]:
            return {"ActionStatus": "FAIL", "ErrorCode": code, "ErrorInfo": info}

        q = {k: v[0] for k, v in query.items()}
        for name in ("sdkappid", "identifier", "usersig", "random", "contenttype"):
            if name not in q:
                return fail(60002, f"missing {name} in the URL")
        if q["contenttype"] != "json" or not q["random"].isdigit() or int(q["random"]) >= 2**32:
            return fail(60002, "bad contenttype or random")
        if q["sdkappid"] != str(IM_APP_ID):
            return fail(60006, "SDKAppID invalid")
        try:
            doc = decode_usersig(q["usersig"])
        except ValueError:
            return fail(70003, "UserSig parse failure")
        if doc.get("TLS.identifier") != q["identifier"]:
            return fail(70013, "UserID in the request differs from the one in the UserSig")
        if int(doc.get("TLS.time", 0)) + int(doc.get("TLS.expire", 0)) < time.time():
            return fail(70001, "UserSig expired")
        if not verify_usersig(q["usersig"], IM_APP_ID, IM_KEY, q["identifier"]):
            return fail(70009, "UserSig verification failed")
        if q["identifier"] != IM_ADMIN:
            return fail(60010, "requires App admin")
        if self.im_rate_limit_next:
            self.im_rate_limit_next = False
            return fail(60007, "request rate limited")
        for name in ("Operator_Account", "Peer_Account", "MaxCnt", "MinTime", "MaxTime"):
            if name not in body:
                return fail(90001, f"missing {name}")
        pair = {body["Operator_Account"], body["Peer_Account"]}
        window = [
            m
            for m in self.im_history
            if {m["From_Account"], m["To_Account"]} == pair
            and body["MinTime"] <= m["MsgTimeStamp"] <= body["MaxTime"]
        ]
        if body.get("LastMsgKey"):
            keys = [m["MsgKey"] for m in window]
            if body["LastMsgKey"] not in keys:
                return fail(90001, "LastMsgKey not found in the window")
            window = window[: keys.index(body["LastMsgKey"])]
        count = min(int(body["MaxCnt"]), self.im_page_size)
        page = window[-count:] if count else []
        complete = len(page) == len(window)
        out: dict[str, Any] = {
            "ActionStatus": "OK",
            "ErrorCode": 0,
            "ErrorInfo": "",
            "Complete": 1 if complete else 0,
            "MsgCnt": len(page),
            "MsgList": page,
        }
        if page:
            out["LastMsgTime"] = page[0]["MsgTimeStamp"]
            out["LastMsgKey"] = page[0]["MsgKey"]
        return out

    # -- TRTC ----------------------------------------------------------------------------------
    def _trtc(self, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
        request_id = str(uuid.uuid4())

        def error(code: str, message: str) -> dict[str, Any]:
            return {"Response": {"Error": {"Code": code, "Message": message}, "RequestId": request_id}}

        h = {k.lower(): v for k, v in headers.items()}
        auth = h.get("authorization", "")
        if not auth.startswith("TC3-HMAC-SHA256 "):
            return error("AuthFailure.SignatureFailure", "missing TC3 signature")
        fields = dict(part.strip().split("=", 1) for part in auth[len("TC3-HMAC-SHA256 ") :].split(","))
        secret_id, date, service, terminator = fields.get("Credential", "///").split("/")
        if secret_id != TC_SECRET_ID:
            return error("AuthFailure.SecretIdNotFound", "the SecretId does not exist")
        timestamp = int(h.get("x-tc-timestamp", "0"))
        if (
            abs(time.time() - timestamp) > 300
            or datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d") != date
        ):
            return error("AuthFailure.SignatureExpire", "the request timestamp is out of range")
        signed = fields.get("SignedHeaders", "").split(";")
        canonical_headers = "".join(f"{name}:{h.get(name, '')}\n" for name in signed)
        canonical = "\n".join(
            ["POST", "/", "", canonical_headers, ";".join(signed), hashlib.sha256(raw).hexdigest()]
        )
        scope = f"{date}/{service}/{terminator}"
        to_sign = "\n".join(
            ["TC3-HMAC-SHA256", str(timestamp), scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        if service != "trtc" or not hmac.compare_digest(
            _tc3_signature(TC_SECRET_KEY, date, service, to_sign), fields.get("Signature", "")
        ):
            return error("AuthFailure.SignatureFailure", "the signature does not match")
        if h.get("x-tc-version") != "2019-07-22":
            return error("InvalidParameter", "X-TC-Version must be 2019-07-22")
        body = json.loads(raw)
        action = h.get("x-tc-action")
        if action == "StartAIConversation":
            for name in ("SdkAppId", "RoomId", "AgentConfig", "LLMConfig", "TTSConfig"):
                if name not in body:
                    return error("MissingParameter", f"missing {name}")
            for name in ("LLMConfig", "TTSConfig"):
                if not isinstance(body[name], str):
                    return error("InvalidParameter", f"{name} must be a JSON string")
                json.loads(body[name])
            task_id = f"task-{uuid.uuid4().hex[:12]}"
            return {"Response": {"TaskId": task_id, "RequestId": request_id}}
        if action in ("StopAIConversation", "UpdateAIConversation"):
            if not body.get("TaskId"):
                return error("MissingParameter", "missing TaskId")
            return {"Response": {"RequestId": request_id}}
        return error("InvalidAction", f"unknown action {action}")

    # -- Agora ---------------------------------------------------------------------------------
    def _agora(
        self, method: str, path: str, headers: dict[str, str], body: Any
    ) -> tuple[int, dict[str, Any]]:
        expected = "Basic " + base64.b64encode(":".join(AGORA_CUSTOMER).encode()).decode()
        if {k.lower(): v for k, v in headers.items()}.get("authorization") != expected:
            return 401, {"detail": "Invalid authentication credentials", "reason": "Unauthorized"}
        if self.agora_fail_next:
            self.agora_fail_next = False
            return 503, {"detail": "service busy", "reason": "ServiceUnavailable"}
        prefix = f"/api/conversational-ai-agent/v2/projects/{AGORA_APP_ID}"
        if not path.startswith(prefix):
            return 404, {"detail": "project not found", "reason": "InvalidAppId"}
        rest = path[len(prefix) :]
        if method == "POST" and rest == "/join":
            props = body.get("properties") if isinstance(body, dict) else None
            if not isinstance(props, dict) or not props.get("channel") or not body.get("name"):
                return 400, {"detail": "name and properties.channel are required", "reason": "InvalidParams"}
            if any(a["name"] == body["name"] for a in self.agents.values()):
                return 409, {"detail": "agent name already in use", "reason": "TaskConflict"}
            agent_id = uuid.uuid4().hex.upper()
            self.agents[agent_id] = {"name": body["name"], "status": "RUNNING", "body": body}
            return 200, {"agent_id": agent_id, "create_ts": 1767268800, "status": "RUNNING"}
        parts = rest.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "agents":
            agent = self.agents.get(parts[1])
            if agent is None or agent["status"] != "RUNNING":
                return 404, {"detail": "agent not found", "reason": "TaskNotFound"}
            if method == "POST" and parts[2] == "leave":
                agent["status"] = "STOPPED"
                return 200, {}
            if method == "POST" and parts[2] == "update":
                agent["body"]["properties"].update(body.get("properties", {}))
                return 200, {"agent_id": parts[1], "create_ts": 1767268800, "status": "RUNNING"}
            if method == "GET" and parts[2] == "history":
                contents = [
                    {
                        "role": "user",
                        "content": "我对芒果过敏。",
                        "turn_id": 1,
                        "timestamp": 1767268809870,
                        "metadata": {"source": "asr", "user": "10086"},
                    }
                ]
                return 200, {
                    "agent_id": parts[1],
                    "start_ts": 1767268800,
                    "status": "RUNNING",
                    "contents": contents,
                }
        return 404, {"detail": f"no route {method} {rest}", "reason": "NotFound"}

    # -- server --------------------------------------------------------------------------------
    def start(self) -> FakeVendors:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            def _handle(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                url = urlparse(self.path)
                headers = dict(self.headers)
                with fake._lock:
                    fake.calls.append({"method": method, "path": url.path, "headers": headers})
                    body = json.loads(raw) if raw else None
                    if url.path.startswith("/v4/"):
                        status, doc = 200, fake._im(parse_qs(url.query), body or {})
                    elif url.path == "/":
                        status, doc = 200, fake._trtc(headers, raw)
                    else:
                        status, doc = fake._agora(method, url.path, headers, body)
                payload = json.dumps(doc, ensure_ascii=False).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        ).start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeVendors:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
