"""A test cluster's certificates: one CA, serving certificates and client identities.

Kubernetes authenticates its own components and kubectl by client certificates: the common name
is the user, each organisation a group (``system:masters`` for the admin, ``system:nodes`` and
``system:node:<name>`` for a kubelet, as NodeRestriction requires).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = datetime.timedelta(days=2)
"""A test cluster lives for a run; its certificates a little longer, never for years."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, PEM."""

    certificate: str
    key: str


class ClusterCA:
    """A fresh certificate authority that signs the cluster's serving and client certificates."""

    def __init__(self, common_name: str = "kubernetes") -> None:

        self._now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - datetime.timedelta(minutes=5))
            .not_valid_after(self._now + VALID_FOR)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(signs_certificates=True), critical=True)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def certificate(self) -> str:

        return self._certificate.public_bytes(serialization.Encoding.PEM).decode()

    def serving(self, common_name: str, names: Sequence[str], addresses: Sequence[str]) -> Issued:
        """A server's certificate for the DNS ``names`` and IP ``addresses`` it is reached by."""

        alternatives: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
        alternatives += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        return self._issue(
            common_name,
            (),
            [ExtendedKeyUsageOID.SERVER_AUTH],
            x509.SubjectAlternativeName(alternatives),
        )

    def client(self, user: str, groups: Sequence[str] = ()) -> Issued:
        """A client identity: ``user`` in ``groups``, as the API server reads the subject."""

        return self._issue(user, groups, [ExtendedKeyUsageOID.CLIENT_AUTH], None)

    def _issue(
        self,
        common_name: str,
        organizations: Sequence[str],
        usages: list[x509.ObjectIdentifier],
        alternatives: x509.SubjectAlternativeName | None,
    ) -> Issued:

        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now - datetime.timedelta(minutes=5))
            .not_valid_after(self._now + VALID_FOR)
            .add_extension(_key_usage(signs_certificates=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if alternatives is not None:
            builder = builder.add_extension(alternatives, critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        pem = serialization.Encoding.PEM
        key_pem = key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return Issued(certificate.public_bytes(pem).decode(), key_pem.decode())


def signing_key() -> Issued:
    """The key pair that signs ServiceAccount tokens (``certificate`` holds the public key)."""

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return Issued(public.decode(), private.decode())


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
