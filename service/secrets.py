"""The one owner of secrets: which names hold one, how a text is shown without them, and where a
URL carries a password.

Everything that prints or logs configuration, or a message that may quote it (check-config, log
lines, configuration errors, the lookup database's errors, Spark's own redaction), asks this
module; it imports nothing of the service, so that every floor may.

The name rule. A name (an environment variable, a librdkafka property or a Spark property) is split
into lower-case words at ".", "_", "-" and camelCase boundaries; it names a secret when
  - a word contains password, passwd, passphrase, secret, token, credential or jaas, or is sas
    (an Azure shared access signature), or the words "user info" / "oauthbearer config" appear;
  - or it has the word "key" right after secret, access, private, encryption, account, api,
    signing, master, shared or sse (s3a.secret.key, s3a.access.key, fs.azure.account.key.<host>,
    ssl private keys), or right before pem, data or material (ssl.key.pem);
unless its last word says the value only points at or describes the secret (a file, location,
path, class, mechanism, algorithm, size, ...): ssl.key.location, spark.authenticate.secret.file,
fs.s3a.aws.credentials.provider. So OUTPUT_KEY, LEFT_PRIMARY_KEY, LEFT_KEY_FORMAT and
spark.io.encryption.keySizeBits are shown. Independently of names, the user info of every URL
in every value (``https://user:pass@host``) is hidden.

URL passwords. A URL carries a password in its user info (``scheme://user:password@host``) or as a
``password`` query parameter; a libpq ``key=value`` connection string as ``password=...``.
:func:`url_passwords` finds every one a text holds, in every form it may show, to hide it;
:func:`url_password` reads the one a client is given; :func:`redact_url` shows a URL without it,
:func:`without_user_info` without its user info.
"""
from __future__ import annotations

import json
import re
from typing import Iterable
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

REDACTED = "*****"
_SECRET_WORDS = ("password", "passwd", "passphrase", "secret", "token", "credential", "jaas")
_KEY_QUALIFIERS = frozenset({"secret", "access", "private", "encryption", "account", "api", "signing",
                             "master", "shared", "sse"})
