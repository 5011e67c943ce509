"""Where the control plane's binaries come from (sandbox/controlplane/binaries.py), in order: NODEFLOW_K8S_BIN,
KUBEBUILDER_ASSETS, the shared tarball's versions (their cache, else the tarball unpacked into it once), the pinned
official releases' versions (their cache, else downloaded into it once, from NODEFLOW_K8S_MIRROR when set: here a
fake mirror on 127.0.0.1 or a file:// folder, never the internet), else a clear error."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sandbox.controlplane import ControlPlane
from sandbox.controlplane.binaries import (
    ALL,
    ETCD_RELEASE,
    KUBERNETES_RELEASE,
    RELEASE_CACHE_NAME,
    TARBALL_CACHE_NAME,
    Archive,
    BinariesNotFound,
    Release,
    find_binaries,
    kubectl,
)

CACHE_NAME = "vtest-etcd-vtest"


def fake_folder(path: Path, names: tuple[str, ...] = ALL) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / name).write_text(f"#!/bin/sh\necho {name}\n")
        (path / name).chmod(0o755)
    return path


def tarball(members: Mapping[str, bytes], mode: str = "w:xz") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


CONTENT = {name: f"#!/bin/sh\necho fake {name}\n".encode() for name in ALL}
ARCHIVE = Archive(members={n: f"kubernetes/bin/{n}" for n in ALL}, sums={n: sha(d) for n, d in CONTENT.items()})


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A folder with a fake shared tarball (the real name, fake binaries)."""
    folder = tmp_path / "shared"
    folder.mkdir()
    data = tarball({f"kubernetes/bin/{n}": d for n, d in CONTENT.items()})
    (folder / "kubernetes-v1.36.2-etcd-v3.5.30-linux-amd64.tar.xz").write_bytes(data)
    return folder


def find(env: dict[str, str], **kw: object) -> object:
    kw.setdefault("tarball", ARCHIVE)
    kw.setdefault("cache_name", CACHE_NAME)
    return find_binaries(env, **kw)  # type: ignore[arg-type]


def test_the_env_folder_comes_first(tmp_path: Path, shared: Path) -> None:
    own = fake_folder(tmp_path / "own")
    envtest = fake_folder(tmp_path / "envtest", ("etcd", "kube-apiserver", "kubectl"))
    env = {"NODEFLOW_K8S_BIN": str(own), "KUBEBUILDER_ASSETS": str(envtest), "NODEFLOW_K8S_CACHE": str(tmp_path / "c")}
    found = find_binaries(env, shared_dirs=[shared])
    assert found.path("kube-scheduler") == own / "kube-scheduler"
    assert found.source.startswith("NODEFLOW_K8S_BIN=")
    assert not (tmp_path / "c").exists()  # nothing unpacked


def test_an_incomplete_env_folder_is_an_error_naming_what_is_missing(tmp_path: Path, shared: Path) -> None:
    own = fake_folder(tmp_path / "own", ("kubectl", "etcd"))
    with pytest.raises(BinariesNotFound, match=r"NODEFLOW_K8S_BIN=.*kube-apiserver missing or not executable"):
        find_binaries({"NODEFLOW_K8S_BIN": str(own)}, shared_dirs=[shared])


def test_envtest_assets_have_no_controllers_and_say_so(tmp_path: Path, shared: Path) -> None:
    envtest = fake_folder(tmp_path / "envtest", ("etcd", "kube-apiserver", "kubectl"))
    found = find_binaries({"KUBEBUILDER_ASSETS": str(envtest)}, shared_dirs=[shared])
    assert found.path("kube-apiserver") == envtest / "kube-apiserver"
    with pytest.raises(
        BinariesNotFound, match=r"kube-scheduler is not available from KUBEBUILDER_ASSETS=.*NODEFLOW_K8S_BIN"
    ):
        found.path("kube-scheduler")
    plane = ControlPlane(controllers=True, binaries=found)
    with pytest.raises(BinariesNotFound, match="kube-controller-manager is not available"):
        plane.start()
    assert plane.processes == {}
    assert plane.workdir is None


