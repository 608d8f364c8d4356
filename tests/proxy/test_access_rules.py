"""The pure rules of ``proxy/access.py``: keys, media types, loopback names, the bind warning (the wire behaviour is
``tests/e2e/test_access_control.py``)."""

from __future__ import annotations

import pytest

from proxy.access import (
    AccessPolicy,
    RouteClass,
    bind_warning,
    is_json_media_type,
    is_loopback_name,
    key_matches,
    presented_keys,
)
from proxy.cli import build_parser, config_from_args
from proxy.config import ProxyConfig


def test_presented_keys_read_bearer_and_x_api_key() -> None:
    assert presented_keys("Bearer k1", None) == ("k1",)
    assert presented_keys("bearer   k1 ", "k2") == ("k1", "k2")
    assert presented_keys("Basic dXNlcjpw", None) == ()
    assert presented_keys("Bearer ", "") == ()
    assert presented_keys(None, None) == ()


def test_keys_match_exactly() -> None:
    assert key_matches(("nope", "secret"), "secret")
    assert not key_matches(("secre", "secret2", "SECRET"), "secret")
    assert not key_matches((), "secret")
    assert key_matches(("clé-ü",), "clé-ü")  # non-ASCII keys compare as UTF-8 bytes


@pytest.mark.parametrize(
    ("api_key", "admin_key", "key", "agent", "admin"),
    [
        (None, None, None, True, True),
        ("a", None, None, False, True),
        ("a", None, "a", True, True),
        (None, "m", None, True, False),
        ("a", "m", "a", True, False),
        ("a", "m", "m", True, True),
        ("a", "m", "x", False, False),
    ],
)
def test_which_key_opens_which_class(api_key, admin_key, key, agent, admin) -> None:
    policy = AccessPolicy(api_key=api_key, admin_key=admin_key)
    presented = (key,) if key else ()
    assert policy.admits(RouteClass.OPEN, presented)
    assert (policy.admits(RouteClass.AGENT, presented), policy.admits(RouteClass.ADMIN, presented)) == (agent, admin)


def test_the_policy_never_shows_its_keys() -> None:
    assert "secret" not in repr(AccessPolicy(api_key="secret", admin_key="secret"))


@pytest.mark.parametrize(
    ("content_type", "accepted"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON; charset=UTF-8", True),
        ("application/json; charset=latin-1", False),
        ("text/plain", False),
        ("text/plain; charset=utf-8", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        (None, False),
    ],
)
def test_json_media_types(content_type, accepted) -> None:
    assert is_json_media_type(content_type) is accepted


@pytest.mark.parametrize("name", ["localhost", "LOCALHOST.", "app.localhost", "127.0.0.1", "127.1.2.3", "::1",
                                  "[::1]"])
def test_loopback_names(name) -> None:
    assert is_loopback_name(name)


@pytest.mark.parametrize("name", ["0.0.0.0", "::", "10.0.0.5", "proxy", "localhost.evil.example", "evil.example"])
def test_names_beyond_the_loopback(name) -> None:
    assert not is_loopback_name(name)


def test_the_bind_warning_is_for_a_non_loopback_address_without_an_admin_key() -> None:
    assert bind_warning(ProxyConfig()) is None
    assert bind_warning(ProxyConfig(host="localhost")) is None
    assert bind_warning(ProxyConfig(host="0.0.0.0", admin_key="k")) is None
    warning = bind_warning(ProxyConfig(host="0.0.0.0", api_key="k"))
    assert warning is not None and "0.0.0.0" in warning and "DRESSAGE_ADMIN_KEY" in warning
    assert bind_warning(ProxyConfig(host="10.1.2.3")) is not None


def test_key_variables_reach_the_policy(monkeypatch) -> None:
    monkeypatch.setenv("DRESSAGE_API_KEY", "agent-key")
    monkeypatch.setenv("DRESSAGE_PROXY_ADMIN_KEY", "admin-key")
    policy = AccessPolicy.from_config(config_from_args(build_parser().parse_args([])))
    assert (policy.api_key, policy.admin_key) == ("agent-key", "admin-key")
