import pytest

from nodeflow.scheduling.requirements import Requirement, RequirementError, Requirements


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement.create(key, op, values)


def reqs(*items: Requirement) -> Requirements:
    return Requirements(items)


@pytest.mark.parametrize(
    ("op", "values", "yes", "no"),
    [
        ("In", ("a", "b"), ["a", "b"], ["c"]),
        ("NotIn", ("a",), ["b", "zzz"], ["a"]),
        ("Exists", (), ["anything"], []),
        ("DoesNotExist", (), [], ["anything"]),
        ("Gt", ("4",), ["5", "100"], ["4", "3", "x"]),
        ("Gte", ("4",), ["4", "5"], ["3"]),
        ("Lt", ("4",), ["3", "-1"], ["4", "x"]),
        ("Lte", ("4",), ["4", "0"], ["5"]),
    ],
)
def test_operators(op: str, values: tuple[str, ...], yes: list[str], no: list[str]) -> None:
    r = req("k", op, *values)
    for v in yes:
        assert r.has(v), (op, v)
    for v in no:
        assert not r.has(v), (op, v)


@pytest.mark.parametrize(
    ("op", "values", "message"),
    [
        ("In", (), "requires at least one value"),
        ("Exists", ("a",), "takes no values"),
        ("Gt", ("a",), "integer"),
        ("Lt", ("1", "2"), "exactly one"),
        ("Near", ("1",), "unknown operator"),
    ],
)
def test_bad_operator_values(op: str, values: tuple[str, ...], message: str) -> None:
    with pytest.raises(RequirementError, match=message):
        req("k", op, *values)


def test_intersections() -> None:
    assert req("k", "In", "a", "b").intersection(req("k", "In", "b", "c")).values == {"b"}
    both = req("k", "In", "a", "b").intersection(req("k", "NotIn", "a"))
    assert both.operator == "In"
    assert both.values == {"b"}
    notins = req("k", "NotIn", "a").intersection(req("k", "NotIn", "b"))
    assert notins.operator == "NotIn"
    assert notins.values == {"a", "b"}
    assert len(req("k", "Exists").intersection(req("k", "DoesNotExist"))) == 0
    ranged = req("k", "Gt", "2").intersection(req("k", "Lt", "5"))
    assert ranged.has("3")
    assert ranged.has("4")
    assert not ranged.has("5")
    assert len(req("k", "Gt", "4").intersection(req("k", "Lt", "5"))) == 0
    bounded_in = req("k", "In", "1", "8", "16").intersection(req("k", "Gt", "4"))
    assert bounded_in.values == {"8", "16"}
    with_min = Requirement.create("k", "In", ["a", "b"], min_values=2)
    assert req("k", "In", "a", "b").intersection(with_min).min_values == 2


def test_requirements_merge_same_key() -> None:
    r = reqs(req("zone", "In", "a", "b"), req("zone", "NotIn", "a"))
    assert r["zone"].values == {"b"}


def test_compatible_custom_label_must_be_defined() -> None:
    pool = reqs(req("team", "In", "blue"))
    assert pool.compatible(reqs(req("team", "In", "blue"))) is None
    conflict = pool.compatible(reqs(req("team", "In", "red")))
    assert conflict is not None
    assert "team" in conflict
    assert "red" in conflict
    undefined = pool.compatible(reqs(req("owner", "In", "x")))
    assert undefined is not None
    assert "not defined" in undefined
    # Excluding values of an undefined label is fine; so is a well-known label we allow.
    assert pool.compatible(reqs(req("owner", "NotIn", "x"))) is None
    assert pool.compatible(reqs(req("owner", "DoesNotExist"))) is None
    assert (
        pool.compatible(reqs(req("topology.kubernetes.io/zone", "In", "a")), frozenset({"topology.kubernetes.io/zone"}))
        is None
    )


def test_intersects_allows_two_exclusions() -> None:
    assert reqs(req("k", "DoesNotExist")).intersects(reqs(req("k", "DoesNotExist"))) is None
    assert reqs(req("k", "NotIn", "a")).intersects(reqs(req("k", "DoesNotExist"))) is None
    assert reqs(req("k", "In", "a")).intersects(reqs(req("k", "DoesNotExist"))) is not None


def test_key_aliases_are_normalized() -> None:
    r = Requirement.create("topology.ebs.csi.aws.com/zone", "In", ["us-east-1a"])
    assert r.key == "topology.kubernetes.io/zone"
    labels = Requirements.from_labels({"failure-domain.beta.kubernetes.io/zone": "us-east-1b"})
    assert "topology.kubernetes.io/zone" in labels


def test_equality_and_hash() -> None:
    a = reqs(req("a", "In", "1"), req("b", "Exists"))
    b = reqs(req("b", "Exists"), req("a", "In", "1"))
    assert a == b
    assert hash(a) == hash(b)
    # A custom key the requirements only need to exist gets a value too (Karpenter labels the node with one).
    assert a.labels() == {"a": "1", "b": "0"}
    assert a.add(reqs(req("a", "In", "1", "2")))["a"].values == {"1"}
