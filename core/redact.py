"""Secret redaction in one place: a table of secret kinds, each with its own examples.

Everything rlmedic shows (terminal, JSON, a model's context, Slack, the index on disk)
passes through :func:`redact` (text) or :func:`redact_value` (structured results).
Redact *before* cutting text short: a key cut in half no longer matches its pattern,
and its first characters would leak.

To add a secret kind, append a :class:`SecretKind` to :data:`KINDS` with

* ``pattern``: a regex whose named group ``secret`` is the part replaced by ``[REDACTED]``
  (what is around it, like ``WANDB_API_KEY=``, stays so the reader knows what was there);
* ``hints``: lower-case literals of which at least one occurs in every match. They are
  the quick pre-check: a kind's regex runs only on text that contains one of its hints,
  so ordinary log lines cost a few substring searches (a kind without hints runs on
  every text, with a newline in front: keep such patterns cheap);
* ``positives`` (each must lose its secret) and ``negatives`` (each must come out
  unchanged). ``tests/test_redact.py`` checks both for every kind, so a new kind
  cannot silently redact config values such as ``max_new_tokens``.

Kinds run in table order; later kinds see earlier ones' ``[REDACTED]`` and skip it.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from rlmedic.lazyregex import LazyPattern

REDACTED = "[REDACTED]"


@dataclass(frozen=True)
class SecretKind:
    """One kind of secret: how to find it, and examples that pin what it must and must not touch."""

    name: str
    pattern: re.Pattern[str]
    hints: tuple[str, ...]
    positives: tuple[str, ...]
    negatives: tuple[str, ...]
    #: a cheap pattern every match contains, searched before ``pattern`` (for a kind whose hints are
    #: common words but whose matches are rare: a value one line down)
    gate: re.Pattern[str] | None = None

    def search(self, text: str) -> re.Match[str] | None:
        """The first secret of this kind in ``text`` (positions are in ``text`` for kinds with hints)."""
        if self.gate is not None and not self.gate.search(text):
            return None
        if not self.hints:  # see redact_kind
            return self.pattern.search("\n" + text)
        return self.pattern.search(text)

    def redact(self, text: str) -> str:
        """``text`` with this kind's secrets replaced; ``text`` itself when there were none.

        A kind without hints sees ``"\\n" + text``, so its pattern may begin with the character
        before a secret (a pattern that starts with a character set is searched faster than
        one that starts with a lookbehind).
        """
        if self.gate is not None and not self.gate.search(text):
            return text
        if not self.hints:
            out, n = self.pattern.subn(_replace, "\n" + text)
            return out[1:] if n else text
        return self.pattern.sub(_replace, text)


# ------------------------------------------------------------------ vocabulary -------

#: Names (of variables, keys, flags) whose value is a secret: the name must END with one of
#: these words, so ``hf_token`` and ``WANDB_API_KEY`` are secrets while ``token_budget``,
#: ``max_new_tokens`` and ``tokenizer_path`` are settings. A bare ``key`` is not (``input_key``).
SECRET_NAME_ENDINGS: tuple[str, ...] = (
    "apikey", "secret", "token", "password", "passwd", "passphrase", "credential", "credentials",
    *(f"{who}{sep}key" for who in ("api", "wandb", "access", "secret", "private", "auth", "openai", "anthropic", "hf",
                                   "client", "encryption", "signing", "master", "session", "license")
      for sep in ("_", "-", "")),
)
#: Tokenizer settings named ``*_token`` whose values are vocabulary entries, not secrets.
TOKENIZER_TOKEN_NAMES: tuple[str, ...] = tuple(
    f"{what}{sep}token"
    for what in ("pad", "eos", "bos", "unk", "sep", "cls", "mask", "stop", "image", "video", "audio", "special",
                 "start", "end", "think", "vision", "boi", "eoi", "im_start", "im_end")
    for sep in ("_", "-", "")
)
# A name, matched in one linear pass: the whole word (possessive), then fixed-width lookbehinds
# check how it ends. (A lazy `[\w-]*?(?:words)` here cost seconds per 10 MB of log.)
_NAME = (
    r"(?<![\w/\\-])[\w-]++"  # not the end of a path: "/etc/passwd: outside the allowed roots"
    + "(?:" + "|".join(f"(?<={re.escape(w)})" for w in SECRET_NAME_ENDINGS) + ")"
    + "".join(f"(?<!{re.escape(w)})" for w in TOKENIZER_TOKEN_NAMES)
)
#: Values that are never secrets: interpolations, placeholders, special tokens, numbers, nulls,
#: names of variables.
_NOT_A_VALUE = (
    # ($ starts a value unless it is a variable reference filling it: ${X}, $(cmd), $NAME; a YAML block
    # scalar's indicator (|, >-) and a shell line continuation (\ at the end) have the value on the next line)
    r"(?!\[REDACTED\]|\$\{|\$\(|\$[A-Za-z_]\w*(?![^\s'\",})\\])|%\(|\{\{|<|\[|\*{3}|\.{3}"
    r"|[|>][-+]?[1-9]?[ \t]*(?:#[^\n]*)?(?:\r?\n|\\n|$)|\\{1,2}(?:\r?\n|\\n)"
    r"|(?:none|null|nil|true|false|~|required|optional|str|string|env)(?![\w/+=-])"
    r"|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w/+=-])"
    # a variable passed on (api_key=api_key, token=args.hf_token), not a value
    r"|(?:[\w.]*[_.])?(?:key|token|secret|password|passwd|credentials?)(?![\w/+=-]))"
)
_QUOTE = r"(?:\\?['\"])"  # a quote, or an escaped one inside a JSON string

#: What may come before the text of a log line that continues the one above: an excerpt's gutter
#: (``>  12 | ``), a Ray actor's prefix (``(TrainWorker pid=7) ``), a comment's ``#``.
_NEXT_LINE_PREFIX = r"(?:[ >]{0,3}\d{1,9} \| )?(?:\([^()\n]{0,80}\) ?)?(?:#+(?=[ \t]))?"

#: How a secret flag's name ends, as fixed-width lookbehinds (checked after the whole name is read once:
#: ``--[\w-]*token`` backtracked over every dash of a long ``-----`` run, from every one of them).
_KEY_FLAG_END = "(?:" + "|".join(
    f"(?<={who}{sep}key)" for who in ("api", "wandb", "access", "secret", "auth") for sep in ("_", "-", "")
) + "|(?<=token)|(?<=secret)|(?<=password)|(?<=passwd))"


def _rx(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A kind's regex, compiled when a text first holds one of its hints (most commands never meet a
    private key or a JWT: compiling all the kinds cost every cold command ~30 ms)."""
    return LazyPattern(pattern, flags)  # type: ignore[return-value]


PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu"
OPENSSH_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACCxO38tKA0yv1SzOvTWhmbyG6vWFqSJwlv7QJ9wTOqMtwAAAJi8Nc5RvDXO"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
W = "0123456789abcdef0123456789abcdef01234567"  # a W&B-shaped key used by the examples

KINDS: list[SecretKind] = [
    SecretKind(
        "private_key_block",
        # PEM (RSA, EC, DSA, PKCS#8, encrypted), OpenSSH and PGP private keys, with real or
        # escaped (\n in JSON) line breaks; in a block cut before its END line, the base64 lines that follow
        _rx(r"(-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)(?P<secret>"
            r"(?:(?!-----BEGIN ).){1,20000}?(?=-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----)"  # the whole block
            r"|(?:(?:\r?\n|\\n)(?:[^\n\\]*?\s)?[A-Za-z0-9+/=]{20,})+)", re.S),  # cut before END: its base64 lines
        ("-----begin",),
        (f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----",
         f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",
         f"-----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_BODY}\n-----END OPENSSH PRIVATE KEY-----",
         '{"key": "-----BEGIN EC PRIVATE KEY-----\\n' + PEM_BODY.replace("\n", "\\n") + '\\n-----END EC PRIVATE KEY-----\\n"}',
         f"(Worker pid=3) -----BEGIN PRIVATE KEY-----\n(Worker pid=3) {PEM_BODY}"),
        # (a certificate's 64-character body lines look like key lines and are hidden by key_material_line)
        ("ca_file: ca.pem holds a -----BEGIN CERTIFICATE----- block",
         "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"),
    ),
    SecretKind(
        "key_material_line",
        # a line of a private-key block whose BEGIN line was cut away (a log excerpt that starts
        # inside the block): 60-76 base64 characters, mixed case and digits, ending the line (or a
        # quoted value on it)
        # (it starts with the character before the key line: see SecretKind.redact)
        _rx(r"(?m)[\s'\"n](?:(?<=[\s'\"])|(?<=\\n))"
            r"(?P<secret>(?=[A-Za-z0-9+/]{60})(?=[A-Za-z0-9+/]{0,75}[A-Z])(?=[A-Za-z0-9+/]{0,75}[a-z])(?=[A-Za-z0-9+/]{0,75}\d)"
            r"[A-Za-z0-9+/]{60,76}={0,2})(?=(?:\\n|['\",\]}])*[ \t]*$)"),
        (),  # no literal to look for: runs on every text, with a newline in front (SecretKind.redact)
        ("(Worker pid=3) MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
         "QyNTUxOQAAACCxO38tKA0yv1SzOvTWhmbyG6vWFqSJwlv7QJ9wTOqMtwAAAJi8Nc5RvDXO\n-----END OPENSSH PRIVATE KEY-----",
         'notes: "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu"'),
        ("sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "digest 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
         "saved /checkpoints/root/gsm8k-grpo/trial_20250101_120000/default/epoch1epochstep99globalstep99",
         "image data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="),
    ),
    SecretKind(
        "key_block_tail",
        # the last, short line of a private key's body, right above its END line (an excerpt that starts
        # inside the block has no BEGIN line; its full-width lines are key_material_line's)
        _rx(r"(?:(?<![A-Za-z0-9+/=])|(?<=\\n))(?P<secret>[A-Za-z0-9+/]{4,76}={0,2})[ \t]*"
            r"(?=(?:\r?\n|\\n)[^\n]{0,120}?-----END (?:[A-Z0-9]+ )*PRIVATE KEY)"),
        ("-----end",),
        ("MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\nDXO8bJ6ZGQ==\n-----END PRIVATE KEY-----",
         "(Worker pid=3) QyNTUxOQAAACCxO38t\n(Worker pid=3) -----END OPENSSH PRIVATE KEY-----"),
        ("-----END CERTIFICATE-----", "done\n-----END PUBLIC KEY-----"),
    ),
    SecretKind(
        "jwt",
        _rx(r"(?<![\w-])(?P<secret>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"),
        ("eyj",),
        (f"id_token={JWT}", f"session {JWT} expired"),
        ("eyJhbGciOiJIUzI1NiJ9 is the base64 of a header", "version eyJ.eyJ.x"),
    ),
    SecretKind(
        "authorization_header",
        _rx(r"(?i)(authorization\\?['\"]?\s*[:=]\s*\\?['\"]?(?:(?:bearer|basic|token)\s+)?+)(?P<secret>(?!\[REDACTED\])[^\s'\",\\]+)"),
        ("authorization",),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
         '{"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz012345"}',
         "headers: {\\\"Authorization\\\": \\\"Basic dXNlcjpwYXNzd29yZA==\\\"}"),
        ("the authorization server rejected the request", "Authorization failed for user alice"),
    ),
    SecretKind(
        "bearer_token",
        _rx(r"(?<![\w-])(Bearer\s+)(?P<secret>(?!\[REDACTED\])[A-Za-z0-9._~+/=-]{16,})"),
        ("bearer",),
        ("curl -H 'X-Api: Bearer abcdefghijklmnopqrstuvwxyz012345' http://h",),
        ("Bearer token expired, refreshing", "Bearer authentication is required"),
    ),
    SecretKind(
        "url_password",
        # user:password@host and :password@host (redis://:pw@host); the user name stays
        # (bounded runs: an unbounded scheme was scanned from every letter of a long word, 40,000 letters
        # before :// took 20 s)
        _rx(r"(?i)([a-z][a-z0-9+.-]{0,30}://[^\s:/@'\"]{0,256}:)(?P<secret>(?!\[REDACTED\])[^\s@/'\"]{1,512})(?=@)"),
        ("://",),
        ("connecting to https://trainer:s3cr3tPassw0rd@registry.example.com/v2",
         "REDIS_URL=redis://:hunter2@10.0.0.5:6379/0",
         "postgresql://admin:pw@db:5432/runs",
         "https://trainer:p%40ss%3Aw0rd@registry.example.com/v2"),
        ("http://localhost:8000/v1/chat/completions", "ssh://git@github.com:22/org/repo.git",
         "see https://example.com/a:b@c"),
    ),
    SecretKind(
        "openai_anthropic_key",
        _rx(r"(?<![\w-])(?P<secret>sk-(?:proj-|ant-(?:api\d+-)?)?[A-Za-z0-9_-]{16,})"),
        ("sk-",),
        ("client key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
        ("task-sk-1234", "disk-sk-short"),
    ),
    SecretKind(
        "huggingface_token",
        _rx(r"(?<![\w-])(?P<secret>hf_[A-Za-z0-9]{20,})"),
        ("hf_",),
        ("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",),
        ("hf_hub_download(repo_id='Qwen/Qwen2.5-7B')", "HF_HOME=/data/hf_cache"),
    ),
    SecretKind(
        "slack_token",
        _rx(r"(?<![\w-])(?P<secret>(?:xox[abposr]|xapp)-[A-Za-z0-9-]{10,})"),
        ("xox", "xapp-"),
        ("SLACK xoxb-1234567890-abcdefghijkl", "SLACK_APP=xapp-1-A0123456789-abcdef"),
        ("xoxo hugs", "the xapp-config file"),
    ),
    SecretKind(
        "github_token",
        _rx(r"(?<![\w-])(?P<secret>gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        ("GH github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV012345",
         "push with ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
        ("ghp_short", "github_pat_ is the prefix of a fine-grained token"),
    ),
    SecretKind(
        "gitlab_token",
        _rx(r"(?<![\w-])(?P<secret>gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,})"),
        ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-"),
        ("git clone https://oauth2:glpat-AbCdEfGhIjKlMnOpQrSt@gitlab.example.com/rl/run.git",
         "GITLAB_TOKEN glpat-xY12_zW34-vU56tS78rQ90"),
        ("glpat- is how GitLab personal tokens start", "glpat-short"),
    ),
    SecretKind(
        "nvidia_api_key",
        _rx(r"(?<![\w-])(?P<secret>nvapi-[A-Za-z0-9_-]{20,})"),
        ("nvapi-",),
        ("NGC key nvapi-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",),
        ("nvapi- keys come from build.nvidia.com", "nvapi-docs"),
    ),
    SecretKind(
        "slack_webhook",
        # the path of an incoming webhook is its secret: whoever has it posts to the channel
        _rx(r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<secret>[A-Za-z0-9_-]{6,}(?:/[A-Za-z0-9_-]+){0,4})"),
        ("hooks.slack.com",),
        ("SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx",
         "posting alert to https://hooks.slack.com/workflows/T01ABCDEF/A02BCDEFG/123456789/abcDEF"),
        ("see https://api.slack.com/messaging/webhooks", "https://hooks.slack.com/ is Slack's webhook host"),
    ),
    SecretKind(
        "azure_account_key",
        # storage connection strings: AccountKey=, SharedAccessKey= (Service Bus, Event Hubs), sig= of a SAS
        _rx(r"(?i)((?:account|sharedaccess)key\s*=\s*)(?P<secret>(?!\[REDACTED\])[A-Za-z0-9+/=]{16,})"),
        ("accountkey", "sharedaccesskey"),
        ("DefaultEndpointsProtocol=https;AccountName=runs;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
         "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=AbCdEfGhIjKlMnOpQrStUvWx0123456789+/=="),
        ("AccountKey is missing from the connection string", "AccountName=runs;EndpointSuffix=core.windows.net"),
    ),
    SecretKind(
        "cookie_header",
        # a Cookie or Set-Cookie header carries session ids: its whole value goes
        _rx(r"(?i)(\b(?:set-)?cookie\\?['\"]?[ \t]*:[ \t]*\\?['\"]?)(?P<secret>(?!\[REDACTED\])[^\s'\"\\][^\n'\"\\]{0,4095})"),
        ("cookie",),
        ("Cookie: sessionid=8f3a9c2e7b1d4f6a; csrftoken=x",
         '{"Set-Cookie": "session=eyJ1c2VyIjoxfQ.Zx9; HttpOnly"}',
         "request headers: Cookie: _ga=GA1.2.3; connect.sid=s%3Aabc123def456"),
        ("the cookie consent banner", "cookies: 3", "set_cookie_policy strict"),
    ),
    SecretKind(
        "aws_presigned_url",
        # a presigned S3 URL works for anyone until it expires: its signature and session token go
        _rx(r"(?i)([?&]X-Amz-(?:Signature|Security-Token)=)(?P<secret>(?!\[REDACTED\])[^&\s'\"]{8,})"),
        ("x-amz-",),
        ("GET https://ckpt.s3.amazonaws.com/model.pt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20250101T000000Z"
         "&X-Amz-Expires=3600&X-Amz-Signature=4f2c8a1b9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a",
         "url ...&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ&X-Amz-Expires=60"),
        ("X-Amz-Signature header missing", "X-Amz-Date=20250101T000000Z"),
    ),
    SecretKind(
        "google_api_key",
        _rx(r"(?<![\w-])(?P<secret>AIza[0-9A-Za-z_-]{35})"),
        ("aiza",),
        ("key AIzaSyA1234567890abcdefghijklmnopqrstuv",),
        ("AIzaSy is how Google keys start",),
    ),
    SecretKind(
        "aws_access_key",
        _rx(r"(?<![\w-])(?P<secret>(?:AKIA|ASIA)[A-Z0-9]{16})(?![\w-])"),
        ("akia", "asia"),
        ("aws key AKIAIOSFODNN7EXAMPLE",),
        ("ASIA is a continent", "AKIAIOSFODNN7EXAMPLEXX is too long"),
    ),
    SecretKind(
        "wandb_local_key",
        _rx(r"(?<![\w-])(?P<secret>local-[0-9a-f]{40})(?![\w-])"),
        ("local-",),
        (f"key local-{W}",),
        ("local-rank 0", "/tmp/local-0123/ckpt"),
    ),
    SecretKind(
        "wandb_login",
        # `wandb login KEY` on a command line, and wandb.login(key='KEY') in Python
        # (the arguments before key= are searched on the line, 400 characters at most: a wandb.login( never
        # closed was scanned to the end of the text from every occurrence, 100 s for 3 MB)
        _rx(r"(?i)(\bwandb\s+login\s+(?:--\S+\s+)*+|\bwandb\.login\s*\([^)\n]{0,400}?\bkey\s*=\s*\\?['\"]?)"
            r"(?P<secret>(?!\[REDACTED\]|None\b|os\.)[^\s'\",)\\]+)"),
        ("wandb",),
        (f"wandb login {W}", f"wandb login --relogin {W}", f"wandb.login(key='{W}')",
         f'wandb.login(anonymous="never", key="{W}")'),
        ("wandb login", "wandb.login(key=os.environ['WANDB_API_KEY'])", "wandb: Logged in as alice"),
    ),
    SecretKind(
        "netrc_password",
        _rx(r"(?i)(\bmachine\s+\S+\s+login\s+\S+\s+password\s+)(?P<secret>(?!\[REDACTED\])\S+)"),
        ("machine",),
        (f"machine api.wandb.ai login user password {W}",),
        ("machine learning login page",),
    ),
    SecretKind(
        "secret_cli_flag",
        _rx(rf"(?i)((?<![\w-])--[\w-]*+{_KEY_FLAG_END}(?:=|\s+))(?P<secret>(?!\[REDACTED\]|\$\{{|--)[^\s'\"]+)"),
        ("--",),
        (f"--wandb-key {W}", "--hf-token=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "--db-password hunter2",
         "--sglang-router-api-key sk-x-12345678"),
        ("--input-key prompt --max-tokens-per-gpu 4096", "--wandb-key ${WANDB_KEY}", "--token-budget 4096",
         "--max-new-tokens 1024"),
    ),
    SecretKind(
        "secret_args_dump",
        # Megatron/slime print their arguments as `name ....... value`
        _rx(rf"(?i)((?<![\w/\\-])(?=[\w-]++\s+\.{{3}}){_NAME}\s+\.{{3,}}\s+)(?P<secret>(?!None\b|\[REDACTED\])\S+)"),
        ("...",),
        (f"  wandb_key ....................................... {W}", "  hf_token ..... hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"),
        ("  max_tokens_per_gpu .............................. 4096", "  wandb_key ........ None",
         "  tokenizer_type .......... HuggingFaceTokenizer"),
    ),
    SecretKind(
        "secret_assignment",
        # name=value and name: value in env files, YAML, JSON (also escaped inside a JSON
        # string), Python reprs (Namespace(wandb_key='...')), dicts and os.environ["..."]
        # (quotes may come doubled: a dict repr inside a YAML single-quoted string, '{''hf_token'': ''...''}')
        _rx(rf"(?i)((?<![\w/\\-])(?=[\w-]++{_QUOTE}{{0,2}}\]?\s*[=:]){_NAME}{_QUOTE}{{0,2}}\]?\s*(?:=|:(?!//))\s*(?P<q>{_QUOTE}{{1,2}})?)"
            rf"(?P<secret>{_NOT_A_VALUE}(?(q)[^'\"\\\n]+|(?:[^\s'\",}})\\]|\\(?!['\"]))+))"),
        ("key", "token", "secret", "password", "passwd", "passphrase", "credential"),
        ("WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567",
         f'{{"wandb_api_key": "{W}"}}',
         f"Namespace(lr=1e-06, wandb_key='{W}', seed=1)",
         f"{{'wandb_key': '{W}', 'seed': 1}}",
         f"env_vars: '{{''WANDB_API_KEY'': ''{W}'', ''seed'': 1}}'",
         f'\\"WANDB_API_KEY\\": \\"{W}\\"',
         'os.environ["HF_TOKEN"] = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"',
         "password: hunter2",
         "  db_password: pw",
         "client_secret=Zm9vYmFyYmF6cXV4",
         "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
         "SLACK_BOT_TOKEN: 'abc.def-ghi-42'",
         "db_password: $ecr3t!Pass"),
        ("tokenizer_path: /models/Qwen2.5-7B-Instruct",
         "  max_new_tokens: ${gconfig.max_new_tokens}",
         '{"max_tokens_per_mb": 20480000, "tokenizer": "/models/qwen/tokenizer"}',
         "  pad_token: <|endoftext|>",
         "  eos_token: </s>",
         "  tokenizer_path: ${tokenizer_path}",
         "token_budget: 4096",
         "max_token_len: 16384",
         "api_key: ${oc.env:OPENAI_API_KEY}",
         "api_key: $OPENAI_API_KEY",
         "wandb_api_key: null",
         "password: None",
         "input_key: prompt",
         "secret_name: runs",
         "global_step: 1200  tokens/s: 3400.5",
         "eval token: 12",
         "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
         "pad_token_id: 151643",
         "max_new_tokens=1024",
         "api_key: ***",
         "client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)",
         "login(token=args.hf_token)",
         "/etc/passwd: outside the allowed roots (/tmp/allowed)",
         "~/.cache/huggingface/token: no such file or directory"),
    ),
    SecretKind(
        "secret_on_next_line",
        # the value one line down: a YAML block scalar (hf_token: >-, password: |) or a shell line
        # continuation (export WANDB_API_KEY=\); secret_assignment leaves those names alone
        _rx(rf"(?i)((?<![\w/\\-])(?=[\w-]++{_QUOTE}{{0,2}}\s*[=:]){_NAME}{_QUOTE}{{0,2}}\s*"
            rf"(?::[ \t]*[|>][-+]?[1-9]?[ \t]*(?:#[^\n\\]*)?|=[ \t]*\\{{1,2}})(?:\r?\n|\\n){_NEXT_LINE_PREFIX}[ \t]*{_QUOTE}?)"
            rf"(?P<secret>{_NOT_A_VALUE}[^\s'\"\\#]+)"),
        ("key", "token", "secret", "password", "passwd", "passphrase", "credential"),
        ("hf_token: >-\n  AbCdEfGhIjKlMnOpQrStUvWxYz0123",
         f"  wandb_api_key: |\n    {W}\n",
         f"export WANDB_API_KEY=\\\n    {W}",
         f'WANDB_API_KEY=\\\n  "{W}" python train.py'),
        ("description: >-\n  a long text",
         "hf_token: >-\n  ${HF_TOKEN}",
         "max_new_tokens=\\\n  1024"),
        _rx(r"[:=][ \t]*(?:[|>][-+]?[1-9]?[ \t]*(?:#[^\n\\]*)?|\\{1,2})(?:\r?\n|\\n)"),
    ),
    SecretKind(
        "numeric_password",
        # a password may be all digits (73915286); other secret names keep their numbers (eval token: 12)
        _rx(rf"(?i)((?<![\w/\\-])(?=[\w-]++{_QUOTE}{{0,2}}\]?\s*[=:])[\w-]++(?:(?<=password)|(?<=passwd)|(?<=passphrase))"
            rf"{_QUOTE}{{0,2}}\]?\s*(?:=|:(?!//))\s*{_QUOTE}{{0,2}})(?P<secret>\d{{4,}})(?![\w.])"),
        ("password", "passwd", "passphrase"),
        ("password: 73915286", "DB_PASSWORD=20240601", '{"redis_passwd": "918273"}', "SMTP_PASSPHRASE: 4821"),
        ("password_min_length: 12", "password: 12", "max_retries: 1000", "eval token: 12"),
    ),
    SecretKind(
        "url_encoded_password",
        # user:password@host inside a URL that was itself URL-encoded (a redirect target, a logged query)
        # (the password stops at an encoded / or @: a run of %3A%2F%2F is not scanned 512 characters a time)
        _rx(r"(?i)([a-z][a-z0-9+.-]{0,30}%3A%2F%2F[^\s:/@%'\"&]{0,256}%3A)"
            r"(?P<secret>(?!\[REDACTED\])(?:[^\s@/'\"&%]|%(?!2F|40)[0-9A-F]{2}){1,256})(?=%40)"),
        ("%3a%2f%2f",),
        ("redirect=https%3A%2F%2Ftrainer%3As3cr3tPassw0rd%40registry.example.com%2Fv2",
         "REDIS_URL=redis%3A%2F%2F%3Ahunter2%40redis%3A6379"),
        ("next=https%3A%2F%2Fexample.com%2Fa%3Ab", "next=https%3A%2F%2Fhost%3A8000%2Fv1"),
    ),
]


# ------------------------------------------------------------------ functions -------

_HINTS: tuple[str, ...] = tuple(sorted({h for kind in KINDS for h in kind.hints}))
_ALWAYS: tuple[SecretKind, ...] = tuple(kind for kind in KINDS if not kind.hints)


def _replace(m: re.Match[str]) -> str:
    whole, start, end = m.group(0), m.start("secret") - m.start(), m.end("secret") - m.start()
    return whole[:start] + REDACTED + whole[end:]


#: Terminal escape sequences: CSI (colours, cursor moves), OSC (titles, links) and the
#: two-character escapes. A colour code between a key's name and its value
#: (``\x1b[33mWANDB_API_KEY\x1b[0m=...``) hides the name from every pattern.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences (a lone ESC is dropped too)."""
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text).replace("\x1b", "")


