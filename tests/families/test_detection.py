"""Family detection from a tokenizer folder's chat template, the --model-family override, and the old flags."""

from __future__ import annotations

import pytest

from proxy.cli import build_parser, config_from_args
from proxy.families import FALLBACK, TemplateOnlyTokenizer, TitoMode, detect_family, get_family, load_tito_tokenizer
from serving.tokenizer_files import model_tokenizer_path

from .edited_folders import commented_qwen3, primed_qwen3_5


@pytest.mark.parametrize(("folder", "family"), [("qwen3", "qwen3"), ("qwen3.5", "qwen3_5"), ("qwen3.6", "qwen3_6")])
def test_each_official_folder_is_detected_by_its_template_hash(tokenizer_root, folder, family):
    detection = detect_family(model_tokenizer_path(folder, tokenizer_root))
    assert (detection.family.name, detection.how, detection.warning) == (family, "template_sha256", None)
    assert detection.template_sha256 in detection.family.template_sha256


def test_qwen3_6_folder_holds_its_own_template_and_config_with_qwen3_5_tokenizer(tokenizer_root):
    """Qwen3.6 ships no tokenizer.json: its folder uses Qwen3.5's. Its tokenizer_config.json equals Qwen3.5's as
    JSON, and every added token of that tokenizer.json is declared there at the same id; the config's 7 further
    audio/TTS tokens (248070-248076) are missing from Qwen3.5's own official tokenizer.json alike (transformers adds
    them from the config; a text model never emits them)."""
    import json

    import tokenizers

    q35, q36 = model_tokenizer_path("qwen3_5", tokenizer_root), model_tokenizer_path("qwen3_6", tokenizer_root)
    assert (q36 / "chat_template.jinja").read_bytes() == (q35 / "chat_template.jinja").read_bytes()
    assert (q36 / "tokenizer_config.json").read_bytes() != (q35 / "tokenizer_config.json").read_bytes()
    config36 = json.loads((q36 / "tokenizer_config.json").read_text())
    assert config36 == json.loads((q35 / "tokenizer_config.json").read_text())
    added = tokenizers.Tokenizer.from_file(str(q36 / "tokenizer.json")).get_added_tokens_decoder()
    declared = {int(i): t["content"] for i, t in config36["added_tokens_decoder"].items()}
    assert {i: t.content for i, t in added.items()} == {i: c for i, c in declared.items() if i < 248070}
    assert sorted(i for i in declared if i not in added) == list(range(248070, 248077))


def test_an_edited_template_that_keeps_the_rules_stays_incremental_with_a_warning(qwen3_path, tmp_path):
    detection = detect_family(commented_qwen3(qwen3_path, tmp_path / "edited"))
    assert (detection.family.name, detection.how) == ("qwen3", "structure")
    assert "not an official template" in detection.warning and "qwen3" in detection.warning


def test_an_unrecognised_template_falls_back_to_last_step_mode_with_one_clear_warning(qwen3_5_path, tmp_path):
    folder = primed_qwen3_5(qwen3_5_path, tmp_path / "primed")
    detection = detect_family(folder)
    assert detection.family is FALLBACK and detection.family.mode is TitoMode.LAST_STEP
    assert detection.how == "unrecognised"
    # what was not recognised: the folder, the template's hash, each family's objection; and what happens now
    for part in (str(folder), detection.template_sha256[:12], "qwen3:", "qwen3_5:", "last-step mode", "--model-family"):
        assert part in detection.warning
    tokenizer = load_tito_tokenizer(detection.family, folder)
    assert isinstance(tokenizer, TemplateOnlyTokenizer)
    assert tokenizer.END_OF_TURN == "<|im_end|>"
    assert tokenizer.thinking_prefix() == "<think>\nLet me think step by step.\n"
    assert tokenizer.thinking_prefix({"enable_thinking": False}) == ""
    result = tokenizer.encode_incremental([tokenizer.end_of_turn_id], [{"role": "user", "content": "hi"}])
    assert not result.ok and result.reason.value == "last_step_mode"


def parse(*argv: str):
    return config_from_args(build_parser().parse_args(["--port", "0", *argv]))


def test_the_command_line_detects_the_family_and_keeps_the_warning_for_start_up(qwen3_5_path, tmp_path):
    official = parse("--tokenizer-path", str(qwen3_5_path))
    assert (official.trajectory_build_model, official.model_family_source) == ("qwen3_5", "template_sha256")
    assert official.model_family_warning is None
    assert (official.effective_tool_call_type, official.effective_reasoning_type) == ("qwen3_coder", "qwen3")
    primed = parse("--tokenizer-path", str(primed_qwen3_5(qwen3_5_path, tmp_path / "primed")))
    assert (primed.trajectory_build_model, primed.model_family_source) == ("generic", "unrecognised")
    assert primed.effective_tito_model == "generic" and "not recognised" in primed.model_family_warning
    assert (primed.effective_tool_call_type, primed.effective_reasoning_type) == (None, None)


@pytest.mark.parametrize("flag", ["--model-family", "--trajectory-build-model"])
def test_model_family_flag_and_its_old_spelling_override_detection(qwen3_5_path, flag):
    config = parse("--tokenizer-path", str(qwen3_5_path), flag, "qwen3.6")
    assert (config.trajectory_build_model, config.model_family_source) == ("qwen3_6", "flag")
    assert config.effective_tito_model == "qwen3_6"


def test_model_family_wins_over_trajectory_build_model_and_tito_model_overrides_the_tokenizer(qwen3_5_path):
    config = parse("--tokenizer-path", str(qwen3_5_path), "--model-family", "qwen3_5",
                   "--trajectory-build-model", "qwen3", "--tito-model", "generic")
    assert config.trajectory_build_model == "qwen3_5" and config.effective_tito_model == "generic"
    assert config.effective_tool_call_type == "qwen3_coder"


def test_an_unknown_family_name_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--model-family", "llama"])
    assert exited.value.code == 2
    assert "--model-family" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown model family 'llama'; expected one of qwen3, .*qwen3_6"):
        get_family("llama")