def test_the_tarball_is_unpacked_into_the_cache_once_then_the_cache_is_used(tmp_path: Path, shared: Path) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache")}
    logs: list[str] = []
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(find(env, shared_dirs=[shared], log=logs.append)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    assert [m for m in logs if m.startswith("unpacking")] == [
        f"unpacking {shared / 'kubernetes-v1.36.2-etcd-v3.5.30-linux-amd64.tar.xz'} into {tmp_path / 'cache' / CACHE_NAME} (once)"
    ]
    binaries = tmp_path / "cache" / CACHE_NAME / "bin"
    assert sorted(p.name for p in binaries.iterdir()) == sorted([*ALL, ".complete"])
    assert (binaries / "etcd").read_bytes() == CONTENT["etcd"]
    assert (binaries / "etcd").stat().st_mode & 0o111
    # The cache is enough from now on: no tarball, no download.
    found = find({**env, "NODEFLOW_K8S_DOWNLOAD": "0"}, shared_dirs=[tmp_path / "nowhere"])
    assert found.source == f"the cache {tmp_path / 'cache' / CACHE_NAME}"  # type: ignore[attr-defined]


def test_a_tarball_with_a_wrong_sum_is_refused_and_leaves_no_cache(tmp_path: Path, shared: Path) -> None:
    wrong = Archive(ARCHIVE.members, {**ARCHIVE.sums, "kube-apiserver": "0" * 64})
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache")}
    with pytest.raises(BinariesNotFound, match=r"kube-apiserver: sha256 .* does not match the pinned 0000"):
        find(env, shared_dirs=[shared], tarball=wrong)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".lock"]  # no partial folder left behind


def test_the_tarball_env_var_names_the_file(tmp_path: Path, shared: Path) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_TARBALL": str(tmp_path / "missing.tar.xz")}
    with pytest.raises(BinariesNotFound, match=r"NODEFLOW_K8S_TARBALL=.*missing.tar.xz: no such file"):
        find(env, shared_dirs=[shared])
    env["NODEFLOW_K8S_TARBALL"] = str(next(shared.iterdir()))
    assert find(env, shared_dirs=[]).path("kubectl").read_bytes() == CONTENT["kubectl"]  # type: ignore[attr-defined]


class FakeReleases:
    """An HTTP server on 127.0.0.1 serving fake release archives; counts the requests."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self.files = dict(files)
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                data = outer.files.get(self.path)
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


K8S_TGZ = tarball({f"kubernetes/server/bin/{n}": CONTENT[n] for n in ALL if n != "etcd"}, "w:gz")
ETCD_TGZ = tarball({"etcd-v3.5.21-linux-amd64/etcd": CONTENT["etcd"], "etcd-v3.5.21-linux-amd64/etcdctl": b"x"}, "w:gz")
# Where a mirror holds the pinned releases: <version>/<file>, as dl.k8s.io does.
K8S_PATH = "/v1.36.0/kubernetes-server-linux-amd64.tar.gz"
ETCD_PATH = "/v3.5.21/etcd-v3.5.21-linux-amd64.tar.gz"


@pytest.fixture
def mirror() -> Iterator[FakeReleases]:
    """A mirror on 127.0.0.1 serving fake archives at the pinned releases' paths."""
    server = FakeReleases({K8S_PATH: K8S_TGZ, ETCD_PATH: ETCD_TGZ})
    yield server
    server.close()


def pinned_to_fakes(k8s: bytes = K8S_TGZ, etcd: bytes = ETCD_TGZ) -> list[Release]:
    """The real releases (versions, files, archive layouts, algorithms), their digests those of the fake archives."""
    return [
        replace(KUBERNETES_RELEASE, digest=hashlib.sha512(k8s).hexdigest()),
        replace(ETCD_RELEASE, digest=sha(etcd)),
    ]


def test_without_a_tarball_the_pinned_releases_are_downloaded_from_the_mirror_into_their_cache(
    tmp_path: Path, mirror: FakeReleases
) -> None:
    """NODEFLOW_K8S_MIRROR replaces the official hosts; the Kubernetes archive is checked by sha512, etcd's by sha256;
    the cache folder and the reported versions are the download's (v1.36.0, etcd v3.5.21), not the tarball's."""
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_MIRROR": mirror.url + "/"}
    logs: list[str] = []
    found = find_binaries(env, shared_dirs=[tmp_path / "nowhere"], releases=pinned_to_fakes(), log=logs.append)
    assert sorted(found.paths) == sorted(ALL)
    assert found.path("etcd").read_bytes() == CONTENT["etcd"]
    assert found.path("kube-scheduler") == tmp_path / "cache" / "v1.36.0-etcd-v3.5.21" / "bin" / "kube-scheduler"
    assert found.versions == "Kubernetes v1.36.0, etcd v3.5.21"
    assert mirror.requests == [K8S_PATH, ETCD_PATH]
    assert logs[0] == (
        f"downloading Kubernetes v1.36.0 from {mirror.url}{K8S_PATH} into {tmp_path / 'cache' / RELEASE_CACHE_NAME} "
        "(once)"
    )
    again = find_binaries(env, shared_dirs=[], releases=pinned_to_fakes())
    assert len(mirror.requests) == 2  # once
    assert again.source == f"the cache {tmp_path / 'cache' / 'v1.36.0-etcd-v3.5.21'}"
    assert again.versions == "Kubernetes v1.36.0, etcd v3.5.21"


