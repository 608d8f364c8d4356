"""The proxy process: flags and env vars, the embedded engine started in-process, /health and /v1/models."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import hypercorn.trio
import pytest
import trio
import trustme

from engine import EngineConfig, serve_engine
from engine.app import create_engine_app
from proxy.cli import ProxyHandle, build_parser, main, run_proxy
from proxy.config import ConfigError, ProxyConfig, proxy_config_from_args
from serving.http_server import hypercorn_config


def parse(argv: list[str]) -> ProxyConfig:
    return proxy_config_from_args(build_parser().parse_args(argv))


def test_proxy_flags_default_to_loopback_8800_and_the_embedded_engine() -> None:
    config = parse([])
    assert (config.host, config.port, config.uses_embedded_engine) == ("127.0.0.1", 8800, True)


def test_proxy_flags_beat_env_vars_which_beat_defaults(monkeypatch) -> None:
    monkeypatch.setenv("DRESSAGE_PROXY_PORT", "9100")
    monkeypatch.setenv("DRESSAGE_PROXY_SGLANG_WORKER_URLS", "http://a:1/, http://b:2")
    config = parse([])
    assert config.port == 9100
    assert config.sglang_worker_urls == ("http://a:1", "http://b:2")
    assert parse(["--port", "9200"]).port == 9200


def test_proxy_env_var_that_cannot_be_parsed_is_a_clear_error(monkeypatch, capsys) -> None:
    monkeypatch.setenv("DRESSAGE_PROXY_PORT", "eighty")
    with pytest.raises(ConfigError, match="DRESSAGE_PROXY_PORT='eighty'"):
        build_parser()
    assert main([]) == 2
    assert "DRESSAGE_PROXY_PORT" in capsys.readouterr().err


def test_proxy_help_explains_every_flag_with_its_env_var() -> None:
    parser = build_parser()
    text = parser.format_help()
    for flag in ("--host", "--port", "--tokenizer-path", "--sglang-router-url", "--sglang-worker-urls"):
        assert flag in text
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help"


def test_proxy_sglang_ca_file_flag_and_env_var(monkeypatch, tmp_path: Path, capsys) -> None:
    pem = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(pem))
    assert parse([]).sglang_ca_file is None
    assert parse(["--sglang-ca-file", str(pem)]).sglang_ca_file == pem
    monkeypatch.setenv("DRESSAGE_PROXY_SGLANG_CA_FILE", str(pem))
    config = parse([])
    assert config.sglang_ca_file == pem and config.summary()["sglang_ca_file"] == str(pem)
    # A file that does not load is refused at start-up, naming the flag.
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    for bad in (not_pem, tmp_path / "missing.pem"):
        with pytest.raises(ConfigError, match="--sglang-ca-file"):
            parse(["--sglang-ca-file", str(bad)])
        with pytest.raises(SystemExit) as info:
            main(["--sglang-ca-file", str(bad), "--tokenizer-path", str(tmp_path)])
        assert info.value.code == 2 and "cannot load CA certificates" in capsys.readouterr().err


async def get_json(url: str) -> tuple[int, dict]:
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    return response.status_code, response.json()


async def test_proxy_starts_the_embedded_engine_and_serves_health_and_models(nursery, qwen3_path: Path) -> None:
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path)
    handle: ProxyHandle = await nursery.start(run_proxy, config, EngineConfig(tokenizer_path=qwen3_path, weight_version="v7"))
    assert handle.engine is not None

    status, health = await get_json(handle.url + "/health")
    assert status == 200
    assert health["status"] == "ok"
    assert health["upstream"] == {"url": handle.engine.url, "reachable": True, "weight_version": "v7"}
    assert health["config"]["embedded_engine"] is True
    assert health["gate"]["state"] == "RUNNING" and health["gate"]["in_flight"] == 0
    assert health["sessions"] is not None and health["store"]["segments"] == 0

    status, models = await get_json(handle.url + "/v1/models")
    _, engine_models = await get_json(handle.engine.url + "/v1/models")
    assert status == 200 and models == engine_models and models["data"]


async def test_proxy_health_follows_the_upstream_weight_version(nursery, qwen3_path: Path) -> None:
    handle = await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path))
    async with httpx.AsyncClient() as client:
        updated = await client.post(handle.engine.url + "/update_weight_version", json={"new_version": "step-42"})
        assert updated.status_code == 200
        health = (await client.get(handle.url + "/health")).json()
    assert health["upstream"]["weight_version"] == "step-42"


async def test_proxy_with_a_router_url_uses_it_and_starts_no_engine(nursery, qwen3_path: Path) -> None:
    engine = await nursery.start(serve_engine, EngineConfig(tokenizer_path=qwen3_path, port=0, weight_version="ext"))
    config = ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=engine.url, sglang_worker_urls=(engine.url,))
    handle = await nursery.start(run_proxy, config)
    assert handle.engine is None
    status, health = await get_json(handle.url + "/health")
    assert status == 200
    assert health["upstream"]["url"] == engine.url and health["upstream"]["weight_version"] == "ext"


async def test_proxy_with_sglang_ca_file_reaches_an_https_upstream(nursery, qwen3_path: Path, tmp_path: Path) -> None:
    """The embedded engine served over TLS (hypercorn with a certificate from a throw-away CA): the proxy trusts
    it only through --sglang-ca-file."""
    ca = trustme.CA()
    server_pem, ca_pem = tmp_path / "server.pem", tmp_path / "ca.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    app, _ = create_engine_app(EngineConfig(tokenizer_path=qwen3_path, weight_version="tls"))
    hconfig = hypercorn_config("127.0.0.1", 0)
    hconfig.certfile = hconfig.keyfile = str(server_pem)
    (engine_url,) = await nursery.start(functools.partial(hypercorn.trio.serve, app, hconfig))
    assert engine_url.startswith("https://")

    for ca_file, reachable in ((ca_pem, True), (None, False)):  # without it: the system CAs, which do not sign it
        config = ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=engine_url,
                             sglang_worker_urls=(engine_url,), sglang_ca_file=ca_file)
        handle = await nursery.start(run_proxy, config)
        status, health = await get_json(handle.url + "/health")
        assert status == 200 and health["upstream"]["reachable"] is reachable
        if reachable:
            assert health["upstream"]["weight_version"] == "tls"
            status, models = await get_json(handle.url + "/v1/models")
            assert status == 200 and models["data"]
        else:
            status, body = await get_json(handle.url + "/v1/models")
            assert status == 502 and body["error"]["code"] == "upstream_unavailable"


async def test_proxy_with_an_unreachable_upstream_answers_clear_errors_not_500(nursery, qwen3_path: Path) -> None:
    with trio.socket.socket() as sock:  # a port that was free a moment ago: connection refused
        await sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    handle = await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path, sglang_router_url=dead))
    status, health = await get_json(handle.url + "/health")
    assert status == 200 and health["status"] == "degraded" and health["upstream"]["reachable"] is False
    status, body = await get_json(handle.url + "/v1/models")
    assert status == 502
    assert body["error"]["code"] == "upstream_unavailable" and body["error"]["type"] == "upstream_error"


async def test_proxy_unknown_route_and_wrong_method_get_openai_errors(nursery, qwen3_path: Path) -> None:
    handle = await nursery.start(run_proxy, ProxyConfig(port=0, tokenizer_path=qwen3_path))
    async with httpx.AsyncClient() as client:
        missing = await client.get(handle.url + "/v1/nothing-here")
        wrong = await client.post(handle.url + "/v1/models", json={})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_proxy_console_script_starts_and_says_it_uses_the_embedded_engine(qwen3_path: Path) -> None:
    exe = Path(sys.executable).parent / "dressage-proxy"
    proc = subprocess.Popen(
        [str(exe), "--port", "0", "--tokenizer-path", str(qwen3_path)],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = []
        for line in proc.stderr:  # bounded: the process prints two lines, then serves
            lines.append(line)
            if "listening on" in line:
                break
        text = "".join(lines)
        assert "embedded engine started in-process" in text
        url = text.split("listening on ")[1].split()[0]
        assert httpx.get(url + "/health").json()["status"] == "ok"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_build_model_is_detected_from_the_tokenizers_chat_template(qwen3_path: Path, qwen3_5_path: Path,
                                                                       tmp_path: Path) -> None:
    """--tokenizer-path to a Qwen3.5 tokenizer works without --trajectory-build-model (issue 14, item 13)."""
    detected = parse(["--tokenizer-path", str(qwen3_5_path)])
    assert (detected.trajectory_build_model, detected.effective_tito_model) == ("qwen3_5", "qwen3_5")
    assert detected.effective_tool_call_type == "qwen3_coder"
    assert parse(["--tokenizer-path", str(qwen3_path)]).trajectory_build_model == "qwen3"
    # An explicit choice still wins (and is then checked when the tokenizer loads).
    assert parse(["--tokenizer-path", str(qwen3_5_path), "--trajectory-build-model", "qwen3"]).trajectory_build_model \
        == "qwen3"
    # A template of no supported family starts in last-step mode with a warning naming the way out (issue 17).
    other = tmp_path / "other"
    shutil.copytree(qwen3_path, other)
    config_file = other / "tokenizer_config.json"
    data = json.loads(config_file.read_text())
    data["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    config_file.write_text(json.dumps(data))
    (other / "chat_template.jinja").unlink(missing_ok=True)
    unknown = parse(["--tokenizer-path", str(other)])
    assert (unknown.trajectory_build_model, unknown.model_family_source) == ("generic", "unrecognised")
    assert "--model-family" in unknown.model_family_warning
