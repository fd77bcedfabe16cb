"""The job's Spark cache folder (`spark_class_cache`): the driver JVM's class-data archive and the
zip-free SPARK_HOME its Python workers start from, kept between runs.

`auto` is the user's cache folder: `$XDG_CACHE_HOME/replicator`, else `~/.cache/replicator`. An
archive already in the folder is used even when the folder is read-only (an image ships one); a
new one is recorded only into a folder this process can write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from replicator.config import ReplicatorConfig

# The driver JVM's options the archive is recorded with (spark_session): part of its name, as a
# different set could make the JVM refuse it.
JVM_OPTIONS = "-XX:+UseSerialGC -Xms32m -XX:ReservedCodeCacheSize=64m -XX:TieredStopAtLevel=1"


def cache_folder(cfg: ReplicatorConfig) -> Path | None:
    """The folder `spark_class_cache` names, None when `off` (or `auto` without a home)."""
    value = cfg.spark_class_cache
    if value == "off":
        return None
    if value != "auto":
        return Path(value).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):  # the XDG spec: a relative value is invalid and ignored
        return Path(xdg) / "replicator"
    home = Path("~").expanduser()
    return home / ".cache" / "replicator" if home.is_absolute() else None


def spark_home(cfg: ReplicatorConfig) -> Path:
    """The SPARK_HOME the job runs with: the user's, else `worker_spark_home`, else PySpark's own."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return worker_spark_home(cfg) or Path(pyspark.__file__).parent


def worker_spark_home(cfg: ReplicatorConfig) -> Path | None:
    """A SPARK_HOME for pip-installed PySpark that lacks python/lib/pyspark.zip.

    Spark puts that zip first on every Python worker's PYTHONPATH, and Python compiles modules
    imported from a zip on every start: 1.2 s of CPU against 0.4 s for the same pyspark from
    site-packages with its cached bytecode (measured here). Spark waits a fixed 10 s for a new
    worker to connect back, which a loaded machine then missed (the planner's process). Without the
    zip, workers import the installed pyspark, the same version. Kept in the cache folder (a stable
    path: the class-data archive records the jars' paths); None when the cache is off or its folder
    cannot be written (`spark_home` lets a user's SPARK_HOME win before asking)."""
    folder = cache_folder(cfg)
    if folder is None:
        return None
    import pyspark

    real = Path(pyspark.__file__).parent
    if not (real / "jars").is_dir():
        return None
    home = folder / f"spark-home-{pyspark.__version__}-{_digest(str(real))}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        for name in ("bin", "sbin", "jars", "conf", "data", "licenses"):
            link = home / name
            if (real / name).exists() and not link.is_symlink():
                link.symlink_to(real / name)
    except OSError:
        return None
    return home


def class_archive(cfg: ReplicatorConfig) -> Path | None:
    """Where the class-data archive for this JVM, Spark and SPARK_HOME lives (an existing one also in
    a read-only folder); None when switched off or nothing could be recorded there. Removes
    recordings left by processes that are gone."""
    folder = cache_folder(cfg)
    if folder is None:
        return None
    java = _java()
    if java is None:
        return None
    import pyspark

    home = spark_home(cfg)
    # The JVM refuses an archive whose JVM build or jars (path, size, mtime) differ, silently: a JDK
    # or PySpark upgraded in place keeps the paths, so their files' stats are in the name too, and
    # an upgrade records a new archive instead of starting without one for good.
    key = _digest("|".join([str(java), _stats(_libjvm(java)), pyspark.__version__, str(home),
                            _stats(*sorted((home / "jars").glob("*.jar"))), JVM_OPTIONS]))
    archive = folder / f"spark-{pyspark.__version__}-{key}.jsa"
    if archive.is_file():  # also from a read-only folder (an image that ships its archive)
        return archive
    if not writable(folder):
        return None
    for stale in folder.glob("spark-*.jsa.*.tmp"):  # left by a recording whose process is gone
        pid = stale.suffixes[-2].lstrip(".")
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                stale.unlink()
    return archive


def writable(folder: Path) -> bool:
    """Whether `folder` exists (created if need be) and this process may write into it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _java() -> Path | None:
    found = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    return Path(found).resolve() if found else None


def _libjvm(java: Path) -> Path:
    home = java.parent.parent
    for candidate in (home / "lib" / "server" / "libjvm.so", home / "jre" / "lib" / "server" / "libjvm.so"):
        if candidate.is_file():
            return candidate
    return java


def _stats(*paths: Path) -> str:
    out = []
    for p in paths:
        with contextlib.suppress(OSError):
            st = p.stat()
            out.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return ",".join(out)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]
