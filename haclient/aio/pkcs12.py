"""PKCS12 key and trust stores (``transport.*StoreType=PKCS12``) read for Python's ``ssl``.

How this works: Python's ``ssl`` reads PEM only, so a PKCS12 store is read with
``cryptography`` (the ``pkcs12`` extra: ``pip install 'haclient[pkcs12]'``) and handed over as
PEM. A trust store's certificates go to the context as ``cadata`` (in memory). A key store's
key and certificate chain must reach ``SSLContext.load_cert_chain`` as files: they are written
to a private temporary directory (mode 0700), the key encrypted with a one-time random password,
loaded, and deleted at once; the store's own password is never written anywhere.

Stores made by Java's ``keytool`` (``-storetype PKCS12``, its default since Java 9) and by
``openssl pkcs12 -export`` are read alike. A key store holds one key here: ``transport.keyAlias``
is not checked, as for PEM.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from pathlib import Path
from typing import Any

from haclient.errors import ConfigurationError

__all__ = ["load_key_store", "trusted_certificates"]


def _read(path: str, password: str | None, option: str) -> Any:
    """The PKCS12 store at ``path``, decrypted with ``password``.

    Raises:
        ConfigurationError: It cannot be read, is not PKCS12, or the password is wrong.
    """
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ModuleNotFoundError as exc:  # a connect() error, at once: a configuration to fix
        raise ConfigurationError(
            f"{option}: a PKCS12 store needs {exc.name}, which the 'pkcs12' extra installs: "
            "pip install 'haclient[pkcs12]'",
            option=option,
        ) from None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigurationError(
            f"{option}: cannot read {path!r}: {reason}", option=option
        ) from None
    secret = password.encode("utf-8") if password else None
    try:
        return pkcs12.load_pkcs12(data, secret)
    except ValueError:  # cryptography says only that: a wrong password, or not PKCS12 at all
        hint = "its password (wrong or missing?)" if data[:1] == b"\x30" else "the file"
        raise ConfigurationError(
            f"{option}: {path!r} cannot be read as a PKCS12 store: check {hint}",
            option=option,
        ) from None


def trusted_certificates(path: str, password: str | None) -> str:
    """The certificates of the PKCS12 trust store at ``path``, as PEM text (``cadata``).

    Raises:
        ConfigurationError: It cannot be read, or it holds no certificate.
    """
    from cryptography.hazmat.primitives.serialization import Encoding

    option = "transport.trustStoreLocation"
    store = _read(path, password, option)
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise ConfigurationError(f"{option}: {path!r} holds no certificate", option=option)
    return "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in certificates)


def load_key_store(context: ssl.SSLContext, path: str, password: str | None) -> None:
    """Load the key and certificate chain of the PKCS12 key store at ``path`` into
    ``context`` (see the module docstring for the files it writes and deletes).

    Raises:
        ConfigurationError: It cannot be read, or holds no key with its certificate.
    """
    from cryptography.hazmat.primitives import serialization

    option = "transport.keyStoreLocation"
    store = _read(path, password, option)
    if store.key is None or store.cert is None:
        raise ConfigurationError(
            f"{option}: {path!r} holds no private key with its certificate", option=option
        )
    chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
    once = secrets.token_urlsafe(32)
    key = store.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once.encode("ascii")),
    )
    with tempfile.TemporaryDirectory(prefix="haclient-pkcs12-") as directory:
        os.chmod(directory, 0o700)
        cert_file, key_file = Path(directory, "chain.pem"), Path(directory, "key.pem")
        cert_file.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain))
        key_file.write_bytes(key)
        try:
            context.load_cert_chain(cert_file, key_file, once)
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"{option}: the key and certificate in {path!r} cannot be used ({exc.reason})",
                option=option,
            ) from None