def test_a_file_url_mirror_is_read_like_a_web_one(tmp_path: Path) -> None:
    folder = tmp_path / "mirror"
    for path, data in ((K8S_PATH, K8S_TGZ), (ETCD_PATH, ETCD_TGZ)):
        (folder / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (folder / path.lstrip("/")).write_bytes(data)
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_MIRROR": folder.as_uri()}
    found = find_binaries(env, shared_dirs=[], releases=pinned_to_fakes())
    assert found.path("kubectl").read_bytes() == CONTENT["kubectl"]


def test_the_real_pins_refuse_an_archive_that_is_not_the_release(tmp_path: Path, mirror: FakeReleases) -> None:
    """The production pins (no test digest): the mirror's fake Kubernetes archive is refused, the error names the
    URL, the archive's sha512 and the pinned one; nothing is left in the cache."""
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_MIRROR": mirror.url}
    with pytest.raises(BinariesNotFound) as err:
        find_binaries(env, shared_dirs=[])
    message = str(err.value)
    assert f"{mirror.url}{K8S_PATH}: sha512 {hashlib.sha512(K8S_TGZ).hexdigest()} does not match the pinned " in message
    assert KUBERNETES_RELEASE.digest in message
    assert mirror.requests == [K8S_PATH]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".lock"]


def test_a_wrong_second_archive_leaves_nothing_of_the_first(tmp_path: Path, mirror: FakeReleases) -> None:
    """Kubernetes' archive is right and unpacked, etcd's (against its real sha256 pin) is wrong: the error names
    etcd's URL and both sha256 sums, and the Kubernetes binaries already unpacked are not kept either."""
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_MIRROR": mirror.url}
    releases = [pinned_to_fakes()[0], ETCD_RELEASE]
    with pytest.raises(BinariesNotFound) as err:
        find_binaries(env, shared_dirs=[], releases=releases)
    assert f"{mirror.url}{ETCD_PATH}: sha256 {sha(ETCD_TGZ)} does not match the pinned {ETCD_RELEASE.digest}" in str(
        err.value
    )
    assert mirror.requests == [K8S_PATH, ETCD_PATH]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".lock"]


def test_no_download_allowed_names_what_would_be_downloaded_and_connects_to_nothing(
    tmp_path: Path, mirror: FakeReleases
) -> None:
    env = {
        "NODEFLOW_K8S_CACHE": str(tmp_path / "cache"),
        "NODEFLOW_K8S_MIRROR": mirror.url,
        "NODEFLOW_K8S_DOWNLOAD": "0",
    }
    with pytest.raises(BinariesNotFound) as err:
        find_binaries(env, shared_dirs=[tmp_path / "a"])
    message = str(err.value)
    assert "NODEFLOW_K8S_DOWNLOAD=0 forbids the download" in message
    assert f"Kubernetes v1.36.0 from {mirror.url}{K8S_PATH}, etcd v3.5.21 from {mirror.url}{ETCD_PATH}" in message
    assert mirror.requests == []


def test_a_mirror_that_is_not_a_url_is_refused_naming_it(tmp_path: Path, mirror: FakeReleases) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_MIRROR": "mirror.example/k8s"}
    with pytest.raises(BinariesNotFound, match=r"NODEFLOW_K8S_MIRROR=mirror.example/k8s: not an http://, https://"):
        find_binaries(env, shared_dirs=[], releases=pinned_to_fakes())


def test_an_unpinned_release_is_refused_before_any_connection(tmp_path: Path, mirror: FakeReleases) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_MIRROR": mirror.url}
    releases = [replace(KUBERNETES_RELEASE, digest=""), ETCD_RELEASE]
    with pytest.raises(BinariesNotFound, match=r"no tarball at .*its sha512 is not pinned"):
        find_binaries(env, shared_dirs=[tmp_path], releases=releases)
    assert mirror.requests == []


def test_a_release_names_a_digest_algorithm_it_can_check() -> None:
    with pytest.raises(ValueError, match="algorithm 'md5' is not one of sha256, sha512"):
        replace(ETCD_RELEASE, algorithm="md5")


