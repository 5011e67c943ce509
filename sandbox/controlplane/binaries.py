"""Where the control plane's binaries come from, in this order:

1. ``NODEFLOW_K8S_BIN``: a folder holding ``etcd`` and ``kube-apiserver`` (and, for the controllers,
   ``kube-controller-manager`` and ``kube-scheduler``; ``kubectl`` for humans). Set but incomplete is an error.
2. ``KUBEBUILDER_ASSETS``: controller-runtime envtest's folder (``etcd``, ``kube-apiserver``, ``kubectl``); it has
   no controller-manager or scheduler, so a control plane that asks for them is refused, naming what is missing.
3. The cache (``NODEFLOW_K8S_CACHE``, else ``$XDG_CACHE_HOME/nodeflow/k8s``, else ``~/.cache/nodeflow/k8s``),
   ``<k8s version>-etcd-<etcd version>/bin``, filled once by 4 or 5.
4. The shared tarball (``NODEFLOW_K8S_TARBALL``, else ``../shared/k8s/`` next to the repository, else
   ``/work/shared/k8s/``), unpacked into the cache; every binary's sha256 must match ``SHARED_TARBALL``'s.
5. The official releases (Kubernetes' server tarball from dl.k8s.io, etcd's from GitHub), downloaded into the
   cache, each archive checked against a pinned sha256 before anything is unpacked (``NODEFLOW_K8S_DOWNLOAD=0``
   forbids it). A release whose sum is not pinned is refused before any connection is made.

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
    "SHARED_TARBALL",
    "Archive",
    "Binaries",
    "BinariesNotFound",
    "Release",
    "find_binaries",
    "kubectl",
]

KUBERNETES_VERSION = "v1.36.2"
ETCD_VERSION = "v3.5.30"
CONTROL_PLANE = ("etcd", "kube-apiserver")
CONTROLLERS = ("kube-controller-manager", "kube-scheduler")
ALL = (*CONTROL_PLANE, *CONTROLLERS, "kubectl")

ENV_BIN = "NODEFLOW_K8S_BIN"
ENV_ENVTEST = "KUBEBUILDER_ASSETS"
ENV_CACHE = "NODEFLOW_K8S_CACHE"
ENV_TARBALL = "NODEFLOW_K8S_TARBALL"
ENV_DOWNLOAD = "NODEFLOW_K8S_DOWNLOAD"
REPO = Path(__file__).resolve().parents[2]
SHARED_DIRS = (REPO.parent / "shared" / "k8s", Path("/work/shared/k8s"))
HOW_TO = (
    f"Set {ENV_BIN} to a folder with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl "
    f"(Kubernetes {KUBERNETES_VERSION}'s server release, kubernetes/server/bin/, plus etcd {ETCD_VERSION}'s release), "
    f"or {ENV_ENVTEST} to envtest's folder (no controllers), or {ENV_TARBALL} to the tarball "
    "kubernetes-*-etcd-*-linux-amd64.tar.xz. The download of the official releases needs the internet and their "
    "sha256 sums pinned in sandbox/controlplane/binaries.py (KUBERNETES_RELEASE, ETCD_RELEASE)."
)


class BinariesNotFound(RuntimeError):
    """No usable binaries; the message says where they were looked for and how to provide them."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the binaries found (a missing optional one is absent from ``paths``); ``source`` says where from."""

    paths: Mapping[str, Path]
    source: str

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


