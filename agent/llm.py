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
#: The most one answer may spend on the model (``--timeout`` / ``RLMEDIC_TIMEOUT``); the
#: offline fallback has its own reserve on top (see ``loop.Budgets``).
REQUEST_TIMEOUT_S = 120.0
#: The longest silence tolerated inside one response (no byte from a stalled server).
STALL_TIMEOUT_S = 30.0
#: Tokens one model reply may generate (``RLMEDIC_MAX_TOKENS``): a runaway generation is cut here.
MAX_TOKENS = 1536
#: Retries of a request answered 429 or 503, and the longest ``Retry-After`` honoured.
RETRIES = 2
MAX_RETRY_AFTER_S = 10.0


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str = ""  # "" -> the first model the server lists
    api_key: str = "EMPTY"
    timeout_s: float = REQUEST_TIMEOUT_S
    temperature: float = 0.0
    max_tokens: int = MAX_TOKENS

    @property
    def stall_s(self) -> float:
        """Read timeout between two bytes of a response: a stalled server is given up on."""
        return max(1.0, min(STALL_TIMEOUT_S, self.timeout_s))

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                timeout_s: float | None = None, max_tokens: int | None = None) -> LLMConfig:
        """Flags win over the environment, which wins over the defaults."""
        url = (base_url or os.environ.get("RLMEDIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        config = cls(
            base_url=url,
            model=model or os.environ.get("RLMEDIC_MODEL", ""),
            api_key=api_key or os.environ.get("RLMEDIC_API_KEY") or "EMPTY",
            timeout_s=timeout_s if timeout_s is not None else _env_number("RLMEDIC_TIMEOUT", REQUEST_TIMEOUT_S),
            max_tokens=max_tokens if max_tokens is not None else int(_env_number("RLMEDIC_MAX_TOKENS", MAX_TOKENS)),
        )
        if config.timeout_s <= 0 or config.max_tokens <= 0:
            raise UserError("the timeout and max tokens must be positive")
        check_allowed(config.base_url)
        return config


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{name}={raw!r}: not a number") from None
    if value <= 0:
        raise UserError(f"{name}={raw!r}: must be positive")
    return value


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


def probe(config: LLMConfig, timeout_s: float = PROBE_TIMEOUT_S, *, retries: int = RETRIES,
          sleep: Any = None) -> str:
    """GET ``/v1/models``; the model name to use, or :class:`ServerUnavailable`.

    A 429 or 503 with a short ``Retry-After`` is waited out (at most ``retries`` times) before
    the answer goes offline: a busy server is not a dead one.
    """
    import time

    request = urllib.request.Request(config.base_url + "/models", headers={"Authorization": f"Bearer {config.api_key}"})
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (checked URL)
                body = json.loads(response.read() or b"{}")
            break
        except urllib.error.HTTPError as exc:
            wait = retry_after(exc.headers) if exc.code in (429, 503) else None
            if wait is None or wait > MAX_RETRY_AFTER_S or attempt == retries:
                raise ServerUnavailable(f"model server at {config.base_url} answered HTTP {exc.code}") from None
            (sleep or time.sleep)(wait)
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


def retry_after(headers: Any, now: float | None = None) -> float | None:
    """Seconds a 429/503 asks to wait (``Retry-After`` as seconds or an HTTP date), None if absent/bad."""
    import email.utils
    import time

    raw = (headers.get("retry-after-ms") or "").strip()
    if raw:
        try:
            return max(0.0, float(raw) / 1000)
        except ValueError:
            pass
    raw = (headers.get("retry-after") or "").strip()
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def retrying_transport(inner: Any, *, retries: int = RETRIES, max_wait_s: float = MAX_RETRY_AFTER_S,
                       sleep: Any = None) -> Any:
    """An HTTP transport that retries 429 and 503 answers, waiting what ``Retry-After`` says.

    Bounded: at most ``retries`` retries, each wait capped at ``max_wait_s`` (a longer
    Retry-After is not waited out: the answer goes offline instead). Other errors pass.
    """
    import time

    import httpx2

    pause = sleep or time.sleep

    class RetryTransport(httpx2.BaseTransport):
        def handle_request(self, request: Any) -> Any:
            for attempt in range(retries + 1):
                response = inner.handle_request(request)
                if response.status_code not in (429, 503) or attempt == retries:
                    return response
                wait = retry_after(response.headers)
                wait = min(2.0 ** attempt * 0.5, max_wait_s) if wait is None else wait
                if wait > max_wait_s:
                    return response
                response.close()
                pause(wait)
            return response  # pragma: no cover - the loop returns

        def close(self) -> None:
            inner.close()

    return RetryTransport()


@functools.lru_cache(maxsize=8)
def chat_model(config: LLMConfig, model: str) -> Any:
    """The LangChain chat model for ``config`` (chat completions, streamed).

    Bounded: ``max_tokens`` on every request, a read timeout for stalled servers, 429/503
    retried with ``Retry-After`` (:func:`retrying_transport`), nothing else retried.
    Cached: building one costs ~0.2 s (HTTP clients, TLS context), and a long-lived
    process (web, Slack) makes an agent per conversation.
    """
    import httpx2

    from rlmedic.memory import collector_paused

    with collector_paused():
        from langchain_openai import ChatOpenAI  # heavy: only when the LLM engine runs

    check_allowed(config.base_url)
    timeout = httpx2.Timeout(connect=min(5.0, config.timeout_s), read=config.stall_s, write=30.0, pool=5.0)
    client = httpx2.Client(transport=retrying_transport(httpx2.HTTPTransport()), timeout=timeout)
    return ChatOpenAI(
        base_url=config.base_url,
        api_key=config.api_key,
        model=model,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        timeout=timeout,
        max_retries=0,
        http_client=client,
        streaming=True,
        use_responses_api=False,
        stream_usage=True,
    )
