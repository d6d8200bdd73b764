import pytest

from cvbench.registry import Registry


def test_register_get_and_names():
    reg = Registry("widget")
    reg.register("b", lambda *, x=1: ("b", x))
    reg.register("a", lambda: "a")
    assert reg.names() == ["a", "b"]
    assert reg.build("b", x=3) == ("b", 3)
    assert "a" in reg and "c" not in reg


def test_register_twice_raises():
    reg = Registry("widget")
    reg.register("a", lambda: 1)
    with pytest.raises(ValueError, match="'a' is already registered"):
        reg.register("a", lambda: 2)


def test_unknown_name_lists_known():
    reg = Registry("widget")
    reg.register("alpha", lambda: 1)
    reg.register("beta", lambda: 2)
    with pytest.raises(ValueError, match=r"unknown widget 'gamma'; known: alpha, beta"):
        reg.get("gamma")
