"""``LimitedConfig.response_headers``: hypercorn's headers of every response, built once a second."""

from __future__ import annotations

import time
import types

import pytest
from hypercorn.config import Config

from serving import limited_h11
from serving.http_limits import HTTPLimits
from serving.limited_h11 import LimitedConfig


@pytest.mark.parametrize("protocol", ["h11", "h2"])
def test_the_headers_are_hypercorns_for_the_same_second(protocol):
    config = LimitedConfig(HTTPLimits())
    config.include_server_header = True
    for _ in range(100):
        second = int(time.time())
        ours, theirs = config.response_headers(protocol), Config.response_headers(config, protocol)
        if int(time.time()) == second:  # no second boundary between the two reads
            assert ours == theirs
            assert [name for name, _ in ours] == [b"date", b"server"]
            return
    pytest.fail("never two reads within one second")


def test_a_new_second_builds_them_again_and_each_caller_gets_its_own_list(monkeypatch):
    config = LimitedConfig(HTTPLimits())
    built = []
    monkeypatch.setattr(Config, "response_headers",
                        lambda self, protocol: built.append(protocol) or [(b"date", str(len(built)).encode())])
    clock = types.SimpleNamespace(time=lambda: 1000.2)
    monkeypatch.setattr(limited_h11, "time", clock)
    first = config.response_headers("h11")
    first.append((b"x", b"y"))  # a caller extends its list (limited_h11 does): the next caller must not see it
    assert config.response_headers("h11") == [(b"date", b"1")]
    clock.time = lambda: 1000.9
    assert config.response_headers("h11") == [(b"date", b"1")] and built == ["h11"]
    clock.time = lambda: 1001.0
    assert config.response_headers("h11") == [(b"date", b"2")] and built == ["h11", "h11"]
    assert config.response_headers("h2") == [(b"date", b"3")]