_KEY_MATERIAL = frozenset({"pem", "data", "material"})
_DESCRIBES_ONLY = frozenset({"file", "location", "path", "dir", "provider", "class", "url", "endpoint",
                             "mechanism", "method", "algorithm", "type", "format", "size", "bits", "length",
                             "enabled", "id", "name"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
URL_USER_INFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@")

# Secrets shorter than this are hidden where they are printed by name, but not searched for in free
# text: replacing every occurrence of two letters would garble the logs.
MIN_SCRUBBED_LENGTH = 4

# Spark's own redaction of its UI, event logs and plans (default: secret|password|token|access.key),
# widened towards the rule of is_secret_name (session.py sets it). Spark also matches it against values.
SPARK_REDACTION_REGEX = (r"(?i)secret|password|passwd|passphrase|token|credential|jaas|access[.]?key"
                         r"|account[.]key|private[.]key|encryption[.]key|oauthbearer[.]config|user[._]?info")


def _words(name: str) -> list[str]:
    return [w.lower() for part in re.split(r"[._\-\s]+", name) for w in _WORDS.findall(part)]


def is_secret_name(name: str) -> bool:
    """Whether the value of this variable or property is a secret (see the rule above)."""
    words = _words(name)
    if not words or words[-1] in _DESCRIBES_ONLY:
        return False
    if any(s in w for w in words for s in _SECRET_WORDS) or "sas" in words:
        return True
    pairs = list(zip(words, words[1:]))
    for first, second in pairs:
        if (first, second) in (("user", "info"), ("oauthbearer", "config")) or first == "userinfo":
            return True
        if second == "key" and first in _KEY_QUALIFIERS:
            return True
        if first == "key" and second in _KEY_MATERIAL:
            return True
    return "userinfo" in words


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without URL user info and without any of ``secrets`` (also JSON-escaped), each
    where it stands as a value of its own: not where it is part of a longer word (a password
    ``post`` leaves ``postgresql`` alone, and ``s3cret`` leaves ``s3cret2``)."""
    text = URL_USER_INFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
        for form in {secret, escaped}:
            text = _value_of_its_own(form).sub(REDACTED, text)
    return text


def _value_of_its_own(secret: str) -> re.Pattern:
    """``secret`` where no letter or digit continues it on either side (where its own first or
    last character is one: a secret that starts or ends with punctuation is matched there as is)."""
    before = r"(?<![A-Za-z0-9])" if secret[:1].isalnum() else ""
    after = r"(?![A-Za-z0-9])" if secret[-1:].isalnum() else ""
    return re.compile(before + re.escape(secret) + after)


def redact(name: str, value):
    """A variable's (or property's) value as it may be shown."""
    if value is None:
        return None
    if is_secret_name(name):
        return REDACTED
    return redact_text(value) if isinstance(value, str) else value


# -- URL passwords ------------------------------------------------------------------------------

# A URL in a text: its scheme, what follows up to a query, a fragment or a blank, and its query.
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://([^\s?#]*)(?:\?([^\s#]*))?")
_CONNINFO_PASSWORD = re.compile(r"(?i)\bpassword\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))")


def url_passwords(text: str | None) -> list[str]:
    """Every password the URLs in ``text`` carry (or, in a text without a URL, a ``key=value``
    connection string's ``password=``), each as written and percent-decoded, longest first: the
    value to hide wherever it shows. A user name is no secret (``postgresql://postgres@db/postgres``
    must not lose every ``postgres``); within a URL the whole user info is hidden anyway
    (:data:`URL_USER_INFO`).

    The user info ends at the first ``@`` before any ``/`` (as libpq and ``URL_USER_INFO`` read
    it); where a ``@`` or a ``/`` follows, the password as far as the last ``@`` is hidden too,
    should a client read it so (an unencoded ``@`` or ``/`` in a password)."""
    found = []
    urls = list(_URL.finditer(text or ""))
    for url in urls:
        rest, query = url.group(1), url.group(2) or ""
        infos = {m.group(1)} if (m := re.match(r"([^/@]+)@", rest)) else set()
        if "@" in rest:
            infos.add(rest.rpartition("@")[0])
        found += [info.split(":", 1)[1] for info in infos if ":" in info]
        for param in query.split("&"):
            name, _, value = param.partition("=")
            if name.lower() == "password" and value:
                found.append(value)
    if not urls:
        found += [quoted or bare for quoted, bare in _CONNINFO_PASSWORD.findall(text or "")]
    forms = {form for secret in found for form in (secret, unquote(secret))}
    return sorted((s for s in forms if s), key=len, reverse=True)


def password_forms(url: str, password: str | None = None) -> list[str]:
    """Every form in which a client's password may show: given apart (``password``), or in its URL
    (:func:`url_passwords`); longest first."""
    forms = set(url_passwords(url)) | ({password, unquote(password)} if password else set())
    return sorted((s for s in forms if s), key=len, reverse=True)


def url_password(url: str | None) -> str | None:
    """The password a client reads from a URL, decoded: its user info's, else its last
    ``password`` query parameter's; None without one."""
    if not url:
        return None
    parts = urlsplit(url)
    password = parts.password or (parse_qs(parts.query).get("password") or [None])[-1]
    return unquote(password) if password else None


def redact_url(url: str) -> str:
    """The URL without its password: user, hosts, ports, database and other parameters kept
    (``postgresql://app:pw@db:5432/shop?password=pw`` -> ``postgresql://app@db:5432/shop``).
    A ``key=value`` connection string loses its ``password=...``."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", url, re.S)
    if match is None:
        return re.sub(r"(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", "password=***", url)
    scheme, rest = match.groups()
    rest = rest.partition("#")[0]
    rest, _, query = rest.partition("?")
    if "@" in rest:  # userinfo ends at the last '@' before the query (a password may hold '@' or '/')
        userinfo, _, rest = rest.rpartition("@")
        user = userinfo.split(":", 1)[0]
        rest = f"{user}@{rest}" if user else rest
    params = [p for p in query.split("&") if p and p.split("=", 1)[0].lower() != "password"]
    return f"{scheme}://{rest}" + (f"?{'&'.join(params)}" if params else "")


def without_user_info(url: str) -> str:
    """The URL without its user info (``https://user:pass@registry:8081`` ->
    ``https://registry:8081``): a server named in a message."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
