"""Apache Kafka jars (broker, tools, MirrorMaker 2) resolved from Maven Central.

Maven keeps its own repository in ~/.m2, so a fresh clone on the same machine resolves offline; the
copied folder of jars lives in an ignored cache next to the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

DEFAULT_KAFKA_VERSION = "4.1.2"
_POM = Path(__file__).with_name("pom.xml")
_MARKER = ".complete"


def cache_root() -> Path:
    """`REPLICATOR_CACHE_DIR`, else `.cache/` of the checkout, else ~/.cache/replicator."""
    if env := os.environ.get("REPLICATOR_CACHE_DIR"):
        return Path(env)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").exists():
        return checkout / ".cache"
    return Path.home() / ".cache" / "replicator"


def kafka_jars(version: str = DEFAULT_KAFKA_VERSION, quiet: bool = True) -> Path:
    """Folder holding every runtime jar of Kafka `version`; downloads it on first use."""
    target = cache_root() / f"kafka-{version}"
    if (target / _MARKER).exists():
        return target
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is needed to fetch the Kafka jars from Maven Central")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [
        "mvn", "-B", "-f", str(_POM),
        f"-Dkafka.version={version}",
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
    ]
    if quiet:
        cmd.insert(1, "-q")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise RuntimeError(f"resolving Kafka {version} jars with Maven failed:\n{tail}")
    _one_slf4j_binding(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (target / _MARKER).write_text(version)
    return target


def _one_slf4j_binding(folder: Path) -> None:
    """Kafka 3.x brings slf4j-reload4j at runtime; next to our log4j2 binding SLF4J would pick either
    (classpath order) and, with reload4j unconfigured, the broker would log nothing, not even the
    "Kafka Server started" line readiness waits for. Keep only the log4j2 binding."""
    if any(folder.glob("log4j-slf4j-impl-*.jar")):
        for jar in (*folder.glob("slf4j-reload4j-*.jar"), *folder.glob("slf4j-log4j12-*.jar")):
            jar.unlink()


def classpath(version: str = DEFAULT_KAFKA_VERSION) -> str:
    return str(kafka_jars(version) / "*")
