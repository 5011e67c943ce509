"""Where the control plane's binaries come from (sandbox/controlplane/binaries.py), in order: NODEFLOW_K8S_BIN,
KUBEBUILDER_ASSETS, the cache, the shared tarball (unpacked into the cache once), the official releases
(downloaded into the cache; here from a fake server on 127.0.0.1, never the internet), else a clear error."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sandbox.controlplane import ControlPlane
from sandbox.controlplane.binaries import (
    ALL,
    ETCD_RELEASE,
    KUBERNETES_RELEASE,
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
ETCD_TGZ = tarball({"etcd-v3.5.30-linux-amd64/etcd": CONTENT["etcd"], "etcd-v3.5.30-linux-amd64/etcdctl": b"x"}, "w:gz")


@pytest.fixture
def releases() -> Iterator[FakeReleases]:
    server = FakeReleases({"/k8s.tar.gz": K8S_TGZ, "/etcd.tar.gz": ETCD_TGZ})
    yield server
    server.close()


def fake_releases(url: str, k8s_sum: str = sha(K8S_TGZ), etcd_sum: str = sha(ETCD_TGZ)) -> list[Release]:
    return [
        Release(f"{url}/k8s.tar.gz", k8s_sum, KUBERNETES_RELEASE.archive),
        Release(f"{url}/etcd.tar.gz", etcd_sum, ETCD_RELEASE.archive),
    ]


def test_without_a_tarball_the_pinned_releases_are_downloaded_into_the_cache(
    tmp_path: Path, releases: FakeReleases
) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache")}
    found = find(env, shared_dirs=[tmp_path / "nowhere"], releases=fake_releases(releases.url))
    assert sorted(found.paths) == sorted(ALL)  # type: ignore[attr-defined]
    assert found.path("etcd").read_bytes() == CONTENT["etcd"]  # type: ignore[attr-defined]
    assert releases.requests == ["/k8s.tar.gz", "/etcd.tar.gz"]
    find(env, shared_dirs=[], releases=fake_releases(releases.url))
    assert len(releases.requests) == 2  # once


def test_a_download_with_a_wrong_sum_is_refused_and_nothing_is_kept(tmp_path: Path, releases: FakeReleases) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache")}
    with pytest.raises(BinariesNotFound, match=r"k8s.tar.gz: sha256 \w+ does not match the pinned 1111"):
        find(env, shared_dirs=[], releases=fake_releases(releases.url, k8s_sum="1" * 64))
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".lock"]


def test_an_unpinned_release_is_refused_before_any_connection(tmp_path: Path, releases: FakeReleases) -> None:
    env = {"NODEFLOW_K8S_CACHE": str(tmp_path / "cache")}
    with pytest.raises(BinariesNotFound, match=r"no tarball at .*its sha256 is not pinned"):
        find(env, shared_dirs=[tmp_path], releases=fake_releases(releases.url, k8s_sum=""))
    assert releases.requests == []


def test_the_official_releases_are_pinned_to_the_versions_of_the_shared_tarball(tmp_path: Path) -> None:
    assert KUBERNETES_RELEASE.url == "https://dl.k8s.io/v1.36.2/kubernetes-server-linux-amd64.tar.gz"
    assert ETCD_RELEASE.url == (
        "https://github.com/etcd-io/etcd/releases/download/v3.5.30/etcd-v3.5.30-linux-amd64.tar.gz"
    )
    # Their sums could not be obtained offline: until they are pinned, the download refuses to run (no network).
    if not (KUBERNETES_RELEASE.sha256 and ETCD_RELEASE.sha256):
        with pytest.raises(BinariesNotFound, match="not pinned"):
            find_binaries({"NODEFLOW_K8S_CACHE": str(tmp_path)}, shared_dirs=[], cache_name=CACHE_NAME)


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
