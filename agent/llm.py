"""The model client: where the OpenAI-compatible server is, and a quick "is it up?".

rlmedic talks to any OpenAI-compatible chat-completions server (SGLang started by
``rlmedic serve-model``, SGLang's router, vLLM...). Settings come from flags or the
environment: ``RLMEDIC_BASE_URL``, ``RLMEDIC_MODEL``, ``RLMEDIC_API_KEY``.

Under pytest the client refuses any URL that is not on loopback, so no test can ever
call a real model by accident.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rlmedic.errors import UserError

DEFAULT_BASE_URL = "http://127.0.0.1:30000/v1"
#: How long the reachability probe waits; the offline fallback must start well within 5 s.
PROBE_TIMEOUT_S = 1.5
#: How long one model request may take before the loop gives up.
REQUEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str = ""  # "" -> the first model the server lists
    api_key: str = "EMPTY"
    timeout_s: float = REQUEST_TIMEOUT_S
    temperature: float = 0.0

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                timeout_s: float | None = None) -> LLMConfig:
        """Flags win over the environment, which wins over the defaults."""
        url = (base_url or os.environ.get("RLMEDIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        config = cls(
            base_url=url,
            model=model or os.environ.get("RLMEDIC_MODEL", ""),
            api_key=api_key or os.environ.get("RLMEDIC_API_KEY") or "EMPTY",
            timeout_s=timeout_s if timeout_s is not None else REQUEST_TIMEOUT_S,
        )
        check_allowed(config.base_url)
        return config


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_allowed(url: str) -> None:
    """Refuse non-loopback model servers while running under pytest."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--base-url {url!r}: not an http(s) URL")
    if os.environ.get("PYTEST_CURRENT_TEST") and not is_loopback(url):
        raise UserError(f"--base-url {url!r}: only loopback model servers are allowed under pytest")


class ServerUnavailable(Exception):
    """The model server cannot be used now; ``reason`` is one line for the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def probe(config: LLMConfig, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """GET ``/v1/models``; the model name to use, or :class:`ServerUnavailable`."""
    request = urllib.request.Request(config.base_url + "/models", headers={"Authorization": f"Bearer {config.api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (checked URL)
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise ServerUnavailable(f"model server at {config.base_url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnavailable(f"model server at {config.base_url} unreachable ({reason})") from None
    except ValueError:
        raise ServerUnavailable(f"model server at {config.base_url} sent no JSON model list") from None
    if config.model:
        return config.model
    models = [m.get("id", "") for m in body.get("data", []) if isinstance(m, dict)]
    if not models or not models[0]:
        raise ServerUnavailable(f"model server at {config.base_url} lists no model")
    return models[0]


@functools.lru_cache(maxsize=8)
def chat_model(config: LLMConfig, model: str) -> Any:
    """The LangChain chat model for ``config`` (chat completions, streamed, no retries).

    Cached: building one costs ~0.2 s (HTTP clients, TLS context), and a long-lived
    process (web, Slack) makes an agent per conversation.
    """
    from langchain_openai import ChatOpenAI  # heavy: only when the LLM engine runs

    check_allowed(config.base_url)
    return ChatOpenAI(
        base_url=config.base_url,
        api_key=config.api_key,
        model=model,
        temperature=config.temperature,
        timeout=config.timeout_s,
        max_retries=0,
        streaming=True,
        use_responses_api=False,
        stream_usage=True,
    )
