"""Vendor REST clients (httpx, sync and async, timeouts, retries with backoff, typed errors).

- :mod:`~convmem_graph.clients.tencent_im`: IM ``admin_getroammsg`` with paging and a local UserSig.
- :mod:`~convmem_graph.clients.trtc`: TRTC ``StartAIConversation`` / ``UpdateAIConversation`` /
  ``StopAIConversation`` through Tencent's official SDK (TC3 signing is theirs).
- :mod:`~convmem_graph.clients.agora`: Agora ConvoAI join, update, leave and history.

They use ``ConvMemory`` payloads like any caller; nothing below this package imports it.
"""

from __future__ import annotations

from convmem_graph.clients._base import RetryPolicy, VendorError, VendorHTTPError, VendorRateLimited
from convmem_graph.clients.agora import AgoraConvoAIClient, AgoraError, AsyncAgoraConvoAIClient
from convmem_graph.clients.tencent_im import AsyncTencentIMClient, TencentIMClient, TencentIMError
from convmem_graph.clients.usersig import gen_usersig, verify_usersig

__all__ = [
    "AgoraConvoAIClient",
    "AgoraError",
    "AsyncAgoraConvoAIClient",
    "AsyncTencentIMClient",
    "RetryPolicy",
    "TencentIMClient",
    "TencentIMError",
    "VendorError",
    "VendorHTTPError",
    "VendorRateLimited",
    "gen_usersig",
    "verify_usersig",
]