def redact(text: str) -> str:
    """``text`` with every secret of every kind replaced by ``[REDACTED]``.

    Terminal escape sequences are stripped first (:func:`strip_ansi`): they would split a
    secret's name from its value, and nothing rlmedic shows needs a log's colours.
    Fast on ordinary text: one lower-cased copy and a substring search per hint decide
    which kinds' regexes run at all (usually none for a log line).
    """
    if not text:
        return text
    if "\x1b" in text:
        text = strip_ansi(text)
    low = text.lower()
    hinted = any(map(low.__contains__, _HINTS))
    for kind in KINDS if hinted else _ALWAYS:
        if not kind.hints or any(h in low for h in kind.hints):
            text = kind.redact(text)
    return text


def secret_kinds(text: str) -> list[str]:
    """Names of the secret kinds present in ``text`` (for tests and audits)."""
    text = strip_ansi(text)
    low = text.lower()
    return [kind.name for kind in KINDS if (not kind.hints or any(h in low for h in kind.hints)) and kind.search(text)]


def names_secret(key: str) -> bool:
    """True when a field or dict key names a secret (``wandb_key``, ``HF_TOKEN``; not ``max_new_tokens``)."""
    low = key.lower()
    return low.endswith(SECRET_NAME_ENDINGS) and not low.endswith(TOKENIZER_TOKEN_NAMES)


