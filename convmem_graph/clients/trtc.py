"""TRTC AI-conversation client through Tencent's official SDK (``tencentcloud-sdk-python-trtc``).

The SDK signs every call with TC3-HMAC-SHA256 (we never sign by hand) and retries network errors
and ``RequestLimitExceeded`` with our backoff. Bodies are sent as given (``call_json``), so the
``StartAIConversation`` body built by ``ConvMemory.payload(..., "trtc", ...)`` goes out unchanged,
``LLMConfig`` and ``TTSConfig`` as the JSON strings TRTC wants. Errors become :class:`TRTCError`
with the ``Error.Code``, ``Message`` and ``RequestId``; keys are never logged.

The async twin runs the sync SDK client in a worker thread (one call at a time per client).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from convmem_graph.clients._base import RetryPolicy, VendorError

__all__ = ["AsyncTRTCClient", "TRTCClient", "TRTCError"]

logger = logging.getLogger(__name__)

VENDOR = "trtc"
API_VERSION = "2019-07-22"


class TRTCError(VendorError):
    """A TRTC cloud API call failed; ``code`` is the ``Response.Error.Code``."""


def _load_sdk() -> Any:
    try:
        from tencentcloud.common import credential
        from tencentcloud.common.exception.tencent_cloud_sdk_exception import TencentCloudSDKException
        from tencentcloud.common.profile.client_profile import ClientProfile
        from tencentcloud.common.profile.http_profile import HttpProfile
        from tencentcloud.common.retry import StandardRetryer
        from tencentcloud.trtc.v20190722 import trtc_client
    except ModuleNotFoundError as exc:  # pragma: no cover - the server extra installs it
        raise ModuleNotFoundError(
            "the TRTC client needs tencentcloud-sdk-python-trtc: pip install 'convmem-graph[server]'",
            name=exc.name,
        ) from exc
    return credential, TencentCloudSDKException, ClientProfile, HttpProfile, StandardRetryer, trtc_client


class TRTCClient:
    """Sync TRTC client (``StartAIConversation``, ``UpdateAIConversation``, ``StopAIConversation``).

    Args:
        secret_id: Tencent Cloud API SecretId.
        secret_key: Its SecretKey (never logged).
        region: ``ap-guangzhou``, ``ap-singapore`` ...
        endpoint: API host (``trtc.tencentcloudapi.com``, ``trtc.intl.tencentcloudapi.com``, or a
            test server's ``127.0.0.1:PORT``).
        scheme: ``https`` (``http`` only for a local test server).
        timeout_s: Per-request timeout.
        retry: Attempts and backoff for network errors and rate limits.
        token: A temporary credential's token, if any.
    """

    def __init__(
        self,
        secret_id: str,
        secret_key: str,
        region: str = "ap-guangzhou",
        *,
        endpoint: str = "trtc.tencentcloudapi.com",
        scheme: str = "https",
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
    ) -> None:
        credential, self._sdk_error, client_profile, http_profile, retryer, trtc_client = _load_sdk()
        policy = retry or RetryPolicy()
        http = http_profile(endpoint=endpoint, protocol=scheme, reqTimeout=int(max(1, timeout_s)))
        profile = client_profile(httpProfile=http)
        profile.retryer = retryer(
            max_attempts=policy.max_attempts, backoff_fn=lambda n: policy.delay(n + 1, None), logger=logger
        )
        self.region = region
        self.endpoint = endpoint
        self._client = trtc_client.TrtcClient(
            credential.Credential(secret_id, secret_key, token), region, profile
        )
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TRTCClient(region={self.region!r}, endpoint={self.endpoint!r})"

    def call(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """Call any TRTC action with a JSON body; return ``Response`` without the envelope.

        Raises:
            TRTCError: The API answered an error, or could not be reached after the retries.
        """
        try:
            with self._lock:
                doc = self._client.call_json(action, body)
        except self._sdk_error as exc:
            raise TRTCError(
                VENDOR, exc.get_code(), str(exc.get_message() or ""), request_id=exc.get_request_id()
            ) from None
        response = doc.get("Response") if isinstance(doc, dict) else None
        if not isinstance(response, dict):
            raise TRTCError(VENDOR, "InvalidResponse", f"{action}: no Response object in the answer")
        return response

    def start_ai_conversation(self, body: dict[str, Any]) -> str:
        """Start an AI conversation; return its ``TaskId``.

        Args:
            body: The whole request (``SdkAppId``, ``RoomId``, ``AgentConfig``, ``LLMConfig`` string,
                ``TTSConfig`` string ...), e.g. ``mem.payload(memory_id, "trtc", ...)``.
        """
        task_id = self.call("StartAIConversation", body).get("TaskId")
        if not isinstance(task_id, str) or not task_id:
            raise TRTCError(VENDOR, "InvalidResponse", "StartAIConversation answered without a TaskId")
        return task_id

    def update_ai_conversation(self, task_id: str, **fields: Any) -> None:
        """Update a running task (``LLMConfig`` string, ``TTSConfig``, ``WelcomeMessage`` ...)."""
        self.call("UpdateAIConversation", {"TaskId": task_id, **fields})

    def stop_ai_conversation(self, task_id: str) -> None:
        """Stop a task (TRTC then sends callback 902)."""
        self.call("StopAIConversation", {"TaskId": task_id})


class AsyncTRTCClient:
    """Async twin of :class:`TRTCClient` (the SDK call runs in a worker thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._sync = TRTCClient(*args, **kwargs)

    async def call(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """Async :meth:`TRTCClient.call`."""
        return await asyncio.to_thread(self._sync.call, action, body)

    async def start_ai_conversation(self, body: dict[str, Any]) -> str:
        """Async :meth:`TRTCClient.start_ai_conversation`."""
        return await asyncio.to_thread(self._sync.start_ai_conversation, body)

    async def update_ai_conversation(self, task_id: str, **fields: Any) -> None:
        """Async :meth:`TRTCClient.update_ai_conversation`."""
        await asyncio.to_thread(self._sync.update_ai_conversation, task_id, **fields)

    async def stop_ai_conversation(self, task_id: str) -> None:
        """Async :meth:`TRTCClient.stop_ai_conversation`."""
        await asyncio.to_thread(self._sync.stop_ai_conversation, task_id)
