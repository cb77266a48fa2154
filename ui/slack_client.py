"""The Slack Web API client rlmedic posts through: every outgoing string is redacted.

Both ``rlmedic slack`` and ``rlmedic watch`` post through :class:`RedactingWebClient`, so
no code path can send a secret to Slack by forgetting to call ``redact``: the text,
blocks, file contents and titles of every API call pass through
:func:`rlmedic.confine.redact_value` at the one place where requests are made.
``SLACK_API_URL`` (or ``base_url``) points the client at another Web API root (a test fake).
"""

from __future__ import annotations

import os
from typing import Any

from slack_sdk import WebClient
from slack_sdk.web.slack_response import SlackResponse

from rlmedic.redact import redact, redact_value


def _redact_args(args: dict | None) -> dict | None:
    """Redact every argument except ``token``: that one is the credential slack_sdk moves into the
    Authorization header, never posted content."""
    if args is None:
        return None
    return {k: (v if k == "token" else redact_value(v)) for k, v in args.items()}


#: A PNG made only of these chunks is pixels (rlmedic's own charts): no text in it to redact.
_PNG = b"\x89PNG\r\n\x1a\n"
_PIXEL_CHUNKS = {b"IHDR", b"IDAT", b"IEND", b"PLTE"}


def _pixels_only(data: bytes) -> bool:
    """A PNG whose chunks carry no text (no tEXt/iTXt/zTXt/eXIf...): uploaded as it is."""
    import struct

    if not data.startswith(_PNG):
        return False
    pos = len(_PNG)
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        if kind not in _PIXEL_CHUNKS:
            return False
        pos += 12 + length
        if kind == b"IEND":
            return pos == len(data)
    return False


def _redact_upload(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)) and _pixels_only(bytes(value)):
        return value
    if isinstance(value, bytes):
        return redact(value.decode("utf-8", errors="replace")).encode("utf-8")
    return redact_value(value)


class RedactingWebClient(WebClient):
    """A :class:`WebClient` whose API calls and file uploads carry only redacted text."""

    def api_call(self, api_method: str, *, http_verb: str = "POST", files: dict | None = None,
                 data: dict | None = None, params: dict | None = None, json: dict | None = None,
                 headers: dict | None = None, auth: dict | None = None) -> SlackResponse:
        return super().api_call(api_method, http_verb=http_verb, files=files, data=_redact_args(data),
                                params=_redact_args(params), json=_redact_args(json), headers=headers, auth=auth)

    def _upload_file(self, *, url: str, data: bytes, logger: Any, timeout: int, proxy: str | None,
                     ssl: Any) -> Any:  # files_upload_v2's step 2 (the bytes themselves)
        return super()._upload_file(url=url, data=_redact_upload(data), logger=logger, timeout=timeout,
                                    proxy=proxy, ssl=ssl)


def make_client(token: str, base_url: str | None = None) -> RedactingWebClient:
    """The bot's client; ``base_url`` / ``SLACK_API_URL`` override the Web API root."""
    url = base_url or os.environ.get("SLACK_API_URL") or WebClient.BASE_URL
    if not url.endswith("/"):
        url += "/"
    return RedactingWebClient(token=token, base_url=url)
