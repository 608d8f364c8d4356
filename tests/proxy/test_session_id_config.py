"""``--session-id-header`` (repeatable, precedence order) and ``--session-id-body-field``, and their env vars."""

from __future__ import annotations

import pytest

from proxy.cli import build_parser, main
from proxy.config import ConfigError, ProxyConfig, proxy_config_from_args


def parse(argv: list[str]) -> ProxyConfig:
    return proxy_config_from_args(build_parser().parse_args(argv))


def test_session_id_defaults_are_the_spec_order() -> None:
    config = parse([])
    assert (config.session_id_headers, config.session_id_body_field) == (("X-Session-Id",), "session_id")
    assert ProxyConfig().session_id_headers == ("X-Session-Id",)
    assert config.summary()["session_id_headers"] == ("X-Session-Id",)


def test_session_id_header_flag_repeats_in_precedence_order() -> None:
    config = parse(["--session-id-header", "X-Rollout-Session", "--session-id-header", "X-Session-Id"])
    assert config.session_id_headers == ("X-Rollout-Session", "X-Session-Id")
    assert parse(["--session-id-header", "X-A,X-B", "--session-id-header", "X-C"]).session_id_headers == (
        "X-A", "X-B", "X-C")


def test_session_id_env_vars_and_flags_replace_them(monkeypatch) -> None:
    monkeypatch.setenv("DRESSAGE_PROXY_SESSION_ID_HEADER", "X-Rollout-Session, X-Session-Id")
    monkeypatch.setenv("DRESSAGE_PROXY_SESSION_ID_BODY_FIELD", "")
    config = parse([])
    assert (config.session_id_headers, config.session_id_body_field) == (("X-Rollout-Session", "X-Session-Id"), None)
    # A flag replaces the env var's list (it does not append to it), and repeats extend the flag's own list.
    assert parse(["--session-id-header", "X-Mine"]).session_id_headers == ("X-Mine",)
    assert parse(["--session-id-header", "X-1", "--session-id-header", "X-2"]).session_id_headers == ("X-1", "X-2")
    assert parse(["--session-id-body-field", "rollout_session"]).session_id_body_field == "rollout_session"


def test_a_session_id_header_that_is_not_a_header_name_is_refused(monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--session-id-header", "X Bad:Name"])
    assert info.value.code == 2 and "--session-id-header" in capsys.readouterr().err
    monkeypatch.setenv("DRESSAGE_PROXY_SESSION_ID_HEADER", "Bad:Name")
    with pytest.raises(ConfigError, match="DRESSAGE_PROXY_SESSION_ID_HEADER"):
        build_parser()
    assert main([]) == 2


def test_help_explains_the_session_id_flags() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "--session-id-header HEADER" in text and "DRESSAGE_PROXY_SESSION_ID_HEADER" in text
    assert "--session-id-body-field FIELD" in text and "precedence order" in text