_PLACEHOLDER = _rx(rf"(?i)^{_NOT_A_VALUE}")


def _secret_value(value: Any) -> bool:
    """A value under a secret-named key that is worth hiding (not empty, null, a number or ``${...}``)."""
    return isinstance(value, str) and bool(value.strip()) and bool(_PLACEHOLDER.match(value.strip()))


def redact_value(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` with every string redacted, and every value under a secret-named key hidden.

    Walks dicts, lists, tuples, sets, dataclass instances and pydantic models (50 levels at
    most); other objects come back as they are, and so does ``value`` itself where nothing
    changed. ``{"wandb_key": "abc"}`` becomes ``{"wandb_key": "[REDACTED]"}`` even though
    ``abc`` alone looks like nothing.
    """
    if isinstance(value, str):
        return redact(value)
    if _depth > 50 or isinstance(value, (bytes, bytearray, int, float, bool, type(None))):
        return value
    if isinstance(value, dict):
        return {k: _field(k, v, _depth) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple: its field names count
            return type(value)(*(_field(k, v, _depth) for k, v in zip(value._fields, value)))
        return type(value)(redact_value(v, _depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = copy.copy(value)
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            new = _field(f.name, v, _depth)
            if new is not v:
                object.__setattr__(out, f.name, new)
        return out
    model_fields = getattr(type(value), "model_fields", None)
    if isinstance(model_fields, dict) and hasattr(value, "model_copy"):  # a pydantic v2 model
        update = {name: _field(name, getattr(value, name), _depth) for name in model_fields}
        update = {k: v for k, v in update.items() if v is not getattr(value, k)}
        return value.model_copy(update=update) if update else value
    return value


def _field(key: Any, value: Any, depth: int) -> Any:
    """One entry of a mapping or object: hidden when its name says secret, else walked."""
    if isinstance(key, str) and names_secret(key) and _secret_value(value):
        return REDACTED
    return redact_value(value, depth + 1)
