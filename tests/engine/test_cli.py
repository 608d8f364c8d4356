"""The ``dressage-engine`` command line and the helpers another CLI reuses."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.cli import add_engine_arguments, engine_config_from_args, main


def test_engine_flags_build_the_config(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    script = tmp_path / "s.jsonl"
    args = parser.parse_args([
        "--host", "0.0.0.0", "--port", "0", "--tokenizer-path", str(tmp_path), "--script", str(script),
        "--seed", "3", "--token-rate", "25", "--weight-version", "w0", "--context-length", "4096",
        "--incremental-streaming-output", "--no-enable-return-routed-experts", "--num-layers", "6",
        "--num-experts", "32", "--experts-per-token", "4", "--first-token-latency", "0.5",
        "--fault-error-every", "5", "--fault-error-status", "500", "--fault-drop-stream-after", "7",
        "--fault-drop-stream-every", "2", "--abort-blocked-requests", "--served-model-name", "m",
    ])
    config = engine_config_from_args(args)
    assert (config.host, config.port, config.tokenizer_path, config.script) == ("0.0.0.0", 0, tmp_path, script)
    assert (config.seed, config.token_rate, config.weight_version, config.context_length) == (3, 25.0, "w0", 4096)
    assert config.incremental_streaming_output and not config.enable_return_routed_experts
    assert (config.num_layers, config.num_experts, config.experts_per_token) == (6, 32, 4)
    assert config.first_token_latency == 0.5 and config.model_name == "m"
    assert (config.fault_error_every, config.fault_error_status) == (5, 500)
    assert (config.fault_drop_stream_after, config.fault_drop_stream_every) == (7, 2)
    assert config.abort_blocked_requests


def test_host_cli_reuses_the_flags_without_server_options(tmp_path: Path) -> None:
    """The proxy adds the engine's options but keeps its own --host/--port/--tokenizer-path."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8800)
    add_engine_arguments(parser, include_server=False)
    args = parser.parse_args(["--port", "9000", "--script", "x.jsonl", "--token-rate", "5"])
    config = engine_config_from_args(args, tokenizer_path=tmp_path, port=0)
    assert args.port == 9000 and config.port == 0 and config.tokenizer_path == tmp_path
    assert config.script == Path("x.jsonl") and config.token_rate == 5.0


def test_invalid_values_are_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--token-rate", "-1"])
    assert "token_rate" in capsys.readouterr().err