@dataclass(frozen=True)
class Release:
    """An official release archive: where to download it, its pinned sha256, the binaries it holds."""

    url: str
    sha256: str
    archive: Archive


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
# The sha256 of each official archive must be pinned here before the download can run: copy them from
# https://dl.k8s.io/v1.36.2/kubernetes-server-linux-amd64.tar.gz.sha256 and the SHA256SUMS file of
# https://github.com/etcd-io/etcd/releases/tag/v3.5.30 (they could not be fetched where this was written).
KUBERNETES_RELEASE = Release(
    url=f"https://dl.k8s.io/{KUBERNETES_VERSION}/kubernetes-server-linux-amd64.tar.gz",
    sha256="",
    archive=Archive(
        members={name: f"kubernetes/server/bin/{name}" for name in (*CONTROLLERS, "kube-apiserver", "kubectl")}
    ),
)
ETCD_RELEASE = Release(
    url=f"https://github.com/etcd-io/etcd/releases/download/{ETCD_VERSION}/etcd-{ETCD_VERSION}-linux-amd64.tar.gz",
    sha256="",
    archive=Archive(members={"etcd": f"etcd-{ETCD_VERSION}-linux-amd64/etcd"}),
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
    cache_name: str = f"{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}",
    log: Callable[[str], None] = lambda message: None,
) -> Binaries:
    """The binaries, from the first source that has them (see the module's docstring)."""
    env = os.environ if env is None else env
    if env.get(ENV_BIN):
        return _folder(Path(env[ENV_BIN]), ALL, f"{ENV_BIN}={env[ENV_BIN]}", required=CONTROL_PLANE)
    if env.get(ENV_ENVTEST):
        return _folder(Path(env[ENV_ENVTEST]), ALL, f"{ENV_ENVTEST}={env[ENV_ENVTEST]}", required=CONTROL_PLANE)
    cache = cache_root(env) / cache_name
    if (cache / "bin" / ".complete").is_file():
        return _folder(cache / "bin", ALL, f"the cache {cache}", required=CONTROL_PLANE)

    candidates = [Path(env[ENV_TARBALL])] if env.get(ENV_TARBALL) else [d / SHARED_TARBALL_NAME for d in shared_dirs]
    source = next((c for c in candidates if c.is_file()), None)
    if source is None and env.get(ENV_TARBALL):
        raise BinariesNotFound(f"{ENV_TARBALL}={env[ENV_TARBALL]}: no such file. " + HOW_TO)
    looked = ", ".join(str(c) for c in candidates)
    if source is None and env.get(ENV_DOWNLOAD, "1") in ("0", "false", "no"):
        raise BinariesNotFound(
            f"no Kubernetes binaries: {ENV_BIN} and {ENV_ENVTEST} unset, nothing in the cache {cache}, no tarball at "
            f"{looked}, and {ENV_DOWNLOAD}={env[ENV_DOWNLOAD]} forbids the download. " + HOW_TO
        )

    def fill(into: Path) -> None:
        if source is not None:
            log(f"unpacking {source} into {cache} (once)")
            with source.open("rb") as f:
                _unpack(f, tarball, into)
            return
        try:
            _check_platform()
            for release in releases:
                log(f"downloading {release.url} into {cache} (once)")
                _download(release, into)
        except BinariesNotFound as exc:
            raise BinariesNotFound(
                f"no Kubernetes binaries: {ENV_BIN} and {ENV_ENVTEST} unset, nothing in the cache {cache}, no tarball "
                f"at {looked}; {exc}"
            ) from exc

    with _locked(cache.parent):
        if not (cache / "bin" / ".complete").is_file():
            _fill_atomically(cache, fill)
    origin = f"the cache {cache}"
    return _folder(cache / "bin", ALL, origin, required=CONTROL_PLANE)


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


def _download(release: Release, into: Path) -> None:
    """Download ``release`` to a temporary file, check its pinned sha256, then unpack its binaries into ``into``."""
    if not release.sha256:
        raise BinariesNotFound(
            f"the download of {release.url} is not possible: its sha256 is not pinned in {__name__} "
            "(fill KUBERNETES_RELEASE/ETCD_RELEASE from the release's published sums). " + HOW_TO
        )
    with tempfile.TemporaryFile(dir=into) as tmp:
        digest = hashlib.sha256()
        try:
            with urllib.request.urlopen(release.url, timeout=60) as response:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    tmp.write(chunk)
        except OSError as exc:
            raise BinariesNotFound(f"could not download {release.url}: {exc}. " + HOW_TO) from exc
        if digest.hexdigest() != release.sha256:
            raise BinariesNotFound(
                f"{release.url}: sha256 {digest.hexdigest()} does not match the pinned {release.sha256}; not used"
            )
        tmp.seek(0)
        _unpack(tmp, release.archive, into)
