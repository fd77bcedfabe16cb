"""Security for the sandbox clusters: a self-made CA, broker and client certificates, SCRAM users,
and the broker properties for an authenticated, authorizing cluster.

Two modes (`replicator sandbox up --secure scram|mtls`):
- `scram`: clients use SASL_SSL with SCRAM-SHA-512; users are created by `kafka-storage format
  --add-scram` (KRaft bootstrap), so no admin call is needed before the first login.
- `mtls`: clients use SSL with a certificate; the principal is the certificate's CN.

Either way the controller listener is SSL with client certificates (only the broker holds one with
CN=broker), `StandardAuthorizer` denies what no ACL allows, and the super users are exactly the
broker and the `admin` principal the tests use. Every other principal (`reader`, `writer`, ...) has
no rights until an ACL grants them.

All material lives in `<sandbox dir>/secure/` (private keys and password files 0600) and is made
once per sandbox dir, so a restart keeps the same CA and credentials.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MODES = ("scram", "mtls")
MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
BROKER = "broker"
# Client principals the sandbox provisions; the ACL tests grant them rights (super users need none).
PRINCIPALS = (ADMIN, "reader", "writer", "other")
_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# CN=reader,O=replicator-sandbox -> User:reader (the default would be the whole DN).
_PRINCIPAL_RULES = r"RULE:^CN=([A-Za-z0-9._-]+)(,.*)?$/$1/,DEFAULT"
_DAY = datetime.timedelta(days=1)


def _crypto():
    # Imported lazily: the plaintext sandbox and the CLI's --help must not pay for it.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def _write_private(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


class CertificateAuthority:
    """A throw-away CA that signs the sandbox's broker and client certificates."""

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.dir = directory
        self.name = name
        self.cert_path = directory / f"{name}.pem"
        self.key_path = directory / f"{name}.key"
        if not (self.cert_path.exists() and self.key_path.exists()):
            self._create()

    def _create(self) -> None:
        x509, hashes, serialization, ec, _, NameOID = _crypto()
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"replicator-sandbox-{self.name}")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - _DAY).not_valid_after(now + 3650 * _DAY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_private(self.key_path, key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, cn: str, cert_path: Path, key_path: Path, *, server: bool = False,
              hosts: tuple[str, ...] = ("127.0.0.1",), expired: bool = False) -> None:
        """A leaf certificate for `cn`: server certificates name `hosts` as SANs (hostname checks),
        client ones are for TLS client authentication. `expired` makes one that ended yesterday."""
        x509, hashes, serialization, ec, EKU, NameOID = _crypto()
        ca_key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - 30 * _DAY, now - _DAY) if expired else (now - _DAY, now + 825 * _DAY)
        builder = (x509.CertificateBuilder()
                   # RFC 2253 prints the last RDN first: this reads "CN=<cn>,O=replicator-sandbox".
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "replicator-sandbox"),
                                            x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
                   .issuer_name(ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([EKU.SERVER_AUTH, EKU.CLIENT_AUTH] if server
                                                        else [EKU.CLIENT_AUTH]), critical=False))
        if server:
            sans: list = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        # The key file holds key + chain: Kafka's PEM keystore wants both in one file, and librdkafka
        # reads the key from it just as well.
        _write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


