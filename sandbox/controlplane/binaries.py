"""Where the control plane's binaries come from, in this order:

1. ``NODEFLOW_K8S_BIN``: a folder holding ``etcd`` and ``kube-apiserver`` (and, for the controllers,
   ``kube-controller-manager`` and ``kube-scheduler``; ``kubectl`` for humans). Set but incomplete is an error.
2. ``KUBEBUILDER_ASSETS``: controller-runtime envtest's folder (``etcd``, ``kube-apiserver``, ``kubectl``); it has
   no controller-manager or scheduler, so a control plane that asks for them is refused, naming what is missing.
3. The shared tarball's versions (Kubernetes ``KUBERNETES_VERSION``, etcd ``ETCD_VERSION``: what the tests run):
   the cache folder ``<cache>/<k8s version>-etcd-<etcd version>/bin`` when complete, else the tarball
   (``NODEFLOW_K8S_TARBALL``, else ``../shared/k8s/`` next to the repository, else ``/work/shared/k8s/``) unpacked
   into it once; every binary's sha256 must match ``SHARED_TARBALL``'s.
4. The official releases' versions (``RELEASE_KUBERNETES_VERSION``, ``RELEASE_ETCD_VERSION``: other patch
   releases than the tarball's, whose sums could be pinned offline): their own cache folder when complete, else
   Kubernetes' server tarball (dl.k8s.io) and etcd's (GitHub) downloaded into it once, each archive checked against
   its pinned sha512 or sha256 before anything is unpacked. ``NODEFLOW_K8S_MIRROR`` (an http(s):// or file:// base
   holding ``<version>/<file>``, as dl.k8s.io does) replaces both official hosts, for machines without the
   internet; ``NODEFLOW_K8S_DOWNLOAD=0`` forbids the download. A release whose sum is not pinned is refused before
   any connection is made.

``<cache>`` is ``NODEFLOW_K8S_CACHE``, else ``$XDG_CACHE_HOME/nodeflow/k8s``, else ``~/.cache/nodeflow/k8s``; the
folder's name says which versions it holds, and ``Binaries.versions`` says it too.

Filling the cache is atomic (unpacked into a temporary folder next to it, then renamed) and done by one process at
a time (a lock file): concurrent test workers wait for the first and then use its result.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "ETCD_RELEASE",
    "ETCD_VERSION",
    "KUBERNETES_RELEASE",
    "KUBERNETES_VERSION",
    "RELEASE_CACHE_NAME",
    "RELEASE_ETCD_VERSION",
    "RELEASE_KUBERNETES_VERSION",
    "SHARED_TARBALL",
    "TARBALL_CACHE_NAME",
    "Archive",
    "Binaries",
    "BinariesNotFound",
    "Release",
    "find_binaries",
    "kubectl",
]

KUBERNETES_VERSION = "v1.36.2"  # the shared tarball's, what the tests run
ETCD_VERSION = "v3.5.30"
RELEASE_KUBERNETES_VERSION = "v1.36.0"  # the download's: see KUBERNETES_RELEASE and ETCD_RELEASE
RELEASE_ETCD_VERSION = "v3.5.21"
TARBALL_CACHE_NAME = f"{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"
RELEASE_CACHE_NAME = f"{RELEASE_KUBERNETES_VERSION}-etcd-{RELEASE_ETCD_VERSION}"
CONTROL_PLANE = ("etcd", "kube-apiserver")
CONTROLLERS = ("kube-controller-manager", "kube-scheduler")
ALL = (*CONTROL_PLANE, *CONTROLLERS, "kubectl")

ENV_BIN = "NODEFLOW_K8S_BIN"
ENV_ENVTEST = "KUBEBUILDER_ASSETS"
ENV_CACHE = "NODEFLOW_K8S_CACHE"
ENV_TARBALL = "NODEFLOW_K8S_TARBALL"
ENV_DOWNLOAD = "NODEFLOW_K8S_DOWNLOAD"
ENV_MIRROR = "NODEFLOW_K8S_MIRROR"
REPO = Path(__file__).resolve().parents[2]
SHARED_DIRS = (REPO.parent / "shared" / "k8s", Path("/work/shared/k8s"))
HOW_TO = (
    f"Set {ENV_BIN} to a folder with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl "
    f"(Kubernetes {KUBERNETES_VERSION}'s server release, kubernetes/server/bin/, plus etcd {ETCD_VERSION}'s release), "
    f"or {ENV_ENVTEST} to envtest's folder (no controllers), or {ENV_TARBALL} to the tarball "
    f"kubernetes-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}-linux-amd64.tar.xz; else the official releases "
    f"(Kubernetes {RELEASE_KUBERNETES_VERSION}, etcd {RELEASE_ETCD_VERSION}, linux/amd64, sums pinned in "
    f"sandbox/controlplane/binaries.py) are downloaded once, which needs the internet or {ENV_MIRROR} (a mirror "
    "holding <version>/<file> as dl.k8s.io does)."
)


class BinariesNotFound(RuntimeError):
    """No usable binaries; the message says where they were looked for and how to provide them."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the binaries found (a missing optional one is absent from ``paths``); ``source`` says where from,
    ``versions`` which Kubernetes and etcd they are when known (a folder named by the environment: not known)."""

    paths: Mapping[str, Path]
    source: str
    versions: str | None = None

    def path(self, name: str) -> Path:
        found = self.paths.get(name)
        if found is None:
            raise BinariesNotFound(
                f"{name} is not available from {self.source} (it has {', '.join(sorted(self.paths)) or 'nothing'}). "
                + HOW_TO
            )
        return found

    @property
    def kubectl(self) -> Path | None:
        return self.paths.get("kubectl")


@dataclass(frozen=True)
class Archive:
    """A tarball holding the binaries: ``members`` maps binary name -> member path; ``sums`` the sha256 every
    unpacked binary must have (empty: not checked)."""

    members: Mapping[str, str]
    sums: Mapping[str, str] = field(default_factory=dict)


DIGESTS = ("sha256", "sha512")


@dataclass(frozen=True)
class Release:
    """An official release archive: ``<base>/<version>/<file>`` (the layout of dl.k8s.io and of GitHub's release
    downloads, and what a mirror must hold), the pinned digest of the whole archive (``algorithm`` names it, as the
    release publishes it: Kubernetes sha512, etcd sha256), the binaries it holds."""

    name: str
    base: str
    version: str
    file: str
    algorithm: str
    digest: str
    archive: Archive

    def __post_init__(self) -> None:
        if self.algorithm not in DIGESTS:
            raise ValueError(f"Release {self.file}: algorithm {self.algorithm!r} is not one of {', '.join(DIGESTS)}")

    @property
    def url(self) -> str:
        return self.url_from(None)

    def url_from(self, mirror: str | None) -> str:
        """The official URL, or the same ``<version>/<file>`` under ``mirror``."""
        return f"{(mirror or self.base).rstrip('/')}/{self.version}/{self.file}"


SHARED_TARBALL_NAME = f"kubernetes-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}-linux-amd64.tar.xz"
SHARED_TARBALL = Archive(
    members={name: f"kubernetes/bin/{name}" for name in ALL},
    sums={  # /work/shared/k8s/README.md
        "kube-apiserver": "6dbd2f24c05756b11ea454307b3f513ca4d7d70c53fc2efdc20f5b232787fa62",
        "kube-controller-manager": "c8dae5897c274c282cae45322a873328cb7db9601063a6631f2b1a4a6ed18d36",
        "kube-scheduler": "30d55da698c2f5fabb57a7e0929e18ea4695bfd3596768c10913e2fb6b854178",
        "kubectl": "66757f040d187831b46861a91b7933f4302a095d1e94c13b0c3a393d72acbbd6",
        "etcd": "d24ad02a1579be534e93c9fbf229349ec0f33dde5ac25d8278c6c4071b4aec99",
    },
)
# The download pins other patch releases than the shared tarball's (v1.36.2, etcd v3.5.30): their published sums
# could not be read offline, these could. They go to their own cache folder (RELEASE_CACHE_NAME), so a cache never
# claims a version it does not hold.
# Kubernetes v1.36.0's server archive, sha512 from the "Server Binaries" table of
# https://github.com/kubernetes/kubernetes/blob/master/CHANGELOG/CHANGELOG-1.36.md#server-binaries
KUBERNETES_RELEASE = Release(
    name="Kubernetes",
    base="https://dl.k8s.io",
    version=RELEASE_KUBERNETES_VERSION,
    file="kubernetes-server-linux-amd64.tar.gz",
    algorithm="sha512",
    digest="1c64da92575451c2c7ff97c79b772e603995f8e76da1371a6b0746aaa27b65dce81c4d734cbb50f40e71486a8e08df36f14e12974f97d4d29e41f23a172a6a25",
    archive=Archive(
        members={name: f"kubernetes/server/bin/{name}" for name in (*CONTROLLERS, "kube-apiserver", "kubectl")}
    ),
)
# etcd v3.5.21's linux-amd64 archive, sha256 from kubespray's pins (etcd_binary_checksums, amd64, 3.5.21):
# https://github.com/kubernetes-sigs/kubespray/blob/master/roles/kubespray_defaults/vars/main/checksums.yml
# and the same sum independently in chromebrew's package (source_sha256):
# https://github.com/chromebrew/chromebrew/blob/master/packages/etcd.rb
ETCD_RELEASE = Release(
    name="etcd",
    base="https://github.com/etcd-io/etcd/releases/download",
    version=RELEASE_ETCD_VERSION,
    file=f"etcd-{RELEASE_ETCD_VERSION}-linux-amd64.tar.gz",
    algorithm="sha256",
    digest="adddda4b06718e68671ffabff2f8cee48488ba61ad82900e639d108f2148501c",
    archive=Archive(members={"etcd": f"etcd-{RELEASE_ETCD_VERSION}-linux-amd64/etcd"}),
)


def cache_root(env: Mapping[str, str]) -> Path:
    if env.get(ENV_CACHE):
        return Path(env[ENV_CACHE])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "nodeflow" / "k8s"


def _folder(path: Path, names: Sequence[str], source: str, *, required: Sequence[str]) -> Binaries:
    found = {n: path / n for n in names if (path / n).is_file() and os.access(path / n, os.X_OK)}
    missing = [n for n in required if n not in found]
    if missing:
        raise BinariesNotFound(f"{source}: {', '.join(missing)} missing or not executable in {path}. " + HOW_TO)
    return Binaries(found, source)


def find_binaries(
    env: Mapping[str, str] | None = None,
    *,
    shared_dirs: Sequence[Path] = SHARED_DIRS,
    releases: Sequence[Release] = (KUBERNETES_RELEASE, ETCD_RELEASE),
    tarball: Archive = SHARED_TARBALL,
    cache_name: str = TARBALL_CACHE_NAME,
    release_cache_name: str = RELEASE_CACHE_NAME,
    log: Callable[[str], None] = lambda message: None,
) -> Binaries:
    """The binaries, from the first source that has them (see the module's docstring)."""
    env = os.environ if env is None else env
    if env.get(ENV_BIN):
        return _folder(Path(env[ENV_BIN]), ALL, f"{ENV_BIN}={env[ENV_BIN]}", required=CONTROL_PLANE)
    if env.get(ENV_ENVTEST):
        return _folder(Path(env[ENV_ENVTEST]), ALL, f"{ENV_ENVTEST}={env[ENV_ENVTEST]}", required=CONTROL_PLANE)
    cache = cache_root(env) / cache_name
    tarball_versions = f"Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION}"
    if _complete(cache):
        return _cached(cache, tarball_versions)

    candidates = [Path(env[ENV_TARBALL])] if env.get(ENV_TARBALL) else [d / SHARED_TARBALL_NAME for d in shared_dirs]
    source = next((c for c in candidates if c.is_file()), None)
    if source is None and env.get(ENV_TARBALL):
        raise BinariesNotFound(f"{ENV_TARBALL}={env[ENV_TARBALL]}: no such file. " + HOW_TO)
    if source is not None:

        def unpack(into: Path) -> None:
            log(f"unpacking {source} into {cache} (once)")
            with source.open("rb") as f:
                _unpack(f, tarball, into)

        _fill_once(cache, unpack)
        return _cached(cache, tarball_versions)

    downloaded = cache_root(env) / release_cache_name
    release_versions = ", ".join(f"{r.name} {r.version}" for r in releases)
    if _complete(downloaded):
        return _cached(downloaded, release_versions)
    mirror = _mirror(env)
    nowhere = (
        f"no Kubernetes binaries: {ENV_BIN} and {ENV_ENVTEST} unset, nothing in the caches {cache} and "
        f"{downloaded}, no tarball at {', '.join(str(c) for c in candidates) or '(no folder to look in)'}"
    )
    if env.get(ENV_DOWNLOAD, "1") in ("0", "false", "no"):
        wanted = ", ".join(f"{r.name} {r.version} from {r.url_from(mirror)}" for r in releases)
        raise BinariesNotFound(
            f"{nowhere}, and {ENV_DOWNLOAD}={env[ENV_DOWNLOAD]} forbids the download ({wanted}). " + HOW_TO
        )

    def download(into: Path) -> None:
        try:
            _check_platform()
            for release in releases:
                url = release.url_from(mirror)
                log(f"downloading {release.name} {release.version} from {url} into {downloaded} (once)")
                _download(release, url, into)
        except BinariesNotFound as exc:
            raise BinariesNotFound(f"{nowhere}; {exc}") from exc

    _fill_once(downloaded, download)
    return _cached(downloaded, release_versions)


def _complete(cache: Path) -> bool:
    return (cache / "bin" / ".complete").is_file()


def _cached(cache: Path, versions: str) -> Binaries:
    found = _folder(cache / "bin", ALL, f"the cache {cache}", required=CONTROL_PLANE)
    return Binaries(found.paths, found.source, versions)


def _mirror(env: Mapping[str, str]) -> str | None:
    mirror = env.get(ENV_MIRROR) or None
    if mirror is not None and not mirror.startswith(("http://", "https://", "file://")):
        raise BinariesNotFound(
            f"{ENV_MIRROR}={mirror}: not an http://, https:// or file:// URL (a base holding <version>/<file>, "
            f"e.g. https://mirror.example/k8s with {KUBERNETES_RELEASE.version}/{KUBERNETES_RELEASE.file} under it). "
            + HOW_TO
        )
    return mirror


def kubectl(env: Mapping[str, str] | None = None) -> Path:
    """The kubectl to run: the one that came with the control plane's binaries (the server's version), else the one
    on PATH. ``BinariesNotFound`` (saying how to get one) when there is neither: a test that needs kubectl fails, it
    is never skipped."""
    try:
        found = find_binaries(env).kubectl
    except BinariesNotFound as exc:
        on_path = shutil.which("kubectl")
        if on_path is None:
            raise BinariesNotFound(f"no kubectl on PATH, and {exc}") from exc
        return Path(on_path)
    if found is None:
        on_path = shutil.which("kubectl")
        if on_path is None:
            raise BinariesNotFound("no kubectl: not with the control plane's binaries, not on PATH. " + HOW_TO)
        return Path(on_path)
    return found


def _fill_once(cache: Path, fill: Callable[[Path], None]) -> None:
    """Fill ``cache`` unless it is complete, one process at a time (the others wait, then find it complete)."""
    with _locked(cache.parent):
        if not _complete(cache):
            _fill_atomically(cache, fill)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fill_atomically(cache: Path, fill: Callable[[Path], None]) -> None:
    """``fill(tmp/bin)`` in a temporary folder beside ``cache``, mark it complete, then rename it into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{cache.name}.", dir=cache.parent))
    try:
        (tmp / "bin").mkdir()
        fill(tmp / "bin")
        (tmp / "bin" / ".complete").write_text("ok\n")
        if cache.exists():  # an incomplete leftover of an interrupted fill (the lock is held: nobody uses it)
            shutil.rmtree(cache)
        tmp.rename(cache)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpack(stream: IO[bytes], archive: Archive, into: Path) -> None:
    """Extract ``archive.members`` from the tar ``stream`` (any compression) as ``into/<name>``, executable,
    checking each against ``archive.sums``; a missing member or a wrong sum is an error naming it."""
    wanted = {member: name for name, member in archive.members.items()}
    seen: set[str] = set()
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for info in tar:
            name = wanted.get(info.name.removeprefix("./"))
            if name is None or not info.isfile():
                continue
            src = tar.extractfile(info)
            assert src is not None
            digest = hashlib.sha256()
            target = into / name
            with target.open("wb") as out:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            target.chmod(0o755)
            expected = archive.sums.get(name)
            if expected and digest.hexdigest() != expected:
                raise BinariesNotFound(f"{name}: sha256 {digest.hexdigest()} does not match the pinned {expected}")
            seen.add(name)
    missing = sorted(set(archive.members) - seen)
    if missing:
        raise BinariesNotFound(f"the archive has no {', '.join(archive.members[n] for n in missing)}")


def _check_platform() -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "amd64"):
        raise BinariesNotFound(
            f"the download is pinned to linux/amd64; this is {platform.system()}/{platform.machine()}. " + HOW_TO
        )


def _download(release: Release, url: str, into: Path) -> None:
    """Download ``release`` from ``url`` to a temporary file, check its pinned digest, then unpack its binaries into
    ``into``; a wrong digest is an error naming the URL and both digests, and nothing of the archive is kept."""
    if not release.digest:
        raise BinariesNotFound(
            f"the download of {url} is not possible: its {release.algorithm} is not pinned in {__name__} "
            "(fill KUBERNETES_RELEASE/ETCD_RELEASE from the release's published sums). " + HOW_TO
        )
    with tempfile.TemporaryFile(dir=into) as tmp:
        digest = hashlib.new(release.algorithm)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    tmp.write(chunk)
        except OSError as exc:
            raise BinariesNotFound(f"could not download {url}: {exc}. " + HOW_TO) from exc
        if digest.hexdigest() != release.digest:
            raise BinariesNotFound(
                f"{url}: {release.algorithm} {digest.hexdigest()} does not match the pinned {release.digest} "
                f"({release.name} {release.version}); not used"
            )
        tmp.seek(0)
        _unpack(tmp, release.archive, into)
