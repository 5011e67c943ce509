import pytest

from nodeflow.scheduling.taints import Taint, Toleration, untolerated

GPU = Taint("nvidia.com/gpu", "NoSchedule", "true")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration("nvidia.com/gpu", "Exists"), True),
        (Toleration("nvidia.com/gpu", "Equal", "true"), True),
        (Toleration("nvidia.com/gpu", "Equal", "false"), False),
        (Toleration("nvidia.com/gpu", "Exists", effect="NoExecute"), False),
        (Toleration("nvidia.com/gpu", "Exists", effect="NoSchedule"), True),
        (Toleration("", "Exists"), True),
        (Toleration("", "Equal"), False),
        (Toleration("other", "Exists"), False),
    ],
)
def test_toleration(toleration: Toleration, tolerated: bool) -> None:
    assert toleration.tolerates(GPU) is tolerated


def test_untolerated_ignores_prefer_no_schedule() -> None:
    soft = Taint("soft", "PreferNoSchedule")
    assert untolerated((), [soft]) is None
    assert untolerated((), [soft, GPU]) == GPU
    assert str(GPU) == "nvidia.com/gpu=true:NoSchedule"
