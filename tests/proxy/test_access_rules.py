"""The pure rules of ``proxy/access.py``: keys, media types, loopback names, the bind warning (the wire behaviour is
``tests/e2e/test_access_control.py``)."""

from __future__ import annotations

import base64

import pytest

from proxy.access import (
    AccessPolicy,
    RouteClass,
    basic_password,
    bind_warning,
    is_browser_path,
    is_json_media_type,
    is_loopback_name,
    key_matches,
    presented_keys,
    unauthorized,
)
from proxy.cli import build_parser, config_from_args
from proxy.config import ProxyConfig


def test_presented_keys_read_bearer_basic_and_x_api_key() -> None:
    assert presented_keys("Bearer k1", None) == ("k1",)
    assert presented_keys("bearer   k1 ", "k2") == ("k1", "k2")
    assert presented_keys("Basic dXNlcjpw", None) == ("p",)  # user:p, a browser's sign-in: the password is the key
    assert presented_keys("Bearer ", "") == ()
    assert presented_keys(None, None) == ()


@pytest.mark.parametrize(
    ("credential", "password"),
    [
        (base64.b64encode(b"anyone:sk-admin").decode(), "sk-admin"),
        (base64.b64encode(b":sk-admin").decode(), "sk-admin"),  # an empty user name
        (base64.b64encode(b"user:pa:ss").decode(), "pa:ss"),  # only the first colon splits
        (base64.b64encode("u:clé-ü".encode()).decode(), "clé-ü"),
        (base64.b64encode(b"user:").decode(), None),  # no password
        (base64.b64encode(b"no-colon").decode(), None),
        ("not base64!", None),
        (base64.b64encode(b"\xff\xfe:x").decode(), None),  # not UTF-8
    ],
)
def test_basic_credentials_give_their_password(credential, password) -> None:
    assert basic_password(credential) == password
    assert presented_keys(f"Basic {credential}", None) == ((password,) if password else ())


def test_the_viewer_paths_challenge_a_browser_with_basic() -> None:
    assert [is_browser_path(path) for path in ("/ui", "/ui/", "/ui/api/sessions", "/uix", "/v1/ui", "/")] == [
        True, True, True, False, False, False]
    browser = unauthorized(RouteClass.ADMIN, (), browser=True)
    assert browser.status == 401 and browser.headers["WWW-Authenticate"] == 'Basic realm="dressage-proxy"'
    assert unauthorized(RouteClass.ADMIN, ("wrong",), browser=True).headers["WWW-Authenticate"].startswith("Basic ")
    assert unauthorized(RouteClass.ADMIN, ()).headers["WWW-Authenticate"] == 'Bearer realm="dressage-proxy"'


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