@dataclass
class SecurityMaterial:
    """Everything the secure sandbox needs on disk: CA, broker and client certificates, passwords."""

    dir: Path
    mode: str

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown security mode {self.mode!r}; expected one of {', '.join(MODES)}")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = CertificateAuthority(self.dir)
        if not self.broker_keystore.exists():
            self.ca.issue(BROKER, self.dir / "broker.crt", self.dir / "broker.key", server=True)
            _write_private(self.broker_keystore, (self.dir / "broker.key").read_text()
                           + (self.dir / "broker.crt").read_text())
        for principal in (BROKER, *PRINCIPALS):
            if not self.password_file(principal).exists():
                _write_private(self.password_file(principal), secrets.token_urlsafe(18))
            if not self.cert_file(principal).exists():
                self.ca.issue(principal, self.cert_file(principal), self.key_file(principal))

    @property
    def ca_file(self) -> Path:
        return self.ca.cert_path

    @property
    def broker_keystore(self) -> Path:
        return self.dir / "broker-keystore.pem"

    def password_file(self, principal: str) -> Path:
        return self.dir / f"{principal}.password"

    def password(self, principal: str) -> str:
        return self.password_file(principal).read_text().strip()

    def cert_file(self, principal: str) -> Path:
        return self.dir / f"{principal}.crt"

    def key_file(self, principal: str) -> Path:
        return self.dir / f"{principal}.key"

    # --- broker side ---------------------------------------------------------------------------

    def listener_properties(self, port: int, controller_port: int) -> list[str]:
        """Replaces the plaintext sandbox's listener lines."""
        client_protocol = "SASL_SSL" if self.mode == "scram" else "SSL"
        lines = [
            f"listeners=CLIENT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=CLIENT://127.0.0.1:{port}",
            f"listener.security.protocol.map=CLIENT:{client_protocol},CONTROLLER:SSL",
            "inter.broker.listener.name=CLIENT",
            # One certificate for the broker on every listener; the controller listener always asks
            # for a client certificate, so only the broker itself gets through it.
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.broker_keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca_file}",
            "listener.name.controller.ssl.client.auth=required",
            f"ssl.principal.mapping.rules={_PRINCIPAL_RULES}",
            f"authorizer.class.name={_AUTHORIZER}",
            "allow.everyone.if.no.acl.found=false",
            f"super.users=User:{BROKER};User:{ADMIN}",
        ]
        if self.mode == "scram":
            lines += [
                "listener.name.client.ssl.client.auth=none",
                f"sasl.enabled.mechanisms={MECHANISM}",
                f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
                f"listener.name.client.{MECHANISM.lower()}.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{BROKER}" password="{self.password(BROKER)}";',
            ]
        else:
            lines.append("listener.name.client.ssl.client.auth=required")
        return lines

    def format_arguments(self) -> list[str]:
        """`kafka-storage format` arguments that create the SCRAM users with the cluster."""
        if self.mode != "scram":
            return []
        args: list[str] = []
        for principal in (BROKER, *PRINCIPALS):
            args += ["--add-scram", f"{MECHANISM}=[name={principal},password={self.password(principal)}]"]
        return args

    # --- client side ---------------------------------------------------------------------------

    def client_properties(self, principal: str = ADMIN, *, by_reference: bool = False) -> dict[str, str]:
        """librdkafka properties for `principal`. With `by_reference` the password is the replicator's
        `${file:...}` reference, never its value (what `status` prints and configs should hold)."""
        props = {"ssl.ca.location": str(self.ca_file)}
        if self.mode == "scram":
            password = f"${{file:{self.password_file(principal)}}}" if by_reference else self.password(principal)
            props.update({"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
                          "sasl.username": principal, "sasl.password": password})
        else:
            props.update({"security.protocol": "SSL",
                          "ssl.certificate.location": str(self.cert_file(principal)),
                          "ssl.key.location": str(self.key_file(principal))})
        return props

    def redact(self, text: str) -> str:
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

    def secrets(self) -> list[str]:
        """Every secret value of this sandbox (tests grep logs for them)."""
        values = [self.password(p) for p in (BROKER, *PRINCIPALS)]
        for key in [self.ca.key_path, *(self.key_file(p) for p in (BROKER, *PRINCIPALS))]:
            body = [line for line in key.read_text().splitlines() if line and not line.startswith("-----")]
            values += body
        return values


def java_client_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The same credentials for the Java tools (kafka-acls and friends)."""
    out = {"security.protocol": props["security.protocol"], "ssl.truststore.type": "PEM",
           "ssl.truststore.location": props["ssl.ca.location"]}
    if "sasl.mechanism" in props:
        out["sasl.mechanism"] = props["sasl.mechanism"]
        out["sasl.jaas.config"] = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                   f'username="{props["sasl.username"]}" password="{props["sasl.password"]}";')
    if "ssl.key.location" in props:
        # A PEM keystore wants key and chain in one file: concatenate them next to the key.
        key = Path(props["ssl.key.location"])
        bundle = key.with_suffix(".keystore.pem")
        if not bundle.exists():
            _write_private(bundle, key.read_text() + Path(props["ssl.certificate.location"]).read_text())
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(bundle)})
    return out