def test_the_tested_versions_cache_comes_before_the_downloaded_one(tmp_path: Path, shared: Path) -> None:
    """Both caches complete: the shared tarball's (the versions the tests run) is used."""
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache")}
    downloaded = fake_folder(tmp_path / "cache" / RELEASE_CACHE_NAME / "bin")
    (downloaded / ".complete").write_text("ok\n")
    assert find_binaries(env, shared_dirs=[]).versions == "Kubernetes v1.36.0, etcd v3.5.21"
    found = find(env, shared_dirs=[shared], cache_name=TARBALL_CACHE_NAME)
    assert found.versions == "Kubernetes v1.36.2, etcd v3.5.30"  # type: ignore[attr-defined]
    assert found.source == f"the cache {tmp_path / 'cache' / 'v1.36.2-etcd-v3.5.30'}"  # type: ignore[attr-defined]


def test_the_official_releases_are_pinned_and_say_their_versions() -> None:
    """The download pins Kubernetes v1.36.0 (sha512, its CHANGELOG) and etcd v3.5.21 (sha256): other patch releases
    than the shared tarball's v1.36.2 and v3.5.30, so they have their own cache folder."""
    assert KUBERNETES_RELEASE.url == "https://dl.k8s.io/v1.36.0/kubernetes-server-linux-amd64.tar.gz"
    assert (KUBERNETES_RELEASE.algorithm, len(KUBERNETES_RELEASE.digest)) == ("sha512", 128)
    assert ETCD_RELEASE.url == (
        "https://github.com/etcd-io/etcd/releases/download/v3.5.21/etcd-v3.5.21-linux-amd64.tar.gz"
    )
    assert (ETCD_RELEASE.algorithm, len(ETCD_RELEASE.digest)) == ("sha256", 64)
    assert (TARBALL_CACHE_NAME, RELEASE_CACHE_NAME) == ("v1.36.2-etcd-v3.5.30", "v1.36.0-etcd-v3.5.21")


def test_nothing_anywhere_and_no_download_is_a_clear_error(tmp_path: Path) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache"), "NODEFLOW_K8S_DOWNLOAD": "0"}
    with pytest.raises(BinariesNotFound) as err:
        find(env, shared_dirs=[tmp_path / "a", tmp_path / "b"])
    message = str(err.value)
    for expected in ("NODEFLOW_K8S_BIN", "KUBEBUILDER_ASSETS", "NODEFLOW_K8S_TARBALL", str(tmp_path / "a"), "download"):
        assert expected in message


def test_kubectl_is_the_control_planes_else_the_machines_else_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests that run kubectl take the one of the server's version, else PATH's; without either they fail, saying
    how to get one (never a skip)."""
    with_kubectl = fake_folder(tmp_path / "full")
    without = fake_folder(tmp_path / "bare", ("etcd", "kube-apiserver"))
    on_path = fake_folder(tmp_path / "path", ("kubectl",))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert kubectl({"NODEFLOW_K8S_BIN": str(with_kubectl)}) == with_kubectl / "kubectl"
    with pytest.raises(BinariesNotFound, match="no kubectl: not with the control plane's binaries, not on PATH"):
        kubectl({"NODEFLOW_K8S_BIN": str(without)})
    with pytest.raises(BinariesNotFound, match="no kubectl on PATH, and NODEFLOW_K8S_BIN="):
        kubectl({"NODEFLOW_K8S_BIN": str(tmp_path / "missing")})
    monkeypatch.setenv("PATH", str(on_path))
    assert kubectl({"NODEFLOW_K8S_BIN": str(without)}) == on_path / "kubectl"
    assert kubectl({"NODEFLOW_K8S_BIN": str(tmp_path / "missing")}) == on_path / "kubectl"


def test_the_check_fails_without_binaries_and_says_how_to_get_them(tmp_path: Path) -> None:
    """``python -m sandbox.controlplane --check`` (what .ci/run runs before the tests): exit 1 and the how-to when the
    binaries cannot be found; exit 0 and where they are when they can."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "NODEFLOW_K8S_BIN")}

    def check(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sandbox.controlplane", "--check"],
            cwd=root,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )

    missing = check(NODEFLOW_K8S_BIN=str(tmp_path / "missing"))
    assert missing.returncode == 1
    assert "the tests and the demo need a Kubernetes control plane's binaries" in missing.stderr
    assert "Set NODEFLOW_K8S_BIN to a folder with etcd" in missing.stderr
    envtest = check(KUBEBUILDER_ASSETS=str(fake_folder(tmp_path / "envtest", ("etcd", "kube-apiserver", "kubectl"))))
    assert envtest.returncode == 1  # envtest has no controller-manager or scheduler: the tests need them
    assert "kube-controller-manager is not available" in envtest.stderr
    found = check(NODEFLOW_K8S_BIN=str(fake_folder(tmp_path / "full")))
    assert found.returncode == 0, found.stderr
    assert f"kube-scheduler           {tmp_path / 'full' / 'kube-scheduler'}" in found.stdout
